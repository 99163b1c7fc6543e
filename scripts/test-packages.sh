#!/bin/bash
# The Debian packages (make deb) on another suite, in a throwaway copy of
# that suite's chroot (scripts/kernel-chroot.sh):
#   - pmm-dkms installs and DKMS builds the module for the suite's kernel,
#     with no warning in DKMS's make.log;
#   - pmm-tools on the suite's Python: pmd records samples of a process
#     into a database, pmctl reads them back;
#   - the hook's host tests (tests/host/test_hook_*.py) pass there, the hook
#     and test programs built with the suite's compiler and glibc.
# One line per suite; exit 1 if any fails. Logs: build/packages/<suite>/.
#
#   scripts/test-packages.sh [SUITE...]     (default: trixie sid)
set -uo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
suites=${*:-trixie sid}
out=$top/build/packages
mkdir -p "$out"
[ -f build/deb/pmm-dkms_"$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' dkms.conf)"_all.deb ] ||
	scripts/build-deb.sh >/dev/null || exit 1
fail=0
for s in $suites; do
	dir=$out/$s
	rm -rf "$dir"
	mkdir -p "$dir"
	cdir=$(scripts/kernel-chroot.sh "$s" 2>"$dir/chroot.log" | tail -n 1) || {
		echo "$s: no chroot (see $dir/chroot.log)"; fail=1; continue; }
	kver=$(cat "$cdir/kver")
	root=$dir/root
	cp -a --reflink=auto "$cdir/root" "$root"
	mkdir -p "$root/src" "$root/debs"
	cp build/deb/*.deb "$root/debs/"
	git archive HEAD | tar -x -C "$root/src"
	ts=$(date +%s)
	# In the copy: install the packages (apt resolves dkms and the Python
	# packages from the suite), check DKMS's build, record and read a
	# database, build the hook and run its host tests.
	unshare --mount --fork sh -c 'mount -t proc proc "$1/proc" && exec chroot "$1" /bin/bash -c "$2"' \
		- "$root" "
set -e
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends /debs/*.deb python3-pytest procps \
	g++ libunwind-dev binutils file sqlite3 >/dev/null 2>&1
echo \"python: \$(python3 -V), glibc: \$(ldd --version | head -n 1)\"
dkms status pmm
dkms status pmm -k $kver | grep -q installed
log=\$(ls /var/lib/dkms/pmm/*/build/make.log 2>/dev/null || ls /var/lib/dkms/pmm/*/$kver/*/log/make.log)
if grep -E 'warning:|error' \$log; then echo 'DKMS make.log has warnings'; exit 1; fi
modinfo -F vermagic /lib/modules/$kver/updates/dkms/pmm.ko* 2>/dev/null ||
	modinfo -F vermagic \$(find /lib/modules/$kver -name 'pmm.ko*' | head -n 1)
sleep 60 & target=\$!
pmd --no-genl --pid \$target --interval 100ms --db /tmp/pmm.db & pmd=\$!
sleep 4
kill -TERM \$pmd
wait \$pmd
pmctl trend \$target --db /tmp/pmm.db --source db --json >/tmp/trend.json || [ \$? -ge 10 ]
python3 -c 'import json; t = json.load(open(\"/tmp/trend.json\")); n = t[\"samples\"]; print(\"pmctl read\", n, \"samples\"); assert n >= 20, t'
kill \$target
cd /src
make -s -C hooklib
make -s -C tests/progs
make -s -C bench
PYTHONPATH=/src/src:/usr/share/pmm/python python3 -m pytest -q -p no:cacheprovider tests/host/test_hook_*.py
" >"$dir/log.txt" 2>&1
	rc=$?
	py=$(sed -n 's/^python: \(Python [0-9.]*\), glibc: .* \([0-9.]*\)$/\1, glibc \2/p' "$dir/log.txt")
	tests=$(grep -E "^[0-9]+ passed" "$dir/log.txt" | tail -n 1)
	if [ "$rc" -eq 0 ]; then
		echo "$s ($kver; $py): pmm-dkms built by DKMS, pmd recorded and pmctl read a database," \
			"hook host tests: $tests ($(($(date +%s) - ts)) s)"
		rm -rf "$root"
	else
		echo "$s ($kver; $py): FAILED (exit $rc): $(tail -n 3 "$dir/log.txt" | tr '\n' ' ')" \
			"(see $dir/log.txt; the chroot copy is kept in $root)"
		fail=1
	fi
done
exit $fail
