"""The Debian packages of `make deb` (build/deb/, built on the host: the guest
has no network) installed with dpkg -i and their maintainer scripts, modprobe
loads the module, /dev/pmm gets the packaged udev rule's group and mode, and
the demo runs from the installed paths only (/usr/bin/pmctl and pmd on
Debian's python3, the hook from /usr/lib/pmm), with no .venv on PATH or
PYTHONPATH. Then dpkg --purge removes it all again.

With PMM_FULL=1, DKMS builds the module in pmm-dkms's postinst, as on a real
machine (more than 10 minutes under TCG); by default the postinst is told not
to (/etc/dkms/no-autoinstall, DKMS's own switch), `dkms add` checks the
packaged source tree, and the module the tree built is put where dkms
install puts it.

Nothing is written to the real system: the install runs in a private mount
namespace with overlays (upper layers on a tmpfs) over /usr, /etc and /var
(/lib is /usr/lib here), which end with the namespace. The module it loads
is unloaded before the test returns."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from helpers import FULL, KO, TOP, module_loaded, unload_module

DEBS = TOP / "build" / "deb"
LEAKER = TOP / "examples" / "bin" / "demo_daemon"

# Runs as root in the private mount namespace; "@@ key value" lines are results.
IN_NAMESPACE = r"""
set -euo pipefail
debs=$1 scratch=$2 leaker=$3 full=$4 ko=$5
say() { echo "@@ $*"; }
t_start=$(date +%s.%N)
since() { echo "$(date +%s.%N) - $1" | bc; }
mount -t tmpfs pmm-deb "$scratch"
mkdir -p "$scratch/home"
for d in usr etc var; do
	mkdir -p "$scratch/$d.up" "$scratch/$d.work"
	mount -t overlay "pmm-deb-$d" \
		-o "lowerdir=/$d,upperdir=$scratch/$d.up,workdir=$scratch/$d.work" "/$d"
done
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rmmod pmm 2>/dev/null || true
}
trap cleanup EXIT

kver=$(uname -r)
if [ "$full" != 1 ]; then
	# Under TCG, dpkg's reading of the other packages' file lists (1,600 files
	# over 9p) and DKMS's compile take minutes each. Quick: a dpkg database of
	# their status only (dependencies are still checked; the host test checks
	# that no other package owns our files), and DKMS's own switch that stops
	# the postinst from building; the module the tree built goes where dkms
	# install puts it. PMM_FULL=1: all of it for real.
	adm=$scratch/dpkg
	mkdir -p "$adm/info" "$adm/updates"
	cp -r /var/lib/dpkg/status /var/lib/dpkg/available /var/lib/dpkg/diversions \
		/var/lib/dpkg/statoverride /var/lib/dpkg/triggers "$adm/"
	rm -f "$adm/triggers/Lock"
	mount --bind "$adm" /var/lib/dpkg
	mkdir -p /etc/dkms
	touch /etc/dkms/no-autoinstall
fi
say t_install "$(since "$t_start")"
t0=$(date +%s.%N)
rc=0
dpkg -i "$debs"/pmm-dkms_*_all.deb "$debs"/libpmmhook_*_amd64.deb \
	"$debs"/libpmmhook-dbgsym_*_amd64.deb "$debs"/pmm-tools_*_all.deb \
	>"$scratch/dpkg.out" 2>&1 || rc=$?
grep -v "^dpkg: warning: files list file for package" "$scratch/dpkg.out" || true
[ $rc = 0 ]
say install_seconds "$(since "$t0")"
if [ "$full" != 1 ]; then
	dkms add -m pmm -v "$(dpkg-query -W -f='${Version}' pmm-dkms)"
	install -D -m 0644 "$ko" "/lib/modules/$kver/updates/dkms/pmm.ko"
	# an index of this module alone: depmod's scan of the kernel's 4,000
	# modules over 9p takes minutes too (the namespace's copy; pmm needs none)
	depmod "$kver" "/lib/modules/$kver/updates/dkms/pmm.ko"
fi
say dkms "$(dkms status pmm)"
say group "$(getent group pmm)"
say user "$(getent passwd pmd)"
say compiled "$(find /usr/share/pmm/python/pmctl -name '*.pyc' | wc -l)"
say enabled "$(readlink /etc/systemd/system/multi-user.target.wants/pmd.service || true)"
say t_verify "$(since "$t_start")"
if systemd-analyze verify /lib/systemd/system/pmd.service >"$scratch/verify.log" 2>&1; then
	say verify ok
else
	say verify failed
fi
cat "$scratch/verify.log"
say modules_load "$(cat /usr/lib/modules-load.d/pmm.conf | grep -v '^#')"

say t_modprobe "$(since "$t_start")"
modprobe pmm
say modinfo "$(modinfo -F filename pmm)"
say readers "$(getent group pmm-readers)"
say reader_gid "$(cat /sys/module/pmm/parameters/reader_gid)"
# the packaged rule, applied by this namespace's view of the rules (the
# running udevd, if any, sees the real /usr and has settled first)
udevadm settle 2>/dev/null || true
udevadm test --action=add /sys/class/misc/pmm >"$scratch/udev.log" 2>&1 || cat "$scratch/udev.log"
say device "$(stat -c '%a %U %G' /dev/pmm)"

# pmctl finds the packaged hook in its private directory by itself
say run_hook "$(/usr/bin/pmctl run --json -- /bin/true 2>&1 >/dev/null |
	sed -n 's/.*"hooklib": "\([^"]*\)".*/\1/p')"
hook_id=$(readelf -n /usr/lib/pmm/libpmmhook.so | sed -n 's/^ *Build ID: //p')
say hook_debug "$(ls "/usr/lib/debug/.build-id/${hook_id:0:2}/${hook_id:2}.debug")"
say t_demo "$(since "$t_start")"
t_demo=$(date +%s.%N)
/usr/bin/pmctl config --interval 100ms
/usr/bin/pmd --db "$scratch/pmm.db" --detect-every 10 >"$scratch/pmd.log" 2>&1 &
pids+=($!)
LD_PRELOAD=/usr/lib/pmm/libpmmhook.so PMM_QUIET=1 "$leaker" -s 20 -l 16384 </dev/null >/dev/null &
leaky=$!
pids+=($leaky)
sleep 0.5
/usr/bin/pmctl start "$leaky"
sleep 3
say leaks_begin
/usr/bin/pmctl leaks "$leaky" --limit 3
say leaks_end
verdict=none
for _ in $(seq 20); do
	rc=0
	/usr/bin/pmctl trend "$leaky" --db "$scratch/pmm.db" >"$scratch/trend.out" 2>&1 || rc=$?
	echo "pmctl trend: exit $rc"
	if [ $rc = 10 ]; then verdict=leak; break; fi
	kill -0 "${pids[0]}" || break # pmd ended
	sleep 1
done
say trend "$verdict"
cat "$scratch/pmd.log"
say demo_seconds "$(since "$t_demo")"
cat "$scratch/trend.out"
/usr/bin/pmctl stop "$leaky"
cleanup
pids=()

t0=$(date +%s.%N)
if [ "$full" = 1 ]; then # the maintainer scripts of removal (40 s under TCG)
	debug=$(dpkg -L libpmmhook-dbgsym | grep '\.debug$' | tr '\n' ' ')
	rc=0
	dpkg --purge pmm-tools libpmmhook-dbgsym libpmmhook pmm-dkms >"$scratch/dpkg.out" 2>&1 ||
		rc=$?
	grep -v "^dpkg: warning: files list file for package" "$scratch/dpkg.out" || true
	[ $rc = 0 ]
	say purge_seconds "$(since "$t0")"
	say left "$(ls -d /usr/share/pmm /usr/src/pmm-* /var/lib/dkms/pmm /usr/lib/pmm $debug \
		/etc/default/pmd /lib/systemd/system/pmd.service 2>/dev/null | tr '\n' ' ')"
	say modules "$(find /usr/lib/modules/"$kver" -name 'pmm.ko*' | tr '\n' ' ')"
fi
"""


def results(out: str) -> dict[str, str]:
    found = {}
    for line in out.splitlines():
        if line.startswith("@@ "):
            key, _, value = line[3:].partition(" ")
            found[key] = value.strip()
    return found


def leak_line() -> int:
    src = (TOP / "examples" / "demo_daemon.c").read_text().splitlines()
    return next(i for i, text in enumerate(src, 1) if "leaked on purpose" in text)


def test_deb_install_and_demo_from_installed_paths(tmp_path: Path) -> None:
    debs = sorted(p.name for p in DEBS.glob("*.deb"))
    assert len(debs) == 4, f"{DEBS}: {debs}: run `make deb` on the host before the guest suite"
    unload_module()
    script = tmp_path / "in-namespace.sh"
    script.write_text(IN_NAMESPACE)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    # no .venv: what an admin's shell has
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(scratch / "home"),
           "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive",
           "PMM_CACHE_DIR": str(scratch / "home" / "cache")}
    # the log is written as it goes: where a slow guest spends its time shows
    log = Path(os.environ.get("PMM_RESULTS", tmp_path)) / "deb.log"
    start = time.monotonic()
    try:
        with log.open("w") as out:
            r = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash",
                                str(script), str(DEBS), str(scratch), str(LEAKER),
                                "1" if FULL else "0", str(KO)],
                               stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                               env=env, timeout=1800)
    finally:
        unload_module()
    took = time.monotonic() - start
    output = log.read_text()
    print(output, f"test_deb: {took:.0f} s", sep="\n")
    assert r.returncode == 0, output[-8000:]
    got = results(output)
    kver = subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
    if FULL:  # the postinst's DKMS build
        assert re.match(rf"pmm/[\d.]+, {re.escape(kver)}, x86_64: installed", got["dkms"]), got
        assert got["modules"] == ""  # the prerm's dkms remove
    else:  # the postinst ran DKMS's common.postinst, which obeyed the switch
        assert "autoinstall for dkms modules has been disabled" in output
        assert re.fullmatch(r"pmm/[\d.]+: added", got["dkms"]), got
    assert got["modinfo"].startswith(f"/lib/modules/{kver}/updates/dkms/pmm.ko"), got
    assert got["modules_load"] == "pmm"
    assert got["group"].startswith("pmm:x:")
    assert got["user"].startswith("pmd:x:") and got["user"].endswith(":/usr/sbin/nologin")
    assert int(got["compiled"]) > 0  # postinst's py3compile
    assert got["enabled"] == "/lib/systemd/system/pmd.service"
    assert got["verify"] == "ok"
    assert got["device"] == "660 root pmm"
    assert got["run_hook"] == "/usr/lib/pmm/libpmmhook.so", got
    assert got["hook_debug"].startswith("/usr/lib/debug/.build-id/"), got  # libpmmhook-dbgsym
    # pmd's group for reading every process, given to the module by modprobe.d
    assert got["readers"].split(":")[2] == got["reader_gid"], got
    leaks = output.split("@@ leaks_begin", 1)[1].split("@@ leaks_end", 1)[0]
    assert f"demo_daemon.c:{leak_line()}" in leaks, leaks
    assert got["trend"] == "leak"
    if FULL:
        assert got["left"] == "", got
    assert not module_loaded()
    print(f"test_deb: dpkg -i {float(got['install_seconds']):.0f} s, "
          f"demo {float(got['demo_seconds']):.0f} s")
