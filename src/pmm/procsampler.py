"""Samples a process from /proc when the module does not (absent, or the
process is not monitored): /proc/PID/statm for vm and rss (pages, exact),
/proc/PID/status for the rss split (anon, file, shmem; kB) and
/proc/PID/stat for the start time that keys the process."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from pmm.store import TICK_NS, ProcessRow, SampleRow

PAGE = os.sysconf("SC_PAGE_SIZE")


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


def parse_status_kb(text: str, keys: tuple[str, ...]) -> dict[str, int | None]:
    """The given 'Key:   123 kB' lines of /proc/PID/status, in bytes (None if absent)."""
    out: dict[str, int | None] = dict.fromkeys(keys)
    for line in text.splitlines():
        k, _, v = line.partition(":")
        if k in out:
            parts = v.split()
            if parts:
                out[k] = int(parts[0]) * 1024
    return out


def parse_statm(text: str) -> tuple[int, int]:
    """(vm, rss) in bytes from /proc/PID/statm."""
    f = text.split()
    return int(f[0]) * PAGE, int(f[1]) * PAGE


def read_stat(pid: int, proc: str = "/proc") -> ProcStat:
    """pid's /proc/PID/stat parsed; ProcessGone if the pid does not exist or
    the file cannot be parsed."""
    try:
        return parse_stat(_read(f"{proc}/{pid}/stat"))
    except (ValueError, IndexError):
        raise ProcessGone(f"{proc}/{pid}/stat") from None


def sample(pid: int, start_time: int | None = None, proc: str = "/proc") -> SampleRow:
    """One sample of pid. If start_time is given and the pid now names another
    process (or a zombie), ProcessGone."""
    st = read_stat(pid, proc)
    if start_time is not None and st.start_time != start_time:
        raise ProcessGone(f"pid {pid} is another process now")
    if st.state in ("Z", "X"):
        raise ProcessGone(f"pid {pid} exited")
    now = boottime_ns()
    try:
        vm, rss = parse_statm(_read(f"{proc}/{pid}/statm"))
    except (ValueError, IndexError):
        raise ProcessGone(f"{proc}/{pid}/statm") from None
    split = parse_status_kb(_read(f"{proc}/{pid}/status"), ("RssAnon", "RssFile", "RssShmem"))
    return SampleRow(pid, st.start_time, now, vm, rss, split["RssAnon"], split["RssFile"],
                     split["RssShmem"], source="proc")


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
