#!/bin/bash
# Natively, with a fake /dev/pmm (bench/host_bigheap.py): `pmctl leaks`,
# `pmctl logs > /dev/null` and `pmctl report` on a process of N live blocks
# (32 bytes, 4 sites), wall time and peak RSS, and the report's size. "read"
# is the fake's own cost (making the pages, Python's start), in every figure.
# PMM_BIGHEAP_BEFORE=DIR: the same for DIR's pmctl (a tree with src/pmm and
# pmctl/, e.g. `git archive` of an older commit), on counts up to
# PMM_BIGHEAP_BEFORE_MAX (1000000).
#
#   bench/host_bigheap.sh       PMM_BIGHEAP_BLOCKS="1000000 10000000"
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
py=$top/.venv/bin/python
counts=${PMM_BIGHEAP_BLOCKS:-1000000 10000000}
before=${PMM_BIGHEAP_BEFORE:-}
before_max=${PMM_BIGHEAP_BEFORE_MAX:-1000000}
if [ -n "$before" ] && { [ ! -d "$before/pmctl" ] || [ ! -d "$before/src/pmm" ]; }; then
	# PYTHONPATH would skip it silently and time this tree twice
	echo "PMM_BIGHEAP_BEFORE=$before has no pmctl/ and src/pmm/" >&2
	exit 1
fi
tmp=$(mktemp -d /tmp/host_bigheap.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$py" -c "from pmm.store import Store; Store.open('$tmp/empty.db').close()"
run() { # LABEL PYTHONPATH N WHAT [ARGS...]
	local label=$1 path=$2 n=$3
	shift 3
	if PYTHONPATH=$path /usr/bin/time -f '%e %M' -o "$tmp/time" \
		"$py" bench/host_bigheap.py "$n" "$@" >/dev/null 2>"$tmp/err"; then
		read -r secs kib <"$tmp/time"
		printf '%-9s %-22s %8.1f s %8.0f MiB\n' "$n" "$label" "$secs" "$(echo "$kib / 1024" | bc -l)"
	else
		printf '%-9s %-22s failed: %s\n' "$n" "$label" "$(tail -n 1 "$tmp/err")"
	fi
}
echo "host_bigheap: pmctl on N live blocks from a fake device (native; load $(cut -d' ' -f1 /proc/loadavg))"
printf '%-9s %-22s %10s %12s\n' blocks command wall "peak RSS"
for n in $counts; do
	run "read (the fake alone)" "" "$n" read
	run "pmctl leaks" "" "$n" leaks
	run "pmctl logs > /dev/null" "" "$n" logs
	rm -f "$tmp/r.html"
	run "pmctl report" "" "$n" report -o "$tmp/r.html" --db "$tmp/empty.db"
	[ -f "$tmp/r.html" ] && printf '%-9s %-22s %10s %8d KiB\n' "$n" "report's size" "" \
		$(($(stat -c %s "$tmp/r.html") / 1024))
	if [ -n "$before" ] && [ "$n" -le "$before_max" ]; then
		run "pmctl leaks (before)" "$before/src:$before" "$n" leaks
		run "pmctl logs (before)" "$before/src:$before" "$n" logs
		run "pmctl report (before)" "$before/src:$before" "$n" report -o "$tmp/r.html" \
			--db "$tmp/empty.db"
	fi
done
