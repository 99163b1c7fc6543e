"""pmd's SQLite store (sqlite-utils, WAL), shared with `pmctl trend`.

Tables (times are CLOCK_BOOTTIME nanoseconds, sizes bytes; a process is keyed
by (pid, start_time) so that a reused pid never mixes two processes):

processes       pid, start_time, comm, exe, cmdline, started, exited, source
                PRIMARY KEY (pid, start_time). started: when pmd first saw it
                monitored; exited: exit time or NULL; source: "kmod" | "proc".
samples         pid, start_time, time, vm, rss, rss_anon, rss_file, rss_shmem,
                live_bytes, live_blocks, source ("kmod": the module's sampler, with the
                hook's live heap bytes and blocks; "proc": pmd read /proc, live_* NULL)
                PRIMARY KEY (pid, start_time, time)
site_snapshots  pid, start_time, time, site, live_bytes, live_blocks
                PRIMARY KEY (pid, start_time, time, site)
sites           pid, start_time, site, where_ (a site's description) PRIMARY KEY
                (pid, start_time, site)
alerts          id, pid, start_time, time, wall_time (Unix seconds), comm,
                verdict, slope, slope_low, slope_high (bytes/s), confidence,
                growth (bytes), site, message. One LEAK alert per process.

start_time is the process start (task->start_boottime) rounded down to the
clock tick (1/CLK_TCK s): /proc/PID/stat only has ticks, the module has
nanoseconds, and both must name the same process.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sqlite_utils

from pmctl.errors import PmmError

TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")



class StoreError(PmmError):
    """The database cannot be opened, read or written."""


def default_db_path() -> Path:
    """$PMM_DB, else /var/lib/pmm/pmm.db as root, else ~/.local/share/pmm/pmm.db."""
    env = os.environ.get("PMM_DB")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/pmm/pmm.db")
    return Path.home() / ".local" / "share" / "pmm" / "pmm.db"


def start_key(start_time_ns: int) -> int:
    """A process start time as stored: nanoseconds rounded down to the clock tick."""
    return start_time_ns - start_time_ns % TICK_NS


@dataclass(frozen=True)
class SampleRow:
    pid: int
    start_time: int
    time: int
    vm: int
    rss: int
    rss_anon: int | None = None
    rss_file: int | None = None
    rss_shmem: int | None = None
    live_bytes: int | None = None
    live_blocks: int | None = None
    source: str = "kmod"


@dataclass(frozen=True)
class ProcessRow:
    pid: int
    start_time: int
    comm: str = ""
    exe: str = ""
    cmdline: str = ""
    started: int = 0
    exited: int | None = None
    source: str = "kmod"


@dataclass(frozen=True)
class AlertRow:
    pid: int
    start_time: int
    time: int
    wall_time: float
    comm: str
    verdict: str
    slope: float
    slope_low: float
    slope_high: float
    confidence: float
    growth: float
    site: int | None
    message: str


@dataclass(frozen=True)
class Series:
    """One process's samples as arrays, oldest first."""

    time_ns: np.ndarray[Any, np.dtype[np.int64]]
    vm: np.ndarray[Any, np.dtype[np.int64]]
    rss: np.ndarray[Any, np.dtype[np.int64]]

    def __len__(self) -> int:
        return int(self.time_ns.size)


def _describe(e: sqlite3.Error, path: Path, doing: str) -> StoreError:
    msg = str(e)
    hint = ""
    low = msg.lower()
    if "readonly" in low or "read-only" in low:
        hint = " (the file or its file system is read-only; choose another with --db or PMM_DB)"
    elif "full" in low or "disk" in low:
        hint = " (the disk is full; free space or choose another --db)"
    elif "unable to open" in low:
        hint = " (check that the directory exists and is writable, or pass --db)"
    elif "locked" in low or "busy" in low:
        hint = " (another process holds a write lock)"
    elif "not a database" in low or "malformed" in low:
        hint = " (the file is not a pmm database)"
    return StoreError(f"{doing} {path}: {msg}{hint}")


class Store:
    """A pmm database. `Store.open(path)` creates it (and the tables) if needed;
    `Store.open(path, readonly=True)` only reads an existing one."""

    def __init__(self, db: sqlite_utils.Database, path: Path, readonly: bool) -> None:
        self.db = db
        self.path = path
        self.readonly = readonly

    @classmethod
    def open(cls, path: Path | str, readonly: bool = False) -> Store:
        path = Path(path)
        try:
            if readonly:
                if not path.exists():
                    raise StoreError(f"no database at {path} (is pmd running? use --db)")
                conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
                conn.execute("PRAGMA busy_timeout=5000")
                db = sqlite_utils.Database(conn, execute_plugins=False)
                db.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
                return cls(db, path, readonly=True)
            path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite_utils.Database(path, execute_plugins=False)
            db.conn.execute("PRAGMA busy_timeout=5000")
            db.enable_wal()
            # WAL + NORMAL: a crash of pmd (kill -9) loses nothing committed;
            # only a power loss may lose the last transactions.
            db.conn.execute("PRAGMA synchronous=NORMAL")
            store = cls(db, path, readonly=False)
            store._create()
            return store
        except sqlite3.Error as e:
            raise _describe(e, path, "cannot open the database") from None
        except OSError as e:
            raise StoreError(f"cannot open the database {path}: {e.strerror or e}") from None

    def _create(self) -> None:
        db = self.db
        with db.atomic():
            if not db.table("processes").exists():
                db.table("processes").create(
                    {"pid": int, "start_time": int, "comm": str, "exe": str, "cmdline": str,
                     "started": int, "exited": int, "source": str},
                    pk=("pid", "start_time"), not_null={"pid", "start_time"},
                )
            if not db.table("samples").exists():
                db.table("samples").create(
                    {"pid": int, "start_time": int, "time": int, "vm": int, "rss": int,
                     "rss_anon": int, "rss_file": int, "rss_shmem": int, "live_bytes": int,
                     "live_blocks": int, "source": str},
                    pk=("pid", "start_time", "time"),
                    not_null={"pid", "start_time", "time", "vm", "rss"},
                )
            if not db.table("site_snapshots").exists():
                db.table("site_snapshots").create(
                    {"pid": int, "start_time": int, "time": int, "site": int,
                     "live_bytes": int, "live_blocks": int},
                    pk=("pid", "start_time", "time", "site"),
                )
            if not db.table("sites").exists():
                db.table("sites").create(
                    {"pid": int, "start_time": int, "site": int, "where_": str},
                    pk=("pid", "start_time", "site"),
                )
            if not db.table("alerts").exists():
                db.table("alerts").create(
                    {"id": int, "pid": int, "start_time": int, "time": int, "wall_time": float,
                     "comm": str, "verdict": str, "slope": float, "slope_low": float,
                     "slope_high": float, "confidence": float, "growth": float, "site": int,
                     "message": str},
                    pk="id",
                )
                db.table("alerts").create_index(["pid", "start_time"])

    def close(self) -> None:
        self.db.close()

    # -- writing -------------------------------------------------------------

    def write(
        self,
        samples: Sequence[SampleRow] = (),
        processes: Sequence[ProcessRow] = (),
        exits: Sequence[tuple[int, int, int]] = (),
        snapshots: Sequence[tuple[int, int, int, int, int, int]] = (),
    ) -> None:
        """One transaction: new processes (existing ones keep their first
        `started`), exits (pid, start_time, time), samples and site snapshots
        (pid, start_time, time, site, live_bytes, live_blocks). Duplicates
        (same key) are ignored. Raises StoreError; nothing is written then."""
        try:
            with self.db.atomic():
                c = self.db.conn
                if processes:
                    c.executemany(
                        "INSERT INTO processes (pid, start_time, comm, exe, cmdline, started, "
                        "exited, source) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(pid, start_time) "
                        "DO UPDATE SET comm = CASE WHEN excluded.comm != '' THEN excluded.comm "
                        "ELSE comm END, exe = CASE WHEN excluded.exe != '' THEN excluded.exe "
                        "ELSE exe END, cmdline = CASE WHEN excluded.cmdline != '' THEN "
                        "excluded.cmdline ELSE cmdline END",
                        [(p.pid, p.start_time, p.comm, p.exe, p.cmdline, p.started, p.exited,
                          p.source) for p in processes],
                    )
                if exits:
                    c.executemany(
                        "UPDATE processes SET exited = ? WHERE pid = ? AND start_time = ? "
                        "AND exited IS NULL",
                        [(t, pid, st) for pid, st, t in exits],
                    )
                if samples:
                    c.executemany(
                        "INSERT OR IGNORE INTO samples (pid, start_time, time, vm, rss, "
                        "rss_anon, rss_file, rss_shmem, live_bytes, live_blocks, source) "
                        "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                        [(s.pid, s.start_time, s.time, s.vm, s.rss, s.rss_anon, s.rss_file,
                          s.rss_shmem, s.live_bytes, s.live_blocks, s.source) for s in samples],
                    )
                if snapshots:
                    c.executemany(
                        "INSERT OR IGNORE INTO site_snapshots (pid, start_time, time, site, "
                        "live_bytes, live_blocks) VALUES (?,?,?,?,?,?)",
                        snapshots,
                    )
        except sqlite3.Error as e:
            raise _describe(e, self.path, "cannot write to the database") from None

    def set_site(self, pid: int, start_time: int, site: int, where: str) -> None:
        try:
            with self.db.atomic():
                self.db.conn.execute(
                    "INSERT OR REPLACE INTO sites (pid, start_time, site, where_) "
                    "VALUES (?,?,?,?)", (pid, start_time, site, where))
        except sqlite3.Error as e:
            raise _describe(e, self.path, "cannot write to the database") from None

    def add_alert(self, a: AlertRow) -> bool:
        """Adds the alert unless the process already has one of this verdict.
        True if it was added."""
        try:
            with self.db.atomic():
                c = self.db.conn
                row = c.execute(
                    "SELECT 1 FROM alerts WHERE pid = ? AND start_time = ? AND verdict = ?",
                    (a.pid, a.start_time, a.verdict)).fetchone()
                if row is not None:
                    return False
                c.execute(
                    "INSERT INTO alerts (pid, start_time, time, wall_time, comm, verdict, slope,"
                    " slope_low, slope_high, confidence, growth, site, message) VALUES "
                    "(?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (a.pid, a.start_time, a.time, a.wall_time, a.comm, a.verdict, a.slope,
                     a.slope_low, a.slope_high, a.confidence, a.growth, a.site, a.message))
                return True
        except sqlite3.Error as e:
            raise _describe(e, self.path, "cannot write to the database") from None

    # -- reading -------------------------------------------------------------

    def _query(self, sql: str, args: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return list(self.db.conn.execute(sql, tuple(args)).fetchall())
        except sqlite3.Error as e:
            raise _describe(e, self.path, "cannot read the database") from None

    def processes(self, pid: int | None = None) -> list[ProcessRow]:
        """Processes (of one pid, if given), latest start first."""
        where, args = ("WHERE pid = ?", (pid,)) if pid is not None else ("", ())
        rows = self._query(
            "SELECT pid, start_time, comm, exe, cmdline, started, exited, source FROM "
            f"processes {where} ORDER BY start_time DESC, pid", args)
        return [ProcessRow(r[0], r[1], r[2] or "", r[3] or "", r[4] or "", r[5] or 0, r[6],
                           r[7] or "") for r in rows]

    def sample_count(self, pid: int | None = None, start_time: int | None = None) -> int:
        if pid is None:
            return int(self._query("SELECT count(*) FROM samples")[0][0])
        return int(self._query(
            "SELECT count(*) FROM samples WHERE pid = ? AND start_time = ?",
            (pid, start_time))[0][0])

    def series(self, pid: int, start_time: int, since_ns: int | None = None) -> Series:
        sql = "SELECT time, vm, rss FROM samples WHERE pid = ? AND start_time = ?"
        args: list[int] = [pid, start_time]
        if since_ns is not None:
            sql += " AND time >= ?"
            args.append(since_ns)
        try:
            cur = self.db.conn.execute(sql + " ORDER BY time", args)
            a = np.array(cur.fetchall(), dtype=np.int64).reshape(-1, 3)
        except sqlite3.Error as e:
            raise _describe(e, self.path, "cannot read the database") from None
        return Series(a[:, 0].copy(), a[:, 1].copy(), a[:, 2].copy())

    def site_snapshots(self, pid: int, start_time: int,
                       since_ns: int | None = None) -> list[tuple[int, int, int, int]]:
        """(site, time, live_bytes, live_blocks), oldest first."""
        sql = ("SELECT site, time, live_bytes, live_blocks FROM site_snapshots "
               "WHERE pid = ? AND start_time = ?")
        args: list[int] = [pid, start_time]
        if since_ns is not None:
            sql += " AND time >= ?"
            args.append(since_ns)
        return [(int(r[0]), int(r[1]), int(r[2]), int(r[3]))
                for r in self._query(sql + " ORDER BY time, site", args)]

    def sites(self, pid: int, start_time: int) -> dict[int, str]:
        return {int(r[0]): str(r[1]) for r in self._query(
            "SELECT site, where_ FROM sites WHERE pid = ? AND start_time = ?",
            (pid, start_time))}

    def alerts(self, pid: int | None = None) -> list[AlertRow]:
        where, args = ("WHERE pid = ?", (pid,)) if pid is not None else ("", ())
        rows = self._query(
            "SELECT pid, start_time, time, wall_time, comm, verdict, slope, slope_low, "
            f"slope_high, confidence, growth, site, message FROM alerts {where} ORDER BY id",
            args)
        return [AlertRow(*r) for r in rows]
