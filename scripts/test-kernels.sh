#!/bin/bash
# make test-kernels: the module on every kernel line Debian ships, each
# built with its own compiler and headers (scripts/kernel-chroot.sh; the
# host's for bookworm) with W=1, then booted (one VM per kernel) for the
# kernel-facing guest tests (tests/guest/kernel.sh). One line per kernel;
# exit 1 if any kernel fails. Results: build/kernels/<name>/.
#
# Environment:
#   PMM_KERNELS  the lines to build (default: all, in the order below)
#   PMM_BOOT     the lines to boot (default: all of PMM_KERNELS; "none")
#   PMM_GUEST_TESTS, PMM_GUEST_ARGS, PMM_FULL: as for the guest suite
#   PMM_KERNEL_TIMEOUT  seconds for one VM run (default 1500)
set -uo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)

all="bullseye bookworm bookworm-backports trixie sid"
kernels=${PMM_KERNELS:-$all}
boot=${PMM_BOOT:-$kernels}
out=$top/build/kernels
mkdir -p "$out"
t0=$(date +%s)
declare -A line

suite_of() { # the Debian suite a line's kernel comes from
	case "$1" in
	bookworm) echo "bookworm, the host's" ;;
	*) echo "$1" ;;
	esac
}

# 1. The chroots, made at once (downloads, mostly), before any build.
t_chroot=$(date +%s)
if ! command -v mmdebstrap >/dev/null; then
	echo "test-kernels: installing mmdebstrap"
	apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null 2>&1 ||
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null; }
fi
pids=()
for k in $kernels; do
	[ "$k" = bookworm ] && continue
	scripts/kernel-chroot.sh "$k" >"$out/chroot-$k.log" 2>&1 &
	pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
t_chroot=$(($(date +%s) - t_chroot))

# copy_sources DIR: the module's sources (what Kbuild builds) into DIR.
copy_sources() {
	rm -rf "$1"
	mkdir -p "$1/uapi" "$1/probes"
	cp kmod/Kbuild kmod/*.h "$1/"
	for f in kmod/*.c; do
		case "$f" in *.mod.c) ;; *) cp "$f" "$1/" ;; esac
	done
	cp kmod/uapi/pmm.h "$1/uapi/"
	cp kmod/probes/*.c "$1/probes/"
}

# 2. Build on each: W=1, zero warnings.
declare -A ko image gcc kver
for k in $kernels; do
	dir=$out/$k
	rm -rf "$dir"
	mkdir -p "$dir"
	ts=$(date +%s)
	if [ "$k" = bookworm ]; then
		kver[$k]=$(scripts/kver.sh)
		image[$k]=/boot/vmlinuz-${kver[$k]}
		kdir=/lib/modules/${kver[$k]}/build
		src=$dir/src
		copy_sources "$src"
		make -C "$kdir" M="$src" W=1 -j2 modules >"$dir/build.log" 2>&1
		rc=$?
		cfg=$kdir/.config
	else
		if ! cdir=$(scripts/kernel-chroot.sh --path "$k" 2>/dev/null); then
			line[$k]="no chroot (see $out/chroot-$k.log)"
			continue
		fi
		root=$cdir/root
		kver[$k]=$(cat "$cdir/kver")
		image[$k]=$cdir/$(cat "$cdir/image")
		# one build directory per run: runs sharing a cache do not collide
		src=$root/tmp/pmm-build.$$
		cfg=$root/usr/src/linux-headers-${kver[$k]}/.config
		copy_sources "$src"
		# objtool reads /proc: a private mount namespace mounts it, and
		# takes it down with the build.
		unshare --mount --fork sh -c 'mount -t proc proc "$1/proc" &&
			exec chroot "$1" make -C "/lib/modules/$2/build" M="$3" W=1 -j2 modules' \
			- "$root" "${kver[$k]}" "/tmp/pmm-build.$$" >"$dir/build.log" 2>&1
		rc=$?
	fi
	gcc[$k]=$(sed -n 's/^CONFIG_GCC_VERSION=\([0-9]*\)[0-9][0-9][0-9][0-9]$/\1/p' "$cfg" 2>/dev/null)
	echo "test-kernels: $k: built against ${kver[$k]} in $(($(date +%s) - ts)) s (exit $rc)"
	if [ "$rc" -ne 0 ] || [ ! -f "$src/pmm.ko" ]; then
		line[$k]="does not build: $(grep -m1 -E 'error|pmm:' "$dir/build.log" || tail -n 1 "$dir/build.log") (see $dir/build.log)"
		continue
	fi
	if grep -iE "warning" "$dir/build.log" >"$dir/warnings.txt"; then
		line[$k]="builds with $(wc -l <"$dir/warnings.txt") warnings (see $dir/warnings.txt)"
		continue
	fi
	cp "$src/pmm.ko" "$dir/pmm.ko"
	cp "$src/pmm_probes.h" "$dir/"
	[ "$k" = bookworm ] || rm -rf "$src"
	ko[$k]=$dir/pmm.ko
	line[$k]="builds"
done
t_build=$(date +%s)

# 3. Boot each built one: the module loads, the kernel-facing tests pass.
for k in $kernels; do
	[ -n "${ko[$k]:-}" ] || continue
	case " $boot " in
	*" $k "*) ;;
	*) line[$k]+=", not booted (PMM_BOOT)"; continue ;;
	esac
	dir=$out/$k
	ts=$(date +%s)
	RESULTS=$dir/vm PMM_KO=${ko[$k]} timeout -k 30 "${PMM_KERNEL_TIMEOUT:-1500}" \
		scripts/vmtest.sh --kernel "${image[$k]}" -- tests/guest/kernel.sh \
		>"$dir/vm.log" 2>&1
	rc=$?
	secs=$(($(date +%s) - ts))
	if [ ! -f "$dir/vm/loaded" ]; then
		line[$k]+=", does not load: $(cat "$dir/vm/insmod.txt" 2>/dev/null || echo "no boot, see $dir/vm.log")"
		continue
	fi
	read -r n f e s < <(python3 - "$dir/vm/guest.xml" <<-'EOF' 2>/dev/null || echo "0 0 1 0"
		import sys
		import xml.etree.ElementTree as ET
		r = ET.parse(sys.argv[1]).getroot()
		s = r if r.tag == "testsuite" else r.find("testsuite")
		t, f, e, k = (int(s.get(a, 0)) for a in ("tests", "failures", "errors", "skipped"))
		print(t - f - e - k, f, e, k)
	EOF
	)
	line[$k]+=", loads, $n kernel-facing guest tests passed"
	[ "$n" -gt 0 ] || line[$k]+=" (none ran: failed)"
	[ "$s" -gt 0 ] && line[$k]+=", $s skipped"
	if [ "$rc" -ne 0 ] || [ "$f" -gt 0 ] || [ "$e" -gt 0 ]; then
		line[$k]+=", $f failed, $e errors"
		[ -s "$dir/vm/dmesg-bad.txt" ] && line[$k]+=", kernel log errors"
		line[$k]+=" (exit $rc, see $dir/vm.log)"
	fi
	line[$k]+=" in $secs s"
done
t_boot=$(date +%s)

echo "test-kernels: chroots $t_chroot s, builds $((t_build - t0 - t_chroot)) s," \
	"boots $((t_boot - t_build)) s, total $((t_boot - t0)) s"
fail=0
for k in $kernels; do
	l=${line[$k]:-not built}
	echo "${kver[$k]:-$k} ($(suite_of "$k"), gcc-${gcc[$k]:-?}): $l"
	case "$l" in
	builds | "builds, not booted"*) ;;
	*"kernel-facing guest tests passed in"*) ;;
	*) fail=1 ;;
	esac
	case "$l" in *failed*) fail=1 ;; esac
done
exit $fail
