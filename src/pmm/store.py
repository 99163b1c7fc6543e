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

Permissions: the database holds other users' command lines, rss series and
code addresses. The writer (pmd) creates it 0640 with group $PMM_GROUP
(default "pmm") when that group exists, else 0600, and its -wal and -shm
with the database's mode and group (before SQLite would make them); a
directory it creates is 0750 (that group) or 0700, and systemd's
StateDirectory (0750 root:root) is given to that group. A database, -wal or
-shm file pmd owns that is more open than that is tightened when pmd opens
it (one log line). Readers open it read-only (`Store.open(path,
readonly=True)`), also from a directory they cannot write (see
`_open_readonly`).
"""

from __future__ import annotations

import grp
import logging
import os
import sqlite3
import stat
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sqlite_utils

from pmm.errors import PmmError

TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")

log = logging.getLogger("pmd")


class StoreError(PmmError):
    """The database cannot be opened, read or written."""


class BadRowError(StoreError):
    """The database refused the rows themselves (a value out of SQLite's
    range, a missing required value): writing them again cannot succeed,
    unlike a StoreError about the database (full, read-only, locked)."""


def db_group() -> int | None:
    """The gid that may read pmd's database: group $PMM_GROUP, else "pmm";
    None if there is no such group."""
    try:
        return grp.getgrnam(os.environ.get("PMM_GROUP") or "pmm").gr_gid
    except KeyError:
        return None


def _state_dirs() -> set[Path]:
    # systemd's StateDirectory= (set up by systemd, owned by pmd's user)
    return {Path(p) for p in os.environ.get("STATE_DIRECTORY", "").split(":") if p}


def _prepare_dir(d: Path, gid: int | None) -> None:
    """Creates the database's directory 0750 (group gid) or 0700. An existing
    one keeps its mode, except that the unit's StateDirectory gets group gid
    (systemd creates it owned by root:root)."""
    if not d.exists():
        d.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            return
        if gid is not None:
            try:
                os.chown(d, -1, gid)
                os.chmod(d, 0o750)
                return
            except OSError:
                pass
        os.chmod(d, 0o700)
        return
    if gid is not None and d in _state_dirs():
        st = os.stat(d)
        if st.st_uid == os.geteuid() and st.st_gid != gid:
            try:
                os.chown(d, -1, gid)
            except OSError as e:
                log.warning("cannot give %s to group %d: %s", d, gid, e.strerror or e)


def _create_file(path: Path, mode: int, gid: int | None) -> None:
    """A new, empty file with exactly `mode` (and group gid: else the group
    bits go), made before SQLite opens it: SQLite would create the database
    0644 less the umask, and -wal and -shm with the database's mode but,
    when pmd is not root, pmd's group."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    except OSError:
        return  # exists, or cannot be created: SQLite says why, with a hint
    try:
        if gid is None:
            mode &= 0o600
        else:
            try:
                os.fchown(fd, -1, gid)
            except OSError:
                mode &= 0o600  # not a member of the group: the owner alone reads it
        os.fchmod(fd, mode)  # exact, whatever the umask
    finally:
        os.close(fd)


def _tighten(path: Path, limit: int, gid: int | None) -> tuple[int, int, str] | None:
    """Takes the bits beyond `limit` (0640 or 0600) away from a file pmd owns,
    and gives it to group gid if the group may read it. (mode, gid, what
    changed or "") of the file afterwards; None if it is absent or not pmd's.
    The file is held by an O_PATH descriptor: no symlink is followed, the
    checked file is the changed one, and closing it drops no SQLite lock of
    this process (closing a plain descriptor of the file would)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None  # absent, or in a directory we cannot search
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or not stat.S_ISREG(st.st_mode):
            return None
        via = f"/proc/self/fd/{fd}"  # the inode fd holds
        old = new = stat.S_IMODE(st.st_mode)
        group = st.st_gid
        if gid is not None and group != gid and old & 0o070:
            try:
                os.chown(via, -1, gid)
                group = gid
            except OSError:
                pass
        new = old & (limit if gid is not None and group == gid else limit & 0o600)
        if new != old:
            try:
                os.chmod(via, new)
            except OSError:
                new = old  # a read-only file system: SQLite will say so
        what = ""
        if new != old or group != st.st_gid:
            what = f"{path.name} {old:04o} -> {new:04o}"
            if group != st.st_gid:
                what += f" group {_group_name(group)}"
        return new, group, what
    finally:
        os.close(fd)


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _secure_files(path: Path, gid: int | None) -> list[str]:
    """The database and its -wal and -shm: created or tightened (see the
    module docstring) before SQLite opens them; what was tightened."""
    changed: list[str] = []
    db = _tighten(path, 0o640, gid)
    if db is None:
        _create_file(path, 0o640, gid)
        db = _tighten(path, 0o640, gid)
    if db is None:  # not pmd's file: its owner chose its mode
        return changed
    mode, group, what = db
    changed += [what] if what else []
    # never more open than the database (but writable by pmd)
    side_gid = group if mode & 0o070 else None
    side_mode = (mode & 0o070) | 0o600
    for side in (Path(f"{path}-wal"), Path(f"{path}-shm")):
        t = _tighten(side, side_mode, side_gid)
        if t is None:
            _create_file(side, side_mode, side_gid)
        elif t[2]:
            changed.append(t[2])
    return changed


def _uri(path: Path, query: str) -> str:
    # quoted: "?", "#" and "%" are part of a file name, not of the URI
    return f"file:{urllib.parse.quote(str(path))}?{query}"


def _open_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection. A WAL database needs its -shm file even to be
    read; while pmd runs it exists and SQLite (>= 3.22) reads it read-only.
    When pmd has stopped (clean close: no -wal, no -shm), a reader that
    cannot write the directory cannot create the -shm and SQLite refuses;
    then the file is opened immutable=1, which needs no -shm and no locks.
    That is safe because without a -wal file (or with an empty one) every
    committed transaction is in the database file and no writer has it open (a pmd starting at that
    very moment could make this one read fail, never corrupt anything)."""
    conn = sqlite3.connect(_uri(path, "mode=ro"), uri=True)
    try:
        conn.execute("PRAGMA busy_timeout=5000")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError as e:
        conn.close()
        low = str(e).lower()
        try:
            wal = os.lstat(f"{path}-wal").st_size
        except FileNotFoundError:
            wal = 0
        # an empty -wal holds no transaction either
        if not ("readonly" in low or "unable to open" in low) or wal:
            raise
    conn = sqlite3.connect(_uri(path, "immutable=1"), uri=True)
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    return conn


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


# errors about the values written (sqlite3 binding a value it cannot store,
# a constraint), not about the database
_ROW_ERRORS = (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.InterfaceError,
               sqlite3.ProgrammingError, OverflowError, TypeError, ValueError)


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
                db = sqlite_utils.Database(_open_readonly(path), execute_plugins=False)
                return cls(db, path, readonly=True)
            gid = db_group()
            _prepare_dir(path.parent, gid)
            changed = _secure_files(path, gid)
            db = sqlite_utils.Database(path, execute_plugins=False)
            db.conn.execute("PRAGMA busy_timeout=5000")
            db.enable_wal()
            # WAL + NORMAL: a crash of pmd (kill -9) loses nothing committed;
            # only a power loss may lose the last transactions.
            db.conn.execute("PRAGMA synchronous=NORMAL")
            if changed:
                log.warning("%s was more open than its contents allow; tightened: %s",
                            path, ", ".join(changed))
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
        (same key) are ignored, so writing rows again is harmless. Raises
        BadRowError when a row itself is refused, StoreError when the
        database is; nothing is written then."""
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
        except _ROW_ERRORS as e:
            if isinstance(e, sqlite3.ProgrammingError) and "closed" in str(e):
                # the one ProgrammingError about the connection, not a row
                raise _describe(e, self.path, "cannot write to the database") from None
            raise BadRowError(f"the database refused a row: {type(e).__name__}: {e}") from None
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
