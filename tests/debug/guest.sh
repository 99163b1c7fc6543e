#!/bin/bash
# Runs inside the debug-kernel VM as root (scripts/test-debug.sh boots it):
#   1. suite:    the whole in-guest suite (tests/guest/run.sh), then unload
#                pmm, scan kmemleak and judge dmesg + kmemleak (kcheck.py).
#   2. selftest: proves the same checker fails on real bugs, with
#                pmm_badmod.ko: mode=ok must be judged clean, mode=leak must
#                be flagged by kmemleak, mode=uaf by KASAN. It runs after the
#                suite because a KASAN report taints the kernel, and that
#                turns lockdep off for the rest of the boot.
# PMM_DEBUG_PHASES="suite selftest" (default) selects; PMM_BADMOD is the
# selftest module. Exit status: 0 only if every phase gave its verdict.
# The body is one function, parsed whole before it runs: editing this file
# during a run cannot change what the running guest executes.
set -u

main() {
	cd "$PMM_TOP"
	results=${PMM_RESULTS:-/tmp}
	kcheck=(.venv/bin/python tests/debug/kcheck.py)
	phases=${PMM_DEBUG_PHASES:-suite selftest}
	rc=0
	summary=()

	loaded() { grep -q "^$1 " /proc/modules; }

	t0=$(date +%s)
	echo "debug-guest: $(uname -r), $(nproc) cpus, $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)," \
		"up $(cut -d' ' -f1 /proc/uptime) s at start, $(grep -o kasan_multi_shot /proc/cmdline)"

	if [[ " $phases " == *" suite "* ]]; then
		tests/guest/run.sh
		suite_rc=$?
		[ $suite_rc -eq 0 ] || summary+=("suite: tests/guest/run.sh failed (exit $suite_rc)")
		if loaded pmm && ! rmmod pmm; then
			echo "debug-guest: rmmod pmm failed after the suite"
			suite_rc=1
		fi
		if "${kcheck[@]}" live --results "$results" --label suite; then
			summary+=("suite: kernel findings (KASAN/UBSAN/lockdep/kmemleak/BUG/WARNING): none")
		else
			summary+=("suite: kernel findings: YES, see suite-findings.txt")
			suite_rc=1
		fi
		summary+=("suite: $([ $suite_rc -eq 0 ] && echo clean || echo FAILED) ($(($(date +%s) - t0)) s)")
		[ $suite_rc -eq 0 ] || rc=1
	fi

	if [[ " $phases " == *" selftest "* ]]; then
		t1=$(date +%s)
		badmod=${PMM_BADMOD:?PMM_BADMOD: the path of pmm_badmod.ko}
		for pair in ok:clean leak:kmemleak uaf:kasan; do
			mode=${pair%%:*}
			want=${pair#*:}
			"${kcheck[@]}" reset || rc=1
			if ! insmod "$badmod" mode="$mode"; then
				echo "debug-guest: insmod pmm_badmod mode=$mode failed"
				rc=1
				continue
			fi
			rmmod pmm_badmod || rc=1
			if "${kcheck[@]}" live --results "$results" --label "selftest-$mode" --expect "$want"
			then
				summary+=("selftest mode=$mode: flagged as $want, as it must be")
			else
				summary+=("selftest mode=$mode: NOT judged $want: the harness is broken")
				rc=1
			fi
		done
		summary+=("selftest: $(($(date +%s) - t1)) s")
	fi

	echo "debug-guest: ---- summary ----"
	printf 'debug-guest: %s\n' "${summary[@]}"
	echo "debug-guest: total in guest $(($(date +%s) - t0)) s, exit $rc"
	return $rc
}

main "$@"; exit $?
