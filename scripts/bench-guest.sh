#!/bin/bash
# Inside the VM (scripts/bench.sh): load the module, run each guest benchmark.
set -uo pipefail
cd "$PMM_TOP"
insmod "$PMM_KO"
rc=0
for b in bench/guest_*.sh; do
	# needs the plugin's VM: scripts/bench-icount.sh
	[ "$b" = bench/guest_icount.sh ] && continue
	echo "== $b"
	bash "$b" 2>&1 | tee "$PMM_RESULTS/$(basename "$b" .sh).txt"
	[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
done
rmmod pmm
exit $rc
