#!/bin/bash
# Builds (once per machine) a kernel with the kernel's own bug finders on:
# KASAN (generic, inline), lockdep (PROVE_LOCKING), DEBUG_ATOMIC_SLEEP,
# kmemleak, UBSAN (bounds) and DEBUG_LIST, on top of virtme-ng's minimal
# bootable config, from Debian's linux-source-6.1. The tree is cached outside
# the repo, keyed by the source package version and the configuration inputs:
#
#   ${PMM_CACHE:-${XDG_CACHE_HOME:-~/.cache}/pmm}/debug-kernel/<srcver>-<key>/linux/
#
# A complete build (stamp .built, written last) is reused; a partial one is
# resumed (make is incremental; extraction and configuration are redone when
# their stamps are missing). A lock stops two builds of one tree at once.
#
#   scripts/debug-kernel.sh           build if needed; print the tree's path last
#   scripts/debug-kernel.sh --path    print the tree's path; exit 1 if not built
#   scripts/debug-kernel.sh --module DIR
#                                     build the module whose sources are in DIR
#                                     against the tree (make -C tree M=DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)

src_tar=${PMM_LINUX_SOURCE:-/usr/src/linux-source-6.1.tar.xz}
jobs=${PMM_JOBS:-$(nproc)}
if [ -z "${PMM_JOBS:-}" ] && [ "$jobs" -gt 2 ]; then
	jobs=2 # the machine is shared with other agents
fi

# On top of `virtme-configkernel --defconfig`: each must end up =y.
enable=(MODULES MODULE_UNLOAD KASAN KASAN_GENERIC KASAN_INLINE PROVE_LOCKING
	DEBUG_ATOMIC_SLEEP DEBUG_KMEMLEAK UBSAN UBSAN_BOUNDS DEBUG_LIST TASKSTATS
	TASK_XACCT PROC_EVENTS CONNECTOR KALLSYMS UPROBES UPROBE_EVENTS DEBUG_INFO_NONE
	DEBUG_FS CMDLINE_BOOL)
# Each must end up unset: the other members of the choices above, kmemleak's
# periodic scan (we scan on demand, so reports appear only when we ask) and
# kmemleak off by default.
disable=(KASAN_OUTLINE DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT DEBUG_INFO_DWARF4
	DEBUG_INFO_DWARF5 DEBUG_KMEMLEAK_AUTO_SCAN DEBUG_KMEMLEAK_DEFAULT_OFF
	CMDLINE_OVERRIDE MODULE_SIG_FORCE)
# Built into the command line: report every KASAN bug, not only the first
# (the selftest's use-after-free must not hide a real one, nor the reverse).
cmdline="kasan_multi_shot"

die() { echo "debug-kernel: $*" >&2; exit 1; }

if [ ! -f "$src_tar" ]; then
	if [ "$(id -u)" -eq 0 ] && [ -z "${PMM_LINUX_SOURCE:-}" ]; then
		echo "debug-kernel: installing linux-source-6.1" >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			linux-source-6.1 bc flex bison libelf-dev libssl-dev dwarves >/dev/null
	fi
	[ -f "$src_tar" ] || die "$src_tar is missing: apt install linux-source-6.1"
fi
configkernel=$top/.venv/bin/virtme-configkernel
[ -x "$configkernel" ] || die "$configkernel is missing: run 'make setup'"

srcver=$(dpkg-query -W -f='${Version}' linux-source-6.1 2>/dev/null || true)
[ -n "$srcver" ] || srcver=$(stat -c %Y "$src_tar")
vngver=$("$top/.venv/bin/python" -c \
	'import importlib.metadata as m; print(m.version("virtme-ng"))')
key=$(printf '%s\n' "vng=$vngver" "enable=${enable[*]}" "disable=${disable[*]}" \
	"cmdline=$cmdline" | sha256sum | cut -c1-12)
cache=${PMM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pmm}/debug-kernel
dir=$cache/$srcver-$key
tree=$dir/linux

if [ "${1:-}" = "--path" ]; then
	[ -f "$dir/.built" ] || die "not built yet: run 'make debug-kernel' ($dir)"
	echo "$tree"
	exit 0
fi

if [ "${1:-}" = "--module" ]; then
	[ -f "$dir/.built" ] || die "not built yet: run 'make debug-kernel' ($dir)"
	mdir=$(cd "${2:?--module DIR}" && pwd)
	make -s -C "$tree" M="$mdir" -j"$jobs" modules
	exit 0
fi

mkdir -p "$dir"
exec 9>"$dir/.lock"
if ! flock -n 9; then
	echo "debug-kernel: another build of $dir is running; waiting for it" >&2
	flock 9
fi

if [ -f "$dir/.built" ] && [ -f "$tree/arch/x86/boot/bzImage" ]; then
	echo "debug-kernel: cached build" >&2
	echo "$tree"
	exit 0
fi

start=$(date +%s)
if [ ! -f "$dir/.extracted" ]; then
	echo "debug-kernel: extracting $src_tar into $tree" >&2
	rm -rf "$tree" "$dir/.configured"
	mkdir -p "$tree"
	tar -xf "$src_tar" -C "$tree" --strip-components=1
	touch "$dir/.extracted"
fi

if [ ! -f "$dir/.configured" ]; then
	echo "debug-kernel: configuring" >&2
	(
		cd "$tree"
		"$configkernel" --defconfig >/dev/null
		args=()
		for s in "${enable[@]}"; do args+=(--enable "$s"); done
		for s in "${disable[@]}"; do args+=(--disable "$s"); done
		args+=(--set-str CMDLINE "$cmdline")
		scripts/config "${args[@]}"
		make -s olddefconfig
	)
	bad=()
	for s in "${enable[@]}"; do
		grep -qx "CONFIG_$s=y" "$tree/.config" || bad+=("$s (want y)")
	done
	for s in "${disable[@]}"; do
		if grep -q "^CONFIG_$s=" "$tree/.config"; then bad+=("$s (want unset)"); fi
	done
	grep -qx "CONFIG_CMDLINE=\"$cmdline\"" "$tree/.config" || bad+=("CMDLINE")
	# What virtme needs to boot it: 9p root, virtio, a console.
	for s in NET_9P_VIRTIO 9P_FS VIRTIO_PCI VIRTIO_CONSOLE SERIAL_8250_CONSOLE; do
		grep -qx "CONFIG_$s=y" "$tree/.config" || bad+=("$s (virtme needs it =y)")
	done
	if [ ${#bad[@]} -gt 0 ]; then
		printf 'debug-kernel: config symbol not as required: %s\n' "${bad[@]}" >&2
		die "configuration failed ($tree/.config)"
	fi
	touch "$dir/.configured"
fi

echo "debug-kernel: building with -j$jobs (about 13 min on 2 idle cores)" >&2
make -C "$tree" -j"$jobs" bzImage modules_prepare modules >&2
[ -f "$tree/arch/x86/boot/bzImage" ] || die "no bzImage after the build"
touch "$dir/.built"
end=$(date +%s)
echo "debug-kernel: built $(make -s -C "$tree" kernelrelease) in $((end - start)) s" >&2
echo "$tree"
