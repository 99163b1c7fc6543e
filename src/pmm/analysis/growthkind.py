"""Where a process's memory growth goes: the kind of growth, and its evidence.
Pure logic, no I/O.

The rss a process's samples show is split, per sample, into

- the live heap: bytes in live blocks (the hook's figure: exact, or weighted
  in sampled mode); unknown for a process without the hook;
- the rest of its anonymous memory (rss_anon - live heap): what the
  allocator holds free (`heap_free`, when the hook can read it: glibc's
  mallinfo2, jemalloc's stats), its overhead, and memory outside malloc
  (the program's own mappings, thread stacks);
- file pages and shared memory (rss_file, rss_shmem).

`classify` fits the detector's robust slope (pmm.analysis.trend.detect: Theil-Sen on
bucket minima, the same tests) to each part, and names the kind of the
growth after the part that grows fastest. The rest of anon and the
allocator's free bytes are taken as at the live heap's floor (its minimum,
their maximum, within a bucket's width of each sample), so that blocks live for
a moment (a burst, a request) do not hide what stays behind when they are
freed:

LEAK              the live heap grows: a leak or an unbounded cache; the
                  sites that grow say where.
RETENTION         anonymous memory grows while the live heap is flat, and the
                  allocator holds it: its free bytes grow, or the mappings
                  that grew are its own ([heap], glibc's arenas).
                  Fragmentation, an arena per thread, jemalloc's dirty pages.
OUTSIDE THE HEAP  anonymous memory grows with neither: mappings of the
                  program's own, thread stacks (the mappings that grew say).
NOT IN LIVE BLOCKS  anonymous memory outside live blocks grows, and neither
                  the allocator's figures nor the mappings say whose it is.
FILE, SHMEM       file pages, shared memory grow.
HEAP UNKNOWN      anonymous memory grows, and the live heap is not known
                  (no hook: `pmctl attach PID`).
NONE              no part grows (or too few samples to say).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pmm.analysis.trend import Params, Trend, Verdict, detect
from pmm.kernel.smaps import MapGrowth
from pmm.units import human_bytes, human_rate


class Kind(enum.StrEnum):
    """The kind of a process's memory growth (see the module docstring)."""

    LEAK = "LEAK"
    RETENTION = "RETENTION"
    OUTSIDE_HEAP = "OUTSIDE THE HEAP"
    NOT_IN_LIVE = "NOT IN LIVE BLOCKS"
    FILE = "FILE"
    SHMEM = "SHMEM"
    HEAP_UNKNOWN = "HEAP UNKNOWN"
    NONE = "NONE"


# label values of the metrics' kind gauge
KIND_LABELS: dict[Kind, str] = {
    Kind.LEAK: "leak", Kind.RETENTION: "retention", Kind.OUTSIDE_HEAP: "outside_heap",
    Kind.NOT_IN_LIVE: "not_in_live_blocks", Kind.FILE: "file", Kind.SHMEM: "shmem",
    Kind.HEAP_UNKNOWN: "heap_unknown", Kind.NONE: "none",
}

# what to do about each kind (the README's trend section says the same)
ADVICE: dict[Kind, str] = {
    Kind.LEAK: "find the sites: pmctl leaks PID (or pmctl report PID -o FILE.html)",
    Kind.RETENTION: "glibc: malloc_trim(0) returns free pages; MALLOC_TRIM_THRESHOLD_ and "
    "M_TRIM_THRESHOLD trim sooner, MALLOC_ARENA_MAX=2 caps the arenas; jemalloc: "
    "dirty_decay_ms (MALLOC_CONF=dirty_decay_ms:1000)",
    Kind.OUTSIDE_HEAP: "look at the mappings named (/proc/PID/smaps): the program's own "
    "mmaps, thread stacks",
    Kind.NOT_IN_LIVE: "watch it to name the mappings: pmctl trend PID --watch 30s",
    Kind.FILE: "file pages: the page cache of files it maps or reads; reclaimable unless "
    "locked",
    Kind.SHMEM: "shared memory (tmpfs, memfd, SysV): look at /dev/shm and its mappings",
    Kind.HEAP_UNKNOWN: "with the hook in the process (pmctl attach PID, or pmctl run), "
    "pmctl trend PID --watch or pmd's database splits the heap from the rest",
    Kind.NONE: "",
}

# the allocator's free bytes are fitted when they are known over this share
# of the window's samples, its end included
FREE_KNOWN_SHARE = 0.8

# the mappings that grew kept as evidence, most first (the kind weighs them all)
MAPS_SHOWN = 8

# parts of the split, in the order the chart stacks them
PARTS = ("live", "heap_free", "anon_other", "file", "shmem")
GROWING = (Verdict.LEAK, Verdict.GROWING)


@dataclass(frozen=True)
class SplitPoint:
    """One sample's split (bytes; None where unknown): the live heap, what the
    allocator holds free (at most the anonymous memory outside live blocks),
    the rest of the anonymous memory, file pages and shared memory."""

    live: int | None
    heap_free: int | None
    anon_other: int
    file: int
    shmem: int

    def to_dict(self) -> dict[str, int | None]:
        """The JSON form: the parts by name."""
        return {"live": self.live, "heap_free": self.heap_free,
                "anon_other": self.anon_other, "file": self.file, "shmem": self.shmem}


def split_point(anon: int, file: int, shmem: int, live: int | None,
                heap_free: int | None) -> SplitPoint:
    """A sample's split: live and the allocator's free bytes are clipped so
    that the parts add up to anon + file + shmem (the hook's live figure may
    run ahead of the kernel's counters, and the allocator's free bytes
    include pages that are not resident)."""
    if live is None:
        return SplitPoint(None, None, max(anon, 0), file, shmem)
    lv = min(max(live, 0), max(anon, 0))
    rest = max(anon, 0) - lv
    held = None if heap_free is None else min(max(heap_free, 0), rest)
    return SplitPoint(lv, held, rest - (held or 0), file, shmem)


@dataclass(frozen=True)
class Classification:
    """The kind of growth and its evidence: each part's trend (pmm.analysis.trend.Trend,
    by part name: live, anon_other, heap_free, anon, file, shmem; only those
    known), the latest split, the allocator's latest figures and the
    mappings that grew (when snapshots were taken)."""

    kind: Kind
    reason: str
    parts: dict[str, Trend] = field(default_factory=dict)
    heap_known: bool = False
    latest: SplitPoint | None = None
    allocator: str | None = None
    heap_free: int | None = None
    heap_trimmable: int | None = None
    mappings: tuple[MapGrowth, ...] = ()
    also: tuple[Kind, ...] = ()  # other kinds that grow too, fastest first

    @property
    def advice(self) -> str:
        """What to do about it (README's trend section)."""
        return ADVICE[self.kind]

    def rate(self, part: str) -> float | None:
        """A part's slope in bytes per second (None: not fitted)."""
        t = self.parts.get(part)
        return None if t is None or not t.buckets else t.slope

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: kind, reason, advice, heap_known, each part's verdict
        and rate (bytes/min), the latest split, the allocator's figures and
        the mappings that grew."""
        return {
            "kind": str(self.kind),
            "reason": self.reason,
            "advice": self.advice,
            "heap_known": self.heap_known,
            "also": [str(k) for k in self.also],
            "parts": {name: {"verdict": str(t.verdict), "rate_bytes_min": t.slope * 60.0,
                             "rate_bytes_min_low": t.slope_low * 60.0,
                             "rate_bytes_min_high": t.slope_high * 60.0,
                             "growth_bytes": t.growth}
                      for name, t in self.parts.items()},
            "latest": self.latest.to_dict() if self.latest is not None else None,
            "allocator": self.allocator,
            "heap_free": self.heap_free,
            "heap_trimmable": self.heap_trimmable,
            "mappings": [m.to_dict() for m in self.mappings],
        }


def _bucket_width(times: Sequence[float], params: Params) -> float:
    """About how wide the detector's time buckets are for these samples."""
    n = len(times)
    if n < 2:
        return 0.0
    k = max(params.min_buckets, min(params.max_buckets, n // params.samples_per_bucket))
    return (times[-1] - times[0]) / k


def _sliding(times: Sequence[float], values: Sequence[int], reach: float,
             pick: Callable[[int, int], int]) -> list[int]:
    """Each sample's pick (min or max) of the values within `reach` seconds of
    it (times sorted), by a monotonic queue: O(n)."""
    def better(a: int, b: int) -> bool:
        return a <= b if pick is min else a >= b

    out: list[int] = []
    queue: deque[int] = deque()  # indices whose values are monotonic, best first
    hi = 0
    for t in times:
        while hi < len(times) and times[hi] <= t + reach:
            while queue and better(values[hi], values[queue[-1]]):
                queue.pop()
            queue.append(hi)
            hi += 1
        while times[queue[0]] < t - reach:
            queue.popleft()
        out.append(values[queue[0]])
    return out


def _known_from(values: Sequence[int | None] | None, n: int) -> int:
    """The index from which every one of the n values is known (n: none)."""
    if values is None or len(values) != n:
        return n
    i = n
    while i > 0 and values[i - 1] is not None:
        i -= 1
    return i


def _known(values: Sequence[int | None] | None, n: int) -> bool:
    return values is not None and len(values) == n and all(v is not None for v in values)


def _grows(t: Trend | None) -> bool:
    return t is not None and t.verdict in GROWING and t.slope > 0.0


def _rate(t: Trend) -> str:
    return human_rate(t.slope * 60)


def _maps_text(maps: Sequence[MapGrowth], most: int = 3) -> str:
    return ", ".join(f"{m.label} +{human_bytes(m.growth)}" for m in maps[:most])


def classify(times: Sequence[float], anon: Sequence[int], file: Sequence[int],
             shmem: Sequence[int], live: Sequence[int | None] | None = None,
             heap_free: Sequence[int | None] | None = None,
             heap_trimmable: int | None = None, allocator: str | None = None,
             mappings: Sequence[MapGrowth] | None = None,
             params: Params | None = None, live_now: int | None = None) -> Classification:
    """The kind of growth of one process's samples (times in seconds; sizes in
    bytes, one per sample; live and heap_free None where unknown: live is
    fitted only when every sample has it, heap_free when the samples from
    some point on have it and they are most of the window; the latest known
    heap_free is reported). heap_trimmable and allocator are the latest
    figures; mappings those that grew over the window (pmm.kernel.smaps.grown),
    None when no snapshots were taken. live_now: the live heap now, when the
    samples lack its history (the module's ring)."""
    params = params or Params()
    n = len(times)
    if not (len(anon) == len(file) == len(shmem) == n):
        raise ValueError("times, anon, file and shmem must be of equal length")
    heap_known = _known(live, n)
    # the allocator's figures come with the hook's first report, a moment
    # after it starts: fitted from there on when that is most of the window
    free_from = _known_from(heap_free, n)
    free_known = heap_known and n - free_from >= FREE_KNOWN_SHARE * n
    lv: list[int] = [int(v or 0) for v in live] if heap_known and live is not None else []
    hf: list[int] = [int(v or 0) for v in heap_free[free_from:]] \
        if free_known and heap_free is not None else []
    parts: dict[str, Trend] = {}
    if heap_known:
        parts["live"] = detect(times, [float(v) for v in lv], params)
        # the rest of anon and the allocator's free bytes as at the live heap's
        # floor: blocks live for a moment (a request's, a burst's) would
        # otherwise hide the growth of what they leave behind once freed
        reach = _bucket_width(times, params)
        floor = _sliding(times, lv, reach, min)
        parts["anon_other"] = detect(times, [float(a - f) for a, f in zip(anon, floor,
                                                                          strict=True)], params)
        if free_known:
            tf = times[free_from:]
            parts["heap_free"] = detect(tf, [float(v) for v in _sliding(tf, hf, reach, max)],
                                        params)
    else:
        parts["anon"] = detect(times, [float(v) for v in anon], params)
    parts["file"] = detect(times, [float(v) for v in file], params)
    parts["shmem"] = detect(times, [float(v) for v in shmem], params)
    known_free = [v for v in heap_free or () if v is not None]
    free_now = int(known_free[-1]) if known_free else None
    latest = split_point(anon[-1], file[-1], shmem[-1], lv[-1] if lv else None,
                         free_now if heap_known and heap_free and heap_free[-1] is not None
                         else None) if n else None
    maps = tuple(mappings or ())
    common: dict[str, Any] = dict(parts=parts, heap_known=heap_known, latest=latest,
                                  allocator=allocator, heap_free=free_now,
                                  heap_trimmable=heap_trimmable, mappings=maps[:MAPS_SHOWN])
    first = next(iter(parts.values()))
    if first.verdict is Verdict.NOT_ENOUGH_DATA:
        return Classification(Kind.NONE, f"not enough data: {first.reason}", **common)

    # each growing part's kind and the reason it gives, fastest first
    found: list[tuple[float, Kind, str]] = []
    if heap_known:
        t = parts["live"]
        if _grows(t):
            found.append((t.slope, Kind.LEAK, f"the live heap grows {_rate(t)} "
                          f"(+{human_bytes(t.growth)} over the window)"))
        t = parts["anon_other"]
        if _grows(t):
            kind, why = _outside_live(t, parts.get("heap_free"), maps, heap_trimmable,
                                      allocator, free_now)
            found.append((t.slope, kind, why))
    else:
        t = parts["anon"]
        if _grows(t):
            why = (f"anonymous memory grows {_rate(t)}; the live heap is unknown (the hook "
                   "is not in the process)") if live_now is None else (
                f"anonymous memory grows {_rate(t)}; these samples lack the live heap's "
                f"history ({human_bytes(live_now)} live now)")
            if maps:
                why += f"; mappings that grew: {_maps_text(maps)}"
            found.append((t.slope, Kind.HEAP_UNKNOWN, why))
    for name, kind, what in (("file", Kind.FILE, "file pages grow"),
                             ("shmem", Kind.SHMEM, "shared memory grows")):
        t = parts[name]
        if _grows(t):
            why = f"{what} {_rate(t)}"
            if maps:
                why += f"; mappings that grew: {_maps_text(maps)}"
            found.append((t.slope, kind, why))
    if not found:
        what = "the live heap, the rest of anon" if heap_known else "anon"
        return Classification(Kind.NONE, f"no part grows ({what}, file, shmem)", **common)
    found.sort(key=lambda x: -x[0])
    also = tuple(k for _, k, _ in found[1:])
    reason = found[0][2]
    if also:
        reason += "; also growing: " + ", ".join(str(k) for k in also)
    return Classification(found[0][1], reason, also=also, **common)


def _outside_live(t: Trend, held: Trend | None, maps: tuple[MapGrowth, ...],
                  trimmable: int | None, allocator: str | None,
                  free_now: int | None) -> tuple[Kind, str]:
    """RETENTION or OUTSIDE THE HEAP (or NOT IN LIVE BLOCKS: neither can be
    told) for anonymous memory outside live blocks that grows at t."""
    base = f"anonymous memory outside live blocks grows {_rate(t)} while the live heap is flat"
    alloc = allocator or "the allocator"
    figures = ""
    if free_now is not None:
        figures = f"; {alloc} holds {human_bytes(free_now)} free"
        if trimmable is not None:
            figures += f", malloc_trim would return {human_bytes(trimmable)}"
    elif trimmable is not None:
        figures = f"; malloc_trim would return {human_bytes(trimmable)}"
    mine = [m for m in maps if m.allocator]
    other = [m for m in maps if not m.allocator]
    if held is not None:
        # the allocator's free bytes carry at least half of the growth
        if _grows(held) and held.slope >= 0.5 * t.slope:
            return Kind.RETENTION, f"{base}; {alloc}'s free bytes grow {_rate(held)}{figures}"
        why = f"{base}; {alloc}'s free bytes do not grow{figures}"
        if other:
            why += f"; mappings that grew: {_maps_text(other)}"
        return Kind.OUTSIDE_HEAP, why
    if maps:
        in_alloc = sum(m.growth for m in mine)
        outside = sum(m.growth for m in other)
        if in_alloc >= outside:
            return Kind.RETENTION, (f"{base}; the allocator's mappings grew: "
                                    f"{_maps_text(mine)}{figures}")
        return Kind.OUTSIDE_HEAP, f"{base}; mappings that grew: {_maps_text(other)}{figures}"
    return Kind.NOT_IN_LIVE, (f"{base}; neither the allocator's figures nor the mappings are "
                              f"known to say whose it is{figures}")
