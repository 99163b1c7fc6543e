"""pmd keeps running whatever arrives: u64 values beyond SQLite's integers,
events whose handling fails, rows the database refuses, a database that
cannot be written for a long time (bounded memory), and exit events that
never arrive (the process map is pruned). The loop is Daemon.run with a
stand-in for the genl listener; the database is a real SQLite file."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_pmd_genl import FAM, A, msg, u32, u64

from pmm.daemon import Daemon, Options, loop
from pmm.kernel import sampler, uapi
from pmm.kernel.genl import Event, MalformedEvent, SiteLive, decode_datagram
from pmm.store import TICK_NS, SampleRow, Store, start_key

I64_MAX = (1 << 63) - 1
PID, START = 4_000_201, 123_456_789_012  # above pid_max: never a live process
KEY = start_key(START)


def sample(t: int, rss: int = 8192, live_bytes: int | None = None) -> Event:
    return Event(cmd=uapi.Cmd.SAMPLE, pid=PID, start_time=START, time=t, vm=1 << 30, rss=rss,
                 live_bytes=live_bytes)


class FakeListener:
    """Stands in for pmm.kernel.genl.Listener: hands out `batches` one poll at a
    time, then SIGTERMs the process (as systemd would) a few polls later."""

    batches: list[list[Event | MalformedEvent]] = []
    lost_at: dict[int, int] = {}  # poll number -> Listener.lost from then on
    connects_at: dict[int, int] = {}
    last: FakeListener | None = None

    def __init__(self, *args: object, **kw: object) -> None:
        self.lost = 0
        self.connects = 0
        self.polls = 0
        FakeListener.last = self

    def connect(self) -> bool:
        self.connects += 1
        return True

    def dump_pids(self) -> list[Event]:
        return []

    def fds(self) -> list[int]:
        return []

    def timeout(self) -> float:
        return 0.01

    def poll(self) -> list[Event | MalformedEvent]:
        n = self.polls
        self.polls += 1
        self.lost = self.lost_at.get(n, self.lost)
        self.connects = self.connects_at.get(n, self.connects)
        if n < len(self.batches):
            return self.batches[n]
        if n == len(self.batches) + 20:
            os.kill(os.getpid(), signal.SIGTERM)
        return []

    def close(self) -> None:
        pass


@pytest.fixture()
def fake_listener(monkeypatch: pytest.MonkeyPatch) -> type[FakeListener]:
    monkeypatch.setattr(loop, "Listener", FakeListener)
    FakeListener.batches = []
    FakeListener.lost_at = {}
    FakeListener.connects_at = {}
    return FakeListener


def run_daemon(db: Path, **kw: object) -> tuple[int, Daemon, Store]:
    st = Store.open(db)
    d = Daemon(st, Options(db=db, pids=[], commit_interval=0.01, **kw))  # type: ignore[arg-type]
    return d.run(), d, st


def test_u64_beyond_sqlite_is_clamped_and_said_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pmd")
    huge = msg(uapi.Cmd.SAMPLE, u32(A.PID, 4_000_277), u64(A.START_TIME, 5), u64(A.TIME, 9),
               u64(A.VM, (1 << 64) - 1), u64(A.RSS, 4096), u64(A.LIVE_BYTES, 1 << 63))
    evs = decode_datagram(huge + huge, FAM)
    assert [(e.vm, e.rss, e.live_bytes) for e in evs if isinstance(e, Event)] == \
        [(I64_MAX, 4096, I64_MAX)] * 2
    said = [r.getMessage() for r in caplog.records if "2^63-1" in r.getMessage()]
    assert said == [
        f"pid 4000277: PMM_A_VM {(1 << 64) - 1} is beyond 2^63-1: stored as 2^63-1 (said once "
        "per process and attribute)",
        f"pid 4000277: PMM_A_LIVE_BYTES {1 << 63} is beyond 2^63-1: stored as 2^63-1 (said once "
        "per process and attribute)"]
    # a key that large names nothing: the message is malformed
    bad = msg(uapi.Cmd.SAMPLE, u32(A.PID, 4_000_277), u64(A.START_TIME, 5), u64(A.TIME, 1 << 63),
              u64(A.VM, 1), u64(A.RSS, 1))
    (e,) = decode_datagram(bad, FAM)
    assert isinstance(e, MalformedEvent) and "PMM_A_TIME" in str(e)


def test_loop_survives_what_arrives_and_records_the_next_samples(
        tmp_path: Path, fake_listener: type[FakeListener],
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pmd")
    fake_listener.batches = [
        [sample(1_000, live_bytes=1 << 64)],  # not through the decoder: the store refuses it
        [MalformedEvent("from a broken module")],
        [Event(cmd=uapi.Cmd.SAMPLE, pid=PID, start_time=START)],  # handling it fails
        list(decode_datagram(msg(uapi.Cmd.SAMPLE, u32(A.PID, PID), u64(A.START_TIME, START),
                                 u64(A.TIME, 200_000_000_000), u64(A.VM, 1 << 30),
                                 u64(A.RSS, 12288), u64(A.LIVE_BYTES, 1 << 63)), FAM)),
        [sample(300_000_000_000 + i, rss=16384) for i in range(5)],
    ]
    rc, d, st = run_daemon(tmp_path / "pmm.db")
    assert rc == 0
    c = st.db.conn
    rows = c.execute("SELECT time, rss, live_bytes FROM samples ORDER BY time").fetchall()
    assert rows == [(200_000_000_000, 12288, I64_MAX)] + [
        (300_000_000_000 + i, 16384, None) for i in range(5)]
    assert (d.events.malformed, d.events.failed_events, d.rows.bad_rows) == (1, 1, 1)
    text = "\n".join(caplog.messages)
    assert "event skipped (1 so far): AssertionError" in text
    assert "skipped a sample row: the database refused a row: OverflowError" in text
    st.close()


def test_refused_rows_are_isolated_and_the_rest_written(tmp_path: Path) -> None:
    st = Store.open(tmp_path / "pmm.db")
    d = Daemon(st, Options(db=tmp_path / "pmm.db", pids=[], genl=False))
    for i in range(100):
        d.rows.samples.append(SampleRow(PID, KEY, 10 + i, 1, 2))
        if i in (17, 64):
            d.rows.samples.append(SampleRow(PID, KEY, 1000 + i, 1, 2, live_bytes=1 << 63))
    d.rows.snaps.append((PID, KEY, 5, 1, 1 << 64, 1))
    d.rows.snaps.append((PID, KEY, 5, 2, 100, 1))
    d.rows.flush()
    assert d.rows.write_failures == 0 and d.rows.pending() == 0
    assert (d.rows.bad_rows, d.rows.written) == (3, 100)
    assert st.sample_count() == 100
    assert st.site_snapshots(PID, KEY) == [(2, 5, 100, 1)]
    st.close()


def test_pending_rows_stay_bounded_while_writes_fail(tmp_path: Path) -> None:
    st = Store.open(tmp_path / "pmm.db")
    d = Daemon(st, Options(db=tmp_path / "pmm.db", pids=[], genl=False, max_pending=50))
    st.db.conn.execute("PRAGMA query_only=ON")  # every write fails, as on a full disk
    for i in range(200):
        key = (PID + i, START)
        d.handle_event(Event(cmd=uapi.Cmd.STARTED, pid=key[0], start_time=key[1]))
        d.handle_event(Event(cmd=uapi.Cmd.SITES, pid=key[0], start_time=key[1], time=7,
                             sites=(SiteLive(1, 10, 1), SiteLive(2, 20, 2))))
        d.handle_event(Event(cmd=uapi.Cmd.EXITED, pid=key[0], start_time=key[1], time=8))
    d.rows.flush()
    assert d.rows.write_failures == 1
    assert (len(d.rows.procs), len(d.rows.exits), len(d.rows.snaps)) == (50, 50, 50)
    assert d.rows.dropped_rows == 150 + 150 + 350
    # the newest are kept
    assert d.rows.exits[-1] == (PID + 199, KEY, 8)
    st.db.conn.execute("PRAGMA query_only=OFF")
    d.flush_now()
    assert len(st.processes()) == 50
    st.close()


@pytest.fixture()
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    ps: list[subprocess.Popen[bytes]] = []
    yield ps
    for p in ps:
        p.kill()
        p.wait()


@pytest.mark.parametrize("why", ["overrun", "reconnect", "periodic"])
def test_processes_whose_exit_was_lost_are_pruned(
        tmp_path: Path, fake_listener: type[FakeListener],
        children: list[subprocess.Popen[bytes]], why: str) -> None:
    live = subprocess.Popen(["sleep", "60"])
    dead = subprocess.Popen(["sleep", "60"])
    children += [live, dead]
    live_start = sampler.read_stat(live.pid).start_time
    dead_start = sampler.read_stat(dead.pid).start_time
    me = os.getpid()
    my_start = sampler.read_stat(me).start_time
    fake_listener.batches = [[
        Event(cmd=uapi.Cmd.STARTED, pid=live.pid, start_time=live_start),
        Event(cmd=uapi.Cmd.STARTED, pid=dead.pid, start_time=dead_start),
        # a process that had this pid before us: the pid is taken by another now
        Event(cmd=uapi.Cmd.STARTED, pid=me, start_time=my_start - 5 * TICK_NS),
    ], []]
    dead.kill()
    dead.wait()  # its EXITED event never comes
    kw: dict[str, object] = {}
    if why == "overrun":
        fake_listener.lost_at = {1: 1}
    elif why == "reconnect":
        fake_listener.connects_at = {1: 2}
    else:
        kw["prune_interval"] = 0.05
    rc, d, st = run_daemon(tmp_path / "pmm.db", **kw)
    assert rc == 0
    assert set(d.procs) == {(live.pid, live_start)}
    exited = {(p.pid, p.start_time): p.exited for p in st.processes()}
    assert exited[(live.pid, live_start)] is None
    assert exited[(dead.pid, dead_start)] is not None
    assert exited[(me, my_start - 5 * TICK_NS)] is not None
    st.close()


def test_rows_in_a_real_file_after_all_that(tmp_path: Path,
                                             fake_listener: type[FakeListener]) -> None:
    """The database pmd wrote is sound (another connection, integrity check)."""
    fake_listener.batches = [[sample(1, live_bytes=1 << 64), sample(2)]]
    rc, _, st = run_daemon(tmp_path / "pmm.db")
    st.close()
    assert rc == 0
    c = sqlite3.connect(tmp_path / "pmm.db")
    assert c.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert c.execute("SELECT time FROM samples").fetchall() == [(2,)]
    c.close()
