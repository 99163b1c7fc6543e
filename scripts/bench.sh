#!/bin/bash
# make bench: benchmarks print figures and ratios against a bare run; they
# never fail on a number. Host benchmarks (bench/host_*.sh) run here, then ONE
# VM loads the module and runs every bench/guest_*.sh but guest_icount.sh,
# which a second VM, booted with the instruction-counting QEMU plugin, runs
# (scripts/bench-icount.sh): the timings must not run under the plugin.
# Output is also kept in build/bench/.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build/bench
shopt -s nullglob
for b in bench/host_*.sh; do
	echo "== $b"
	bash "$b" 2>&1 | tee "build/bench/$(basename "$b" .sh).txt"
done
guest=(bench/guest_*.sh)
if [ ${#guest[@]} -gt 0 ]; then
	RESULTS=$PWD/build/bench scripts/vmtest.sh -- scripts/bench-guest.sh
	RESULTS=$PWD/build/bench scripts/bench-icount.sh
fi
