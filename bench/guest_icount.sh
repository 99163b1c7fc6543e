#!/bin/bash
# Inside the VM that scripts/bench-icount.sh boots with the QEMU plugin
# bench/icount/bin/libicount.so, which counts every guest instruction (all
# vCPUs, kernel and user, so the module's work counts) and writes the count
# whenever bench/icount/bin/mark runs. Runs bench/guest_hook.sh's programs and
# configurations (bench/hook_runs.sh; heaptrack aside), each between
# "mark start" and "mark stop", and writes each run's label to
# $PMM_RESULTS/guest_icount.labels; the host pairs them with the counts.
# Not part of scripts/bench-guest.sh's VM: without the plugin it measures nothing.
#
#   bench/guest_icount.sh [ROUNDS]   (default 1000000 free+malloc rounds per
#                                     microbenchmark run, as bench/guest_hook.sh)
# PMM_ICOUNT_REPS=N runs every configuration N times (default 3; the report
# takes the median: the guest's background work adds about 1 M instructions
# a second of wall time, and now and then far more). PMM_ICOUNT_ONLY=GLOB
# runs only the programs whose name matches (e.g. 'malloc_bench 1*'),
# PMM_ICOUNT_CFGS the configurations named (default "bare unmonitored exact
# sampled"). Then bench/guest_redis.sh --icount: redis-server under
# redis-benchmark, in its five configurations (name "redis-benchmark" for
# PMM_ICOUNT_ONLY; PMM_REDIS_* as there); and bench/guest_pgbench.sh
# --icount: PostgreSQL under pgbench, per transaction (name "pgbench").
# PMM_ICOUNT_PROF=1 (scripts/bench-icount.sh's kernel profile) also copies the guest's
# /proc/kallsyms to the results.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
rounds=${1:-${PMM_ICOUNT_ROUNDS:-1000000}}
reps=${PMM_ICOUNT_REPS:-3}
mark=$top/bench/icount/bin/mark
labels=${PMM_RESULTS:?PMM_RESULTS: the shared results directory}/guest_icount.labels
tmp=$(mktemp -d /tmp/guest_icount.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

. bench/workloads.sh
. bench/hook_runs.sh
# python3's and perl's string hashes fixed, so that their work is the same
# in every run (as bench/hook_runs.py on the host): -I would ignore
# PYTHONHASHSEED
python3_flags=(-s)
# like bench/guest_kmod.sh: load the module unless it is loaded
loaded=0
if ! grep -q '^pmm ' /proc/modules; then
	insmod "${PMM_KO:-$top/kmod/pmm.ko}"
	loaded=1
fi
hook_check guest_icount "$mark"
# udev handles the module's events, and its workers exit when idle: not
# during a measured run
udevadm settle 2>/dev/null || true
sleep 5
if [ -n "${PMM_ICOUNT_PROF:-}" ]; then
	cp /proc/kallsyms "$PMM_RESULTS/guest_kallsyms.txt"
fi
write_workloads "$tmp"
echo "rounds $rounds" >"$labels"

# run NAME CFG CMD...: one run between the markers. The stop marker comes
# after STOP_PID, so that the module's freeing of the run's tables counts.
run() {
	local name=$1 cfg=$2 pid rc=0
	shift 2
	local -a env
	hook_env "$cfg"
	env+=(PYTHONHASHSEED=0 PERL_HASH_SEED=0 PERL_PERTURB_KEYS=0)
	"$mark" start
	"${env[@]}" "$@" >/dev/null 2>"$tmp/err" </dev/null &
	pid=$!
	wait $pid || rc=$?
	hook_stop guest_icount "$cfg" "$pid"
	"$mark" stop
	if [ $rc != 0 ]; then
		echo "guest_icount: $cfg $* failed:" >&2
		cat "$tmp/err" >&2
	fi
	printf '%s\t%s\t%s\n' "$name" "$cfg" "$rc" >>"$labels"
}

bench() {	# NAME CMD...
	local name=$1 cfg r
	local -a env
	shift
	# unmeasured first run: reads the program and the hook from the host's
	# file system (9p) into the guest's page cache, once
	hook_env unmonitored
	"${env[@]}" "$@" >/dev/null 2>&1 </dev/null || true
	# shellcheck disable=SC2053 # a glob, on purpose
	[[ $name == ${PMM_ICOUNT_ONLY:-*} ]] || return 0
	for ((r = 0; r < reps; r++)); do
		for cfg in ${PMM_ICOUNT_CFGS:-bare unmonitored exact sampled}; do
			run "$name" "$cfg" "$@"
		done
	done
}

start=$(date +%s)
hook_programs "$rounds"
echo "guest_icount: $(($(wc -l <"$labels") - 1)) runs in $(($(date +%s) - start)) s"
# a real server: redis-server under redis-benchmark, per request
# (bench/guest_redis.sh's configurations; PMM_REDIS_ROUNDS runs each, default 3)
# shellcheck disable=SC2053 # a glob, on purpose
if [[ redis-benchmark == ${PMM_ICOUNT_ONLY:-*} ]]; then
	bench/guest_redis.sh --icount || true
fi
# another: PostgreSQL's backends under pgbench, per transaction
# (bench/guest_pgbench.sh's configurations)
# shellcheck disable=SC2053 # a glob, on purpose
if [[ pgbench == ${PMM_ICOUNT_ONLY:-*} ]]; then
	bench/guest_pgbench.sh --icount || true
fi
if [ $loaded = 1 ]; then
	rmmod pmm
fi
