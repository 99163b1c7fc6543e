#!/bin/bash
# libpmmhook.so's cost, inside the VM with pmm.ko loaded (scripts/bench.sh
# boots the VM and loads the module; run by hand: insmod kmod/pmm.ko first).
#
# For the microbenchmark (free + malloc of 16..527 bytes over a window of
# 4096 live blocks; 1 and 2 threads) and two real programs (python3: JSON
# records encoded, decoded and counted; sqlite3: 10000 inserts, an index,
# queries), prints wall time and machine-wide cpu time
# (from /proc/stat: user+nice+system+irq+softirq+steal of all cpus, so the
# module's own work in ioctls and at exit counts) and their ratios to the
# bare run, for: bare; hooked, not monitored; monitored exact (PMM_START=1);
# monitored sampled (PMM_SAMPLE=524288); heaptrack (reference).
# The programs and configurations are bench/hook_runs.sh's, shared with
# bench/guest_icount.sh (their instruction counts).
#
#   bench/guest_hook.sh [ITERATIONS]   (default 1000000 per microbenchmark run)
set -u
cd "$(dirname "$0")/.."
top=$(pwd)
iters=${1:-1000000}
tmp=$(mktemp -d /tmp/guest_hook.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

. bench/workloads.sh
. bench/hook_runs.sh
hook_check guest_hook
write_workloads "$tmp"

busy() {	# machine-wide busy jiffies
	awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat
}

now() {
	date +%s.%N
}

# ticks: this shell's reaped children's cpu (cutime + cstime), in clock ticks
# (no subshell: it would read its own). Around a run: the run's own cpu, its
# module work in system calls included.
children_ticks() {
	local -a st
	read -ra st </proc/$BASHPID/stat
	ticks=$((st[15] + st[16]))
}

# run CONFIG CMD...: prints "wall cpu proc" (seconds; proc: the process's own)
run() {
	local cfg=$1 t0 t1 b0 b1 c0 c1 ticks pid rc
	shift
	local -a env
	hook_env "$cfg"
	sync
	b0=$(busy)
	t0=$(now)
	children_ticks
	c0=$ticks
	"${env[@]}" "$@" >/dev/null 2>"$tmp/err" </dev/null &
	pid=$!
	wait $pid
	rc=$?
	children_ticks
	c1=$ticks
	t1=$(now)
	b1=$(busy)
	if [ $rc != 0 ]; then
		echo "guest_hook: $cfg $* failed:" >&2
		cat "$tmp/err" >&2
	fi
	hook_stop guest_hook "$cfg" "$pid"
	rm -f "$tmp"/ht*
	awk -v t0="$t0" -v t1="$t1" -v b0="$b0" -v b1="$b1" -v c0="$c0" -v c1="$c1" \
		-v hz="$(getconf CLK_TCK)" \
		'BEGIN { printf "%.3f %.3f %.3f\n", t1 - t0, (b1 - b0) / hz, (c1 - c0) / hz }'
}

have_heaptrack=1
command -v heaptrack >/dev/null || have_heaptrack=0

reps=${GUEST_HOOK_REPS:-9}

# The VM's cpus are shared with the host's other work, whose speed drifts by a
# third within one boot. So each round runs every configuration once, back to
# back, and a configuration's ratio in a round is its time over that round's
# bare run: the figure is the median of the per-round ratios, with their range
# (the spread of the noise). Times are medians over the rounds.
bench() {	# NAME CMD...
	local name=$1 cfg r w c
	shift
	: >"$tmp/rounds"
	for ((r = 0; r < reps; r++)); do
		for cfg in bare unmonitored exact sampled; do
			read -r w c p < <(run "$cfg" "$@")
			echo "$r $cfg $w $c $p" >>"$tmp/rounds"
		done
	done
	if [ $have_heaptrack = 1 ]; then
		read -r w c p < <(run heaptrack "$@")
		echo "0 heaptrack $w $c $p" >>"$tmp/rounds"
	fi
	python3 - "$name" "$tmp/rounds" <<'PY'
import statistics, sys
name, path = sys.argv[1], sys.argv[2]
runs: dict[str, dict[int, tuple[float, float, float]]] = {}
for line in open(path):
    r, cfg, w, c, p = line.split()
    runs.setdefault(cfg, {})[int(r)] = (float(w), float(c), float(p))
bare = runs["bare"]
for cfg in ("bare", "unmonitored", "exact", "sampled", "heaptrack"):
    if cfg not in runs:
        print(f"{name:<22} {cfg:<12} not installed")
        continue
    got = runs[cfg]
    wr = [w / max(bare[r][0], 1e-3) for r, (w, c, p) in got.items()]
    cr = [c / max(bare[r][1], 1e-2) for r, (w, c, p) in got.items()]
    pr = sorted(p / max(bare[r][2], 1e-2) for r, (w, c, p) in got.items())
    wall = statistics.median(w for w, c, p in got.values())
    cpu = statistics.median(c for w, c, p in got.values())
    spread = f"  range {min(cr):.2f}-{max(cr):.2f}" if len(cr) > 1 else "  (one run)"
    quart = f" iqr {pr[len(pr) // 4]:.2f}-{pr[(3 * len(pr)) // 4]:.2f}" if len(pr) > 1 else ""
    print(f"{name:<22} {cfg:<12} wall {wall:7.3f} s  cpu {cpu:7.3f} s  "
          f"(ratio wall {statistics.median(wr):5.2f}x cpu {statistics.median(cr):5.2f}x{spread};"
          f" process {statistics.median(pr):5.2f}x{quart})")
PY
}

echo "guest_hook: libpmmhook.so cost (machine-wide cpu from /proc/stat, $(nproc) cpus; median of $reps paired rounds, cpu ratio range; process: the run's own cpu, median ratio and interquartile range; heaptrack once, against round 0)"
hook_programs "$iters"
