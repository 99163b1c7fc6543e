"""pmd's SQLite store (sqlite-utils, WAL), shared with `pmctl trend`.

Tables (times are CLOCK_BOOTTIME nanoseconds, sizes bytes; a process is keyed
by (pid, start_time) so that a reused pid never mixes two processes):

processes       pid, start_time, comm, exe, cmdline, started, exited, source
                PRIMARY KEY (pid, start_time). started: when pmd first saw it
                monitored; exited: exit time or NULL; source: "kmod" | "proc".
samples         pid, start_time, time, vm, rss, rss_anon, rss_file, rss_shmem,
                live_bytes, live_blocks, source ("kmod": the module's sampler, with the
                hook's live heap bytes and blocks; "proc": pmd read /proc, live_* NULL),
                heap_free, heap_trimmable, allocator ("glibc", "jemalloc"), cgroup_usage
                (pmm.model.Sample; NULL when unknown, and in rows of an older pmd)
                PRIMARY KEY (pid, start_time, time)
site_snapshots  pid, start_time, time, site, live_bytes, live_blocks
                PRIMARY KEY (pid, start_time, time, site)
sites           pid, start_time, site, where_ (a site's description) PRIMARY KEY
                (pid, start_time, site)
alerts          id, pid, start_time, time, wall_time (Unix seconds), comm,
                verdict, slope, slope_low, slope_high (bytes/s), confidence,
                 growth (bytes), site, message, resolved (CLOCK_BOOTTIME ns) and
                 resolved_wall (Unix seconds): when the verdict cleared (NULL
                 while the alert stands), kind (the kind of growth:
                 pmm.growthkind), evidence (its JSON: the split, the mappings
                 that grew). At most one standing LEAK alert per process; one
                 that resolved may be followed by another.

What pmd keeps of a process once it exited (its "harvest", pmm.postmortem),
so that leaks and statistics name file:line after the module dropped it
(exited_ttl_s later, or after a reboot):

exit_info       pid, start_time, harvested, info, objects PRIMARY KEY (pid,
                start_time). info: the module's entry as JSON
                (PidInfo.to_dict: comm, live figures, records, exit time...);
                objects: the files its sites' frames are in (ObjectFile.to_dict:
                path, build-id, dev, inode, size); harvested: when.
exit_sites      pid, start_time, site, registered, flags, func, file, line,
                live_bytes, live_blocks, alloc_bytes, free_bytes, alloc_count,
                oldest_age_s, newest_age_s, histogram, frames, where_
                PRIMARY KEY (pid, start_time, site). Per site, its final
                figures; registered 0 for a site known only by its blocks;
                func/file/line what the program registered (the shim);
                ages (seconds, NULL without a live block) are as of the exit;
                histogram: live blocks per age bucket (pmm.leaks.AGE_LABELS),
                JSON; alloc_count: calls per operation, JSON; frames: its call
                chain symbolized (Frame.as_dict, JSON; addr always 0: each
                frame is an object and a file offset, or unknown); where_:
                its one-line description (pmm.sitestack.describe_site).
exit_stats      pid, start_time, stats (StatsInfo.to_dict, JSON) PRIMARY KEY
                (pid, start_time).

What `pmd --scan-on-leak` found when a process was called LEAK
(pmm.unreachable: the blocks it can no longer reach):

scans           pid, start_time, time, wall_time, definite_blocks,
                definite_bytes, indirect_blocks, indirect_bytes, unknown_blocks,
                young_blocks, longest_stop_us, scan_us, error (NULL: it
                scanned) PRIMARY KEY (pid, start_time, time)
scan_sites      pid, start_time, time, site, where_, definite_blocks,
                definite_bytes, indirect_blocks, indirect_bytes PRIMARY KEY
                (pid, start_time, time, site): its lost sites, worst first

Older databases get these tables (and the alerts' resolved columns) when pmd
opens them; readers of a database without them find nothing harvested, and
every alert standing.

Retention (`Store.prune`, pmd --retain): samples and site snapshots older
than the horizon go, and so does every row of a process that exited before
it, unless the process has an alert: its process row, sites, post-mortem
record and scans stay with its alerts, which are kept for good (a row each).
The horizon is on CLOCK_BOOTTIME, as the rows' times: rows of an earlier
boot go once the current boot's clock has passed them by the horizon.

start_time is the process start (task->start_boottime) rounded down to the
clock tick (1/CLK_TCK s): /proc/PID/stat only has ticks, the module has
nanoseconds, and both must name the same process.

No absolute address of a process is stored: readers of the database are not
checked for access to the processes (as the module's readers are), and an
address would tell them where a process's code is loaded.

Permissions: the database holds other users' command lines, rss series and
where their allocations are in their programs. The writer (pmd) creates it
0640 with group $PMM_GROUP (default "pmm") when that group exists, else 0600,
and its -wal and -shm with the database's mode and group (before SQLite
would make them); a directory it creates is 0750 (that group) or 0700, and systemd's
StateDirectory (0750 root:root) is given to that group. A database, -wal or
-shm file pmd owns that is more open than that is tightened when pmd opens
it (one log line). Readers open it read-only (`Store.open(path,
readonly=True)`), also from a directory they cannot write (see
`_open_readonly`).

Where: `default_db_path()` is where readers look and `default_db_path(writer=
True)` where pmd writes without --db; they differ for a non-root member of
the database's group, who reads the system database (/var/lib/pmm/pmm.db)
but whose own pmd writes ~/.local/share/pmm/pmm.db.

Errors: `Store.open` says what is in the way before SQLite would say
"unable to open database file": DatabaseNotFound, DatabasePermissionDenied
(who may read it) and NotADatabase, each one line naming the path. The
writer looks at an existing file before it changes anything (mode, -wal and
-shm, WAL mode, tables): it refuses one that is not SQLite, or another
program's database (tables, none of them pmd's), and leaves it as it was.
"""

from __future__ import annotations

import errno
import grp
import json
import logging
import os
import pwd
import sqlite3
import stat
import urllib.parse
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # sqlite-utils takes 140 ms to import: only Store.open loads it
    import sqlite_utils

from pmm.errors import PermissionDenied, PmmError

TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")

log = logging.getLogger("pmd")


class StoreError(PmmError):
    """The database cannot be opened, read or written."""


class DatabaseNotFound(StoreError):
    """No database file at the path, or no directory to create it in."""


class DatabasePermissionDenied(StoreError, PermissionDenied):
    """The file, or a directory on its path, is closed to this user."""


class NotADatabase(StoreError):
    """The path is a directory, or a file that is not a pmm database (another
    kind of file, another program's SQLite database)."""


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


def _prepare_dir(path: Path, gid: int | None, create_parents: bool) -> None:
    """Creates the database's directory 0750 (group gid) or 0700 when it is
    missing and its parent exists (as /var/lib/pmm); with create_parents,
    the missing directories above it too (as ~/.local/share). An existing
    one keeps its mode, except that the unit's StateDirectory gets group gid
    (systemd creates it owned by root:root)."""
    d = path.parent
    if not d.exists():
        if create_parents:
            d.parent.mkdir(parents=True, exist_ok=True)
        elif not d.parent.is_dir():
            missing = d
            while not missing.parent.exists():
                missing = missing.parent
            raise DatabaseNotFound(
                f"cannot open the database {path}: {os.strerror(errno.ENOENT)} (no directory "
                f"{missing}: create it, or choose another path with --db)", errno.ENOENT)
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            return
        except OSError as e:
            cls = DatabasePermissionDenied if e.errno in (errno.EACCES, errno.EPERM) \
                else StoreError
            raise cls(f"cannot open the database {path}: cannot create its directory {d}: "
                      f"{e.strerror or e}", e.errno) from None
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


SYSTEM_DB_PATH = Path("/var/lib/pmm/pmm.db")  # where pmd.service writes


def user_db_path() -> Path:
    """A user's own database, for a pmd run without root."""
    return Path.home() / ".local" / "share" / "pmm" / "pmm.db"


def _readable(path: Path) -> bool:
    return os.access(path, os.R_OK, effective_ids=os.access in os.supports_effective_ids)


def default_db_path(writer: bool = False) -> Path:
    """Where pmd writes and pmctl reads without --db: $PMM_DB; else, as root,
    the system database (/var/lib/pmm/pmm.db); else, for a reader, the
    system database when this user may read it (a member of the group it is
    given to, $PMM_GROUP or pmm); else the user's own
    (~/.local/share/pmm/pmm.db), where a pmd run by this user writes."""
    env = os.environ.get("PMM_DB")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return SYSTEM_DB_PATH
    if not writer and _readable(SYSTEM_DB_PATH):
        return SYSTEM_DB_PATH
    return user_db_path()


# samples' columns added after the first release (Store._create adds them)
SAMPLE_HEAP_COLUMNS: dict[str, type] = {"heap_free": int, "heap_trimmable": int,
                                         "allocator": str, "cgroup_usage": int}
def _json_dict(text: str | None) -> dict[str, Any] | None:
    """A stored JSON object (None for NULL or what is not one)."""
    if not text:
        return None
    try:
        v = json.loads(text)
    except ValueError:
        return None
    return v if isinstance(v, dict) else None


def start_key(start_time_ns: int) -> int:
    """A process start time as stored: nanoseconds rounded down to the clock tick."""
    return start_time_ns - start_time_ns % TICK_NS


@dataclass(frozen=True)
class SampleRow:
    """One memory sample of a process as stored; source: "kmod" (the module)
    or "proc" (/proc, which gives no live heap figures: None)."""

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
    # the allocator's figures and the memory cgroup's usage (pmm.model.Sample;
    # None: unknown)
    heap_free: int | None = None
    heap_trimmable: int | None = None
    allocator: str | None = None
    cgroup_usage: int | None = None


@dataclass(frozen=True)
class ProcessRow:
    """A process as stored: what it runs, when pmd first saw it (`started`)
    and when it exited (None while it runs)."""

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
    """A stored alert: the detector's verdict on a process, its rates (bytes/s)
    and growth (bytes), the fastest growing site and the message logged."""

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
    resolved: int | None = None  # CLOCK_BOOTTIME ns when the verdict cleared
    resolved_wall: float | None = None  # the same in Unix seconds
    # the kind of growth (pmm.growthkind.Kind) and its evidence
    # (Classification.to_dict: the split, the mappings that grew), None
    # when unknown (an alert of an older pmd)
    kind: str | None = None
    evidence: dict[str, Any] | None = None


@dataclass(frozen=True)
class PruneStep:
    """What one Store.prune_step deleted, and whether more is left."""

    samples: int = 0
    snapshots: int = 0
    processes: int = 0
    more: bool = False


@dataclass(frozen=True)
class ExitSiteRow:
    """One site of an exited process as stored (table exit_sites): its final
    figures, the age of its live blocks as of the exit and its call chain
    symbolized, with no absolute address."""

    site: int
    registered: bool = True  # False: known only by its blocks (never registered)
    flags: int = 0
    func: str = ""  # what the program registered (the shim), else ""
    file: str = ""
    line: int = 0
    live_bytes: int = 0
    live_blocks: int = 0
    alloc_bytes: int = 0
    free_bytes: int = 0
    alloc_count: dict[str, int] = field(default_factory=dict)  # per operation name
    oldest_age_s: float | None = None  # None: no live block
    newest_age_s: float | None = None
    histogram: tuple[int, ...] = ()  # live blocks per pmm.leaks.AGE_LABELS
    frames: tuple[dict[str, Any], ...] = ()  # Frame.as_dict() each, addr 0
    where: str = ""  # one line (pmm.sitestack.describe_site); "" when unknown


@dataclass(frozen=True)
class ExitRecord:
    """What pmd keeps of an exited process (see the module docstring): the
    module's entry (`info`, PidInfo.to_dict), the files of its frames
    (`objects`, ObjectFile.to_dict), its sites and its statistics
    (StatsInfo.to_dict, None when unknown). Times are CLOCK_BOOTTIME ns."""

    pid: int
    start_time: int  # the stored key (start_key)
    comm: str
    exit_time: int  # 0: unknown
    harvested: int
    info: dict[str, Any]
    objects: tuple[dict[str, Any], ...] = ()
    sites: tuple[ExitSiteRow, ...] = ()
    stats: dict[str, Any] | None = None


@dataclass(frozen=True)
class ScanSiteRow:
    """A site of a scan: its lost blocks and bytes, and where it is."""

    site: int
    where: str
    definite_blocks: int
    definite_bytes: int
    indirect_blocks: int
    indirect_bytes: int


@dataclass(frozen=True)
class ScanRow:
    """A scan of a process (`pmd --scan-on-leak`): its totals, how long the
    process was stopped and the scan took, its lost sites worst first; or
    the error that stopped it (`error`, then no figures)."""

    pid: int
    start_time: int
    time: int  # CLOCK_BOOTTIME ns
    wall_time: float
    definite_blocks: int = 0
    definite_bytes: int = 0
    indirect_blocks: int = 0
    indirect_bytes: int = 0
    unknown_blocks: int = 0
    young_blocks: int = 0
    longest_stop_us: int = 0
    scan_us: int = 0
    error: str | None = None
    sites: tuple[ScanSiteRow, ...] = ()


@dataclass(frozen=True)
class Series:
    """One process's samples as arrays, oldest first."""

    time_ns: array[int]  # 64-bit ints ("q"), compact for long histories
    vm: array[int]
    rss: array[int]

    def __len__(self) -> int:
        return len(self.time_ns)


def _describe(e: sqlite3.Error, path: Path, doing: str) -> StoreError:
    msg = str(e)
    hint = ""
    low = msg.lower()
    if "not a database" in low or "malformed" in low:
        return NotADatabase(f"{doing} {path}: not a pmm database (another kind of file, or "
                            f"a damaged database: {msg})")
    if "readonly" in low or "read-only" in low:
        hint = " (the file or its file system is read-only; choose another with --db or PMM_DB)"
    elif "full" in low:
        hint = " (the disk is full; free space or choose another --db)"
    elif "i/o error" in low:
        hint = " (the file system failed to read or write the file)"
    elif "unable to open" in low:
        hint = " (check that the directory exists and is writable, or pass --db)"
    elif "locked" in low or "busy" in low:
        hint = " (another process holds a write lock)"
    return StoreError(f"{doing} {path}: {msg}{hint}")


def _who(st: os.stat_result) -> str:
    """A file's mode and owners as ls shows them: '0640 root:pmm'."""
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    return f"{stat.S_IMODE(st.st_mode):04o} {user}:{_group_name(st.st_gid)}"


def _group_hint(st: os.stat_result, bits: int, verb: str) -> str:
    """Names the file's group when its members have the access `bits` (0o040
    read, 0o010 search) that this user lacks: the usual remedy is joining it."""
    if st.st_gid != 0 and stat.S_IMODE(st.st_mode) & bits:
        return f"; members of group {_group_name(st.st_gid)} can {verb} it"
    return ""


def _access(path: Path, mode: int) -> bool:
    return os.access(path, mode, effective_ids=os.access in os.supports_effective_ids)


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _why_not(path: Path, writer: bool) -> StoreError | None:
    """Why `path` cannot be opened as a database (for writing when `writer`),
    found before SQLite tries (its own message is "unable to open database
    file" for most of these), in the system's words ("No such file or
    directory", "Is a directory", "Permission denied") and what to do; None
    when nothing is in the way. Only stat and access: no descriptor of the
    file is opened, so no lock SQLite holds on it in this process is dropped."""
    doing = f"cannot open the database {path}"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        d = path.parent
        if not writer:
            return DatabaseNotFound(
                f"no database at {path}: {os.strerror(errno.ENOENT)} (pmd writes it: is pmd "
                f"running? Pass --db or set PMM_DB){_system_db_hint(path)}", errno.ENOENT)
        if not d.is_dir():
            return None  # Store.open makes the directory, or says why it cannot
        if _read_only_fs(d):
            return StoreError(f"{doing}: {os.strerror(errno.EROFS)} ({d} is read-only: choose "
                              "another path with --db or PMM_DB)", errno.EROFS)
        if not _access(d, os.W_OK | os.X_OK):
            return DatabasePermissionDenied(
                f"{doing}: {os.strerror(errno.EACCES)} (this user cannot create files in {d}: "
                f"{_who(os.stat(d))})", errno.EACCES)
        return None
    except PermissionError:
        blocked = next((a for a in reversed(path.parents) if not _access(a, os.X_OK)),
                       path.parent)
        try:
            dst = os.stat(blocked)
            who = f": {_who(dst)}{_group_hint(dst, 0o010, 'enter')}"
        except OSError:
            who = ""
        return DatabasePermissionDenied(
            f"{doing}: {os.strerror(errno.EACCES)} (this user cannot enter {blocked}{who})",
            errno.EACCES)
    except NotADirectoryError:
        return NotADatabase(f"{doing}: {os.strerror(errno.ENOTDIR)} (a part of the path is a "
                            "file)", errno.ENOTDIR)
    except OSError as e:
        return StoreError(f"{doing}: {e.strerror or e}", e.errno)
    if stat.S_ISDIR(st.st_mode):
        return NotADatabase(f"{doing}: {os.strerror(errno.EISDIR)} (give the database file, "
                            f"e.g. {path / 'pmm.db'})", errno.EISDIR)
    if not stat.S_ISREG(st.st_mode):
        return NotADatabase(f"{doing}: not a regular file", errno.EINVAL)
    if not _access(path, os.R_OK):
        return DatabasePermissionDenied(
            f"{doing}: {os.strerror(errno.EACCES)} (this user cannot read it: "
            f"{_who(st)}{_group_hint(st, 0o040, 'read')})", errno.EACCES)
    if writer and not _access(path, os.W_OK):
        if _read_only_fs(path):
            return StoreError(f"{doing}: {os.strerror(errno.EROFS)} (the file is on a read-only "
                              "mount: choose another path with --db or PMM_DB)", errno.EROFS)
        return DatabasePermissionDenied(
            f"{doing}: {os.strerror(errno.EACCES)} (this user cannot write it: {_who(st)})",
            errno.EACCES)
    d = path.parent
    if writer and not os.path.lexists(f"{path}-wal") and not _access(d, os.W_OK | os.X_OK) \
            and not _read_only_fs(d):
        # the write-ahead log is a file beside the database
        return DatabasePermissionDenied(
            f"{doing}: {os.strerror(errno.EACCES)} (this user cannot create its -wal file in "
            f"{d}: {_who(os.stat(d))})", errno.EACCES)
    return None


def _system_db_hint(path: Path) -> str:
    """For a reader that found no database at `path`: pmd's system database
    is there but closed to this user (the default lookup passed it over)."""
    if path == SYSTEM_DB_PATH or _readable(SYSTEM_DB_PATH):
        return ""
    try:
        os.stat(SYSTEM_DB_PATH)
    except PermissionError:
        pass  # its directory is closed to this user: it may well be there
    except OSError:
        return ""
    try:
        group = f" (members of group {_group_name(os.stat(SYSTEM_DB_PATH.parent).st_gid)} can)"
    except OSError:
        group = ""
    return f"; this user cannot read pmd's system database {SYSTEM_DB_PATH}{group}"


PMD_TABLES = ("processes", "samples", "site_snapshots", "sites", "alerts", "exit_info",
              "exit_sites", "exit_stats", "scans", "scan_sites")


def _table_names(conn: sqlite3.Connection) -> list[str]:
    """The database's own tables (not SQLite's sqlite_* ones), by name."""
    return [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' "
        "ESCAPE '\\' ORDER BY name")]


def _existing_tables(path: Path) -> list[str]:
    """The tables of the file at `path` as it is, read without changing it:
    none for a missing or empty file (pmd makes it a database).
    sqlite3.Error when it is not an SQLite database. With a -wal and a -shm
    beside it (a writer may be at work), it is opened read-only, which reads
    the -wal too, under SQLite's locks, and creates neither. Else it is
    opened immutable=1, which takes no lock and makes no -wal or -shm (a
    -wal left by a crash is not read: at worst a database whose tables are
    all in it looks new, and the writer's connection finds them)."""
    try:
        if os.stat(path).st_size == 0:
            return []
    except FileNotFoundError:
        return []
    in_use = os.path.lexists(f"{path}-wal") and os.path.lexists(f"{path}-shm")
    query = "mode=ro" if in_use else "immutable=1"
    conn = sqlite3.connect(_uri(path, query), uri=True)
    try:
        conn.execute("PRAGMA busy_timeout=5000")
        return _table_names(conn)
    finally:
        conn.close()


def _refuse_foreign(path: Path, tables: list[str]) -> None:
    """NotADatabase when the database holds tables and none of pmd's: it is
    another program's, and pmd must not add its tables to it or change its
    mode. A database without tables is a new one."""
    if not tables or set(tables) & set(PMD_TABLES):
        return
    shown = ", ".join(tables[:5]) + (f", ... ({len(tables)} in all)" if len(tables) > 5 else "")
    raise NotADatabase(f"{path} is an SQLite database of something else (tables: {shown}): "
                       "give pmd its own file")


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
    def open(cls, path: Path | str, readonly: bool = False,
             create_parents: bool = False) -> Store:
        """The database at `path`. For writing, the file is created (and its
        directory, when that directory's parent exists; every missing
        directory with `create_parents`). StoreError says what is in the way:
        DatabaseNotFound (no such file, or directory),
        DatabasePermissionDenied, NotADatabase (a directory, another kind of
        file, another program's database: left unchanged), or else SQLite's
        own reason."""
        path = Path(path)
        try:
            if readonly:
                why = _why_not(path, writer=False)
                if why is not None:
                    raise why
                import sqlite_utils

                db = sqlite_utils.Database(_open_readonly(path), execute_plugins=False)
                store = cls(db, path, readonly=True)
                store._check_tables()
                return store
            gid = db_group()
            _prepare_dir(path, gid, create_parents)
            why = _why_not(path, writer=True)
            if why is not None:
                raise why
            # before anything changes it (mode, group, -wal and -shm, WAL)
            _refuse_foreign(path, _existing_tables(path))
            changed = _secure_files(path, gid)
            import sqlite_utils

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
            # SQLite says "unable to open database file" for most causes: a
            # reason found now (a race, the -wal's directory) is clearer
            raise _why_not(path, writer=not readonly) or \
                _describe(e, path, "cannot open the database") from None
        except OSError as e:
            raise StoreError(f"cannot open the database {path}: {e.strerror or e}",
                             e.errno) from None

    def _check_tables(self) -> None:
        have = {r[0] for r in self._query(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"processes", "samples"} <= have:
            self.close()
            what = "an empty file" if not have else "an SQLite database without pmd's tables"
            raise NotADatabase(f"cannot open the database {self.path}: not a pmm database "
                               f"({what})")

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
            # added with the allocator's figures: an older database gets the columns
            self._add_columns("samples", SAMPLE_HEAP_COLUMNS)
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
            # added with resolved alerts and the kind of growth: an older
            # database gets the columns
            self._add_columns("alerts", {"resolved": int, "resolved_wall": float,
                                         "kind": str, "evidence": str})
            # added with post-mortem records: an older database gets them here
            if not db.table("exit_info").exists():
                db.table("exit_info").create(
                    {"pid": int, "start_time": int, "harvested": int, "info": str,
                     "objects": str},
                    pk=("pid", "start_time"), not_null={"pid", "start_time", "info"},
                )
            if not db.table("exit_sites").exists():
                db.table("exit_sites").create(
                    {"pid": int, "start_time": int, "site": int, "registered": int,
                     "flags": int, "func": str, "file": str, "line": int, "live_bytes": int,
                     "live_blocks": int, "alloc_bytes": int, "free_bytes": int,
                     "alloc_count": str, "oldest_age_s": float, "newest_age_s": float,
                     "histogram": str, "frames": str, "where_": str},
                    pk=("pid", "start_time", "site"),
                    not_null={"pid", "start_time", "site"},
                )
            if not db.table("exit_stats").exists():
                db.table("exit_stats").create(
                    {"pid": int, "start_time": int, "stats": str},
                    pk=("pid", "start_time"), not_null={"pid", "start_time", "stats"},
                )
            # added with --scan-on-leak
            if not db.table("scans").exists():
                db.table("scans").create(
                    {"pid": int, "start_time": int, "time": int, "wall_time": float,
                     "definite_blocks": int, "definite_bytes": int, "indirect_blocks": int,
                     "indirect_bytes": int, "unknown_blocks": int, "young_blocks": int,
                     "longest_stop_us": int, "scan_us": int, "error": str},
                    pk=("pid", "start_time", "time"), not_null={"pid", "start_time", "time"},
                )
            if not db.table("scan_sites").exists():
                db.table("scan_sites").create(
                    {"pid": int, "start_time": int, "time": int, "site": int, "where_": str,
                     "definite_blocks": int, "definite_bytes": int, "indirect_blocks": int,
                     "indirect_bytes": int},
                    pk=("pid", "start_time", "time", "site"),
                    not_null={"pid", "start_time", "time", "site"},
                )

    def _add_columns(self, table: str, columns: dict[str, type]) -> None:
        """Adds the columns the table lacks (a database of an older pmd)."""
        have = set(self.db.table(table).columns_dict)
        for name, kind in columns.items():
            if name not in have:
                self.db.table(table).add_column(name, kind)

    def _columns(self, table: str) -> set[str]:
        """The table's column names (reading: a database of an older or newer
        pmd may lack or have more of them)."""
        return {str(r[1]) for r in self._query(f"PRAGMA table_info({table})")}

    def close(self) -> None:
        """Closes the database."""
        self.db.close()

    # -- writing -------------------------------------------------------------

    def write(
        self,
        samples: Sequence[SampleRow] = (),
        processes: Sequence[ProcessRow] = (),
        exits: Sequence[tuple[int, int, int]] = (),
        snapshots: Sequence[tuple[int, int, int, int, int, int]] = (),
        sites: Sequence[tuple[int, int, int, str]] = (),
    ) -> None:
        """One transaction: new processes (existing ones keep their first
        `started`), exits (pid, start_time, time), samples, site snapshots
        (pid, start_time, time, site, live_bytes, live_blocks) and site
        descriptions (pid, start_time, site, where: replaces the one
        stored). Duplicates (same key) are ignored, so writing rows again is
        harmless. Raises
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
                        "rss_anon, rss_file, rss_shmem, live_bytes, live_blocks, source, "
                        "heap_free, heap_trimmable, allocator, cgroup_usage) "
                        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        [(s.pid, s.start_time, s.time, s.vm, s.rss, s.rss_anon, s.rss_file,
                          s.rss_shmem, s.live_bytes, s.live_blocks, s.source, s.heap_free,
                          s.heap_trimmable, s.allocator, s.cgroup_usage) for s in samples],
                    )
                if snapshots:
                    c.executemany(
                        "INSERT OR IGNORE INTO site_snapshots (pid, start_time, time, site, "
                        "live_bytes, live_blocks) VALUES (?,?,?,?,?,?)",
                        snapshots,
                    )
                if sites:
                    c.executemany(
                        "INSERT OR REPLACE INTO sites (pid, start_time, site, where_) "
                        "VALUES (?,?,?,?)", sites)
        except _ROW_ERRORS as e:
            if isinstance(e, sqlite3.ProgrammingError) and "closed" in str(e):
                # the one ProgrammingError about the connection, not a row
                raise _describe(e, self.path, "cannot write to the database") from None
            raise BadRowError(f"the database refused a row: {type(e).__name__}: {e}") from None
        except sqlite3.Error as e:
            raise _describe(e, self.path, "cannot write to the database") from None

    def set_site(self, pid: int, start_time: int, site: int, where: str) -> None:
        """Stores a site's one-line description, replacing any; StoreError when
        the database refuses."""
        try:
            with self.db.atomic():
                self.db.conn.execute(
                    "INSERT OR REPLACE INTO sites (pid, start_time, site, where_) "
                    "VALUES (?,?,?,?)", (pid, start_time, site, where))
        except sqlite3.Error as e:
            raise _describe(e, self.path, "cannot write to the database") from None

    def write_exit(self, r: ExitRecord) -> None:
        """Stores what is kept of an exited process, in one transaction: its
        entry, sites and statistics (replacing an earlier record of the same
        process: a second harvest changes nothing), the descriptions of its
        sites (table sites) and its exit time if none was stored (and its
        process row if pmd had none). Raises BadRowError when a row itself
        is refused, StoreError when the database is; nothing is written then."""
        key = (r.pid, r.start_time)
        try:
            with self.db.atomic():
                c = self.db.conn
                c.execute(
                    "INSERT OR IGNORE INTO processes (pid, start_time, comm, exe, cmdline, "
                    "started, exited, source) VALUES (?,?,?,'','',?,?,'kmod')",
                    (*key, r.comm, r.harvested, r.exit_time or r.harvested))
                if r.exit_time:
                    c.execute("UPDATE processes SET exited = ? WHERE pid = ? AND start_time = ? "
                              "AND exited IS NULL", (r.exit_time, *key))
                c.execute("INSERT OR REPLACE INTO exit_info (pid, start_time, harvested, info, "
                          "objects) VALUES (?,?,?,?,?)",
                          (*key, r.harvested, json.dumps(r.info),
                           json.dumps(list(r.objects))))
                c.execute("DELETE FROM exit_sites WHERE pid = ? AND start_time = ?", key)
                c.executemany(
                    "INSERT INTO exit_sites (pid, start_time, site, registered, flags, func, "
                    "file, line, live_bytes, live_blocks, alloc_bytes, free_bytes, alloc_count, "
                    "oldest_age_s, newest_age_s, histogram, frames, where_) VALUES "
                    "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    [(*key, s.site, int(s.registered), s.flags, s.func, s.file, s.line,
                      s.live_bytes, s.live_blocks, s.alloc_bytes, s.free_bytes,
                      json.dumps(s.alloc_count), s.oldest_age_s, s.newest_age_s,
                      json.dumps(list(s.histogram)), json.dumps(list(s.frames)), s.where)
                     for s in r.sites])
                c.executemany(
                    "INSERT OR REPLACE INTO sites (pid, start_time, site, where_) "
                    "VALUES (?,?,?,?)",
                    [(*key, s.site, s.where) for s in r.sites if s.where])
                if r.stats is not None:
                    c.execute("INSERT OR REPLACE INTO exit_stats (pid, start_time, stats) "
                              "VALUES (?,?,?)", (*key, json.dumps(r.stats)))
        except _ROW_ERRORS as e:
            if isinstance(e, sqlite3.ProgrammingError) and "closed" in str(e):
                raise _describe(e, self.path, "cannot write to the database") from None
            raise BadRowError(f"the database refused a row: {type(e).__name__}: {e}") from None
        except sqlite3.Error as e:
            raise _describe(e, self.path, "cannot write to the database") from None

    def add_alert(self, a: AlertRow) -> bool:
        """Adds the alert unless the process already has a standing one of
        this verdict (not resolved). True if it was added."""
        try:
            with self.db.atomic():
                c = self.db.conn
                row = c.execute(
                    "SELECT 1 FROM alerts WHERE pid = ? AND start_time = ? AND verdict = ? "
                    "AND resolved IS NULL", (a.pid, a.start_time, a.verdict)).fetchone()
                if row is not None:
                    return False
                c.execute(
                    "INSERT INTO alerts (pid, start_time, time, wall_time, comm, verdict, slope,"
                    " slope_low, slope_high, confidence, growth, site, message, kind, evidence)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (a.pid, a.start_time, a.time, a.wall_time, a.comm, a.verdict, a.slope,
                     a.slope_low, a.slope_high, a.confidence, a.growth, a.site, a.message,
                     a.kind, None if a.evidence is None else json.dumps(a.evidence)))
                return True
        except sqlite3.Error as e:
            raise _describe(e, self.path, "cannot write to the database") from None

    def resolve_alerts(self, pid: int, start_time: int, time_ns: int, wall: float,
                       verdict: str = "LEAK") -> int:
        """Marks the process's standing alerts of `verdict` resolved at
        time_ns (wall: Unix seconds); the number marked."""
        try:
            with self.db.atomic():
                return self.db.conn.execute(
                    "UPDATE alerts SET resolved = ?, resolved_wall = ? WHERE pid = ? AND "
                    "start_time = ? AND verdict = ? AND resolved IS NULL",
                    (time_ns, wall, pid, start_time, verdict)).rowcount
        except sqlite3.Error as e:
            raise _describe(e, self.path, "cannot write to the database") from None

    def prune_step(self, before_ns: int, batch: int = 2000) -> PruneStep:
        """One small transaction of retention (see the module docstring):
        at most `batch` samples, then `batch` site snapshots, older than
        before_ns, else one process that exited before it (with its sites
        and post-mortem rows) unless it has an alert. Each batch deletes by
        the primary key's ranges, process by process, so a step costs about
        the same on a database of any size. `more`: call again."""
        try:
            with self.db.atomic():
                c = self.db.conn
                for table in ("samples", "site_snapshots"):
                    n = 0
                    for pid, start in c.execute(
                            "SELECT pid, start_time FROM processes").fetchall():
                        n += c.execute(
                            f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} "
                            "WHERE pid = ? AND start_time = ? AND time < ? LIMIT ?)",
                            (pid, start, before_ns, batch - n)).rowcount
                        if n >= batch:
                            break
                    if n:
                        return PruneStep(**{"samples" if table == "samples" else
                                            "snapshots": n}, more=True)
                row = c.execute(
                    "SELECT pid, start_time FROM processes p WHERE exited IS NOT NULL AND "
                    "exited < ? AND NOT EXISTS (SELECT 1 FROM alerts a WHERE a.pid = p.pid "
                    "AND a.start_time = p.start_time) LIMIT 1", (before_ns,)).fetchone()
                if row is None:
                    return PruneStep()
                for table in ("samples", "site_snapshots", "sites", "exit_info", "exit_sites",
                              "exit_stats", "scans", "scan_sites", "processes"):
                    c.execute(f"DELETE FROM {table} WHERE pid = ? AND start_time = ?", row)
                return PruneStep(processes=1, more=True)
        except sqlite3.Error as e:
            raise _describe(e, self.path, "cannot write to the database") from None

    def add_scan(self, r: ScanRow) -> None:
        """Stores a scan and its sites (a scan of the same time again: ignored)."""
        key = (r.pid, r.start_time, r.time)
        try:
            with self.db.atomic():
                c = self.db.conn
                c.execute(
                    "INSERT OR IGNORE INTO scans (pid, start_time, time, wall_time, "
                    "definite_blocks, definite_bytes, indirect_blocks, indirect_bytes, "
                    "unknown_blocks, young_blocks, longest_stop_us, scan_us, error) VALUES "
                    "(?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (*key, r.wall_time, r.definite_blocks, r.definite_bytes,
                     r.indirect_blocks, r.indirect_bytes, r.unknown_blocks, r.young_blocks,
                     r.longest_stop_us, r.scan_us, r.error))
                c.executemany(
                    "INSERT OR IGNORE INTO scan_sites (pid, start_time, time, site, where_, "
                    "definite_blocks, definite_bytes, indirect_blocks, indirect_bytes) VALUES "
                    "(?,?,?,?,?,?,?,?,?)",
                    [(*key, x.site, x.where, x.definite_blocks, x.definite_bytes,
                      x.indirect_blocks, x.indirect_bytes) for x in r.sites])
        except _ROW_ERRORS as e:
            raise BadRowError(f"the database refused a row: {type(e).__name__}: {e}") from None
        except sqlite3.Error as e:
            raise _describe(e, self.path, "cannot write to the database") from None

    # -- reading -------------------------------------------------------------

    def scans(self, pid: int, start_time: int | None = None) -> list[ScanRow]:
        """The scans of pid (of its run start_time, if given), oldest first,
        each with its sites worst first; none in a database without them."""
        if not self._has_table("scans"):
            return []
        where, args = ("pid = ?", [pid]) if start_time is None else \
            ("pid = ? AND start_time = ?", [pid, start_time])
        out = []
        for r in self._query(
                "SELECT pid, start_time, time, wall_time, definite_blocks, definite_bytes, "
                "indirect_blocks, indirect_bytes, unknown_blocks, young_blocks, "
                f"longest_stop_us, scan_us, error FROM scans WHERE {where} ORDER BY time",
                args):
            sites = tuple(ScanSiteRow(int(x[0]), str(x[1] or ""), int(x[2] or 0),
                                      int(x[3] or 0), int(x[4] or 0), int(x[5] or 0))
                          for x in self._query(
                "SELECT site, where_, definite_blocks, definite_bytes, indirect_blocks, "
                "indirect_bytes FROM scan_sites WHERE pid = ? AND start_time = ? AND time = ? "
                "ORDER BY definite_bytes DESC, indirect_bytes DESC, site", r[:3]))
            n = [int(v or 0) for v in r[4:12]]
            out.append(ScanRow(int(r[0]), int(r[1]), int(r[2]), float(r[3] or 0),
                               definite_blocks=n[0], definite_bytes=n[1], indirect_blocks=n[2],
                               indirect_bytes=n[3], unknown_blocks=n[4], young_blocks=n[5],
                               longest_stop_us=n[6], scan_us=n[7], error=r[12], sites=sites))
        return out

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
        """The number of samples stored: in all, or of the process (pid,
        start_time) when pid is given."""
        if pid is None:
            return int(self._query("SELECT count(*) FROM samples")[0][0])
        return int(self._query(
            "SELECT count(*) FROM samples WHERE pid = ? AND start_time = ?",
            (pid, start_time))[0][0])

    def series(self, pid: int, start_time: int, since_ns: int | None = None) -> Series:
        """The process's samples (time, vm, rss), oldest first, those from since_ns
        on when given; StoreError when the database cannot be read."""
        sql = "SELECT time, vm, rss FROM samples WHERE pid = ? AND start_time = ?"
        args: list[int] = [pid, start_time]
        if since_ns is not None:
            sql += " AND time >= ?"
            args.append(since_ns)
        try:
            cur = self.db.conn.execute(sql + " ORDER BY time", args)
            rows = cur.fetchall()
        except sqlite3.Error as e:
            raise _describe(e, self.path, "cannot read the database") from None
        return Series(array("q", [r[0] for r in rows]), array("q", [r[1] for r in rows]),
                      array("q", [r[2] for r in rows]))

    def sample_rows(self, pid: int, start_time: int,
                    since_ns: int | None = None) -> list[SampleRow]:
        """The process's samples with every figure, oldest first (those from
        since_ns on, if given); a database of an older pmd has no heap or
        cgroup figures: None."""
        have = self._columns("samples")
        cols = ["pid", "start_time", "time", "vm", "rss", "rss_anon", "rss_file", "rss_shmem",
                "live_bytes", "live_blocks", "source"]
        cols += [c if c in have else f"NULL AS {c}" for c in SAMPLE_HEAP_COLUMNS]
        sql = f"SELECT {', '.join(cols)} FROM samples WHERE pid = ? AND start_time = ?"
        args: list[int] = [pid, start_time]
        if since_ns is not None:
            sql += " AND time >= ?"
            args.append(since_ns)
        return [SampleRow(*r) for r in self._query(sql + " ORDER BY time", args)]

    def latest_sample(self, pid: int, start_time: int) -> int | None:
        """The time of the process's latest sample (None: it has none)."""
        r = self._query("SELECT max(time) FROM samples WHERE pid = ? AND start_time = ?",
                        (pid, start_time))
        return int(r[0][0]) if r and r[0][0] is not None else None

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
        """The stored descriptions of the process's sites, by site id."""
        return {int(r[0]): str(r[1]) for r in self._query(
            "SELECT site, where_ FROM sites WHERE pid = ? AND start_time = ?",
            (pid, start_time))}

    def alerts(self, pid: int | None = None) -> list[AlertRow]:
        """The alerts stored (of one pid, if given), oldest first; standing
        ones (resolved None) in a database older than the resolved columns."""
        where, args = ("WHERE pid = ?", (pid,)) if pid is not None else ("", ())
        have = self._columns("alerts")
        resolved = "resolved, resolved_wall" if "resolved" in have else "NULL, NULL"
        kinds = "kind, evidence" if {"kind", "evidence"} <= have else "NULL, NULL"
        rows = self._query(
            "SELECT pid, start_time, time, wall_time, comm, verdict, slope, slope_low, "
            f"slope_high, confidence, growth, site, message, {resolved}, {kinds} FROM alerts "
            f"{where} ORDER BY id", args)
        return [AlertRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10],
                         r[11], r[12], resolved=r[13], resolved_wall=r[14], kind=r[15],
                         evidence=_json_dict(r[16])) for r in rows]

    def _has_table(self, name: str) -> bool:
        """Whether the database has the table (an older one may lack the
        newer tables: a reader finds nothing in them)."""
        return bool(self._query(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)))

    def harvested(self, pid: int, start_time: int) -> bool:
        """Whether what is kept of the exited process (pid, start_time) is stored."""
        return self._has_table("exit_info") and bool(self._query(
            "SELECT 1 FROM exit_info WHERE pid = ? AND start_time = ?", (pid, start_time)))

    def exit_info(self, pid: int) -> tuple[int, dict[str, Any]] | None:
        """The latest stored record of an exited process with this pid:
        (start_time, its entry) where the entry is PidInfo.to_dict as
        harvested with "harvested" (CLOCK_BOOTTIME ns) and "objects"
        (ObjectFile.to_dict each); None when there is none."""
        if not self._has_table("exit_info"):
            return None
        rows = self._query(
            "SELECT start_time, harvested, info, objects FROM exit_info WHERE pid = ? "
            "ORDER BY start_time DESC LIMIT 1", (pid,))
        if not rows:
            return None
        start, harvested, info, objects = rows[0]
        d: dict[str, Any] = json.loads(info)
        d["harvested"] = harvested
        d["objects"] = json.loads(objects) if objects else []
        return int(start), d

    def exit_sites(self, pid: int, start_time: int) -> list[ExitSiteRow]:
        """The stored sites of the exited process (pid, start_time), by site id."""
        if not self._has_table("exit_sites"):
            return []
        rows = self._query(
            "SELECT site, registered, flags, func, file, line, live_bytes, live_blocks, "
            "alloc_bytes, free_bytes, alloc_count, oldest_age_s, newest_age_s, histogram, "
            "frames, where_ FROM exit_sites WHERE pid = ? AND start_time = ? ORDER BY site",
            (pid, start_time))
        return [ExitSiteRow(
            site=int(r[0]), registered=bool(r[1]), flags=r[2] or 0, func=r[3] or "",
            file=r[4] or "", line=r[5] or 0, live_bytes=r[6] or 0, live_blocks=r[7] or 0,
            alloc_bytes=r[8] or 0, free_bytes=r[9] or 0,
            alloc_count=json.loads(r[10]) if r[10] else {}, oldest_age_s=r[11],
            newest_age_s=r[12], histogram=tuple(json.loads(r[13])) if r[13] else (),
            frames=tuple(json.loads(r[14])) if r[14] else (), where=r[15] or "")
            for r in rows]

    def exit_stats(self, pid: int, start_time: int) -> dict[str, Any] | None:
        """The stored statistics of the exited process (pid, start_time), as
        StatsInfo.to_dict gave them; None when there are none."""
        if not self._has_table("exit_stats"):
            return None
        rows = self._query("SELECT stats FROM exit_stats WHERE pid = ? AND start_time = ?",
                           (pid, start_time))
        return json.loads(rows[0][0]) if rows else None
