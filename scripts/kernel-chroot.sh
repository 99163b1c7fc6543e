#!/bin/bash
# Makes (once per machine) a minimal chroot of one Debian suite holding that
# suite's compiler, its linux-headers-amd64 and its kernel image with the
# image's modules, so that the module is built with the compiler the kernel
# was built with and booted on that kernel, without touching the host's
# /lib/modules (scripts/kver.sh picks the newest build tree there for `make`).
#
#   ${PMM_CACHE:-${XDG_CACHE_HOME:-~/.cache}/pmm}/kernels/<name>-<key>/
#       root/                      the chroot (mmdebstrap --variant=apt)
#       root/boot/vmlinuz-<kver>   the kernel image, unpacked from its .deb
#                                  (sid: root/usr/lib/modules/<kver>/vmlinuz)
#       root/lib/modules/<kver>/   its modules (depmod'ed) and build -> headers
#       image                      the image's path, relative to the directory
#       kver                       <kver>, written last: the chroot is complete
#
# vng finds the modules of an image in the root file system the image lies
# in (virtme's get_rootfs_from_kernel_path: <root>/lib/modules/<kver>), so
# 9p and virtio load from the chroot in the guest.
#
#   scripts/kernel-chroot.sh NAME          make it if needed; print its dir last
#   scripts/kernel-chroot.sh --path NAME   print its dir; exit 1 if not made
#
# NAME: bullseye, bookworm-backports, trixie, sid (scripts/kernels.list).
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "kernel-chroot: $*" >&2; exit 1; }

path_only=0
if [ "${1:-}" = "--path" ]; then
	path_only=1
	shift
fi
name=${1:?usage: $0 [--path] NAME}

# The suite to bootstrap and the one (-t) the kernel packages come from.
case "$name" in
bullseye) suite=bullseye; target=bullseye ;;
bookworm-backports) suite=bookworm; target=bookworm-backports ;;
trixie) suite=trixie; target=trixie ;;
sid) suite=sid; target=sid ;;
*) die "unknown kernel line '$name' (bullseye, bookworm-backports, trixie, sid)" ;;
esac

mirror=${PMM_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
	mirror=$(sed -n 's/^URIs:[[:space:]]*\(http[^[:space:]]*\/debian\)\/*$/\1/p' \
		/etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
	mirror=${mirror:-http://deb.debian.org/debian}
fi
includes=gcc,make,libc6-dev,libelf-dev,kmod,bc,xz-utils,zstd,perl,python3
key=$(printf '%s\n' "$suite" "$target" "$mirror" "$includes" "v3" | sha256sum | cut -c1-12)
cache=${PMM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pmm}/kernels
dir=$cache/$name-$key

if [ "$path_only" = 1 ]; then
	[ -f "$dir/kver" ] || die "$name: not made yet: run scripts/kernel-chroot.sh $name"
	echo "$dir"
	exit 0
fi

mkdir -p "$dir"
exec 9>"$dir/.lock"
if ! flock -n 9; then
	echo "kernel-chroot: another run is making $dir; waiting for it" >&2
	flock 9
fi
if [ -f "$dir/kver" ]; then
	echo "$dir"
	exit 0
fi
[ "$(id -u)" -eq 0 ] || die "making a chroot needs root"
command -v mmdebstrap >/dev/null || {
	echo "kernel-chroot: installing mmdebstrap" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		mmdebstrap >/dev/null
}

start=$(date +%s)
rm -rf "$dir/root"
sources="deb $mirror $suite main"
[ "$target" = "$suite" ] || sources+=$'\n'"deb $mirror $target main"
# The kernel packages come from $target. Where the headers pull the image
# in, update-initramfs is /bin/true (vng boots without an initramfs of the
# image's: a minute saved); elsewhere its .debs are unpacked, not installed;
# sid splits it in linux-binary-* (vmlinuz) and linux-modules-*.
hook='chroot "$1" sh -ec "
	dpkg-divert --quiet --local --rename --add /usr/sbin/update-initramfs
	ln -s /bin/true /usr/sbin/update-initramfs
	apt-get install -y -qq --no-install-recommends -t '$target' linux-headers-amd64 >/dev/null
	kver=\$(ls /usr/src | sed -n \"s/^linux-headers-\\(.*-amd64\\)\$/\\1/p\" | sort -V | tail -n 1)
	test -n \"\$kver\"
	cd /tmp
	if ! [ -f /boot/vmlinuz-\$kver ] && ! [ -f /usr/lib/modules/\$kver/vmlinuz ]; then
		apt-get download -qq linux-binary-\$kver linux-modules-\$kver 2>/dev/null ||
			apt-get download -qq linux-image-\$kver-unsigned 2>/dev/null ||
			apt-get download -qq linux-image-\$kver
		for f in linux-*.deb; do dpkg-deb -x \$f /; done
		rm -f linux-*.deb
	fi
	depmod -a \$kver
	echo \$kver >/kver
"'
echo "kernel-chroot: making $name ($suite, kernel from $target) in $dir/root" >&2
mmdebstrap --quiet --variant=apt --include="$includes" \
	--aptopt='Acquire::Check-Valid-Until "false"' \
	--aptopt='APT::Install-Recommends "false"' \
	--customize-hook="$hook" \
	"$suite" "$dir/root" - <<<"$sources" >&2
kver=$(cat "$dir/root/kver")
# sid keeps the image beside its modules, older suites in /boot.
image=
for f in "$dir/root/boot/vmlinuz-$kver" "$dir/root/usr/lib/modules/$kver/vmlinuz"; do
	if [ -f "$f" ]; then image=$f; break; fi
done
[ -n "$image" ] || die "$name: no kernel image for $kver in the chroot"
echo "${image#"$dir"/}" >"$dir/image" # relative: the cache may move
[ -f "$dir/root/usr/src/linux-headers-$kver/Makefile" ] || die "$name: no headers for $kver"
echo "$kver" >"$dir/kver"
echo "kernel-chroot: $name: $kver, gcc $(chroot "$dir/root" gcc -dumpversion)," \
	"$(($(date +%s) - start)) s" >&2
echo "$dir"
