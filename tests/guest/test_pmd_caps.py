"""pmd as pmd.service runs it: an unprivileged user holding only the unit's
capability (CAP_NET_ADMIN, ambient and bounding, no new privileges) and its
supplementary group, the module's reader group (reader_gid), with /dev/pmm
open to its group as the PMM_GROUP udev rule makes it. Against the real
module and a hooked leaker run by another user (root):

- as the unit has it, pmd receives the module's events (samples in its
  database) and keeps the leaker's sites when it exits (as
  test_postmortem.py checks as root), with no CAP_SYS_PTRACE;
- without CAP_NET_ADMIN the kernel refuses the events group and the module
  the list of the processes it monitors: pmd's listener says "cannot join
  genl family pmm (its events group needs CAP_NET_ADMIN): ... Operation not
  permitted" and "cannot ask the module which processes it monitors";
- outside the reader group pmd records the samples, but the module does not
  show it the other user's exited process ("the module no longer holds it:
  nothing kept of its sites").

Two pmds (the unit's, and one outside the reader group) and a listener probe
(pmd's genl.Listener alone: a whole pmd starts slowly under TCG) run side by
side, one leaker for all.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import kmod_dev
import pytest
from helpers import TOP

from pmm.kernel.device import Device

pytestmark = pytest.mark.usefixtures("pmm")
UNIT_CAPS = ["net_admin"]
READER_GID = 4243  # the unit's SupplementaryGroups=pmm-readers, as reader_gid names it
READER_GID_PARAM = Path("/sys/module/pmm/parameters/reader_gid")
LEAK = TOP / "examples" / "bin" / "leak"
HOOKLIB = TOP / "hooklib" / "libpmmhook.so"
SAMPLES = "SELECT count(*) FROM samples WHERE pid = ? AND source = 'kmod'"


def unit_caps() -> list[str]:
    """The unit's capabilities, as setpriv names them."""
    text = (TOP / "pmd" / "pmd.service").read_text()
    line = re.search(r"^CapabilityBoundingSet=(.*)$", text, re.MULTILINE)
    assert line
    return [c.removeprefix("CAP_").lower() for c in line.group(1).split()]


def capped(caps: list[str], *python_args: str, reader: bool = True) -> list[str]:
    """Python as user nobody with exactly `caps` (ambient, inheritable and
    bounding), in the reader group or no group, no new privileges: what the
    unit's settings give pmd."""
    sets = ",".join(["-all", *(f"+{c}" for c in caps)])
    groups = f"--groups={READER_GID}" if reader else "--clear-groups"
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", groups, "--no-new-privs",
            f"--inh-caps={sets}", f"--ambient-caps={sets}", f"--bounding-set={sets}", "--",
            sys.executable, *python_args]


# pmd's listener alone (a whole pmd starts slowly under TCG): whether it
# joins the events group, and the pids the module lists to it
LISTENER_PROBE = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
from pmm.kernel.genl import Listener
listener = Listener()
print("joined" if listener.connect() else "refused")
print(sorted(ev.pid for ev in listener.dump_pids()))
"""


def probe(caps: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(capped(caps, "-c", LISTENER_PROBE), cwd=TOP, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


class CappedPmd:
    """pmd as user nobody with exactly `caps`; its log in a file."""

    def __init__(self, d: Path, caps: list[str], reader: bool = True) -> None:
        self.db, self.log = d / "pmm.db", d / "pmd.log"
        self.f = open(self.log, "w")  # noqa: SIM115
        self.p = subprocess.Popen(
            capped(caps, "-m", "pmd.main", "--db", str(self.db), "--commit-interval", "200ms",
                   reader=reader),
            stderr=self.f, cwd=TOP)

    def text(self) -> str:
        return self.log.read_text()

    def wait_log(self, pattern: str, timeout: float = 120) -> bool:
        return kmod_dev.wait_for(lambda: re.search(pattern, self.text()) is not None
                                 or self.p.poll() is not None, timeout, step=0.2) and \
            re.search(pattern, self.text()) is not None

    def wait_samples(self, pid: int, n: int, timeout: float = 60) -> bool:
        """Whether the database has n of the module's samples of pid in time."""
        return kmod_dev.wait_for(lambda: self.rows(SAMPLES, pid) >= n, timeout, step=0.5)

    def rows(self, sql: str, *args: object) -> int:
        with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True) as conn:
            return int(conn.execute(sql, args).fetchone()[0])

    def stop(self) -> int:
        self.p.terminate()
        rc = self.p.wait(timeout=120)
        self.f.close()
        return rc


def diagnose(pmd: CappedPmd) -> str:
    st = os.stat("/dev/pmm")
    status = Path(f"/proc/{pmd.p.pid}/status").read_text()
    ids = [ln for ln in status.splitlines() if ln.startswith(("Uid", "Gid", "Groups", "Cap"))]
    return f"\n/dev/pmm {st.st_uid}:{st.st_gid} {st.st_mode:o}\n" + "\n".join(ids)


def without(cap: str) -> list[str]:
    return [c for c in UNIT_CAPS if c != cap]


@pytest.fixture()
def nobodys_dir() -> Iterator[Path]:
    nobody = pwd.getpwnam("nobody")
    with tempfile.TemporaryDirectory(prefix="pmd-caps-") as d:
        os.chmod(d, 0o755)
        for name in ("unit", "not-reader"):
            sub = Path(d) / name
            sub.mkdir()
            os.chown(sub, nobody.pw_uid, nobody.pw_gid)
        yield Path(d)


def test_pmd_needs_exactly_the_units_capabilities(nobodys_dir: Path) -> None:
    assert sorted(unit_caps()) == sorted(UNIT_CAPS)
    # the rule PMM_GROUP writes: the device is the group's (here nogroup,
    # pmd's), once udev (which the guest runs) has applied its own rule
    if shutil.which("udevadm"):
        subprocess.run(["udevadm", "settle", "--timeout=10"], check=False)
    os.chown("/dev/pmm", 0, pwd.getpwnam("nobody").pw_gid)
    os.chmod("/dev/pmm", 0o660)
    with Device.open() as dev:
        dev.set_config(interval_ms=100)
    READER_GID_PARAM.write_text(f"{READER_GID}\n")
    pmds = {"unit": CappedPmd(nobodys_dir / "unit", UNIT_CAPS),
            "not-reader": CappedPmd(nobodys_dir / "not-reader", UNIT_CAPS, reader=False)}
    leak = None
    try:
        # root's hooked leaker: another user's process, monitored from its
        # first allocation; it exits when its stdin closes (-w)
        env = dict(os.environ, LD_PRELOAD=str(HOOKLIB), PMM_START="1")
        leak = subprocess.Popen([str(LEAK), "-n", "200", "-b", "4096", "-s", "2", "-w"],
                                env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
        assert leak.stdout is not None
        assert any(line.startswith("leak: done") for line in leak.stdout), "the leaker failed"
        pid = leak.pid
        probes = {cap: probe(without(cap)) for cap in ("net_admin",)}
        for name in pmds:
            assert pmds[name].wait_log("connected to genl family pmm"), pmds[name].text()
            assert pmds[name].wait_samples(pid, 3), pmds[name].text()
        assert leak.stdin is not None
        leak.stdin.close()
        assert leak.wait(timeout=30) == 0
        assert pmds["unit"].wait_log(rf"pid {pid} \(leak\): kept its \d+ sites?"), \
            pmds["unit"].text() + diagnose(pmds["unit"])
        # the module shows a reader only the processes it may read: to pmd
        # outside the reader group, root's exited process is not there
        assert pmds["not-reader"].wait_log(
            rf"pid {pid} \(leak\): the module no longer holds it: nothing kept"), \
            pmds["not-reader"].text()
        said = {cap: p.communicate(timeout=120) for cap, p in probes.items()}
    finally:
        if leak is not None and leak.poll() is None:
            leak.kill()
            leak.wait()
        rcs = {name: pmd.stop() for name, pmd in pmds.items()}
        READER_GID_PARAM.write_text("4294967295\n")
    assert rcs == dict.fromkeys(pmds, 0), {n: p.text() for n, p in pmds.items()}
    # without CAP_NET_ADMIN: neither the events nor the list
    out, err = said["net_admin"]
    assert out == "refused\n[]\n", err
    assert re.search(r"cannot join genl family pmm \(its events group needs CAP_NET_ADMIN\): "
                     r".*Operation not permitted", err), err
    assert "cannot ask the module which processes it monitors" in err, err
    # outside the reader group: samples, but not the sites of another user's
    # process; neither pmd may read its /proc/PID/exe (ptrace's), both its
    # command line
    sites = "SELECT count(*) FROM exit_sites WHERE pid = ?"
    assert pmds["unit"].rows(sites, pid) >= 1
    assert pmds["not-reader"].rows(sites, pid) == 0
    seen = "SELECT count(*) FROM processes WHERE pid = ? AND exe = '' AND cmdline LIKE '%/leak -n%'"
    assert pmds["unit"].rows(seen, pid) == 1
    assert pmds["not-reader"].rows(seen, pid) == 1
    # nothing refused the unit's pmd
    assert "Operation not permitted" not in pmds["unit"].text()
    assert "could not be kept" not in pmds["unit"].text()
    assert "no longer holds" not in pmds["unit"].text()
