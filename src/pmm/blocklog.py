"""`pmctl logs`'s output: a process's live blocks, oldest first, as lines in
/proc/pmm/pid's format or as one JSON document, written as the sorter
(pmm.kernel.blockstream.BlockSorter) hands them out: ten million blocks never
become one list or one string."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any

from pmm.kernel.blockstream import BlockSorter, Row
from pmm.kernel.model import Block, PidInfo, Site, op_name
from pmm.output import dump_json, dump_json_at
from pmm.text import printable


def since_cut(now_mono: int, since_s: float | None) -> int | None:
    """The oldest allocation time `--since` keeps (None: all)."""
    return None if since_s is None else now_mono - int(since_s * 1e9)


def proc_line(d: dict[str, Any], now_mono: int, now_real: int | None = None) -> str:
    """A block (Block.to_dict's form) in /proc/pmm/pid's format (the time is
    UTC, as the module prints it); the function and file names the program
    registered are escaped."""
    real = time.time_ns() if now_real is None else now_real
    wall_s = (d["time_ns"] + (real - now_mono)) // 1_000_000_000
    t = time.strftime("%H:%M:%S", time.gmtime(wall_s))
    s = f"{{{d['op']} @{t}}} Sz: {d['size']}B "
    if d["op"] in ("REALLOC", "MREMAP"):
        s += f"Prev Pointer: 0x{d['prev_ptr']:x} "
    s += f"Pointer: 0x{d['ptr']:x} Caller: 0x{d['caller'] or 0:x}"
    if d["func"] is not None:
        s += f" {printable(d['func'])}() {d['line']} {printable(str(d['file']))}"
    return s


class BlockLines:
    """A block's line at a time, as proc_line gives it, with what depends on
    the site computed once per site and the clock formatted once per
    second: ten million blocks go through here."""

    def __init__(self, sites: dict[int, Site], now_mono: int, now_real: int) -> None:
        self.sites = sites
        self.now = now_mono
        self.offset = now_real - now_mono
        self.second = -1
        self.stamp = ""
        self.text_tails: dict[int, tuple[int, str]] = {}

    def _text_tail(self, site_id: int) -> tuple[int, str]:
        tail = self.text_tails.get(site_id)
        if tail is None:
            d = Block(0, 0, 0, 0, site_id, 1, 0).to_dict(self.sites.get(site_id), 0)
            suffix = (f" {printable(d['func'])}() {d['line']} {printable(str(d['file']))}"
                      if d["func"] is not None else "")
            tail = self.text_tails[site_id] = (d["caller"] or 0, suffix)
        return tail

    def text(self, t: int, ptr: int, prev_ptr: int, size: int, site: int, op: int) -> str:
        """The block's line (proc_line's)."""
        wall_s = (t + self.offset) // 1_000_000_000
        if wall_s != self.second:
            self.second = wall_s
            self.stamp = time.strftime("%H:%M:%S", time.gmtime(wall_s))
        name = op_name(op)
        caller, suffix = self._text_tail(site)
        prev = f"Prev Pointer: 0x{prev_ptr:x} " if name in ("REALLOC", "MREMAP") else ""
        return (f"{{{name} @{self.stamp}}} Sz: {size}B {prev}Pointer: 0x{ptr:x} "
                f"Caller: 0x{caller:x}{suffix}")


def write_chunked(out: IO[str], lines: Iterable[str], every: int = 4096) -> None:
    """Writes lines a few thousand at a time (not one call each)."""
    buf: list[str] = []
    for line in lines:
        buf.append(line)
        if len(buf) >= every:
            out.write("\n".join(buf) + "\n")
            buf = []
    if buf:
        out.write("\n".join(buf) + "\n")
    out.flush()


def _commas(items: Iterable[str]) -> Iterator[str]:
    """The items, each but the last followed by a comma (a JSON list's)."""
    prev: str | None = None
    for x in items:
        if prev is not None:
            yield prev + ","
        prev = x
    if prev is not None:
        yield prev


def write_json(out: IO[str], info: PidInfo, sorter: BlockSorter, sites: dict[int, Site],
               now: int) -> None:
    """`pmctl logs --json`: {"pid", "comm", "state", "total", "blocks"}, the
    blocks written as they leave the sorter."""
    head = dump_json({"pid": info.pid, "comm": info.comm, "state": info.state_name,
                      "total": sorter.total})
    rows: Iterator[Row] = iter(sorter)
    first = next(rows, None)
    if first is None:
        out.write(head[:-2] + ',\n  "blocks": []\n}\n')
        out.flush()
        return
    out.write(head[:-2] + ',\n  "blocks": [\n')

    def items() -> Iterator[str]:
        for t, p, pp, sz, site, w, op in itertools.chain((first,), rows):
            b = Block(p, pp, sz, t, site, w, op)
            yield dump_json_at(b.to_dict(sites.get(b.site), now), 2)

    write_chunked(out, _commas(items()))
    out.write("  ]\n}\n")
    out.flush()


def write_text(out: IO[str], info: PidInfo, sorter: BlockSorter, sites: dict[int, Site],
               now: int, now_real: int) -> None:
    """`pmctl logs`: /proc/pmm/pid's header and a line per block."""
    out.write(f"PID: {info.pid}, Comp: {printable(info.comm)}, PPID: {info.ppid}, "
              f"State: {info.state}, Log count: {info.live_blocks}\n")
    if (info.dropped_records or info.unmatched_frees or info.pending_frees
            or info.older_frees):  # as /proc does
        out.write(f"Dropped: {info.dropped_records}, Unmatched frees: {info.unmatched_frees}, "
                  f"Pending frees: {info.pending_frees}, Older frees: {info.older_frees}\n")
    out.flush()
    lines = BlockLines(sites, now, now_real)
    write_chunked(out, (lines.text(t, p, pp, sz, s, op) for t, p, pp, sz, s, w, op in sorter))
