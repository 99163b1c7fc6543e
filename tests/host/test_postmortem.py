"""What pmd keeps of an exited process (pmm.store.postmortem, pmm.store's exit_*
tables, pmd's harvest): figures, frames naming file:line of a real program
compiled here, no absolute address anywhere in the database; harvested on
the EXITED event and, once, by a restarted pmd from the module's list;
read back as `pmctl leaks --json` and `pmctl stats` show them; an older
database without the tables still read. The module cannot load on the host:
a small stand-in returns real model objects (pmm.kernel.model) whose frames are
file offsets in the compiled program and in the host's libc."""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from pmm.analysis.leaks import AGE_LABELS
from pmm.daemon import Daemon, Options, loop
from pmm.errors import NotMonitored
from pmm.kernel import uapi
from pmm.kernel.genl import Event, SiteLive
from pmm.kernel.model import (
    OP_FREE,
    OP_MALLOC,
    OP_NR,
    SITE_F_SOURCE,
    STATE_EXITED,
    STATE_RUNNING,
    Block,
    Bucket,
    ObjectFile,
    PidInfo,
    Site,
    StatsInfo,
)
from pmm.kernel.sampler import boottime_ns
from pmm.store import Store, postmortem, start_key

LEAK_C = """\
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) void *leaker(size_t n)
{
\tvoid *p = malloc(n); /* LEAK */
\t__asm__ volatile("" ::: "memory");
\treturn p;
}

int main(void)
{
\tvoid *p = leaker(100); /* CALLER */
\tprintf("%p\\n", p);
\treturn 0;
}
"""

PID = 4_000_301  # above pid_max: never a live process
START_NS = 7_123_456_789  # its start, CLOCK_BOOTTIME
KEY = start_key(START_NS)
# where the "process" had its code: addresses that must never be stored
EXE_BASE = 0x55D0_4A30_0000
LIBC_BASE = 0x7F3C_1B20_0000
UNPLACED = 0x7F3C_DEAD_B0B0  # a frame the module could not place (JIT, anon)


def line_of(marker: str) -> int:
    return next(i for i, ln in enumerate(LEAK_C.splitlines(), 1) if marker in ln)


def file_offset(path: str, vaddr: int) -> int:
    """vaddr's file offset, from the PT_LOAD that holds it (readelf -lW)."""
    out = subprocess.run(["readelf", "-lW", path], capture_output=True, text=True,
                         check=True).stdout
    for m in re.finditer(r"^\s*LOAD\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+0x[0-9a-f]+\s+"
                         r"0x([0-9a-f]+)\s+0x([0-9a-f]+)", out, re.M):
        off, va, _filesz, memsz = (int(x, 16) for x in m.groups())
        if va <= vaddr < va + memsz:
            return vaddr - va + off
    raise AssertionError(f"{vaddr:#x} is in no PT_LOAD of {path}")


def build_id(path: str) -> str:
    out = subprocess.run(["readelf", "-n", path], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", out)
    assert m, f"{path} has no build-id"
    return m.group(1)


def return_address(exe: Path, caller: str, callee: str) -> int:
    """The vaddr after `caller`'s call to `callee` (objdump -d): a return address."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(exe)],
                         capture_output=True, text=True, check=True).stdout
    body = out.split(f"<{caller}>:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    for i, ln in enumerate(body):
        if "call" in ln and f"<{callee}" in ln:
            return int(body[i + 1].split(":")[0], 16)
    raise AssertionError(f"no call to {callee} in {caller}")


@dataclass(frozen=True)
class Program:
    exe: str
    exe_id: str
    libc: str
    libc_id: str
    leak_off: int  # file offset of the return address in leaker() (after malloc)
    caller_off: int  # in main(), after leaker()
    malloc_off: int  # a return address inside libc's malloc


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Program:
    d = tmp_path_factory.mktemp("pm")
    (d / "leak.c").write_text(LEAK_C)
    exe = d / "leak"
    subprocess.run(["gcc", "-g", "-O0", "-fno-omit-frame-pointer", "-Wl,--build-id",
                    "-o", str(exe), "leak.c"], cwd=d, check=True)
    libc = os.path.realpath(subprocess.run(["gcc", "-print-file-name=libc.so.6"],
                                           capture_output=True, text=True,
                                           check=True).stdout.strip())
    nm = subprocess.run(["nm", "-D", "--defined-only", libc], capture_output=True, text=True,
                        check=True).stdout
    malloc_va = next(int(ln.split()[0], 16) for ln in nm.splitlines()
                     if ln.split()[-1].split("@")[0] == "malloc")
    leak_va = return_address(exe, "leaker", "malloc")
    caller_va = return_address(exe, "main", "leaker")
    # the return addresses are in the lines the test expects (addr2line, one byte back)
    got = subprocess.run(["addr2line", "-e", str(exe), f"{leak_va - 1:x}", f"{caller_va - 1:x}"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert got == [f"{d}/leak.c:{line_of('LEAK')}", f"{d}/leak.c:{line_of('CALLER')}"]
    return Program(str(exe), build_id(str(exe)), libc, build_id(libc),
                   file_offset(str(exe), leak_va), file_offset(str(exe), caller_va),
                   file_offset(libc, malloc_va) + 0x14)


@pytest.fixture(autouse=True)
def own_symbol_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PMM_CACHE_DIR", str(tmp_path / "cache"))  # never the user's
    (tmp_path / "debug").mkdir()
    monkeypatch.setenv("PMM_DEBUG_DIRS", str(tmp_path / "debug"))  # not the host's
    monkeypatch.delenv("DEBUGINFOD_URLS", raising=False)


@dataclass
class Entry:
    info: PidInfo
    sites: list[Site]
    objects: list[ObjectFile]
    blocks: list[Block]
    stats: StatsInfo


@dataclass
class FakeModule:
    """Stands in for /dev/pmm (pmm.kernel.device.Device's reads), per pid; counts
    the block reads (the heaviest: one per harvest)."""

    entries: dict[int, Entry] = field(default_factory=dict)
    block_reads: int = 0
    fail_blocks: bool = False
    is_open: bool = False

    def open(self) -> FakeModule:
        return self

    def __enter__(self) -> FakeModule:
        self.is_open = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.is_open = False

    def _entry(self, pid: int) -> Entry:
        if pid not in self.entries:
            raise NotMonitored(f"pid {pid} is not monitored")
        return self.entries[pid]

    def pid_info(self, pid: int) -> PidInfo | None:
        return self.entries[pid].info if pid in self.entries else None

    def sites(self, pid: int) -> list[Site]:
        return list(self._entry(pid).sites)

    def objects(self, pid: int) -> list[ObjectFile]:
        return list(self._entry(pid).objects)

    def blocks(self, pid: int) -> list[Block]:
        e = self._entry(pid)
        self.block_reads += 1
        if self.fail_blocks:
            raise OSError(5, "Input/output error")
        return list(e.blocks)

    def stats(self, pid: int) -> StatsInfo:
        return self._entry(pid).stats


def counts(**ops: int) -> tuple[int, ...]:
    c = [0] * OP_NR
    for name, n in ops.items():
        c[{"malloc": OP_MALLOC, "free": OP_FREE}[name]] = n
    return tuple(c)


EXIT_AGO_S = 2.0  # the process exited this long before the harvest
AGES_S = (0.5, 5.0, 50.0, 500.0)  # its leaker() blocks' ages at the exit
STATS = StatsInfo(pid=PID, buckets=tuple(Bucket(i + 1, i, 0, 2 * i, 100 * i + 7, 50 * i)
                                         for i in range(7)),
                  failed_allocs=1, unmatched_frees=2, older_frees=3)


def make_entry(p: Program, state: int = STATE_EXITED) -> Entry:
    now_boot = boottime_ns()
    exit_ns = now_boot - int(EXIT_AGO_S * 1e9) if state == STATE_EXITED else 0
    exit_mono = time.monotonic_ns() - (int(EXIT_AGO_S * 1e9) if state == STATE_EXITED else 0)
    leak_frames = (LIBC_BASE + p.malloc_off, EXE_BASE + p.leak_off, EXE_BASE + p.caller_off,
                   UNPLACED)
    sites = [
        Site(1, frames=leak_frames, live_bytes=100 + 200 + 300 + 2 * 400, live_blocks=5,
             alloc_bytes=4000, free_bytes=2600, alloc_count=counts(malloc=12, free=7),
             locs=((2, p.malloc_off), (1, p.leak_off), (1, p.caller_off), None)),
        # the program said where it is (the shim)
        Site(2, flags=SITE_F_SOURCE, frames=(EXE_BASE + p.caller_off,), file="shim.c",
             func="grow", line=42, live_bytes=64, live_blocks=1, alloc_bytes=64,
             alloc_count=counts(malloc=1), locs=((1, p.caller_off),)),
        # everything freed: no leak, still described
        Site(3, frames=(LIBC_BASE + p.malloc_off, EXE_BASE + p.caller_off), alloc_bytes=10,
             free_bytes=10, alloc_count=counts(malloc=1, free=1),
             locs=((2, p.malloc_off), (1, p.caller_off))),
    ]
    blocks = [Block(0x1000 + i, 0, size, exit_mono - int(age * 1e9), 1, w, OP_MALLOC)
              for i, (size, age, w) in enumerate(zip((100, 200, 300, 400), AGES_S, (1, 1, 1, 2),
                                                     strict=True))]
    blocks += [Block(0x2000, 0, 64, exit_mono - 3_000_000_000, 2, 1, OP_MALLOC),
               # a site the module never had registered
               Block(0x3000, 0, 1000, exit_mono - 20_000_000_000, 7, 1, OP_MALLOC)]
    st = os.stat(p.exe)
    objects = [ObjectFile(1, p.exe, p.exe_id, st.st_dev, st.st_ino, st.st_size),
               ObjectFile(2, p.libc, p.libc_id, 0, 1, 2)]
    info = PidInfo(pid=PID, ppid=1, state=state, comm="leak", start_time_ns=START_NS,
                   monitor_start_ns=START_NS + 1000, exit_time_ns=exit_ns, live_blocks=6,
                   live_bytes=1864, records=20, dropped_records=0, unmatched_frees=2,
                   pending_frees=0, samples=9, vm_bytes=1 << 24, rss_bytes=1 << 20)
    return Entry(info, sites, objects, blocks, STATS)


ADDRESSES = (EXE_BASE, LIBC_BASE, UNPLACED)


def db_cells(db: Path) -> Iterator[tuple[str, str, Any]]:
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        for (table,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            cur = c.execute(f"SELECT * FROM {table}")  # noqa: S608 - the DB's own names
            cols = [d[0] for d in cur.description]
            for row in cur:
                for col, v in zip(cols, row, strict=True):
                    yield table, col, v
    finally:
        c.close()


def assert_no_address(db: Path, p: Program) -> None:
    """No cell holds one of the process's absolute addresses (or one of its
    frames' addresses), in decimal or hex, nor a base's significant digits."""
    frames = {b + o for b in (EXE_BASE, LIBC_BASE)
              for o in (p.malloc_off, p.leak_off, p.caller_off)} | {UNPLACED}
    needles = {str(a) for a in frames} | {f"{a:x}" for a in frames} \
        | {f"{b:x}"[:8] for b in ADDRESSES}
    seen = 0
    for table, col, v in db_cells(db):
        seen += 1
        text = str(v).lower()
        hits = [n for n in needles if n in text]
        assert not hits, f"{table}.{col} holds an address: {v!r}"
    assert seen > 50


def frame_dict(**kw: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"addr": 0, "object": None, "offset": None, "func": None, "file": None,
                         "line": None, "build_id": None, "symbol": None, "lines": []}
    d.update(kw)
    return d


def new_daemon(st: Store, db: Path, module: FakeModule) -> Daemon:
    return Daemon(st, Options(db=db, pids=[], genl=False), open_device=module.open)


def test_exited_event_keeps_sites_named_by_file_line_and_no_address(
        program: Program, tmp_path: Path) -> None:
    db = tmp_path / "pmm.db"
    module = FakeModule({PID: make_entry(program)})
    st = Store.open(db)
    d = new_daemon(st, db, module)
    exit_ns = module.entries[PID].info.exit_time_ns
    d.handle_event(Event(cmd=uapi.Cmd.EXITED, pid=PID, start_time=START_NS, time=exit_ns,
                         comm="leak"))
    assert d.wait_for_worker(60)
    d.flush_now()
    assert (d.harvests.harvests, d.harvests.failures, module.block_reads) == (1, 0, 1)

    rows = {r.site: r for r in st.exit_sites(PID, KEY)}
    assert sorted(rows) == [1, 2, 3, 7]
    leak = rows[1]
    assert (leak.live_bytes, leak.live_blocks, leak.alloc_bytes, leak.free_bytes) == \
        (1400, 5, 4000, 2600)
    assert leak.alloc_count == {"MALLOC": 12, "FREE": 7}
    assert leak.histogram == (1, 1, 1, 2, 0)  # ages 0.5, 5, 50, 500 (weight 2) s at the exit
    assert leak.oldest_age_s == pytest.approx(500.0, abs=0.5)
    assert leak.newest_age_s == pytest.approx(0.5, abs=0.5)
    src = str(Path(program.exe).parent / "leak.c")
    libc_frame, leaker, caller, unknown = leak.frames
    assert (libc_frame["addr"], libc_frame["object"], libc_frame["offset"],
            libc_frame["build_id"]) == (0, program.libc, program.malloc_off, program.libc_id)
    assert leaker == frame_dict(object=program.exe, offset=program.leak_off, func="leaker",
                                file=src, line=line_of("LEAK"), build_id=program.exe_id,
                                lines=[{"func": "leaker", "file": src,
                                        "line": line_of("LEAK")}])
    assert (caller["func"], caller["file"], caller["line"]) == ("main", src,
                                                                line_of("CALLER"))
    assert unknown == frame_dict()  # the module could not place it: no address kept
    # past libc's malloc: the program's line
    assert leak.where == f"leaker() leak.c:{line_of('LEAK')}"
    assert (rows[2].func, rows[2].file, rows[2].line, rows[2].where) == \
        ("grow", "shim.c", 42, "grow() shim.c:42")
    assert (rows[3].live_blocks, rows[3].histogram, rows[3].oldest_age_s) == \
        (0, (0,) * len(AGE_LABELS), None)
    assert (rows[7].registered, rows[7].live_bytes, rows[7].frames, rows[7].where) == \
        (False, 1000, (), "")
    # what alerts and trend show
    assert st.sites(PID, KEY) == {1: f"leaker() leak.c:{line_of('LEAK')}",
                                  2: "grow() shim.c:42",
                                  3: f"main() leak.c:{line_of('CALLER')}"}
    start, info = st.exit_info(PID) or (0, {})
    assert start == KEY
    assert (info["comm"], info["state"], info["exit_time_ns"], info["records"]) == \
        ("leak", "exited", exit_ns, 20)
    assert info["objects"][0] == {"obj": 1, "path": program.exe, "build_id": program.exe_id,
                                  "dev": os.stat(program.exe).st_dev,
                                  "ino": os.stat(program.exe).st_ino,
                                  "size": os.stat(program.exe).st_size,
                                  "path_cut": False, "deleted": False}
    assert 0 < boottime_ns() - info["harvested"] < 60e9
    assert st.exit_stats(PID, KEY) == STATS.to_dict()
    assert [(p.comm, p.exited) for p in st.processes(PID)] == [("leak", exit_ns)]
    st.close()
    assert_no_address(db, program)


def test_the_device_is_closed_while_symbolizing(program: Program, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Symbolizing may take seconds: pmd holds /dev/pmm only for its reads,
    so the module can be unloaded meanwhile."""
    from pmm import sitestack

    db = tmp_path / "pmm.db"
    module = FakeModule({PID: make_entry(program)})
    seen: list[bool] = []
    real = sitestack.site_frames

    def site_frames(*args: Any, **kw: Any) -> Any:
        seen.append(module.is_open)
        return real(*args, **kw)

    monkeypatch.setattr(sitestack, "site_frames", site_frames)
    st = Store.open(db)
    d = new_daemon(st, db, module)
    d.handle_event(Event(cmd=uapi.Cmd.EXITED, pid=PID, start_time=START_NS,
                         time=module.entries[PID].info.exit_time_ns, comm="leak"))
    assert d.wait_for_worker(60)
    d.flush_now()
    assert d.harvests.harvests == 1 and seen == [False]
    st.close()


def test_restarted_pmd_harvests_an_exited_entry_once(
        program: Program, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """pmd was down when the process exited: at start, the module's list says
    so (GET_PIDS, state exited) and pmd harvests it; the next start does not."""
    caplog.set_level(logging.INFO, logger="pmd")
    db = tmp_path / "pmm.db"
    module = FakeModule({PID: make_entry(program)})
    done: list[Callable[[], bool]] = []

    class DumpListener:
        """pmm.kernel.genl.Listener with the module's list of one exited process;
        SIGTERMs pmd once `done` holds (or after 30 s)."""

        def __init__(self, *args: object, **kw: object) -> None:
            self.lost = self.connects = 0
            self.deadline = time.monotonic() + 30

        def connect(self) -> bool:
            self.connects += 1
            return True

        def dump_pids(self) -> list[Event]:
            return [Event(cmd=uapi.Cmd.GET_PIDS, pid=PID, start_time=START_NS, comm="leak",
                          state=STATE_EXITED),
                    # a running one is not harvested
                    Event(cmd=uapi.Cmd.GET_PIDS, pid=PID + 1, start_time=START_NS,
                          comm="other", state=STATE_RUNNING)]

        def fds(self) -> list[int]:
            return []

        def timeout(self) -> float:
            return 0.01

        def poll(self) -> list[Event]:
            if done[0]() or time.monotonic() > self.deadline:
                os.kill(os.getpid(), signal.SIGTERM)
            return []

        def close(self) -> None:
            pass

    monkeypatch.setattr(loop, "Listener", DumpListener)

    def harvested() -> bool:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
            try:
                return bool(c.execute("SELECT count(*) FROM exit_info").fetchone()[0])
            except sqlite3.OperationalError:
                return False

    for run in range(2):
        polls = [0]

        def enough(polls: list[int] = polls, run: int = run) -> bool:
            polls[0] += 1
            return harvested() if run == 0 else polls[0] > 30
        done[:] = [enough]
        st = Store.open(db)
        d = Daemon(st, Options(db=db, pids=[], commit_interval=0.01), open_device=module.open)
        assert d.run() == 0
        st.close()
        assert (run, d.harvests.harvests) == (run, 1 - run)
    assert module.block_reads == 1
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT pid, start_time FROM exit_info").fetchall() == [(PID, KEY)]
        assert c.execute("SELECT count(*) FROM exit_sites").fetchone() == (4,)
        assert c.execute("SELECT exited FROM processes WHERE pid = ?", (PID,)).fetchone() == \
            (module.entries[PID].info.exit_time_ns,)
    st = Store.open(db, readonly=True)
    assert st.sites(PID, KEY)[1] == f"leaker() leak.c:{line_of('LEAK')}"
    st.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_leaks_and_stats_from_the_database(program: Program, tmp_path: Path) -> None:
    db = tmp_path / "pmm.db"
    st = Store.open(db)
    module = FakeModule({PID: make_entry(program)})
    assert postmortem.harvest(module, st, PID, KEY)
    st.close()
    st = Store.open(db, readonly=True)  # as pmctl reads it
    found = postmortem.leaks_from_db(st, PID)
    assert found is not None
    info, entries = found
    assert (info["pid"], info["comm"], info["state"], info["start_time"], info["source"]) == \
        (PID, "leak", "exited", KEY, "pmd database")
    assert [(e["site"], e["blocks"], e["bytes"]) for e in entries] == \
        [(1, 5, 1400), (7, 1, 1000), (2, 1, 64)]  # largest live bytes first; site 3 freed all
    leak, unregistered, shim = entries
    src = str(Path(program.exe).parent / "leak.c")
    assert {k: leak[k] for k in ("source", "func", "file", "line", "object", "offset",
                                 "where", "alloc_blocks", "alloc_bytes")} == {
        "source": "debuginfo", "func": "leaker", "file": src, "line": line_of("LEAK"),
        "object": program.exe, "offset": program.leak_off,
        "where": f"leaker() leak.c:{line_of('LEAK')}", "alloc_blocks": 12,
        "alloc_bytes": 4000}
    assert leak["histogram"] == dict(zip(AGE_LABELS, (1, 1, 1, 2, 0), strict=True))
    assert leak["oldest_age_s"] == pytest.approx(500.0, abs=0.5)
    assert [f["line"] for f in leak["frames"][1:3]] == [line_of("LEAK"), line_of("CALLER")]
    assert leak["frames"][3] == frame_dict()
    assert (shim["source"], shim["where"]) == ("shim", "grow() shim.c:42")
    assert (unregistered["source"], unregistered["where"], unregistered["frames"]) == \
        ("unknown", "site 7 (not registered)", [])
    assert unregistered["oldest_age_s"] == pytest.approx(20.0, abs=0.5)
    # --depth 1
    _, short = postmortem.leaks_from_db(st, PID, depth=1) or ({}, [])
    assert [len(e["frames"]) for e in short] == [1, 0, 1]
    assert postmortem.stats_from_db(st, PID) == STATS
    assert postmortem.leaks_from_db(st, PID + 1) is None
    assert postmortem.stats_from_db(st, PID + 1) is None
    st.close()


def test_harvest_is_idempotent_and_refuses_another_process(program: Program,
                                                          tmp_path: Path) -> None:
    db = tmp_path / "pmm.db"
    st = Store.open(db)
    module = FakeModule({PID: make_entry(program)})
    assert postmortem.harvest(module, st, PID, KEY)
    first = sorted((t, c, str(v)) for t, c, v in db_cells(db)
                   if not (t == "exit_info" and c in ("harvested", "info")))
    assert postmortem.harvest(module, st, PID, KEY)
    again = sorted((t, c, str(v)) for t, c, v in db_cells(db)
                   if not (t == "exit_info" and c in ("harvested", "info")))
    assert again == first
    # the pid is another process now, or still running, or gone: nothing read
    other = make_entry(program)
    module.entries[PID] = replace(other, info=replace(other.info, start_time_ns=START_NS + 10**9))
    assert not postmortem.harvest(module, st, PID, KEY)
    module.entries[PID] = make_entry(program, state=STATE_RUNNING)
    assert not postmortem.harvest(module, st, PID, KEY)
    del module.entries[PID]
    assert not postmortem.harvest(module, st, PID, KEY)
    st.close()


def test_a_failed_harvest_is_logged_once_and_pmd_goes_on(
        program: Program, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pmd")
    db = tmp_path / "pmm.db"
    st = Store.open(db)
    module = FakeModule({PID: make_entry(program)}, fail_blocks=True)
    d = new_daemon(st, db, module)
    d.handle_event(Event(cmd=uapi.Cmd.EXITED, pid=PID, start_time=START_NS, time=5,
                         comm="leak"))
    # expired already: nothing to keep, said once, not an error
    d.handle_event(Event(cmd=uapi.Cmd.EXITED, pid=PID + 7, start_time=START_NS, time=6,
                         comm="gone"))
    # the same failure again: counted, not said again
    module.entries[PID + 8] = replace(make_entry(program),
                                      info=replace(make_entry(program).info, pid=PID + 8))
    d.handle_event(Event(cmd=uapi.Cmd.EXITED, pid=PID + 8, start_time=START_NS, time=7,
                         comm="leak2"))
    assert d.wait_for_worker(60)
    d.handle_event(Event(cmd=uapi.Cmd.SAMPLE, pid=PID + 9, start_time=START_NS, time=7,
                         vm=1 << 20, rss=4096))
    d.flush_now()
    assert (d.harvests.harvests, d.harvests.failures) == (0, 2)
    said = [r.getMessage() for r in caplog.records
            if "sites" in r.getMessage() and r.levelno >= logging.INFO]
    assert said == [
        f"pid {PID} (leak): its sites could not be kept (1 so far; more of this kind are "
        "counted, not logged): OSError: [Errno 5] Input/output error",
        f"pid {PID + 7} (gone): the module no longer holds it: nothing kept of its sites"]
    assert st.exit_info(PID) is None
    assert st.sample_count(PID + 9, KEY) == 1
    assert [p.exited for p in st.processes(PID)] == [5]
    st.close()


def test_running_sites_are_described_and_named_in_the_alert(program: Program,
                                                            tmp_path: Path) -> None:
    """A SITES event's sites get their description while the process runs
    (from the module's objects and offsets), and the alert names it."""
    db = tmp_path / "pmm.db"
    st = Store.open(db)
    module = FakeModule({PID: make_entry(program, state=STATE_RUNNING)})
    d = Daemon(st, Options(db=db, pids=[], genl=False, detect_every=10),
               open_device=module.open)
    d.detector.ready.set()
    d.handle_event(Event(cmd=uapi.Cmd.SITES, pid=PID, start_time=START_NS, time=1,
                         sites=(SiteLive(1, 1400, 5), SiteLive(2, 64, 1))))
    assert d.wait_for_worker(60)
    d.flush_now()
    where = f"leaker() leak.c:{line_of('LEAK')}"
    assert st.sites(PID, KEY) == {1: where, 2: "grow() shim.c:42"}
    for i in range(200):
        t = 10_000_000_000 + i * 100_000_000
        d.handle_event(Event(cmd=uapi.Cmd.SAMPLE, pid=PID, start_time=START_NS, time=t,
                             vm=1 << 30, rss=(2 << 20) + 4096 * i))
        if i % 10 == 0:
            d.handle_event(Event(cmd=uapi.Cmd.SITES, pid=PID, start_time=START_NS, time=t,
                                 sites=(SiteLive(1, 4096 * i, i), SiteLive(2, 64, 1))))
    (a,) = st.alerts(PID)
    assert f"; fastest site 1 {where} +" in a.message
    assert module.block_reads == 0  # describing reads no blocks
    st.close()
    assert_no_address(db, program)


OLD_SCHEMA = """
CREATE TABLE processes (pid INTEGER NOT NULL, start_time INTEGER NOT NULL, comm TEXT, exe TEXT,
  cmdline TEXT, started INTEGER, exited INTEGER, source TEXT, PRIMARY KEY (pid, start_time));
CREATE TABLE samples (pid INTEGER NOT NULL, start_time INTEGER NOT NULL, time INTEGER NOT NULL,
  vm INTEGER NOT NULL, rss INTEGER NOT NULL, rss_anon INTEGER, rss_file INTEGER,
  rss_shmem INTEGER, live_bytes INTEGER, live_blocks INTEGER, source TEXT,
  PRIMARY KEY (pid, start_time, time));
CREATE TABLE site_snapshots (pid INTEGER, start_time INTEGER, time INTEGER, site INTEGER,
  live_bytes INTEGER, live_blocks INTEGER, PRIMARY KEY (pid, start_time, time, site));
CREATE TABLE sites (pid INTEGER, start_time INTEGER, site INTEGER, where_ TEXT,
  PRIMARY KEY (pid, start_time, site));
CREATE TABLE alerts (id INTEGER PRIMARY KEY, pid INTEGER, start_time INTEGER, time INTEGER,
  wall_time FLOAT, comm TEXT, verdict TEXT, slope FLOAT, slope_low FLOAT, slope_high FLOAT,
  confidence FLOAT, growth FLOAT, site INTEGER, message TEXT);
INSERT INTO processes VALUES (4000301, 7120000000, 'leak', '', '', 1, 2, 'kmod');
"""


def test_an_older_database_is_read_and_upgraded_in_place(program: Program,
                                                         tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as c:
        c.executescript(OLD_SCHEMA)
    db.chmod(0o444)
    st = Store.open(db, readonly=True)
    assert (st.exit_info(PID), st.exit_sites(PID, KEY), st.exit_stats(PID, KEY),
            st.harvested(PID, KEY)) == (None, [], None, False)
    assert postmortem.leaks_from_db(st, PID) is None
    assert postmortem.stats_from_db(st, PID) is None
    assert [p.comm for p in st.processes(PID)] == ["leak"]
    st.close()
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        assert "exit_info" not in {r[0] for r in c.execute("SELECT name FROM sqlite_master")}
    db.chmod(0o644)
    st = Store.open(db)  # pmd adds the tables, keeps the rows
    assert postmortem.harvest(FakeModule({PID: make_entry(program)}), st, PID, KEY)
    assert st.harvested(PID, KEY)
    assert [p.comm for p in st.processes(PID)] == ["leak"]
    st.close()


def test_gcc_and_binutils_are_there() -> None:
    """The fixtures build and read a real program (scripts/setup.sh installs them)."""
    assert all(shutil.which(t) for t in ("gcc", "objdump", "readelf", "nm", "addr2line"))
