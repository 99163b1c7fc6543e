#!/bin/bash
# pmd at fleet scale (figures, never pass/fail): 256 processes sampled every
# second while Prometheus-style scrapes of its metrics endpoint come every 15 s
# (target: under 2% of a core), and its memory.
#  1. the real daemon: pmd --no-genl --pid x256 --interval 1s --metrics, scraped
#     by curl every 15 s for PMM_BENCH_SECONDS (default 60) after a warm-up;
#     cpu from /proc/PID/stat (all threads), memory from /proc/PID/status;
#  2. the module's path, which the host cannot load: 256 processes' genl sample
#     events replayed for an hour of their time (every window full), with
#     the metrics endpoint scraped every 15 s of that time; cpu per second of
#     replayed time, and pmd's memory once every window is full.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
py=$top/.venv/bin/python
secs=${PMM_BENCH_SECONDS:-60}
n=${PMM_BENCH_PROCS:-256}
tmp=$(mktemp -d /tmp/pmd-fleet.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
cd "$top"
port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

echo "pmd: $n processes from /proc every 1 s, /metrics scraped every 15 s, ${secs} s measured"
for _ in $(seq "$n"); do
	sleep 3600 &
	pids+=($!)
done
"$py" -m pmd.main --no-genl --db "$tmp/pmd.db" --interval 1s --metrics "127.0.0.1:$port" \
	--pid "${pids[@]}" 2>"$tmp/pmd.log" &
pmd=$!
pids+=($pmd)
for _ in $(seq 300); do grep -q "detector ready" "$tmp/pmd.log" && break; sleep 0.2; done
sleep 35 # every window reaches the detector's minimum: verdicts are made while measured
tck=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
c0=$(cpu $pmd)
s0=$(date +%s.%N)
scrapes=0
end=$(($(date +%s) + secs))
while [ "$(date +%s)" -lt "$end" ]; do
	curl -sf -o "$tmp/metrics.txt" -w '%{time_total}\n' "http://127.0.0.1:$port/metrics" >>"$tmp/scrape-times"
	scrapes=$((scrapes + 1))
	sleep 15
done
c1=$(cpu $pmd)
s1=$(date +%s.%N)
pct=$(echo "scale=2; 100 * ($c1 - $c0) / $tck / ($s1 - $s0)" | bc)
series=$(grep -vc '^#' "$tmp/metrics.txt")
slowest=$(sort -n "$tmp/scrape-times" | tail -1)
echo "  pmd used ${pct}% of a core (target < 2%); $scrapes scrapes of $series series," \
	"$(stat -c %s "$tmp/metrics.txt") bytes, slowest ${slowest} s"
grep -E '^(VmRSS|VmHWM)' "/proc/$pmd/status" | sed 's/^/  /'
kill -TERM $pmd
wait $pmd || true

echo "pmd: $n processes' module sample events replayed, an hour of them, scraped every 15 s"
"$py" bench/pmd_fleet_replay.py "$tmp/replay.db" "$n"
