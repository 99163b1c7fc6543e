#!/bin/bash
# Boots ONE VM on the kernel the module was built for and runs a command in
# it as root (default: the in-guest test suite). The host's root file system
# is shared read-only; RESULTS (default build/vm) is shared read-write and
# holds the guest's output. Exit status: the guest command's.
#
#   scripts/vmtest.sh [--kernel IMAGE] [--memory 1G] [-- CMD...]
# VM_QEMU_OPTS: extra QEMU options (scripts/bench-icount.sh: a TCG plugin).
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
kver=$(scripts/kver.sh)
kernel=${VM_KERNEL:-/boot/vmlinuz-$kver}
# 4G: MemAvailable over 2.7 GB, so a STABLE rules out 64 KiB/min, not less
# (pmm.analysis.trend.rate_that_matters; tests/guest/test_pmd_e2e.py's sawtooth)
memory=${VM_MEMORY:-4G}
while [ $# -gt 0 ]; do
	case "$1" in
	--kernel) kernel=$2; shift 2 ;;
	--memory) memory=$2; shift 2 ;;
	--) shift; break ;;
	*) break ;;
	esac
done
results=${RESULTS:-$top/build/vm}
mkdir -p "$results"
export PATH="$top/.venv/bin:$PATH"
if [ $# -eq 0 ]; then
	set -- tests/guest/run.sh
fi
# Every PMM_* variable of the caller reaches the guest (PMM_GUEST_ARGS, PMM_FULL,
# PMM_FUZZ_N, ...), quoted so that values with spaces survive.
export PMM_RESULTS=$results PMM_TOP=$top PMM_KO=${PMM_KO:-$top/kmod/pmm.ko} PMM_FULL=${PMM_FULL:-0}
exports=""
for var in $(compgen -e | grep '^PMM_'); do
	exports+="export $var=$(printf '%q' "${!var}"); "
done
cmd="cd $top && ${exports}$*"

# KVM where it works (a user's laptop); TCG where QEMU aborts on it (here).
accel=(--disable-kvm)
if [ -z "${VM_NO_KVM:-}" ] && [ -w /dev/kvm ]; then
	if timeout 60 vng --run "$kernel" --memory 256M --exec true >/dev/null 2>&1; then
		accel=()
	fi
fi
# Extra QEMU options: vng takes them last and through a shell.
qemu_opts=()
if [ -n "${VM_QEMU_OPTS:-}" ]; then
	qemu_opts=(--qemu-opts="$VM_QEMU_OPTS")
fi
# A boot that never reaches the command (seen twice in TCG with the debug
# kernel: QEMU busy, no output for 30 minutes) is killed after
# VM_BOOT_TIMEOUT seconds (default 240; a TCG boot takes 45-100 s) and tried
# again, three attempts in all.
boot_timeout=${VM_BOOT_TIMEOUT:-240}
started=$results/.vmtest-started
cmd="touch $started && $cmd"
for attempt in 1 2 3; do
	rm -f "$started"
	echo "vmtest: booting $kernel (${accel[*]:-kvm}), running: $*"
	# QEMU opens its console on /proc/self/fd/1 with O_TRUNC: on a file
	# (make test > log) that would erase what was written before it, so
	# its output goes through a pipe.
	setsid vng --run "$kernel" "${accel[@]}" --cpus 2 --memory "$memory" \
		--rwdir "$results" --exec "$cmd" "${qemu_opts[@]}" > >(cat) 2> >(cat >&2) &
	vm=$!
	for ((waited = 0; waited < boot_timeout; waited++)); do
		[ -e "$started" ] || ! kill -0 "$vm" 2>/dev/null && break
		sleep 1
	done
	if [ -e "$started" ] || ! kill -0 "$vm" 2>/dev/null; then
		rc=0
		wait "$vm" || rc=$?
		rm -f "$started"
		exit $rc
	fi
	echo "vmtest: the guest did not reach its command in $boot_timeout s (attempt $attempt): killed" >&2
	kill -KILL -- -"$vm" 2>/dev/null || true
	wait "$vm" 2>/dev/null || true
done
exit 1
