"""Parsers for /proc/pmm/cfg and /proc/pmm/pid, the module's text files.

/proc/pmm/cfg, one setting per line:
    ["INTERVAL" (Scan Interval) :=10000]
    ["SCAN" (Scan on:1/off:0) := 1]
/proc/pmm/pid, a header per monitored pid followed by its live blocks:
    [1] PID: 21113, Comp: demo_daemon, PPID: 1, State: 1, Log count: 2
    Dropped: 0, Unmatched frees: 0, Pending frees: 0, Older frees: 0
    {MALLOC @06:57:11} Sz: 100B Pointer: 0x10012008 Caller: 0x10000e60 main() 207 demo_daemon.c
    {REALLOC @06:57:21} Sz: 200B Prev Pointer: 0x10012008 Pointer: 0x10012008 Caller: ...

The parse functions are pure (they take text); `read_cfg` and `read_pid`
read the files. Unrecognised lines are kept in `ProcPid.other` (cfg: ignored)
so a format change is visible rather than silently lost.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

PROC_CFG = Path("/proc/pmm/cfg")
PROC_PID = Path("/proc/pmm/pid")

_QUOTES = "\"\u201c\u201d"
_CFG_RE = re.compile(
    rf"^\[[{_QUOTES}](?P<name>[A-Z_0-9]+)[{_QUOTES}]\s*\((?P<desc>[^)]*\)?)\)\s*:=\s*"
    r"(?P<value>-?\d+)\s*\]$"
)
_HDR_RE = re.compile(
    r"^\[(?P<index>\d+)\]\s+PID:\s*(?P<pid>\d+),\s*Comp:\s*(?P<comm>.*?),\s*"
    r"PPID:\s*(?P<ppid>-?\d+),\s*State:\s*(?P<state>\d+),\s*Log count:\s*(?P<count>\d+)"
    r"(?P<rest>.*)$"
)
_SUMMARY_RE = re.compile(
    r"^Dropped:\s*(?P<dropped>\d+),\s*Unmatched frees:\s*(?P<unmatched>\d+),\s*"
    r"Pending frees:\s*(?P<pending>\d+)(?:,\s*Older frees:\s*(?P<older>\d+))?"
)
_BLOCK_RE = re.compile(
    r"^\{(?P<op>[A-Z_]+)\s*@(?P<time>[^}]*)\}\s*Sz:\s*(?P<size>\d+)B"
    r"(?:\s+Prev Pointer:\s*(?P<prev>0x[0-9a-fA-F]+|\(\w+\)|\S+))?"
    r"\s+Pointer:\s*(?P<ptr>0x[0-9a-fA-F]+|\S+)"
    r"(?:\s+Caller:\s*(?P<caller>0x[0-9a-fA-F]+|\S+))?"
    r"(?:\s+(?P<func>\S+?)\(\)\s+(?P<line>\d+)\s+(?P<file>\S+))?"
    r"(?P<rest>.*)$"
)


@dataclass(frozen=True)
class CfgEntry:
    """One setting of /proc/pmm/cfg: its name, its description, its value."""

    name: str
    desc: str
    value: int


def parse_cfg(text: str) -> dict[str, CfgEntry]:
    """The settings of /proc/pmm/cfg by name (INTERVAL, SCAN, START_PID, ...)."""
    out: dict[str, CfgEntry] = {}
    for raw in text.splitlines():
        line = raw.strip()
        m = _CFG_RE.match(line)
        if m:
            out[m["name"]] = CfgEntry(m["name"], m["desc"].strip(), int(m["value"]))
    return out


def _int0(s: str | None) -> int | None:
    if s is None:
        return None
    try:
        return int(s, 0)
    except ValueError:
        return None  # hidden ("(hidden)", "0x(null)") or not a number


@dataclass(frozen=True)
class ProcBlock:
    """One live block line of /proc/pmm/pid."""

    op: str
    time: str  # as printed, e.g. "06:57:11"
    size: int
    ptr: int | None  # None when the reader may not see addresses
    prev_ptr: int | None
    caller: int | None
    func: str | None
    line: int | None
    file: str | None
    raw: str

    def key(self) -> tuple[str, int, int | None, int | None]:
        """What identifies the block regardless of how time is printed."""
        return (self.op, self.size, self.ptr, self.prev_ptr)


@dataclass
class ProcPidEntry:
    """A pid's header line and its blocks."""

    index: int
    pid: int
    comm: str
    ppid: int
    state: int
    log_count: int
    dropped: int | None = None  # from the "Dropped: ..." summary line
    unmatched_frees: int | None = None
    older_frees: int | None = None
    pending_frees: int | None = None
    blocks: list[ProcBlock] = field(default_factory=list)
    raw: str = ""


@dataclass
class ProcPid:
    """/proc/pmm/pid parsed: the entries by pid, and the lines not recognised."""

    pids: dict[int, ProcPidEntry] = field(default_factory=dict)
    other: list[str] = field(default_factory=list)


def parse_block(line: str) -> ProcBlock | None:
    """One live block line of /proc/pmm/pid parsed; None if it is not one."""
    m = _BLOCK_RE.match(line.strip())
    if not m:
        return None
    return ProcBlock(
        op=m["op"],
        time=m["time"].strip(),
        size=int(m["size"]),
        ptr=_int0(m["ptr"]),
        prev_ptr=_int0(m["prev"]),
        caller=_int0(m["caller"]),
        func=m["func"],
        line=int(m["line"]) if m["line"] else None,
        file=m["file"],
        raw=line.strip(),
    )


def parse_pid(text: str) -> ProcPid:
    """All pids of /proc/pmm/pid with their blocks, in file order."""
    out = ProcPid()
    cur: ProcPidEntry | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        m = _HDR_RE.match(line)
        if m:
            cur = ProcPidEntry(
                index=int(m["index"]),
                pid=int(m["pid"]),
                comm=m["comm"],
                ppid=int(m["ppid"]),
                state=int(m["state"]),
                log_count=int(m["count"]),
                raw=line,
            )
            out.pids[cur.pid] = cur
            continue
        sm = _SUMMARY_RE.match(line)
        if sm and cur is not None:
            cur.dropped = int(sm["dropped"])
            cur.unmatched_frees = int(sm["unmatched"])
            cur.pending_frees = int(sm["pending"])
            cur.older_frees = int(sm["older"] or 0)
            continue
        b = parse_block(line)
        if b is not None and cur is not None:
            cur.blocks.append(b)
        else:
            out.other.append(line)
    return out


def read_cfg(path: Path = PROC_CFG) -> dict[str, CfgEntry]:
    """The settings of the cfg file (parse_cfg); OSError if it cannot be read."""
    return parse_cfg(path.read_text())


def read_pid(path: Path = PROC_PID) -> ProcPid:
    """The pid file parsed (parse_pid); OSError if it cannot be read."""
    return parse_pid(path.read_text())
