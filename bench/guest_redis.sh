#!/bin/bash
# A real server under load, inside the VM with pmm.ko (scripts/bench-guest.sh
# loads it; by hand this script loads it when it is not loaded): Debian's
# redis-server (jemalloc) driven by redis-benchmark over loopback, random keys
# (-r), a fixed number of requests per test. Configurations: bare; preloaded
# exact (LD_PRELOAD=hooklib/libpmmhook.so PMM_START=1, as bench/hook_runs.sh);
# preloaded sampled (PMM_SAMPLE=524288); attached exact (started bare, then
# `pmctl attach PID` once it answers PING); attached sampled (`--sample 512K`).
# A fresh server per run, so every run does the same work. Each round runs
# every configuration once, the order rotated a step each round (the host's
# speed drifts within a boot); per run: requests/s (all requests over
# redis-benchmark's wall time) and the server's cpu (utime + stime from
# /proc/PID/stat, so the module's work in its system calls counts) per 100k
# requests. The client runs on the same 2 vCPUs. Figures: medians over the
# rounds with min-max ranges, and each round's ratio to its bare run (median,
# range); attached over preloaded pairs the same round's two runs.
#
#   bench/guest_redis.sh    PMM_REDIS_ROUNDS (5), PMM_REDIS_REQUESTS (per test, 3000),
#                           PMM_REDIS_TESTS (set,get,incr,lpush,lpop,sadd,hset),
#                           PMM_REDIS_CLIENTS (16), PMM_REDIS_PIPELINE (-P, 1),
#                           PMM_REDIS_KEYS (-r, 100000)
#   bench/guest_redis.sh --icount
#       in bench/guest_icount.sh's VM (the QEMU plugin): each run's
#       redis-benchmark between "mark start" and "mark stop", its label
#       appended to $PMM_RESULTS/guest_icount.labels with the request count
#       (bench/icount_report.py: instructions per request, all vCPUs: client,
#       server and kernel); no timings. Defaults there: 3 rounds, 2000
#       requests per test, one client pipelining 16 requests, the server and
#       the client pinned to one vCPU each.
set -uo pipefail
top=${PMM_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$top"
icount=0
[ "${1:-}" = --icount ] && icount=1
rounds=${PMM_REDIS_ROUNDS:-$((icount ? 3 : 5))}
requests=${PMM_REDIS_REQUESTS:-$((icount ? 2000 : 3000))}
tests=${PMM_REDIS_TESTS:-set,get,incr,lpush,lpop,sadd,hset}
clients=${PMM_REDIS_CLIENTS:-$((icount ? 1 : 16))}
# --icount: one client, 16 requests in each write (-P), so that every batch
# takes the same system calls and wakeups, and the guest's work that grows
# with wall time (timer ticks, redis's cron; about 1 M instructions a second
# of TCG's slow time) is spread over many requests
pipeline=${PMM_REDIS_PIPELINE:-$((icount ? 16 : 1))}
# --icount: the server on vCPU 0, the client on vCPU 1 (with one client, the
# same system calls and wakeups for every request)
pin_srv=() pin_cli=()
if [ $icount = 1 ] && [ "$(nproc)" -ge 2 ]; then
	pin_srv=(taskset -c 0) pin_cli=(taskset -c 1)
fi
keys=${PMM_REDIS_KEYS:-100000}
port=${PMM_REDIS_PORT:-6393}
hook=$top/hooklib/libpmmhook.so
mark=$top/bench/icount/bin/mark
export PATH="$top/.venv/bin:$PATH"
configs=(bare preloaded-exact preloaded-sampled attached-exact attached-sampled)
ntests=$(tr , '\n' <<<"$tests" | grep -c .)
total=$((requests * ntests))

for c in redis-server redis-benchmark redis-cli; do
	command -v $c >/dev/null || { echo "guest_redis: no $c (make setup installs redis-server and redis-tools)"; exit 0; }
done
for f in "$hook" hooklib/pmm-inject; do
	[ -f "$f" ] || { echo "guest_redis: $f missing: run make" >&2; exit 1; }
done
loaded=0
if ! grep -q '^pmm ' /proc/modules; then
	insmod "${PMM_KO:-$top/kmod/pmm.ko}"
	loaded=1
fi
tmp=$(mktemp -d /tmp/guest_redis.XXXXXX)
srv=
cleanup() {
	[ -n "$srv" ] && kill -KILL "$srv" 2>/dev/null
	rm -rf "$tmp"
	[ $loaded = 1 ] && rmmod pmm
}
trap cleanup EXIT
if [ $icount = 1 ]; then
	labels=${PMM_RESULTS:?PMM_RESULTS: the shared results directory}/guest_icount.labels
	[ -x "$mark" ] || { echo "guest_redis: $mark missing: run make" >&2; exit 1; }
fi

# start_server CFG: starts redis-server in CFG, sets srv; 1 if it does not answer
start_server() {
	local cfg=$1 i
	local -a env=(env -u LD_PRELOAD -u PMM_START -u PMM_SAMPLE PMM_QUIET=1)
	case $cfg in
	preloaded-exact) env+=(LD_PRELOAD="$hook" PMM_START=1) ;;
	preloaded-sampled) env+=(LD_PRELOAD="$hook" PMM_START=1 PMM_SAMPLE=524288) ;;
	esac
	rm -f "$tmp/redis.log"
	"${pin_srv[@]}" "${env[@]}" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$tmp" --logfile "$tmp/redis.log" </dev/null >/dev/null 2>&1 &
	srv=$!
	for ((i = 0; i < 600; i++)); do
		[ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break
		sleep 0.1
	done
	if [ $i = 600 ]; then
		echo "guest_redis: $cfg: redis-server does not answer" >&2
		cat "$tmp/redis.log" >&2
		kill -KILL "$srv"
		wait "$srv"
		srv=
		return 1
	fi
	case $cfg in
	attached-exact) pmctl attach "$srv" >"$tmp/attach" 2>&1 ;;
	attached-sampled) pmctl attach "$srv" --sample 512K >"$tmp/attach" 2>&1 ;;
	*) return 0 ;;
	esac || { echo "guest_redis: $cfg: pmctl attach $srv failed: $(cat "$tmp/attach")" >&2; return 1; }
}

# stop_server CFG: shuts it down; a monitored run must have been monitored
# (its entry in /proc/pmm/pid), and its exited entry is stopped after
stop_server() {
	local cfg=$1 rc=0
	if [ "$cfg" != bare ] && ! grep -q "PID: $srv," /proc/pmm/pid; then
		echo "guest_redis: $cfg: pid $srv is not monitored" >&2
		rc=1
	fi
	redis-cli -p "$port" shutdown nosave >/dev/null 2>&1
	wait "$srv"
	if [ "$cfg" != bare ]; then
		echo "STOP_PID $srv" >/proc/pmm/cfg 2>/dev/null
	fi
	srv=
	return $rc
}

server_ticks() {	# the server's utime + stime, in clock ticks
	local -a st
	read -ra st <"/proc/$srv/stat"
	# fields 14 and 15 (comm has no spaces: redis-server)
	echo $((st[13] + st[14]))
}

bench_client() {
	"${pin_cli[@]}" redis-benchmark -p "$port" -q -n "$requests" -r "$keys" -c "$clients" \
		-P "$pipeline" -t "$tests" --csv >"$tmp/csv" 2>"$tmp/err"
}

# run ROUND CFG: one measured run; appends "ROUND CFG WALL SERVER_TICKS" to rounds
run() {
	local r=$1 cfg=$2 t0 t1 s0 s1 rc=0
	if ! start_server "$cfg"; then
		[ -n "$srv" ] && stop_server "$cfg"
		return 1
	fi
	if [ $icount = 1 ]; then
		t0=$(date +%s.%N)
		"$mark" start
		bench_client || rc=$?
		"$mark" stop
		t1=$(date +%s.%N)
		# the guest's background work grows with this time (TCG's, slower
		# when the host is busy): printed to judge it by
		awk -v r="$r" -v c="$cfg" -v t0="$t0" -v t1="$t1" \
			'BEGIN { printf "round %d %-18s %6.1f s between the markers\n", r, c, t1 - t0 }'
		printf 'redis-benchmark\t%s\t%s\t%s\n' "$cfg" "$rc" "$total" >>"$labels"
	else
		s0=$(server_ticks)
		t0=$(date +%s.%N)
		bench_client || rc=$?
		t1=$(date +%s.%N)
		s1=$(server_ticks)
		echo "$r $cfg $t0 $t1 $((s1 - s0))" >>"$tmp/rounds"
		awk -v r="$r" -v c="$cfg" -v t0="$t0" -v t1="$t1" -v s="$((s1 - s0))" -v n=$total \
			-v hz="$(getconf CLK_TCK)" 'BEGIN { printf "round %d %-18s %6.0f requests/s  server %5.2f cpu s/100k\n", r, c, n / (t1 - t0), s / hz / n * 1e5 }'
	fi
	if [ $rc != 0 ]; then
		echo "guest_redis: $cfg: redis-benchmark failed ($rc): $(cat "$tmp/err")" >&2
	fi
	stop_server "$cfg" || rc=1
	return $rc
}

start=$(date +%s)
# unmeasured: reads redis, the hook and pmctl's Python from the host's file
# system (9p) into the guest's page cache, once
start_server attached-exact && requests=1000 bench_client
[ -n "$srv" ] && stop_server attached-exact
: >"$tmp/rounds"
fail=0
for ((r = 0; r < rounds; r++)); do
	for ((i = 0; i < ${#configs[@]}; i++)); do
		cfg=${configs[$(((i + r) % ${#configs[@]}))]}
		run "$r" "$cfg" || fail=1
	done
done
took=$(($(date +%s) - start))
if [ $icount = 1 ]; then
	echo "guest_redis: $((rounds * ${#configs[@]})) counted runs in $took s"
	exit $fail
fi
echo "guest_redis: redis-server $(redis-server --version | grep -o 'v=[^ ]*') $(redis-server --version | grep -o 'malloc=[^ ]*'), redis-benchmark -n $requests -r $keys -c $clients -t $tests ($total requests a run) over loopback, $(nproc) vCPUs shared with the client; $rounds rounds of every configuration, medians (min-max) over the rounds; $took s"
/usr/bin/python3 -I - "$tmp/rounds" "$total" "$(getconf CLK_TCK)" "${configs[@]}" <<'PY'
import statistics
import sys

path, total, hz, *configs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:]
rps: dict[str, dict[int, float]] = {c: {} for c in configs}
cpu: dict[str, dict[int, float]] = {c: {} for c in configs}  # server cpu s per 100k requests
for line in open(path):
    r, cfg, t0, t1, ticks = line.split()
    rps[cfg][int(r)] = total / (float(t1) - float(t0))
    cpu[cfg][int(r)] = int(ticks) / hz / total * 1e5


def mr(xs: list[float], fmt: str) -> str:
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"


def ratios(a: dict[int, float], b: dict[int, float]) -> list[float]:
    return [a[r] / b[r] for r in a if r in b and b[r] > 0]


print(f"{'configuration':<18} {'requests/s':>22} {'ratio to bare':>20} "
      f"{'server cpu s/100k req':>24} {'ratio to bare':>20}")
for c in configs:
    if not rps[c]:
        print(f"{c:<18} no successful run")
        continue
    line = f"{c:<18} {mr(list(rps[c].values()), '.0f'):>22} "
    if c == "bare":
        line += f"{'':>20} "
    else:
        line += f"{mr(ratios(rps[c], rps['bare']), '.3f'):>20} "
    line += f"{mr(list(cpu[c].values()), '.2f'):>24} "
    if c != "bare" and ratios(cpu[c], cpu["bare"]):
        line += f"{mr(ratios(cpu[c], cpu['bare']), '.3f'):>20}"
    print(line)
for mode in ("exact", "sampled"):
    a, p = f"attached-{mode}", f"preloaded-{mode}"
    if rps[a] and rps[p]:
        print(f"attached/preloaded {mode:<8} requests/s {mr(ratios(rps[a], rps[p]), '.3f')}"
              f"  server cpu {mr(ratios(cpu[a], cpu[p]), '.3f')}")
PY
exit $fail
