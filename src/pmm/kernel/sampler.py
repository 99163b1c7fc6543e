"""Samples a process from /proc when the module does not (absent, or the
process is not monitored): /proc/PID/status gives vm, rss and its split
(anon, file, shmem; kB, exact) and /proc/PID/stat the start time that keys
the process.

A sampled process's /proc/PID directory stays open between samples (at most
OPEN_DIRS of them), so a sample reads one file: a file opened through that
directory is that very process's, and fails once it is gone, so a reused pid
is never mistaken for it. pmd samples hundreds of processes a second this way.
"""

from __future__ import annotations

import collections
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from pmm.store import TICK_NS, ProcessRow, SampleRow

PAGE = os.sysconf("SC_PAGE_SIZE")
READ_SIZE = 16384
OPEN_DIRS = 512  # open /proc/PID directories kept; beyond, the least recently sampled close


class ProcessGone(Exception):
    """The pid does not exist (any more), or is another process now."""


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/PID/stat that sampling needs."""

    pid: int
    comm: str
    state: str
    ppid: int
    start_time: int  # ns since boot, tick resolution (see pmm.store.start_key)


def boottime_ns() -> int:
    """Now on CLOCK_BOOTTIME, in nanoseconds (the clock of stored sample times)."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError):
        raise ProcessGone(path) from None


def parse_stat(text: str) -> ProcStat:
    """/proc/PID/stat: the comm is in parentheses and may hold spaces and ')'."""
    lpar = text.index("(")
    rpar = text.rindex(")")
    pid = int(text[:lpar].strip())
    comm = text[lpar + 1 : rpar]
    rest = text[rpar + 2 :].split()
    # rest[0] is field 3 (state); starttime is field 22
    return ProcStat(pid, comm, rest[0], int(rest[1]), int(rest[19]) * TICK_NS)


def read_stat(pid: int, proc: str = "/proc") -> ProcStat:
    """pid's /proc/PID/stat parsed; ProcessGone if the pid does not exist or
    the file cannot be parsed."""
    try:
        return parse_stat(_read(f"{proc}/{pid}/stat"))
    except (ValueError, IndexError):
        raise ProcessGone(f"{proc}/{pid}/stat") from None


_STATUS_FIELDS = re.compile(rb"^(State|VmSize|VmRSS|RssAnon|RssFile|RssShmem):\s*(\S+)",
                            re.MULTILINE)


def parse_status_sample(text: bytes) -> tuple[str, int, int, int, int, int]:
    """(state, vm, rss, rss_anon, rss_file, rss_shmem) from /proc/PID/status,
    sizes in bytes; a process without memory (a kernel thread) has 0s."""
    f = dict(_STATUS_FIELDS.findall(text))

    def kb(key: bytes) -> int:
        return int(f.get(key, b"0")) * 1024

    state = f.get(b"State", b"?")[:1].decode("ascii", "replace")
    return (state, kb(b"VmSize"), kb(b"VmRSS"), kb(b"RssAnon"), kb(b"RssFile"),
            kb(b"RssShmem"))


class _OpenDirs:
    """Open /proc/PID directories by (proc, pid, start time): see the module's
    docstring. Only pmd's loop thread samples."""

    def __init__(self, limit: int = OPEN_DIRS) -> None:
        self.limit = limit
        self.fds: collections.OrderedDict[tuple[str, int, int], int] = \
            collections.OrderedDict()

    def get(self, proc: str, pid: int, start_time: int) -> int:
        key = (proc, pid, start_time)
        fd = self.fds.get(key)
        if fd is not None:
            self.fds.move_to_end(key)
            return fd
        try:
            fd = os.open(f"{proc}/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except (FileNotFoundError, ProcessLookupError):
            raise ProcessGone(f"{proc}/{pid}") from None
        try:
            st = parse_stat(_read_at(fd, "stat").decode("utf-8", "replace"))
        except (ProcessGone, ValueError, IndexError):
            os.close(fd)
            raise ProcessGone(f"{proc}/{pid}/stat") from None
        except BaseException:  # not readable (EACCES), or interrupted
            os.close(fd)
            raise
        if st.start_time != start_time:
            os.close(fd)
            raise ProcessGone(f"pid {pid} is another process now")
        self.fds[key] = fd
        while len(self.fds) > self.limit:
            os.close(self.fds.popitem(last=False)[1])
        return fd

    def drop(self, proc: str, pid: int, start_time: int) -> None:
        fd = self.fds.pop((proc, pid, start_time), None)
        if fd is not None:
            os.close(fd)


_open_dirs = _OpenDirs()


def _read_at(dir_fd: int, name: str) -> bytes:
    """The whole of a /proc file under an open /proc/PID directory; ProcessGone
    when that process is gone."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    except (FileNotFoundError, ProcessLookupError):
        raise ProcessGone(name) from None
    try:
        # these files are made in one piece (single_open): a read that does
        # not fill the buffer got all of it
        chunks = [os.read(fd, READ_SIZE)]
        while len(chunks[-1]) == READ_SIZE:
            chunks.append(os.read(fd, READ_SIZE))
    except ProcessLookupError:
        raise ProcessGone(name) from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def forget(pid: int, start_time: int, proc: str = "/proc") -> None:
    """Closes the process's /proc/PID directory kept for sampling, if any
    (it is no longer sampled)."""
    _open_dirs.drop(proc, pid, start_time)


def sample(pid: int, start_time: int | None = None, proc: str = "/proc") -> SampleRow:
    """One sample of pid. If start_time is given and the pid now names another
    process (or a zombie), ProcessGone."""
    if start_time is None:
        start_time = read_stat(pid, proc).start_time
    fd = _open_dirs.get(proc, pid, start_time)
    try:
        now = boottime_ns()
        state, vm, rss, anon, file, shmem = parse_status_sample(_read_at(fd, "status"))
        if state in ("Z", "X"):
            raise ProcessGone(f"pid {pid} exited")
    except (ProcessGone, ValueError):
        _open_dirs.drop(proc, pid, start_time)
        raise ProcessGone(f"pid {pid} exited") from None
    return SampleRow(pid, start_time, now, vm, rss, anon, file, shmem, source="proc")


def describe(pid: int, start_time: int | None = None, proc: str = "/proc",
             source: str = "proc") -> ProcessRow:
    """comm, exe and cmdline of a live process ('' where not readable)."""
    st = read_stat(pid, proc)
    if start_time is not None and st.start_time != start_time:
        raise ProcessGone(f"pid {pid} is another process now")
    try:
        exe = os.readlink(f"{proc}/{pid}/exe")
    except OSError:
        exe = ""
    try:
        raw = Path(f"{proc}/{pid}/cmdline").read_bytes()
        cmdline = " ".join(a.decode("utf-8", "replace") for a in raw.split(b"\0") if a)
    except OSError:
        cmdline = ""
    return ProcessRow(pid, st.start_time, st.comm, exe, cmdline, boottime_ns(), None, source)
