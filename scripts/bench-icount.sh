#!/bin/bash
# The hook's cost in guest instructions (part of make bench; runs alone too):
# boots ONE VM with the QEMU plugin bench/icount/bin/libicount.so, which
# counts every instruction the guest executes (all vCPUs, kernel and user),
# runs bench/guest_icount.sh in it, then pairs the plugin's counts with the
# guest's run labels (bench/icount_report.py). Deterministic where
# bench/guest_hook.sh's timings are not; unlike bench/host_instr.sh it counts
# the module's work. Output also in RESULTS (default build/bench)/guest_icount.txt.
#
#   scripts/bench-icount.sh   (PMM_ICOUNT_ROUNDS, PMM_ICOUNT_REPS, PMM_ICOUNT_ONLY,
#                              PMM_ICOUNT_CFGS: see bench/guest_icount.sh)
# PMM_ICOUNT_PROF=1 also profiles the guest kernel per function (and per
# source line of pmm.ko) for each run: bench/icount_prof.py, in
# RESULTS/guest_icount_prof.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
results=${RESULTS:-$top/build/bench}
mkdir -p "$results"
make -s -C bench/icount
counts=$results/guest_icount.counts
labels=$results/guest_icount.labels
prof=$results/guest_icount.prof
rm -f "$counts" "$labels" "$prof" "$results/guest_kallsyms.txt"
plugin="$top/bench/icount/bin/libicount.so,out=$counts"
if [ -n "${PMM_ICOUNT_PROF:-}" ]; then
	plugin+=",prof=$prof"
fi
# TCG only: plugins are part of QEMU's translator, KVM has none. All vCPUs
# in one host thread: the plugin's counter is not atomic. vng passes the
# options to QEMU through a shell: the paths must not contain spaces.
VM_NO_KVM=1 VM_QEMU_OPTS="-plugin $plugin -accel tcg,thread=single" \
	RESULTS=$results scripts/vmtest.sh -- bench/guest_icount.sh
/usr/bin/python3 -I bench/icount_report.py "$counts" "$labels" | tee "$results/guest_icount.txt"
if [ -n "${PMM_ICOUNT_PROF:-}" ]; then
	/usr/bin/python3 -I bench/icount_prof.py "$prof" "$labels" "$results/guest_kallsyms.txt" \
		kmod/pmm.ko | tee "$results/guest_icount_prof.txt"
fi
