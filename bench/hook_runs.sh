# What bench/guest_hook.sh and bench/guest_icount.sh run in the VM, sourced
# (bench/hook_runs.py is the host's list): the programs, the hook's
# configurations and the cleanup after a monitored run. The caller sets top
# and tmp (bench/workloads.sh's files are in tmp) and defines bench NAME CMD...
hook=$top/hooklib/libpmmhook.so
mb=$top/bench/bin/malloc_bench
# python3's flags (bench/guest_icount.sh: -s, to fix its hashes with PYTHONHASHSEED)
python3_flags=(-I)

# hook_check NAME FILE...: /dev/pmm and the built files are there
hook_check() {
	local name=$1 f
	shift
	if [ ! -e /dev/pmm ] && [ -z "${GUEST_HOOK_NO_DEVICE:-}" ]; then
		echo "$name: /dev/pmm missing: load kmod/pmm.ko first" >&2
		exit 1
	fi
	for f in "$hook" "$mb" "$@"; do
		[ -x "$f" ] || [ -f "$f" ] || { echo "$name: $f missing: run make" >&2; exit 1; }
	done
}

# hook_env CFG: sets the caller's array env to the command that runs a
# program in configuration CFG (bare, unmonitored, exact, sampled, heaptrack)
hook_env() {
	env=(env -u LD_PRELOAD -u PMM_START -u PMM_SAMPLE PMM_QUIET=1)
	case "$1" in
	bare) ;;
	unmonitored) env+=(LD_PRELOAD="$hook") ;;
	exact) env+=(LD_PRELOAD="$hook" PMM_START=1) ;;
	sampled) env+=(LD_PRELOAD="$hook" PMM_START=1 PMM_SAMPLE=524288) ;;
	heaptrack) env+=(heaptrack -o "$tmp/ht") ;;
	esac
}

# hook_stop NAME CFG PID: a monitored run leaves an exited entry: stop it, so
# that the next runs stay under MAX_PIDS, and say so if the run was not
# monitored at all
hook_stop() {
	local name=$1 cfg=$2 pid=$3
	if [ "$cfg" = exact ] || [ "$cfg" = sampled ]; then
		if [ -w /proc/pmm/cfg ] && ! echo "STOP_PID $pid" 2>/dev/null >/proc/pmm/cfg; then
			echo "$name: $cfg run (pid $pid) was not monitored" >&2
		fi
	fi
}

# hook_programs ROUNDS: bench NAME CMD... for each program; the
# microbenchmark does ROUNDS free+malloc rounds in all, split over its threads
hook_programs() {
	local rounds=$1
	bench "malloc_bench 1 thread" "$mb" -t 1 -n "$rounds"
	bench "malloc_bench 2 threads" "$mb" -t 2 -n $((rounds / 2))
	bench "python3 json 10k" /usr/bin/python3 "${python3_flags[@]}" "$tmp/bench.py"
	bench "sqlite3 10k inserts" sqlite3 -init "$tmp/bench.sql" :memory: .quit
	bench "perl hash churn" /usr/bin/perl "$tmp/bench.pl"
}
