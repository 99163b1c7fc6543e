"""A process's mappings from /proc/PID/smaps, named as people read them, and
which of them grew between two snapshots.

`read(pid)` is the one I/O here; `parse`, `label` and `grown` are pure, so
the trend classification (pmm.analysis.growthkind) and its tests need no process.

Names: a file mapping is its path; the kernel's own are as it names them
([heap], [stack], [vdso]); an anonymous mapping is "[anon] 0x7f...", or
"[arena] 0x7f..." when it is the start of a 64 MiB-aligned region the way
glibc lays out a thread arena's heap, or "[stack:TID] 0x7f..." for a thread's
stack: an anonymous mapping right above a guard page, as pthread_create makes
it (the kernel names only the main thread's stack).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

# glibc's HEAP_MAX_SIZE on 64-bit: each non-main arena's heap starts aligned to it
ARENA_ALIGN = 64 << 20
# a guard page (or a few) below a thread's stack: PROT_NONE, at most this large
GUARD_MAX = 64 << 10

_HEADER = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \d+\s*(.*)$")
_FIELD = re.compile(r"^(\w+):\s+(\d+) kB$")


@dataclass(frozen=True)
class Mapping:
    """One mapping: its address range, permissions ("rw-p"), the kernel's name
    for it ("" when anonymous), and its resident, anonymous and swapped bytes."""

    start: int
    end: int
    perms: str
    path: str = ""
    rss: int = 0
    anon: int = 0
    swap: int = 0

    @property
    def size(self) -> int:
        """Its virtual size in bytes."""
        return self.end - self.start


@dataclass(frozen=True)
class MapGrowth:
    """A mapping that grew (or appeared) between two snapshots: its label, its
    resident bytes before (0: new) and after."""

    label: str
    start: int
    rss_before: int
    rss_after: int
    allocator: bool  # glibc's heap or an arena: the allocator's memory

    @property
    def growth(self) -> int:
        """Resident bytes it gained."""
        return self.rss_after - self.rss_before

    def to_dict(self) -> dict[str, object]:
        """The JSON form (sizes in bytes)."""
        return {"mapping": self.label, "start": self.start, "rss_before": self.rss_before,
                "rss_after": self.rss_after, "growth": self.growth,
                "allocator": self.allocator}


def parse(text: str) -> list[Mapping]:
    """/proc/PID/smaps as Mappings, in address order; lines it does not know
    are skipped."""
    out: list[Mapping] = []
    head: tuple[int, int, str, str] | None = None
    fields: dict[str, int] = {}

    def close() -> None:
        if head is not None:
            out.append(Mapping(head[0], head[1], head[2], head[3], fields.get("Rss", 0) * 1024,
                               fields.get("Anonymous", 0) * 1024,
                               fields.get("Swap", 0) * 1024))

    for line in text.splitlines():
        m = _HEADER.match(line)
        if m is not None:
            close()
            head = (int(m.group(1), 16), int(m.group(2), 16), m.group(3), m.group(4).strip())
            fields = {}
            continue
        f = _FIELD.match(line)
        if f is not None:
            fields[f.group(1)] = int(f.group(2))
    close()
    return out


def read(pid: int, proc: str = "/proc") -> list[Mapping]:
    """pid's mappings now; OSError when they cannot be read (gone, not
    permitted)."""
    with open(f"{proc}/{pid}/smaps", encoding="utf-8", errors="replace") as f:
        return parse(f.read())


def _is_guard(m: Mapping) -> bool:
    return not m.path and m.perms.startswith("---") and m.size <= GUARD_MAX


def label(maps: list[Mapping], i: int) -> str:
    """How mapping maps[i] is named for people (see the module docstring);
    maps in address order."""
    m = maps[i]
    if m.path:
        return m.path
    where = f"0x{m.start:x}"
    if m.start % ARENA_ALIGN == 0 and m.perms.startswith("rw"):
        nxt = maps[i + 1] if i + 1 < len(maps) else None
        reserved = m.size + (nxt.size if nxt is not None and nxt.start == m.end
                             and nxt.perms.startswith("---") and not nxt.path else 0)
        if reserved <= ARENA_ALIGN:
            return f"[arena] {where}"
    if i > 0 and _is_guard(maps[i - 1]) and maps[i - 1].end == m.start and \
            m.perms.startswith("rw"):
        return f"[thread stack] {where}"
    return f"[anon] {where}"


def is_allocator(name: str) -> bool:
    """Whether a label names memory glibc's malloc manages ([heap], an arena)."""
    return name == "[heap]" or name.startswith("[arena]")


def grown(before: Iterable[Mapping], after: Iterable[Mapping], limit: int | None = None,
          min_bytes: int = 64 << 10) -> list[MapGrowth]:
    """The mappings whose resident bytes grew by at least min_bytes from
    `before` to `after`, most first (all of them, or the first `limit`: whose
    growth it is takes all of them, a program with many threads has many
    that grow a little). A mapping is the same
    when it starts or ends at the same address with the same name (anonymous
    mappings that grow merge with their neighbour, which moves one end)."""
    old = sorted(before, key=lambda m: m.start)
    new = sorted(after, key=lambda m: m.start)
    by_start = {(m.start, m.path): m for m in old}
    by_end = {(m.end, m.path): m for m in old}
    out: list[MapGrowth] = []
    for i, m in enumerate(new):
        prev = by_start.get((m.start, m.path)) or by_end.get((m.end, m.path))
        was = prev.rss if prev is not None else 0
        if m.rss - was < min_bytes:
            continue
        name = label(new, i)
        out.append(MapGrowth(name, m.start, was, m.rss, is_allocator(name)))
    out.sort(key=lambda g: (-g.growth, g.start))
    return out if limit is None else out[:limit]


def thread_stack_names(pid: int, maps: list[Mapping], proc: str = "/proc") -> dict[int, str]:
    """Thread stacks named by thread: start address -> "[stack:TID]", from the
    stack pointer of each thread blocked in a system call
    (/proc/PID/task/TID/syscall, readable with ptrace access; a thread that
    runs, or a file that cannot be read, names nothing)."""
    out: dict[int, str] = {}
    try:
        tids = sorted(int(t) for t in os.listdir(f"{proc}/{pid}/task"))
    except (OSError, ValueError):
        return out
    anon = [m for m in maps if not m.path or m.path == "[stack]"]
    for tid in tids:
        try:
            with open(f"{proc}/{pid}/task/{tid}/syscall") as f:
                words = f.read().split()
            sp = int(words[-2], 16) if len(words) >= 3 else 0
        except (OSError, ValueError):
            continue
        for m in anon:
            if m.start <= sp < m.end:
                out[m.start] = f"[stack:{tid}]"
    return out


def name_stacks(growth: list[MapGrowth], stacks: dict[int, str]) -> list[MapGrowth]:
    """growth with the thread stacks that `stacks` names relabelled."""
    return [MapGrowth(f"{stacks[g.start]} 0x{g.start:x}", g.start, g.rss_before, g.rss_after,
                      g.allocator) if g.start in stacks else g for g in growth]
