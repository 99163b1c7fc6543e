#!/bin/bash
# Runs inside the VM as root: the in-guest pytest suite, then a scan of the
# kernel log. Its exit status is the VM's (and so `make test`'s).
set -u
cd "$PMM_TOP"
results=${PMM_RESULTS:-/tmp}
# Guest's copy of the args: PMM_GUEST_ARGS=-k foo to select tests;
# PMM_GUEST_TESTS: the files to run (default: all of tests/guest).
# shellcheck disable=SC2086
.venv/bin/python -m pytest -p no:cacheprovider -ra -q --color=no \
	--junitxml="$results/guest.xml" ${PMM_GUEST_TESTS:-tests/guest} ${PMM_GUEST_ARGS:-}
rc=$?
dmesg >"$results/dmesg.txt"
if grep -wE "BUG|WARNING|Oops|general protection|KASAN|UBSAN|circular locking|inconsistent lock state|sleeping function called from invalid context" \
	"$results/dmesg.txt" >"$results/dmesg-bad.txt"; then
	echo "guest: the kernel log has errors:"
	cat "$results/dmesg-bad.txt"
	rc=1
fi
exit $rc
