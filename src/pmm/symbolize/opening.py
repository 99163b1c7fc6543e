"""Opening the files a monitored process names, as its owner could and no further.

The symbolizers run as root (pmctl) or with CAP_SYS_PTRACE (pmd), and read
paths that a process's maps, the module's object records and the debug links
inside its files give: all chosen by the process's owner. Such a path is
resolved

- inside the process's root (`Target`: /proc/PID/root held open), with
  openat2's RESOLVE_IN_ROOT and RESOLVE_NO_MAGICLINKS, so neither `..` nor
  an absolute symlink leaves it (a container never names a host file);
  without a live process, in the caller's root;
- with O_PATH first, which opens nothing (no FIFO waits for a writer, no
  device driver runs), O_NOFOLLOW (a symlink at the end is refused, not
  followed), and only a regular file is then opened for reading, through
  /proc/self/fd, with O_NONBLOCK, and checked to be the same inode;
- when the process's map or the module names its inode (and size), only if
  it is that file: one swapped in since is refused.

Separate debug files are opened only from the trusted debug directories
(root's: $PMM_DEBUG_DIRS, /usr/lib/debug) and the debuginfod cache,
beneath the directory (RESOLVE_BENEATH), the same way.

What is refused raises `Refused` (an OSError) saying why, in one line.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from dataclasses import dataclass

# openat2(2)'s resolve flags (linux/openat2.h)
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_IN_ROOT = 0x10
# the same number on every architecture (the unified table, since 5.6)
_SYS_OPENAT2 = 437
_O_PATH = getattr(os, "O_PATH", 0o10000000)


class Refused(OSError):
    """A file the symbolizer will not open or read: what it is and why, in
    one line (its errno: EPERM, or the lookup's own)."""

    def __init__(self, path: str, why: str, errno_: int = errno.EPERM) -> None:
        super().__init__(errno_, why, path)
        self.path = path
        self.why = why

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


class Replaced(Refused):
    """The file at the path is not the one the process had (another inode or
    size): replaced since, as an upgrade does, or swapped."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


_libc: ctypes.CDLL | None = None
_have_openat2: bool | None = None


def _syscall() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    return _libc


def openat2(dirfd: int, path: str, flags: int, resolve: int) -> int:
    """openat2(2): a new descriptor of path looked up from dirfd as `resolve`
    says; OSError as the kernel says (ENOSYS before Linux 5.6)."""
    how = _OpenHow(flags | os.O_CLOEXEC, 0, resolve)
    libc = _syscall()
    while True:
        fd = int(libc.syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dirfd),
                              ctypes.c_char_p(os.fsencode(path)), ctypes.byref(how),
                              ctypes.c_size_t(ctypes.sizeof(how))))
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err not in (errno.EINTR, errno.EAGAIN):
            raise OSError(err, os.strerror(err), path)


def _walk_no_symlinks(dirfd: int, path: str) -> int:
    """Where openat2 is missing (before 5.6, or a seccomp filter hides it): an
    O_PATH descriptor of path, walked from dirfd one name at a time with
    O_NOFOLLOW, refusing every symlink and `..` (the paths symbolizers get are
    the kernel's, which have neither)."""
    names = [n for n in path.split("/") if n and n != "."]  # from dirfd, even if absolute
    if ".." in names:
        raise Refused(path, "a '..' in the path (not followed)")
    fd = os.dup(dirfd)
    try:
        for i, name in enumerate(names):
            nxt = os.open(name, _O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
            if i < len(names) - 1 and stat.S_ISLNK(os.fstat(fd).st_mode):
                raise Refused(path, "a symbolic link on its path (not followed)", errno.ELOOP)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _lookup(dirfd: int, path: str, resolve: int, follow: bool) -> int:
    """An O_PATH descriptor of path from dirfd (openat2, else the walk);
    follow: a symlink at its end is followed (within what resolve allows)."""
    global _have_openat2
    if _have_openat2 is not False:
        try:
            fd = openat2(dirfd, path, _O_PATH | (0 if follow else os.O_NOFOLLOW), resolve)
        except OSError as e:
            if e.errno != errno.ENOSYS:
                raise
            _have_openat2 = False
        else:
            _have_openat2 = True
            return fd
    return _walk_no_symlinks(dirfd, path)


def kind_of(mode: int) -> str:
    """What a file of this st_mode is, in words ('a FIFO')."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


@dataclass(eq=False)
class OpenFile:
    """A regular file opened for reading, and what fstat said of it.

    path: as it was named (for messages); arg_path: a path other programs
    may be given for it (None: only /proc/self/fd/N, see `tool_path`),
    set for files in the trusted debug directories; the descriptor is
    closed with the object."""

    fd: int
    path: str
    st: os.stat_result
    arg_path: str | None = None

    @property
    def identity(self) -> tuple[int, int, int, int, int, int]:
        """(device, inode, size, mtime, ctime in ns, owner): what tells this
        file from any other, and from itself rewritten."""
        st = self.st
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_uid)

    @property
    def owner_trusted(self) -> bool:
        """Whether its bytes are root's or the caller's own: owned by root or
        by us, and writable by no one else."""
        return self.st.st_uid in (0, os.geteuid()) and not self.st.st_mode & 0o022

    @property
    def tool_path(self) -> str:
        """What a child that inherits the descriptor opens it by."""
        return f"/proc/self/fd/{self.fd}"

    def pread(self, size: int, offset: int) -> bytes:
        """Up to size bytes at offset."""
        if self.fd < 0:
            raise ValueError(f"{self.path}: read after close")
        return os.pread(self.fd, size, offset)

    def close(self) -> None:
        """Closes the descriptor (again: nothing)."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def __del__(self) -> None:
        self.close()


# what a file must be to be the one a process had: (inode, size or None)
Expect = tuple[int, int | None]


def _reopen(pathfd: int, path: str, expect: Expect | None) -> OpenFile:
    """The file of an O_PATH descriptor opened for reading, if it is a
    regular file (and, with expect, has that inode and size)."""
    st = os.fstat(pathfd)
    if not stat.S_ISREG(st.st_mode):
        raise Refused(path, f"{kind_of(st.st_mode)}, not a regular file (not opened)")
    if expect is not None and (st.st_ino != expect[0]
                               or expect[1] is not None and st.st_size != expect[1]):
        had = f"inode {expect[0]}" + (f", {expect[1]} bytes" if expect[1] is not None else "")
        raise Replaced(path, f"not the file the process had (inode {st.st_ino}, "
                             f"{st.st_size} bytes; it had {had})")
    fd = os.open(f"/proc/self/fd/{pathfd}",
                 os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        got = os.fstat(fd)
        if (got.st_dev, got.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(got.st_mode):
            raise Refused(path, "changed while it was opened")
        return OpenFile(fd, path, got)
    except BaseException:
        os.close(fd)
        raise


def _refusal(path: str, e: OSError) -> OSError:
    if e.errno == errno.ELOOP:
        return Refused(path, "a symbolic link on its path (not followed)", errno.ELOOP)
    if e.errno == errno.EXDEV:
        return Refused(path, "its path leaves the directory it is looked up in", errno.EXDEV)
    return e


def open_at(dirfd: int, path: str, resolve: int,
            expect: Expect | None = None, follow: bool = False) -> OpenFile:
    """path looked up from dirfd as `resolve` says, following a symlink at
    its end only with `follow`, opened for reading if it is a regular file
    (see the module's docstring). Refused, or the lookup's OSError
    (FileNotFoundError...)."""
    try:
        pathfd = _lookup(dirfd, path, resolve, follow)
    except Refused:
        raise
    except OSError as e:
        raise _refusal(path, e) from None
    try:
        return _reopen(pathfd, path, expect)
    finally:
        os.close(pathfd)


class Target:
    """A process whose files are opened: its pid, start time (clock ticks)
    and root directory, held open (O_PATH) from when it was seen alive, so
    that its paths resolve in its own root even after it exits.

    `Target.of(pid, start_time_ns)` is None when the process is gone (or is
    another one now) or its root cannot be opened (not ours to read)."""

    def __init__(self, pid: int, start_ticks: int, root_fd: int) -> None:
        self.pid = pid
        self.start_ticks = start_ticks
        self.root_fd = root_fd

    @classmethod
    def of(cls, pid: int, start_time_ns: int | None = None) -> Target | None:
        """The live process pid (the one that started at start_time_ns when
        given, as pmm_pid_info.start_time_ns), or None."""
        from pmm.symbolize.maps import proc_start_ticks, ticks_from_ns

        ticks = proc_start_ticks(pid)
        if ticks is None or (start_time_ns and abs(ticks - ticks_from_ns(start_time_ns)) > 1):
            return None
        try:
            fd = os.open(f"/proc/{pid}/root", _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        if proc_start_ticks(pid) != ticks:  # the pid was reused meanwhile
            os.close(fd)
            return None
        return cls(pid, ticks, fd)

    @property
    def key(self) -> tuple[int, int]:
        """(pid, start ticks): the process, for caches."""
        return (self.pid, self.start_ticks)

    def alive(self) -> bool:
        """Whether the process still runs (the same one)."""
        from pmm.symbolize.maps import proc_start_ticks

        return proc_start_ticks(self.pid) == self.start_ticks

    def open(self, path: str, expect: Expect | None = None) -> OpenFile:
        """path as the process names it, inside its root."""
        return open_at(self.root_fd, path, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS, expect)

    def open_mapped(self, start: int, end: int, path: str,
                    expect: Expect | None = None) -> OpenFile:
        """The file mapped at [start, end) while the process lives, through
        /proc/PID/map_files (the kernel's own reference: needs CAP_SYS_ADMIN
        or CAP_CHECKPOINT_RESTORE), with the inode the map named (expect: a
        map read earlier may be out of date); OSError when that cannot be
        done."""
        link = f"/proc/{self.pid}/map_files/{start:x}-{end:x}"
        pathfd = os.open(link, _O_PATH | os.O_CLOEXEC)
        try:
            if not self.alive():
                raise Refused(path, "the process exited while its map was read")
            return _reopen(pathfd, path, expect)
        finally:
            os.close(pathfd)

    def close(self) -> None:
        """Lets the root go."""
        if self.root_fd >= 0:
            fd, self.root_fd = self.root_fd, -1
            os.close(fd)

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Target(pid={self.pid}, start_ticks={self.start_ticks})"


def open_named(path: str, target: Target | None = None,
               expect: Expect | None = None) -> OpenFile:
    """A file a process named (maps, the module's object record): inside
    its root when the process is known (target), else in the caller's root
    with openat2's RESOLVE_NO_MAGICLINKS; expect: its (inode, size) when
    known. Refused, or the lookup's OSError."""
    if not path.startswith("/"):
        raise Refused(path, "not an absolute path", errno.EINVAL)
    if target is not None and target.root_fd >= 0:
        return target.open(path, expect)
    fd = os.open("/", _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_at(fd, path, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS, expect)
    finally:
        os.close(fd)


def open_beneath(directory: str, relative: str) -> OpenFile:
    """A file under a trusted directory (a debug directory, the debuginfod
    cache): looked up beneath it (RESOLVE_BENEATH: neither `..` nor a symlink
    leaves it; symlinks within it are followed, as a distribution's
    .build-id links are), opened for reading only if it is a regular file;
    programs may be given its path. Refused, or the lookup's OSError."""
    dirfd = os.open(directory, _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        f = open_at(dirfd, relative.lstrip("/"), RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
                    follow=True)
    finally:
        os.close(dirfd)
    f.arg_path = os.path.join(directory, relative.lstrip("/"))
    return f


def open_path(path: str) -> OpenFile:
    """A file at a path of the caller's own choosing, or one it trusts (a
    debug file debuginfod fetched into its cache): looked up as any path
    (symlinks followed), opened for reading only if it is a regular file;
    programs may be given its path."""
    path = os.path.abspath(path)
    try:
        pathfd = os.open(path, _O_PATH | os.O_CLOEXEC)
    except OSError as e:
        raise _refusal(path, e) from None
    try:
        f = _reopen(pathfd, path, None)
    finally:
        os.close(pathfd)
    f.arg_path = path
    return f
