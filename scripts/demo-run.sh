#!/bin/bash
# The walkthrough of `make demo`, run as root where pmm.ko can be loaded (in
# the VM here, or on a host that can load modules). Finds a leak end to end.
set -euo pipefail
cd "${PMM_TOP:-$(dirname "$0")/..}"
top=$(pwd)
export PATH="$top/.venv/bin:$PATH"
ko=${PMM_KO:-$top/kmod/pmm.ko}
hook=$top/hooklib/libpmmhook.so
work=$(mktemp -d /tmp/pmm-demo.XXXXXX)
db=$work/pmm.db
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	grep -qw '^pmm' /proc/modules 2>/dev/null && rmmod pmm 2>/dev/null || true
}
trap cleanup EXIT

if [ -t 1 ]; then bold=$'\033[1m' dim=$'\033[2m' off=$'\033[0m'; else bold= dim= off=; fi
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$off"; }
say() { printf '   %s\n' "$*"; }
show() { printf '%s$ %s%s\n' "$dim" "$*" "$off"; "$@"; }

step "1. Load the kernel module"
show insmod "$ko"
say "/dev/pmm is the device the hook and pmctl talk to; /proc/pmm holds the readable views."
show ls -l /dev/pmm
show pmctl config --interval 100ms
show cat /proc/pmm/cfg

step "2. Start pmd, the monitoring daemon: module events and samples into SQLite"
pmd --db "$db" --detect-every 10 >"$work/pmd.log" 2>&1 &
pids+=($!)
say "pmd (pid $!) writes to $db"

step "3. Start two long-lived programs with the hook preloaded (not yet monitored)"
say "examples/bin/demo_daemon: a demo daemon: malloc 100, realloc 200, free, in a loop."
LD_PRELOAD=$hook PMM_QUIET=1 examples/bin/demo_daemon -s 20 </dev/null >"$work/stable.out" &
stable=$!
pids+=($stable)
say "the same daemon with a leak: 16 KiB lost per iteration, in main()."
LD_PRELOAD=$hook PMM_QUIET=1 examples/bin/demo_daemon -s 20 -l 16384 </dev/null >"$work/leaky.out" &
leaky=$!
pids+=($leaky)
say "stable pid $stable, leaky pid $leaky"

step "4. Monitor both: pmctl start PID (the hook notices within a second)"
show pmctl start "$stable"
show pmctl start "$leaky"
sleep 2

step "5. cat /proc/pmm/pid: each monitored process and its live blocks (unpaired records)"
show cat /proc/pmm/pid | awk -v p="PID: $leaky," '
	/^\[/ { inleak = index($0, p) > 0; n = 0; print; next }
	{ if (!inleak || n < 3) print; else if (n == 3) print "   ... (more blocks)"; n++ }'

step "6. Let them run while the module samples rss/vm every 100 ms (15 s)"
sleep 15
show pmctl status

step "7. pmctl trend: the verdict, with evidence"
for p in "$stable" "$leaky"; do
	rc=0
	show pmctl trend "$p" --db "$db" || rc=$?
	case $rc in
	0) say "=> exit 0: STABLE" ;;
	10) say "=> exit 10: LEAK" ;;
	*) say "=> exit $rc" ;;
	esac
done

step "8. pmctl leaks: where the leaked bytes were allocated (file:line from pmm_hooks.h)"
show pmctl leaks "$leaky" --limit 5

step "9. pmctl stats: allocation counts and bytes by size class for the leaky process"
show pmctl stats "$leaky"

step "10. What pmd recorded and alerted"
show sqlite3 "$db" "select count(*) || ' samples' from samples;"
show sqlite3 -header -column "$db" "select pid, comm, verdict, message from alerts;"
grep -i leak "$work/pmd.log" | tail -n 2 || true

step "Done: stop monitoring and unload"
show pmctl stop "$stable"
show pmctl stop "$leaky"
