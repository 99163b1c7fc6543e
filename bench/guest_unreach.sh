#!/bin/bash
# Inside the VM (root, the module loaded by scripts/bench-guest.sh): `pmctl
# unreachable`'s whole path on bench/bin/unreach_bench preloaded with the
# real hook, monitored from its start: the module's table read before and
# after the stop, the threads stopped, the copy cloned and swept. The
# longest stop and the scan's time, for a million blocks of 100 MiB and of
# 1 GiB (UNREACH_SIZES). Under QEMU's TCG everything runs 10-50 times
# slower than natively: bench/host_unreach.sh has the native figures.
#
#   bench/guest_unreach.sh           UNREACH_SIZES="100 1024"  UNREACH_BLOCKS=1000000
set -uo pipefail
top=${PMM_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$top"
sizes=${UNREACH_SIZES:-100 1024}
blocks=${UNREACH_BLOCKS:-1000000}
tmp=$(mktemp -d /tmp/guest_unreach.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export PATH="$top/.venv/bin:$PATH"
old=$(pmctl config --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["max_blocks_per_pid"])')
pmctl config --max-blocks $((blocks * 2)) >/dev/null
echo "guest_unreach: pmctl unreachable on $blocks blocks (the module's table; TCG)"
printf '%-8s %12s %12s %12s %10s %9s\n' heap longest_stop clone scan GB/s lost
for mib in $sizes; do
	mkfifo "$tmp/in"
	LD_PRELOAD="$top/hooklib/libpmmhook.so" PMM_START=1 PMM_QUIET=1 \
		bench/bin/unreach_bench "$blocks" "$mib" 10 <"$tmp/in" >"$tmp/out" &
	prog=$!
	exec 8>"$tmp/in"
	for _ in $(seq 3000); do grep -q ready "$tmp/out" && break; sleep 0.2; done
	sleep 2	# its last records sent (a buffer waits 100 ms), past the age gate
	if pmctl unreachable "$prog" --json >"$tmp/scan.json" 2>"$tmp/err"; then
		/usr/bin/python3 -I - "$mib" "$tmp/scan.json" <<'PY'
import json
import sys

d = json.load(open(sys.argv[2]))
us = d["scan"]["us"]
print(f"{sys.argv[1] + ' MiB':<8} {d['stop']['longest_us'] / 1e3:9.1f} ms "
      f"{d['stop']['clone_us'] / 1e3:9.1f} ms {us / 1e3:9.0f} ms "
      f"{d['table']['bytes'] / us / 1e3:10.3f} "
      f"{d['totals']['definite']['blocks'] + d['totals']['indirect']['blocks']:9d}")
PY
	else
		echo "$mib MiB: $(cat "$tmp/err")"
	fi
	exec 8>&-
	wait "$prog"
	rm -f "$tmp/in"
done
pmctl config --max-blocks "$old" >/dev/null
