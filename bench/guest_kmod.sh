#!/bin/bash
# Inside the VM (root): the cost per record of PMM_RECORD_LOG at batch sizes
# 1, 16, 256 and 4096 (bench/bin/bench_record). Loads pmm.ko when it
# is not loaded and unloads it again after.
set -euo pipefail
top=${PMM_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
ko=${PMM_KO:-$top/kmod/pmm.ko}
records=${PMM_BENCH_RECORDS:-200000}
loaded=0
if ! grep -q '^pmm ' /proc/modules; then
	insmod "$ko"
	loaded=1
fi
echo "kmod: PMM_RECORD_LOG cost per record (kernel side only; $records records per batch size, rounded down to a multiple of 4096; malloc/free pairs, then the microbenchmark's pattern over 4096 and 256 live blocks)"
"$top/bench/bin/bench_record" "$records"
if [ "$loaded" = 1 ]; then
	rmmod pmm
fi
