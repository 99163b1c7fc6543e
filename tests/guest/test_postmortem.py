"""Call sites that outlive the process, end to end on the real module and pmd.

Programs that leak at known lines (tests/progs/postmortem: C with an inlined
helper, C++ through operator new eight calls deep, a stripped program with a
separate debug file found by build-id, a dlopen()ed and dlclose()d library,
a stripped library without debug info) run under the hook while pmd runs;
two exit, three are killed with SIGKILL. Afterwards `pmctl leaks` names each
leaking line first: from the module's exited entries, again after pmd
restarts, and from pmd's database alone once the module dropped them. The
pprof profile `pmctl leaks --pprof` writes reads back in go tool pprof with
the totals of `pmctl leaks --json`."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmod_dev
import pytest
from helpers import TOP, pmctl, pmctl_json
from test_pmd_e2e import Pmd

from pmm.kernel import uapi
from pmm.kernel.device import Device

pytestmark = pytest.mark.usefixtures("pmm")
PM = TOP / "tests" / "progs" / "postmortem"
HOOKLIB = TOP / "hooklib" / "libpmmhook.so"
COUNT = 2000  # blocks each leaks: more bytes than any start-up allocation (stdio, libstdc++)


def leak_line(source: str, name: str) -> int:
    """The line of `source` marked /* LEAK: name */ (or // LEAK: name)."""
    for i, line in enumerate((PM / source).read_text().splitlines(), 1):
        if f"LEAK: {name} " in line:
            return i
    raise LookupError(name)


# program, its arguments' tail, how it ends, what the first site must say
PROGRAMS: list[tuple[str, str, str]] = [
    ("pm-inline", "exit", f"inline.c:{leak_line('inline.c', 'inline')}"),
    ("pm-deep", "kill", f"deep.cc:{leak_line('deep.cc', 'deep')}"),
    ("pm-stripped", "kill", f"stripped.c:{leak_line('stripped.c', 'stripped')}"),
    ("pm-dlopen", "exit", f"plugin.c:{leak_line('plugin.c', 'plugin')}"),
    ("pm-nodebug", "kill", "libpm-nodebug.so+0x"),
]


@pytest.fixture()
def tmp() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pm-") as d:
        yield Path(d)


def first_where(d: dict[str, Any]) -> str:
    sites = d["sites"]
    assert sites, d
    return str(sites[0]["where"])


def check_named(leaks: dict[int, dict[str, Any]]) -> None:
    for pid, (prog, _, want) in zip(leaks, PROGRAMS, strict=True):
        d = leaks[pid]
        where = first_where(d)
        assert want in where, (prog, d)
        top = d["sites"][0]
        assert top["blocks"] == COUNT, (prog, top)
        if prog == "pm-nodebug":
            assert "leak_in_lib+0x" in where, where  # the nearest dynamic symbol
        if prog == "pm-inline":  # the inlined helper is shown, innermost first
            lines = top["frames"][0]["lines"]
            assert [x["func"] for x in lines][:2] == ["new_buffer", "fill_buffers"], lines


def test_sites_outlive_the_process(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp / "pmm.db"
    # the stripped program's debug file, found by build-id; pmd and pmctl both look
    monkeypatch.setenv("PMM_DEBUG_DIRS", str(PM / "debug"))
    monkeypatch.setenv("PMM_CACHE_DIR", str(tmp / "cache"))
    with Device.open() as dev:
        dev.set_config(interval_ms=100)
    pmd = Pmd(db)
    pids: list[int] = []
    try:
        assert pmd.wait_log("connected to genl family pmm", 600), pmd.text()
        env = dict(os.environ, LD_PRELOAD=str(HOOKLIB), PMM_START="1", PMM_DEPTH="8",
                   PMM_UNWIND="eh")
        procs = []
        for prog, end, _ in PROGRAMS:
            p = subprocess.Popen([str(PM / "bin" / prog), str(COUNT),
                                  "exit" if end == "exit" else "sleep"],
                                 env=env, stdout=subprocess.PIPE, text=True)
            assert p.stdout is not None
            assert p.stdout.readline() == f"leaked {COUNT}\n", prog
            procs.append((p, end))
            pids.append(p.pid)
        for p, end in procs:
            if end == "kill":
                p.send_signal(signal.SIGKILL)
            p.wait()

        def exited() -> bool:
            with Device.open() as dev:
                return all((i := dev.pid_info(pid)) is not None and
                           i.state == uapi.STATE_EXITED for pid in pids)

        assert kmod_dev.wait_for(exited, 30)
        assert wait_kept(pmd, pids), pmd.text()  # pmd kept each at its exit

        # 1. from the module's exited entries
        from_module = {pid: pmctl_json("leaks", str(pid), "--depth", "8") for pid in pids}
        for d in from_module.values():
            assert d["state"] == "exited" and "source" not in d, d
        check_named(from_module)

        # the pprof profile: go tool pprof reads back the totals of --json
        prof = tmp / "deep.pb.gz"
        deep = pids[1]
        r = pmctl("leaks", str(deep), "--pprof", str(prof), "--limit", "0", "--json")
        assert r.exit_code == 0, r.stderr
        totals = pprof_totals(prof, tmp)
        d = from_module[deep]
        assert totals["inuse_space"] == d["live_bytes"]
        assert totals["inuse_objects"] == d["live_blocks"]

        # 2. pmd restarted: it has what it kept, and keeps nothing twice
        assert pmd.stop() == 0
        pmd = Pmd(db)
        assert pmd.wait_log("connected to genl family pmm", 600), pmd.text()

        # 3. the module drops the entries: pmd's database alone
        with Device.open() as dev:
            dev.set_config(exited_ttl_s=1)
            for pid in pids:  # a new TTL applies from an entry's next read
                dev.stats(pid)
            assert kmod_dev.wait_for(lambda: all(dev.pid_info(x) is None for x in pids), 30)
        from_db = {pid: pmctl_json("leaks", str(pid), "--db", str(db), "--depth", "8")
                   for pid in pids}
        for d in from_db.values():
            assert d["source"] == "pmd database", d
        check_named(from_db)
        for pid in pids:
            assert first_where(from_db[pid]) == first_where(from_module[pid])
            assert from_db[pid]["live_bytes"] == from_module[pid]["live_bytes"]
        assert "kept its" not in pmd.text(), pmd.text()
        # the HTML report of a process the module dropped: from the database
        html = tmp / "deep.html"
        r = pmctl("report", str(pids[1]), "--db", str(db), "-o", str(html))
        assert r.exit_code == 0, r.stderr
        assert PROGRAMS[1][2] in html.read_text(), "the leaking line is in the report"
        # the stats of an expired process come from the database too
        st = pmctl_json("stats", str(pids[0]), "--db", str(db))
        assert sum(b["malloc"] for b in st["buckets"]) >= COUNT, st
        # no absolute address of any process in pmd's database
        dump = subprocess.run(["sqlite3", str(db), ".dump"], capture_output=True,
                              text=True, check=True).stdout
        assert not re.search(r"0x7f[0-9a-f]{10}", dump), "an address in the database"
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        rc = pmd.stop()
    assert rc == 0, pmd.text()


def test_pprof_base_names_the_site_that_grew(tmp: Path) -> None:
    """Two profiles of a running leak, a second apart: go tool pprof -base
    puts the leaking line first, with what it grew by."""
    env = dict(os.environ, LD_PRELOAD=str(HOOKLIB), PMM_START="1")
    p = subprocess.Popen([str(TOP / "examples" / "bin" / "leak"), "-n", "100000000", "-b",
                          "4096", "-s", "20"], env=env, stdout=subprocess.DEVNULL)
    try:
        with Device.open() as dev:
            assert kmod_dev.wait_for(lambda: (i := dev.pid_info(p.pid)) is not None
                                     and i.live_blocks > 10, 30)
        old, new = tmp / "old.pb.gz", tmp / "new.pb.gz"
        assert pmctl("leaks", str(p.pid), "--pprof", str(old)).exit_code == 0
        with Device.open() as dev:
            before = dev.pid_info(p.pid)
            assert before is not None
            assert kmod_dev.wait_for(lambda: (i := dev.pid_info(p.pid)) is not None
                                     and i.live_blocks > before.live_blocks + 20, 30)
        assert pmctl("leaks", str(p.pid), "--pprof", str(new)).exit_code == 0
    finally:
        p.kill()
        p.wait()
    out = go_pprof(tmp, "-top", "-lines", "-sample_index=inuse_space", "-base", str(old),
                   str(new))
    rows = [ln for ln in out.splitlines() if re.match(r"\s*[\d.]+[kMG]?B\s", ln)]
    assert rows and "leak_here" in rows[0] and "leak.c:30" in rows[0], out
    grew = rows[0].split()[0]
    assert not grew.startswith("-") and grew != "0", out


def go_pprof(tmp: Path, *args: str) -> str:
    """go tool pprof's output, offline (no symbolization, no network)."""
    go = shutil.which("go")
    assert go, "golang-go is installed by setup"
    env = dict(os.environ, HOME=str(tmp), GOCACHE=str(tmp / "gocache"),
               GOPATH=str(tmp / "gopath"), GOTOOLCHAIN="local")
    return subprocess.run([go, "tool", "pprof", "-symbolize=none", *args],
                          capture_output=True, text=True, timeout=300, env=env,
                          check=True).stdout


def wait_kept(pmd: Pmd, pids: list[int]) -> bool:
    """Whether pmd said it kept every one of pids' sites (within 2 minutes)."""
    return kmod_dev.wait_for(
        lambda: all(re.search(rf"pid {pid} \(.*\): kept its", pmd.text()) for pid in pids), 120)


def pprof_totals(prof: Path, tmp: Path) -> dict[str, int]:
    """Each sample type's total, as go tool pprof -raw reads the file."""
    out = go_pprof(tmp, "-raw", str(prof))
    types_line = re.search(r"^Samples:\n(.*)$", out, re.M)
    assert types_line, out
    names = [t.split("/")[0] for t in types_line.group(1).split()]
    totals = dict.fromkeys(names, 0)
    samples = out[types_line.end():out.index("\nLocations")]
    for m in re.finditer(r"^\s+(\d+(?:\s+\d+)*): ", samples, re.M):
        for name, v in zip(names, m.group(1).split(), strict=True):
            totals[name] += int(v)
    return totals

