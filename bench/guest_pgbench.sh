#!/bin/bash
# A second real server, of another shape than redis: PostgreSQL (Debian's,
# glibc malloc; a postmaster that forks a backend per connection, whose
# memory is mostly its own palloc contexts) under pgbench's TPC-B-like
# transactions over a Unix socket, inside the VM with pmm.ko (loaded here when
# it is not). Configurations: bare; preloaded exact (LD_PRELOAD of the hook,
# PMM_START=1, PMM_FOLLOW_FORK=1: every backend is monitored from its fork);
# preloaded sampled (PMM_SAMPLE=524288). Attaching does not apply: backends
# forked after an attach to the postmaster are not monitored (pmctl attach
# has no --follow-fork). One cluster (initdb, pgbench -i) for all runs, run
# as nobody (postgres refuses root; /dev/pmm is opened to it for the run); a
# fresh server per run; each round runs every configuration, the order
# rotated a step each round. Per run: transactions/s over pgbench's wall time;
# pgbench shares the 2 vCPUs. (No server cpu: the backends' time did not
# reach the postmaster's cutime in the guest; the instruction counts below
# are the steady figure.)
#
#   bench/guest_pgbench.sh    PMM_PG_ROUNDS (3), PMM_PG_TRANSACTIONS (per client, 150),
#                             PMM_PG_CLIENTS (4), PMM_PG_SCALE (pgbench -i -s, 2)
#   bench/guest_pgbench.sh --icount
#       in bench/guest_icount.sh's VM: each run's pgbench between the
#       markers, its label appended to $PMM_RESULTS/guest_icount.labels with
#       the transaction count (instructions per transaction, all vCPUs);
#       defaults there: one client.
set -uo pipefail
top=${PMM_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$top"
icount=0
[ "${1:-}" = --icount ] && icount=1
rounds=${PMM_PG_ROUNDS:-3}
per_client=${PMM_PG_TRANSACTIONS:-150}
clients=${PMM_PG_CLIENTS:-$((icount ? 1 : 4))}
scale=${PMM_PG_SCALE:-2}
hook=$top/hooklib/libpmmhook.so
mark=$top/bench/icount/bin/mark
configs=(bare preloaded-exact preloaded-sampled)
total=$((per_client * clients))
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
for c in initdb postgres pg_ctl pg_isready pgbench; do
	[ -n "$bindir" ] && [ -x "$bindir/$c" ] || command -v $c >/dev/null ||
		{ echo "guest_pgbench: no $c (apt install postgresql)"; exit 0; }
done
[ -f "$hook" ] || { echo "guest_pgbench: $hook missing: run make" >&2; exit 1; }
loaded=0
if ! grep -q '^pmm ' /proc/modules; then
	insmod "${PMM_KO:-$top/kmod/pmm.ko}"
	loaded=1
fi
tmp=$(mktemp -d /tmp/guest_pgbench.XXXXXX)
chmod 0755 "$tmp"
chown 65534:65534 "$tmp"
dev_mode=$(stat -c %a /dev/pmm)
chmod 0666 /dev/pmm
srv=
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; }
pg() { as_nobody "$bindir/$1" "${@:2}"; }
cleanup() {
	[ -n "$srv" ] && kill -KILL "$srv" 2>/dev/null
	chmod "$dev_mode" /dev/pmm
	rm -rf "$tmp"
	[ $loaded = 1 ] && rmmod pmm
}
trap cleanup EXIT
if [ $icount = 1 ]; then
	labels=${PMM_RESULTS:?PMM_RESULTS: the shared results directory}/guest_icount.labels
	[ -x "$mark" ] || { echo "guest_pgbench: $mark missing: run make" >&2; exit 1; }
fi
opts=(-h "$tmp" -p 5439 -U postgres)

# start_server CFG: sets srv; 1 if it does not answer
start_server() {
	local cfg=$1 i
	local -a env=(env -u LD_PRELOAD -u PMM_START -u PMM_SAMPLE PMM_QUIET=1)
	case $cfg in
	preloaded-exact) env+=(LD_PRELOAD="$hook" PMM_START=1 PMM_FOLLOW_FORK=1) ;;
	preloaded-sampled) env+=(LD_PRELOAD="$hook" PMM_START=1 PMM_FOLLOW_FORK=1 PMM_SAMPLE=524288) ;;
	esac
	as_nobody "${env[@]}" "$bindir/postgres" -D "$tmp/data" -k "$tmp" -p 5439 \
		-c listen_addresses= -c fsync=off -c synchronous_commit=off \
		-c full_page_writes=off -c shared_buffers=32MB -c max_connections=20 \
		</dev/null >"$tmp/server.log" 2>&1 &
	srv=$!
	for ((i = 0; i < 600; i++)); do
		pg pg_isready -q "${opts[@]}" && return 0
		sleep 0.1
	done
	echo "guest_pgbench: $cfg: postgres does not answer" >&2
	cat "$tmp/server.log" >&2
	return 1
}

# stop_server CFG: a monitored run must have been monitored, its entries are
# stopped after
stop_server() {
	local cfg=$1 rc=0 p
	if [ "$cfg" != bare ] && ! grep -q "PID: $srv," /proc/pmm/pid; then
		echo "guest_pgbench: $cfg: pid $srv is not monitored" >&2
		rc=1
	fi
	# (SIGINT: a background job of this shell ignores it)
	pg pg_ctl stop -D "$tmp/data" -m fast -w >/dev/null 2>&1 || kill -KILL "$srv"
	wait "$srv"
	if [ "$cfg" != bare ]; then
		for p in $(sed -n 's/^\[[0-9]*\] PID: \([0-9]*\),.*/\1/p' /proc/pmm/pid); do
			echo "STOP_PID $p" >/proc/pmm/cfg 2>/dev/null
		done
	fi
	srv=
	return $rc
}

bench_client() {
	pg pgbench "${opts[@]}" -n -c "$clients" -j "$clients" -t "$per_client" postgres \
		>"$tmp/out" 2>"$tmp/err"
}

# run ROUND CFG: one measured run
run() {
	local r=$1 cfg=$2 t0 t1 rc=0 backends
	start_server "$cfg" || { [ -n "$srv" ] && stop_server "$cfg"; return 1; }
	if [ $icount = 1 ]; then
		"$mark" start
		bench_client || rc=$?
		"$mark" stop
		printf 'pgbench\t%s\t%s\t%s\n' "$cfg" "$rc" "$total" >>"$labels"
	else
		t0=$(date +%s.%N)
		bench_client || rc=$?
		t1=$(date +%s.%N)
		echo "$r $cfg $t0 $t1" >>"$tmp/rounds"
		awk -v r="$r" -v c="$cfg" -v t0="$t0" -v t1="$t1" -v n=$total \
			'BEGIN { printf "round %d %-18s %6.0f transactions/s\n", r, c, n / (t1 - t0) }'
	fi
	if [ $rc != 0 ]; then
		echo "guest_pgbench: $cfg: pgbench failed ($rc): $(cat "$tmp/err")" >&2
	fi
	if [ "$cfg" != bare ]; then
		# each backend of the run was monitored (exited, kept until stopped)
		backends=$(grep -c "Comp: postgres," /proc/pmm/pid)
		if [ "$backends" -lt $((clients + 1)) ]; then
			echo "guest_pgbench: $cfg: $backends monitored postgres processes, want $((clients + 1))+" >&2
			rc=1
		fi
	fi
	stop_server "$cfg" || rc=1
	return $rc
}

start=$(date +%s)
pg initdb -D "$tmp/data" -A trust -U postgres --no-sync >"$tmp/initdb.log" 2>&1 ||
	{ echo "guest_pgbench: initdb failed" >&2; cat "$tmp/initdb.log" >&2; exit 1; }
start_server bare || exit 1
pg pgbench "${opts[@]}" -i -q -s "$scale" postgres >/dev/null 2>&1 ||
	{ echo "guest_pgbench: pgbench -i failed" >&2; exit 1; }
per_client=50 clients=2 bench_client	# unmeasured: warms the page cache
stop_server bare
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
	echo "guest_pgbench: $((rounds * ${#configs[@]})) counted runs in $took s"
	exit $fail
fi
echo "guest_pgbench: $("$bindir/postgres" --version), pgbench TPC-B-like -c $clients -t $per_client ($total transactions a run, scale $scale) over a Unix socket, $(nproc) vCPUs shared with the client; $rounds rounds of every configuration, medians (min-max) over the rounds; $took s"
/usr/bin/python3 -I - "$tmp/rounds" "$total" "${configs[@]}" <<'PY'
import statistics
import sys

path, total, *configs = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
tps: dict[str, dict[int, float]] = {c: {} for c in configs}
for line in open(path):
    r, cfg, t0, t1 = line.split()
    tps[cfg][int(r)] = total / (float(t1) - float(t0))


def mr(xs: list[float], fmt: str) -> str:
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"


print(f"{'configuration':<18} {'transactions/s':>22} {'ratio to bare':>20}")
for c in configs:
    if not tps[c]:
        print(f"{c:<18} no successful run")
        continue
    ratios = [tps[c][r] / tps["bare"][r] for r in tps[c] if tps["bare"].get(r)]
    line = f"{c:<18} {mr(list(tps[c].values()), '.0f'):>22} "
    print(line + (f"{mr(ratios, '.3f'):>20}" if c != "bare" and ratios else ""))
PY
exit $fail
