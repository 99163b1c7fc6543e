#!/bin/bash
# Inside the VM (root, the module loaded by scripts/bench-guest.sh): a
# process holding N live blocks (bench/bin/bigheap: N x 32 bytes from 4
# sites, in exact mode under the hook), monitored end to end. Per N: the
# module's memory per block (kmem_bytes of PMM_GET_CONFIG, before and after),
# `pmctl leaks`, `pmctl logs > /dev/null` and `pmctl report` (wall time and
# peak RSS, the page's size), then the process exits and pmd harvests it
# (the time from the exit to its record in the database, pmd's peak RSS, the
# database's size). The module's max_blocks is raised for the run and put
# back after. Under QEMU's TCG everything runs 10-50 times slower than
# natively; the memory figures are what they are.
#
#   bench/guest_bigheap.sh      PMM_BIGHEAP_BLOCKS=1000000  PMM_BIGHEAP_SIZE=32
#
# make bench runs it on 1M blocks. 10M need a VM of about 4 GiB with the
# table of ~100 bytes a block, and an hour of TCG:
#   VM_MEMORY=4G PMM_BIGHEAP_BLOCKS="1000000 10000000" scripts/vmtest.sh -- bench/guest_bigheap.sh
# PMM_BIGHEAP_STEPS="leaks logs report" (default): the pmctl commands timed
# (the allocation, the module's memory and pmd's harvest always are).
# PMM_BIGHEAP_BEFORE=DIR also times DIR's pmctl (a tree with src/pmm and pmctl/,
# e.g. `git archive` of an older commit) on the counts up to
# PMM_BIGHEAP_BEFORE_MAX (1000000): the same figures before a change.
set -uo pipefail
top=${PMM_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$top"
counts=${PMM_BIGHEAP_BLOCKS:-1000000}
size=${PMM_BIGHEAP_SIZE:-32}
steps=${PMM_BIGHEAP_STEPS:-leaks logs report}  # the pmctl commands timed
before=${PMM_BIGHEAP_BEFORE:-}
before_max=${PMM_BIGHEAP_BEFORE_MAX:-1000000}
if [ -n "$before" ] && { [ ! -d "$before/pmctl" ] || [ ! -d "$before/src/pmm" ]; }; then
	# PYTHONPATH would skip it silently and time this tree twice
	echo "PMM_BIGHEAP_BEFORE=$before has no pmctl/ and src/pmm/" >&2
	exit 1
fi
export PATH="$top/.venv/bin:$PATH"
py=$top/.venv/bin/python
loaded=0
if ! grep -q '^pmm ' /proc/modules; then
	insmod "${PMM_KO:-$top/kmod/pmm.ko}"
	loaded=1
fi
tmp=$(mktemp -d /tmp/guest_bigheap.XXXXXX)
pmd=
cleanup() {
	exec 8>&- 2>/dev/null
	[ -n "$pmd" ] && kill -TERM "$pmd" 2>/dev/null && wait "$pmd" 2>/dev/null
	[ -n "${old_max:-}" ] && pmctl config --max-blocks "$old_max" >/dev/null
	rm -rf "$tmp"
	if [ "$loaded" = 1 ]; then rmmod pmm || true; fi
}
trap cleanup EXIT

cfg() { # a field of PMM_GET_CONFIG
	"$py" -c "from pmm.kernel.device import Device
with Device.open() as d: print(d.get_config().$1)"
}
live() { # the live blocks the module holds of pid $1
	"$py" -c "from pmm.kernel.device import Device
with Device.open() as d:
    i = d.pid_info($1)
    print(i.live_blocks if i else -1)"
}
measure() { # NAME CMD...: wall seconds and peak RSS of CMD, stdout to /dev/null
	local name=$1
	shift
	if /usr/bin/time -f '%e %M' -o "$tmp/time" "$@" >/dev/null 2>"$tmp/err"; then
		read -r secs kib <"$tmp/time"
		printf '  %-34s %9.1f s %8.1f MiB\n' "$name" "$secs" "$(echo "$kib / 1024" | bc -l)"
	else
		printf '  %-34s failed: %s\n' "$name" "$(tail -n 2 "$tmp/err" | tr '\n' ' ')"
	fi
}
step() { [[ " $steps " == *" $1 "* ]]; }
mib() { echo "scale=1; $1 / 1048576" | bc; }

old_max=$(cfg max_blocks_per_pid)
max=0
for n in $counts; do [ "$n" -gt "$max" ] && max=$n; done
pmctl config --max-blocks $((max + 1024)) >/dev/null || exit 1
"$py" -m pmd.main --db "$tmp/pmd.db" 2>"$tmp/pmd.log" &
pmd=$!
for _ in $(seq 3000); do grep -q "pmd running" "$tmp/pmd.log" && break; sleep 0.2; done
echo "guest_bigheap: N live blocks of $size bytes from 4 sites, exact mode (TCG; max_blocks $((max + 1024)))"
for n in $counts; do
	echo "== $n blocks"
	k0=$(cfg kmem_bytes)
	rm -f "$tmp/in"
	mkfifo "$tmp/in"
	s0=$(date +%s.%N)
	LD_PRELOAD="$top/hooklib/libpmmhook.so" PMM_START=1 PMM_QUIET=1 \
		bench/bin/bigheap "$n" "$size" <"$tmp/in" >"$tmp/out" &
	prog=$!
	exec 8>"$tmp/in"
	for _ in $(seq 36000); do
		grep -q ready "$tmp/out" && break
		kill -0 "$prog" 2>/dev/null || break
		sleep 0.1
	done
	if ! grep -q ready "$tmp/out"; then
		echo "  bigheap did not get ready: $(cat "$tmp/out")"
		pmctl status
		exec 8>&-
		wait "$prog"
		continue
	fi
	echo "  ready after $(echo "$(date +%s.%N) - $s0" | bc) s"
	got=-1
	for _ in $(seq 60); do
		got=$(live "$prog")
		[ "$got" -ge "$n" ] && break
		sleep 1
	done
	s1=$(date +%s.%N)
	k1=$(cfg kmem_bytes)
	printf '  %-34s %9.1f s   %d live blocks\n' "allocate (hooked, TCG)" \
		"$(echo "$s1 - $s0" | bc)" "$got"
	printf '  %-34s %9s   %s MiB, %d bytes/block\n' "module memory (kmem_bytes)" "" \
		"$(mib $((k1 - k0)))" $(((k1 - k0) / n))
	step leaks && measure "pmctl leaks" pmctl leaks "$prog"
	step logs && measure "pmctl logs > /dev/null" pmctl logs "$prog"
	step report && measure "pmctl report" pmctl report "$prog" -o "$tmp/report.html" \
		--db "$tmp/pmd.db"
	[ -f "$tmp/report.html" ] && printf '  %-34s %9s   %s KiB\n' "report's size" "" \
		$(($(stat -c %s "$tmp/report.html") / 1024))
	if [ -n "$before" ] && [ "$n" -le "$before_max" ]; then
		measure "pmctl leaks (PMM_BIGHEAP_BEFORE)" env PYTHONPATH="$before/src:$before" \
			"$py" -m pmctl leaks "$prog"
		measure "pmctl logs (PMM_BIGHEAP_BEFORE)" env PYTHONPATH="$before/src:$before" \
			"$py" -m pmctl logs "$prog"
	fi
	rss0=$(awk '/^VmRSS/ {print $2}' "/proc/$pmd/status")
	exec 8>&-
	wait "$prog"
	e0=$(date +%s.%N)
	done_=0
	for _ in $(seq 36000); do
		if [ "$(sqlite3 "$tmp/pmd.db" "select count(*) from exit_info where pid = $prog" \
			2>/dev/null)" = 1 ]; then
			done_=1
			break
		fi
		sleep 0.1
	done
	e1=$(date +%s.%N)
	hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$pmd/status")
	db=$(($(stat -c %s "$tmp/pmd.db") + $(stat -c %s "$tmp/pmd.db-wal" 2>/dev/null || echo 0)))
	if [ "$done_" = 1 ]; then
		printf '  %-34s %9.1f s   pmd rss %s MiB before, peak %s MiB; database %s KiB\n' \
			"pmd's harvest at the exit" "$(echo "$e1 - $e0" | bc)" $((rss0 / 1024)) \
			$((hwm / 1024)) $((db / 1024))
	else
		echo "  pmd's harvest at the exit: not in the database after $(echo "$e1 - $e0" | bc) s"
	fi
	step leaks && measure "pmctl leaks (exited, module)" pmctl leaks "$prog"
	pmctl stop "$prog" >/dev/null 2>&1
	printf '  %-34s %9s   %s MiB still held after the stop\n' "module memory" "" \
		"$(mib $(($(cfg kmem_bytes) - k0)))"
done
grep -iE "warning|error|traceback" "$tmp/pmd.log" | head -5
exit 0
