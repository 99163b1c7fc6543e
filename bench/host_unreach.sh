#!/bin/bash
# pmm-scan's cost, natively on the host (figures, never pass/fail): the
# longest time a thread of the target is stopped, and the scan's time, for a
# heap of a million blocks of 100 MiB and of 1 GiB (bench/bin/unreach_bench:
# 1024 lists, 1% of them lost). The module cannot load here, so the block
# table is the one unreach_bench writes (pmm-scan --blocks FILE), as the
# module would hold it; everything else is the real path: the threads
# stopped, the copy cloned, read through its /proc/PID/mem and swept in the
# confined child. A figure is the median of UNREACH_ROUNDS runs (default 3),
# each on a fresh target. bench/guest_unreach.sh times the whole path, the
# module's table included, in the VM.
#
#   bench/host_unreach.sh            UNREACH_SIZES="100 1024" (MiB)  UNREACH_BLOCKS=1000000
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
for f in hooklib/pmm-scan bench/bin/unreach_bench; do
	[ -f "$f" ] || { echo "host_unreach: $f missing: run make" >&2; exit 1; }
done
rounds=${UNREACH_ROUNDS:-3}
sizes=${UNREACH_SIZES:-100 1024}
blocks=${UNREACH_BLOCKS:-1000000}
tmp=$(mktemp -d /tmp/host_unreach.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
echo "host_unreach: pmm-scan on $blocks blocks (median of $rounds runs; native, --blocks FILE;" \
	"load average $(cut -d' ' -f1 /proc/loadavg) on $(nproc) cpus: other work slows the clone)"
printf '%-8s %12s %12s %12s %12s %10s %9s\n' heap longest_stop clone scan walk+graph GB/s lost
for mib in $sizes; do
	runs=()
	for ((r = 0; r < rounds; r++)); do
		mkfifo "$tmp/in"
		bench/bin/unreach_bench "$blocks" "$mib" 10 "$tmp/blocks" <"$tmp/in" >"$tmp/out" &
		prog=$!
		exec 8>"$tmp/in"
		for _ in $(seq 600); do grep -q ready "$tmp/out" && break; sleep 0.2; done
		sleep 1.1	# past the age gate
		hooklib/pmm-scan --blocks "$tmp/blocks" "$prog" >"$tmp/scan.$r.json"
		exec 8>&-
		wait "$prog"
		rm -f "$tmp/in"
		runs+=("$tmp/scan.$r.json")
	done
	/usr/bin/python3 -I - "$mib" "${runs[@]}" <<'PY'
import json
import statistics
import sys

mib, files = sys.argv[1], sys.argv[2:]
docs = [json.load(open(f)) for f in files]
med = lambda f: statistics.median(f(d) for d in docs)  # noqa: E731
scan = med(lambda d: d["scan"]["us"])
print(f"{mib + ' MiB':<8} {med(lambda d: d['stop']['longest_us']) / 1e3:9.1f} ms "
      f"{med(lambda d: d['stop']['clone_us']) / 1e3:9.1f} ms {scan / 1e3:9.0f} ms "
      f"{med(lambda d: d['scan']['walk_us'] + d['scan']['graph_us']) / 1e3:9.0f} ms "
      f"{med(lambda d: d['table']['bytes']) / scan / 1e3:10.2f} "
      f"{med(lambda d: d['definite']['blocks'] + d['indirect']['blocks']):9.0f}")
PY
done
