"""Where the database is, who may read it, and why it cannot be opened.

Permissions: the database holds other users' command lines, rss series and
where their allocations are in their programs. The writer (pmd) creates it
0640 with group $PMM_GROUP (default "pmm") when that group exists, else 0600,
and its -wal and -shm with the database's mode and group (before SQLite
would make them); a directory it creates is 0750 (that group) or 0700, and systemd's
StateDirectory (0750 root:root) is given to that group. A database, -wal or
-shm file pmd owns that is more open than that is tightened when pmd opens
it (one log line). Readers open it read-only (`Store.open(path,
readonly=True)`), also from a directory they cannot write (see
`open_readonly`).

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
import logging
import os
import pwd
import sqlite3
import stat
import urllib.parse
from pathlib import Path

from pmm.store.errors import DatabaseNotFound, DatabasePermissionDenied, NotADatabase, StoreError

log = logging.getLogger("pmd")


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


def prepare_dir(path: Path, gid: int | None, create_parents: bool) -> None:
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


def secure_files(path: Path, gid: int | None) -> list[str]:
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


def uri(path: Path, query: str) -> str:
    """SQLite's URI of the file at path, with the query."""
    # quoted: "?", "#" and "%" are part of a file name, not of the URI
    return f"file:{urllib.parse.quote(str(path))}?{query}"


def open_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection. A WAL database needs its -shm file even to be
    read; while pmd runs it exists and SQLite (>= 3.22) reads it read-only.
    When pmd has stopped (clean close: no -wal, no -shm), a reader that
    cannot write the directory cannot create the -shm and SQLite refuses;
    then the file is opened immutable=1, which needs no -shm and no locks.
    That is safe because without a -wal file (or with an empty one) every
    committed transaction is in the database file and no writer has it open (a pmd starting at that
    very moment could make this one read fail, never corrupt anything)."""
    conn = sqlite3.connect(uri(path, "mode=ro"), uri=True)
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
    conn = sqlite3.connect(uri(path, "immutable=1"), uri=True)
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


def why_not(path: Path, writer: bool) -> StoreError | None:
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

