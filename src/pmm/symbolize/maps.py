"""Process memory maps: /proc/PID/maps read, parsed and kept in the cache.

An address means something only with the process's memory map. `capture_maps`
saves the map while the process lives to the maps cache, keyed by (pid, start
time in clock ticks, as field 22 of /proc/PID/stat and as
pmm_pid_info.start_time_ns / 10 ms), so a reused pid never picks up another
process's map and symbolization still works after the process exited.
`Mapping.translate` turns an address into (object path, file offset).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pmm.symbolize.cache import cache_dirs, maps_cache_dir, read_text, readable_dir, write_text

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
NS_PER_TICK = 1_000_000_000 // CLK_TCK


@dataclass(frozen=True)
class Mapping:
    """One line of /proc/PID/maps."""

    start: int
    end: int
    perms: str
    offset: int
    inode: int
    path: str  # "" for anonymous mappings

    def contains(self, addr: int) -> bool:
        """Whether addr lies in the mapping."""
        return self.start <= addr < self.end

    @property
    def is_file(self) -> bool:
        """Whether a file is mapped (an inode and an absolute path)."""
        return self.inode != 0 and self.path.startswith("/")

    @property
    def object_path(self) -> str:
        """The mapped file's path, without a ' (deleted)' suffix."""
        p = self.path
        return p[: -len(" (deleted)")] if p.endswith(" (deleted)") else p

    def translate(self, addr: int) -> int:
        """File offset of `addr` in the mapped object."""
        return addr - self.start + self.offset

    def line(self) -> str:
        """The mapping as a /proc/PID/maps line (device 00:00), as the cache keeps it."""
        return (
            f"{self.start:x}-{self.end:x} {self.perms} {self.offset:08x} 00:00 {self.inode}"
            + (f" {self.path}" if self.path else "")
        )


def parse_maps(text: str) -> list[Mapping]:
    """Mappings of a /proc/PID/maps text, sorted by start address."""
    out: list[Mapping] = []
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 5 or "-" not in parts[0]:
            continue
        lo, hi = parts[0].split("-", 1)
        try:
            m = Mapping(
                start=int(lo, 16),
                end=int(hi, 16),
                perms=parts[1],
                offset=int(parts[2], 16),
                inode=int(parts[4]),
                path=parts[5].strip() if len(parts) > 5 else "",
            )
        except ValueError:
            continue
        out.append(m)
    out.sort(key=lambda m: m.start)
    return out


def merge_maps(old: Iterable[Mapping], new: Iterable[Mapping]) -> list[Mapping]:
    """The new map plus old file mappings that no new mapping overlaps
    (a library unloaded since the last capture keeps its addresses)."""
    new_l = sorted(new, key=lambda m: m.start)
    out = list(new_l)
    for m in old:
        if not m.is_file:
            continue
        if any(n.start < m.end and m.start < n.end for n in new_l):
            continue
        out.append(m)
    out.sort(key=lambda m: m.start)
    return out


def find_mapping(maps: Sequence[Mapping], addr: int) -> Mapping | None:
    """The mapping of maps (sorted by start) that holds addr, or None."""
    starts = [m.start for m in maps]
    i = bisect.bisect_right(starts, addr) - 1
    if i >= 0 and maps[i].contains(addr):
        return maps[i]
    return None


def proc_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks since boot)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: split after the last ')'
    rest = stat[stat.rfind(")") + 2 :].split()
    try:
        return int(rest[19])  # fields 3.. -> index 0 is field 3; 22 - 3 = 19
    except (IndexError, ValueError):
        return None


def ticks_from_ns(start_time_ns: int) -> int:
    """A start time in nanoseconds as clock ticks, how the maps cache keys a
    process."""
    return start_time_ns // NS_PER_TICK


def _cache_name(pid: int, ticks: int) -> str:
    return f"{pid}-{ticks}"


def load_cached_maps(pid: int, start_ticks: int | None) -> list[Mapping] | None:
    """The cached map of (pid, start); start_ticks None: the newest for pid.
    A start time one tick off still matches (rounding)."""
    best: tuple[int, Path] | None = None
    for root in cache_dirs():
        d = root / "maps"
        if not readable_dir(d):
            continue
        for f in d.glob(f"{pid}-*"):
            try:
                ticks = int(f.name.split("-", 1)[1])
            except ValueError:
                continue
            if start_ticks is None:
                if best is None or ticks > best[0]:
                    best = (ticks, f)
            elif abs(ticks - start_ticks) <= 1:
                best = (ticks, f)
                break
        if best is not None and start_ticks is not None:
            break
    if best is None:
        return None
    try:
        return parse_maps(read_text(best[1]))
    except OSError:
        return None


def save_maps(pid: int, ticks: int, maps: Sequence[Mapping]) -> Path | None:
    """Writes the map (merged with what is cached) atomically; None: no cache dir."""
    d = maps_cache_dir()
    if d is None:
        return None
    path = d / _cache_name(pid, ticks)
    try:
        old = parse_maps(read_text(path))
    except OSError:
        old = []
    merged = merge_maps(old, maps)
    try:
        write_text(path, "".join(m.line() + "\n" for m in merged))
    except OSError:
        return None
    return path


def read_live_maps(pid: int) -> tuple[int, list[Mapping]] | None:
    """(start ticks, mappings) of a live process, None if gone/unreadable."""
    ticks = proc_start_ticks(pid)
    if ticks is None:
        return None
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None
    maps = parse_maps(text)
    if not maps or proc_start_ticks(pid) != ticks:
        return None  # exited (empty maps) or the pid was reused meanwhile
    return ticks, maps


def capture_maps(pid: int) -> Path | None:
    """Saves the live process's map to the cache; None if it is not alive."""
    live = read_live_maps(pid)
    if live is None:
        return None
    return save_maps(pid, live[0], live[1])


def maps_for(pid: int, start_time_ns: int | None = None) -> list[Mapping] | None:
    """The map of pid: live when it is the same process (and then cached
    too), else the cached one. start_time_ns: pmm_pid_info.start_time_ns."""
    want = ticks_from_ns(start_time_ns) if start_time_ns else None
    live = read_live_maps(pid)
    if live is not None and (want is None or abs(live[0] - want) <= 1):
        save_maps(pid, live[0], live[1])
        cached = load_cached_maps(pid, live[0])
        return cached if cached is not None else live[1]
    return load_cached_maps(pid, want)
