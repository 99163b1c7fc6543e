"""pmd's SQLite store and /proc sampler, on real files and real processes."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from pmm import errors
from pmm.kernel import sampler
from pmm.store import (
    TICK_NS,
    AlertRow,
    DatabaseNotFound,
    DatabasePermissionDenied,
    NotADatabase,
    ProcessRow,
    SampleRow,
    Store,
    StoreError,
    default_db_path,
    start_key,
)
from pmm.store import files as store_files


def test_schema_wal_and_keys(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "pmm.db"
    st = Store.open(db)
    assert st.db.journal_mode == "wal"
    c = sqlite3.connect(db)
    pks = {t: [r[1] for r in c.execute(f"PRAGMA table_info({t})") if r[5]]
           for t in ("processes", "samples", "site_snapshots", "sites", "alerts")}
    assert pks == {
        "processes": ["pid", "start_time"],
        "samples": ["pid", "start_time", "time"],
        "site_snapshots": ["pid", "start_time", "time", "site"],
        "sites": ["pid", "start_time", "site"],
        "alerts": ["id"],
    }
    cols = [r[1] for r in c.execute("PRAGMA table_info(samples)")]
    assert cols == ["pid", "start_time", "time", "vm", "rss", "rss_anon", "rss_file",
                    "rss_shmem", "live_bytes", "live_blocks", "source", "heap_free",
                    "heap_trimmable", "allocator", "cgroup_usage"]
    st.close()
    Store.open(db).close()  # reopening an existing database is fine


def test_reused_pid_never_mixes(tmp_path: Path) -> None:
    st = Store.open(tmp_path / "pmm.db")
    a = [SampleRow(42, 100, t, 1000, 10 * t) for t in range(1, 6)]
    b = [SampleRow(42, 200, t, 2000, 20 * t) for t in range(1, 4)]
    st.write(a + b + a[:2], [ProcessRow(42, 100, "first"), ProcessRow(42, 200, "second")])
    assert st.sample_count() == 8  # the repeated two were ignored
    s = st.series(42, 100)
    assert s.rss.tolist() == [10, 20, 30, 40, 50] and s.time_ns.tolist() == [1, 2, 3, 4, 5]
    assert st.series(42, 200).rss.tolist() == [20, 40, 60]
    assert st.series(42, 200, since_ns=2).rss.tolist() == [40, 60]
    assert [(p.start_time, p.comm) for p in st.processes(42)] == [(200, "second"),
                                                                  (100, "first")]
    # a later row with an empty comm keeps the known one; exits are recorded once
    st.write(processes=[ProcessRow(42, 100, "", "/bin/x", "")], exits=[(42, 100, 77)])
    st.write(exits=[(42, 100, 99)])
    p = st.processes(42)[1]
    assert (p.comm, p.exe, p.exited) == ("first", "/bin/x", 77)
    st.close()


def _old_database(path: Path) -> None:
    """A database as pmd wrote it before samples had the allocator's figures
    (its samples table as that pmd made it), with one sample."""
    c = sqlite3.connect(path)
    c.execute("CREATE TABLE processes (pid INTEGER NOT NULL, start_time INTEGER NOT NULL, "
              "comm TEXT, exe TEXT, cmdline TEXT, started INTEGER, exited INTEGER, "
              "source TEXT, PRIMARY KEY (pid, start_time))")
    c.execute("CREATE TABLE samples (pid INTEGER NOT NULL, start_time INTEGER NOT NULL, "
              "time INTEGER NOT NULL, vm INTEGER NOT NULL, rss INTEGER NOT NULL, "
              "rss_anon INTEGER, rss_file INTEGER, rss_shmem INTEGER, live_bytes INTEGER, "
              "live_blocks INTEGER, source TEXT, PRIMARY KEY (pid, start_time, time))")
    c.execute("INSERT INTO samples VALUES (7, 100, 1, 4096, 2048, 1024, 1024, 0, 500, 5, "
              "'kmod')")
    c.commit()
    c.close()


def test_old_database_gets_the_heap_columns(tmp_path: Path) -> None:
    """A reader of an older database sees no heap figures (None); pmd opening
    it adds the columns, keeps its rows (None there) and stores the figures of
    new samples, which read back as written."""
    db = tmp_path / "pmm.db"
    _old_database(db)
    ro = Store.open(db, readonly=True)
    (old,) = ro.sample_rows(7, 100)
    assert old == SampleRow(7, 100, 1, 4096, 2048, 1024, 1024, 0, 500, 5, "kmod")
    ro.close()
    st = Store.open(db)
    new = SampleRow(7, 100, 2, 4096, 4096, 3072, 1024, 0, 600, 6, "kmod", heap_free=2048,
                    heap_trimmable=512, allocator="glibc", cgroup_usage=1 << 20)
    jem = SampleRow(7, 100, 3, 4096, 4096, 3072, 1024, 0, 600, 6, "kmod", heap_free=1024,
                    allocator="jemalloc")
    proc = SampleRow(8, 200, 3, 4096, 4096, 3072, 1024, 0, source="proc")
    st.write([new, jem, proc])
    assert st.sample_rows(7, 100) == [old, new, jem]
    assert st.sample_rows(7, 100, since_ns=2) == [new, jem]
    assert st.sample_rows(8, 200) == [proc]
    st.close()
    ro = Store.open(db, readonly=True)
    assert ro.sample_rows(7, 100) == [old, new, jem]
    ro.close()


def test_alert_once(tmp_path: Path) -> None:
    st = Store.open(tmp_path / "pmm.db")
    a = AlertRow(1, 2, 3, 4.0, "c", "LEAK", 10.0, 5.0, 15.0, 0.95, 1e6, 7, "msg")
    assert st.add_alert(a) is True
    assert st.add_alert(a) is False
    assert st.alerts(1) == [a]
    st.close()


def test_site_snapshots(tmp_path: Path) -> None:
    st = Store.open(tmp_path / "pmm.db")
    st.write(snapshots=[(1, 2, 10, 7, 100, 1), (1, 2, 10, 8, 50, 2), (1, 2, 20, 7, 300, 3)])
    assert st.site_snapshots(1, 2) == [(7, 10, 100, 1), (8, 10, 50, 2), (7, 20, 300, 3)]
    st.set_site(1, 2, 7, "f() a.c:3")
    assert st.sites(1, 2) == {7: "f() a.c:3"}
    st.close()


def test_readonly_open_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no database at"):
        Store.open(tmp_path / "missing.db", readonly=True)
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"x" * 4096)
    with pytest.raises(StoreError, match="not a pmm database"):
        Store.open(bad, readonly=True)
    with pytest.raises(StoreError, match="cannot open the database /proc/"):
        Store.open("/proc/no/such/dir/pmm.db")


def test_default_db_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PMM_DB", "/tmp/x.db")
    assert default_db_path() == Path("/tmp/x.db")
    monkeypatch.delenv("PMM_DB")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert default_db_path() == Path("/var/lib/pmm/pmm.db")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(store_files, "_readable", lambda path: False)  # not in group pmm
    monkeypatch.setenv("HOME", "/home/u")
    assert default_db_path() == Path("/home/u/.local/share/pmm/pmm.db")
    # a member of the group reads the system database; its own pmd writes its own
    monkeypatch.setattr(store_files, "_readable", lambda path: path == Path("/var/lib/pmm/pmm.db"))
    assert default_db_path() == Path("/var/lib/pmm/pmm.db")
    assert default_db_path(writer=True) == Path("/home/u/.local/share/pmm/pmm.db")
    monkeypatch.setenv("PMM_DB", "/tmp/x.db")
    assert default_db_path() == default_db_path(writer=True) == Path("/tmp/x.db")


def test_open_errors_say_what_is_in_the_way(tmp_path: Path) -> None:
    """Each cause in the system's words, the path named, and a class the
    front ends map to an exit status (permission: tests/host/test_pmd_db_access.py)."""
    (tmp_path / "empty.db").touch()
    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE t (a)").connection.close()
    (tmp_path / "garbage.db").write_bytes(b"SQLite format 2\0" + b"x" * 4096)
    (tmp_path / "file").touch()
    cases: list[tuple[Path, bool, type[StoreError], str]] = [
        (tmp_path / "missing.db", True, DatabaseNotFound,
         f"no database at {tmp_path}/missing.db: No such file or directory (pmd writes it: "
         "is pmd running? Pass --db or set PMM_DB)"),
        (tmp_path, True, NotADatabase, f"cannot open the database {tmp_path}: Is a directory "
         f"(give the database file, e.g. {tmp_path}/pmm.db)"),
        (tmp_path, False, NotADatabase, f"cannot open the database {tmp_path}: Is a directory"),
        (tmp_path / "empty.db", True, NotADatabase,
         f"cannot open the database {tmp_path}/empty.db: not a pmm database (an empty file)"),
        (tmp_path / "other.db", True, NotADatabase,
         f"cannot open the database {tmp_path}/other.db: not a pmm database (an SQLite "
         "database without pmd's tables)"),
        (tmp_path / "garbage.db", True, NotADatabase,
         f"cannot open the database {tmp_path}/garbage.db: not a pmm database (another kind "
         "of file, or a damaged database: file is not a database)"),
        (tmp_path / "garbage.db", False, NotADatabase,
         f"cannot open the database {tmp_path}/garbage.db: not a pmm database"),
        (tmp_path / "file" / "x.db", False, NotADatabase,
         f"cannot open the database {tmp_path}/file/x.db: Not a directory"),
        (tmp_path / "a" / "b" / "pmm.db", False, DatabaseNotFound,
         f"cannot open the database {tmp_path}/a/b/pmm.db: No such file or directory (no "
         f"directory {tmp_path}/a: create it, or choose another path with --db)"),
    ]
    for path, readonly, cls, says in cases:
        with pytest.raises(StoreError) as e:
            Store.open(path, readonly=readonly)
        assert type(e.value) is cls and str(e.value).startswith(says), (path, readonly)
    assert not (tmp_path / "a").exists()
    assert issubclass(DatabasePermissionDenied, errors.PermissionDenied)  # pmctl's exit 4


def test_the_database_directory_is_made(tmp_path: Path) -> None:
    """Its own directory when the parent exists (as /var/lib/pmm); every
    missing one with create_parents (as ~/.local/share/pmm for pmd's default)."""
    Store.open(tmp_path / "pmm" / "pmm.db").close()
    Store.open(tmp_path / "home" / ".local" / "share" / "pmm" / "pmm.db",
               create_parents=True).close()
    assert (tmp_path / "pmm" / "pmm.db").is_file()
    assert (tmp_path / "home" / ".local" / "share" / "pmm" / "pmm.db").is_file()


def test_start_key_matches_proc_stat() -> None:
    assert start_key(5 * TICK_NS + 123) == 5 * TICK_NS
    st = sampler.read_stat(os.getpid())
    assert st.start_time % TICK_NS == 0
    assert start_key(st.start_time) == st.start_time


def test_parse_stat_with_odd_comm() -> None:
    text = "123 (a) b (c) S 1 123 123 0 -1 4194560 " + " ".join(["0"] * 12) + " 4567 " + \
        " ".join(["0"] * 30)
    st = sampler.parse_stat(text)
    assert (st.pid, st.comm, st.state, st.ppid) == (123, "a) b (c", "S", 1)
    assert st.start_time == 4567 * TICK_NS


def test_sample_self_matches_statm() -> None:
    s = sampler.sample(os.getpid())
    with open("/proc/self/statm") as f:
        vm_pages = int(f.read().split()[0])
    page = os.sysconf("SC_PAGE_SIZE")
    assert s.vm % page == 0 and s.rss % page == 0
    assert abs(s.vm - vm_pages * page) < 64 << 20
    assert s.rss_anon is not None and s.rss_file is not None and s.rss_shmem is not None
    assert s.rss_anon % 1024 == 0
    assert abs(s.rss_anon + s.rss_file + s.rss_shmem - s.rss) < 4 << 20
    assert s.source == "proc" and s.live_bytes is None


def test_sample_gone_and_reused() -> None:
    p = subprocess.Popen(["sleep", "30"])
    for _ in range(100):  # right after exec, cmdline may still read empty
        if Path(f"/proc/{p.pid}/cmdline").read_bytes():
            break
        time.sleep(0.01)
    st = sampler.read_stat(p.pid)
    assert st.comm == "sleep"
    assert sampler.sample(p.pid, st.start_time).pid == p.pid
    with pytest.raises(sampler.ProcessGone, match="another process"):
        sampler.sample(p.pid, st.start_time + TICK_NS)
    d = sampler.describe(p.pid)
    assert (d.comm, d.exe, d.cmdline) == ("sleep", os.path.realpath("/usr/bin/sleep"),
                                          "sleep 30")
    p.kill()
    p.wait()
    with pytest.raises(sampler.ProcessGone):
        sampler.sample(p.pid, st.start_time)


def mode_of(path: Path) -> int:
    return os.stat(path).st_mode & 0o7777


def test_a_file_pmd_refuses_is_left_as_it_was(tmp_path: Path) -> None:
    """Not SQLite, or another program's database (its tables, none of pmd's):
    refused before pmd changes anything: the mode, no -wal or -shm made, no
    table added, not switched to WAL."""
    garbage = tmp_path / "g.db"
    garbage.write_text("hello\n")
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE foo (a)")
    conn.execute("INSERT INTO foo VALUES (1)")
    conn.commit()
    conn.close()
    for f in (garbage, other):
        os.chmod(f, 0o644)
    with pytest.raises(NotADatabase) as e:
        Store.open(garbage)
    assert str(e.value) == (f"cannot open the database {garbage}: not a pmm database (another "
                            "kind of file, or a damaged database: file is not a database)")
    with pytest.raises(NotADatabase) as e:
        Store.open(other)
    assert str(e.value) == (f"{other} is an SQLite database of something else (tables: foo): "
                            "give pmd its own file")
    assert garbage.read_text() == "hello\n"
    for f in (garbage, other):
        assert mode_of(f) == 0o644
        assert not Path(f"{f}-wal").exists() and not Path(f"{f}-shm").exists()
    conn = sqlite3.connect(other)
    assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("foo",)]
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    conn.close()


def test_a_foreign_database_in_use_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """Another program's WAL database while it runs: its tables are in the
    -wal still; refused, its files' modes kept; more than five tables are
    summed up."""
    other = tmp_path / "app.db"
    conn = sqlite3.connect(other)
    conn.execute("PRAGMA journal_mode=WAL")
    for i in range(7):
        conn.execute(f"CREATE TABLE t{i} (a)")
    conn.commit()
    try:
        files = [other, Path(f"{other}-wal"), Path(f"{other}-shm")]
        for f in files:
            os.chmod(f, 0o644)
        with pytest.raises(NotADatabase) as e:
            Store.open(other)
        assert str(e.value) == (f"{other} is an SQLite database of something else (tables: "
                                "t0, t1, t2, t3, t4, ... (7 in all)): give pmd its own file")
        assert [mode_of(f) for f in files] == [0o644] * 3
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (7,)
    finally:
        conn.close()


def test_pmd_takes_a_new_or_its_own_database(tmp_path: Path) -> None:
    """An empty file, an SQLite file without tables and pmd's own database
    (with a table someone added) open for writing."""
    empty = tmp_path / "empty.db"
    empty.touch()
    blank = tmp_path / "blank.db"
    conn = sqlite3.connect(blank)
    conn.execute("PRAGMA user_version = 3")  # writes the header: a database, no tables
    conn.close()
    own = tmp_path / "own.db"
    Store.open(own).close()
    conn = sqlite3.connect(own)
    conn.execute("CREATE TABLE notes (a)")
    conn.commit()
    conn.close()
    for db in (empty, blank, own):
        st = Store.open(db)
        st.write(samples=[SampleRow(1, 2, 3, 4, 5)])
        assert st.sample_count() == 1
        st.close()


def test_sample_keeps_one_directory_open_per_process_and_closes_it_at_exit() -> None:
    fds_before = len(os.listdir("/proc/self/fd"))
    p = subprocess.Popen(["sleep", "30"])
    for _ in range(500):  # until it sleeps: before, it is a copy of this process, or loading
        st = sampler.read_stat(p.pid)
        if st.comm == "sleep" and st.state == "S":
            break
        time.sleep(0.01)
    start = sampler.read_stat(p.pid).start_time
    for _ in range(3):
        s = sampler.sample(p.pid, start)
    with open(f"/proc/{p.pid}/statm") as f:
        vm_pages, rss_pages = (int(x) for x in f.read().split()[:2])
    page = os.sysconf("SC_PAGE_SIZE")
    assert (s.vm, s.rss) == (vm_pages * page, rss_pages * page)
    assert len(os.listdir("/proc/self/fd")) == fds_before + 1
    p.kill()
    p.wait()
    with pytest.raises(sampler.ProcessGone):
        sampler.sample(p.pid, start)
    assert len(os.listdir("/proc/self/fd")) == fds_before


def test_parse_status_sample_of_a_kernel_thread_and_a_process() -> None:
    kthread = b"Name:\tkthreadd\nUmask:\t0000\nState:\tS (sleeping)\nTgid:\t2\n"
    assert sampler.parse_status_sample(kthread) == ("S", 0, 0, 0, 0, 0)
    proc = (b"Name:\tx\nState:\tZ (zombie)\nVmPeak:\t  999 kB\nVmSize:\t   100 kB\n"
            b"VmRSS:\t  12 kB\nRssAnon:\t 4 kB\nRssFile:\t 8 kB\nRssShmem:\t 0 kB\n")
    assert sampler.parse_status_sample(proc) == ("Z", 102400, 12288, 4096, 8192, 0)


def test_an_unreadable_stat_leaves_no_directory_open(tmp_path: Path) -> None:
    (tmp_path / "123" / "stat").mkdir(parents=True)  # reading it fails: EISDIR
    fds_before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(IsADirectoryError):
        sampler.sample(123, 5, proc=str(tmp_path))
    assert len(os.listdir("/proc/self/fd")) == fds_before


def test_retention_prunes_old_rows_in_small_steps_and_keeps_alerts(tmp_path: Path) -> None:
    """Store.prune_step: samples and site snapshots older than the horizon
    go, a few at a time; a process that exited before it goes whole, unless
    it has an alert (its rows stay with the alert, kept for good)."""
    from pmm.store import AlertRow, PruneStep

    S = 10**9
    st = Store.open(tmp_path / "pmm.db")
    try:
        procs = [ProcessRow(1, 0, "running", started=0), ProcessRow(2, 0, "gone", started=0),
                 ProcessRow(3, 0, "alerted", started=0)]
        samples = [SampleRow(pid, 0, t * S, 1 << 20, 1 << 20)
                   for pid in (1, 2, 3) for t in range(1, 101)]
        snaps = [(pid, 0, t * S, 7, 4096, 1) for pid in (1, 2, 3) for t in range(1, 101, 10)]
        st.write(samples, procs, [(2, 0, 50 * S), (3, 0, 50 * S)], snaps,
                 [(2, 0, 7, "f() a.c:1"), (3, 0, 7, "g() b.c:2")])
        st.add_alert(AlertRow(3, 0, 40 * S, 1.7e9, "alerted", "LEAK", 1.0, 0.5, 2.0, 0.95,
                              1e6, 7, "LEAK pid 3"))
        steps = []
        while True:
            step = st.prune_step(before_ns=80 * S, batch=50)
            steps.append(step)
            if not step.more:
                break
        # 3 x 79 samples in batches of 50, 3 x 8 snapshots, one exited process
        assert sum(s.samples for s in steps) == 3 * 79
        assert max(s.samples for s in steps) <= 50
        assert sum(s.snapshots for s in steps) == 3 * 8
        assert sum(s.processes for s in steps) == 1 and steps[-1] == PruneStep()
        assert [p.pid for p in st.processes()] == [1, 3]
        assert st.sample_count(1, 0) == 21 and st.sample_count(2, 0) == 0
        assert st.sample_count(3, 0) == 21
        assert st.sites(2, 0) == {} and st.sites(3, 0) == {7: "g() b.c:2"}
        assert len(st.alerts(3)) == 1
        assert st.prune_step(before_ns=80 * S) == PruneStep()  # nothing more to do
    finally:
        st.close()
