"""pmd's side of the kind of growth (pmm.analysis.growthkind): per process, the split of
its last samples and a snapshot of its mappings, so that an alert names the
kind and the mappings that grew, and keeps them with the alert (the process
may be gone when someone reads it).

`SplitWindow` holds the last `size` samples' parts (anon, file, shmem, live
heap, the allocator's free bytes) as single-precision rings, 20 bytes a
sample: a part is a size that need not be exact to the byte for a slope
(2^-24 of it), and pmd holds an hour of samples for hundreds of processes.
A figure a sample lacks is NaN there.

`Tracker.classify(times)` names the kind over the window; `Tracker.at_alert`
also compares the mappings now with those of the first look (`baseline`,
taken at the process's first sample: pmd's loop reads /proc/PID/smaps
twice in a process's life, never per sample).
"""

from __future__ import annotations

import array
import math
from collections.abc import Sequence

from pmm.analysis.growthkind import Classification, classify
from pmm.kernel import smaps
from pmm.store import SampleRow

_FIELDS = ("anon", "file", "shmem", "live", "heap_free")


def _nan_none(v: float) -> int | None:
    return None if math.isnan(v) else int(v)


class SplitWindow:
    """The parts of a process's last `size` samples, as rings (see the module
    docstring), in step with the daemon's SeriesWindow."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.rings = {f: array.array("f") for f in _FIELDS}
        self.head = 0
        self.heap_trimmable: int | None = None
        self.allocator: str | None = None
        self.last: SampleRow | None = None  # the latest sample

    def __len__(self) -> int:
        return len(self.rings["anon"])

    def append(self, s: SampleRow) -> None:
        """Adds a sample's parts (NaN where it lacks one); the oldest goes once
        `size` are held."""
        nan = math.nan
        self.last = s
        values = {"anon": s.rss_anon, "file": s.rss_file, "shmem": s.rss_shmem,
                  "live": s.live_bytes, "heap_free": s.heap_free}
        if s.heap_trimmable is not None:
            self.heap_trimmable = s.heap_trimmable
        if s.allocator:
            self.allocator = s.allocator
        full = len(self) >= self.size
        for name, ring in self.rings.items():
            v = values[name]
            x = float(v) if v is not None else nan
            if full:
                ring[self.head] = x
            else:
                ring.append(x)
        if full:
            self.head = (self.head + 1) % self.size

    def part(self, name: str) -> list[int | None]:
        """A part's values, oldest first (None where unknown)."""
        ring, h = self.rings[name], self.head
        return [_nan_none(v) for v in ring[h:] + ring[:h]]


class Tracker:
    """A process's split and its mappings' baseline, for pmd."""

    def __init__(self, pid: int, size: int) -> None:
        self.pid = pid
        self.split = SplitWindow(size)
        self.baseline: list[smaps.Mapping] | None = None
        self.looked = False

    def look(self) -> None:
        """Takes the mappings' baseline, the first time only (a process whose
        smaps cannot be read has none)."""
        if self.looked:
            return
        self.looked = True
        try:
            self.baseline = smaps.read(self.pid)
        except OSError:
            self.baseline = None

    def classify(self, times: Sequence[float],
                 mappings: Sequence[smaps.MapGrowth] | None = None) -> Classification | None:
        """The kind of growth over the window whose times (seconds, oldest
        first) the detector used; None when the samples lack the kernel's
        split or are out of step with the times."""
        w = self.split
        if len(w) != len(times) or not len(times):
            return None
        anon, file, shmem = w.part("anon"), w.part("file"), w.part("shmem")
        if any(v is None for part in (anon, file, shmem) for v in part):
            return None
        return classify(times, [v or 0 for v in anon], [v or 0 for v in file],
                        [v or 0 for v in shmem], w.part("live"), w.part("heap_free"),
                        w.heap_trimmable, w.allocator, mappings)

    def at_alert(self, times: Sequence[float]) -> Classification | None:
        """classify, with the mappings that grew since the baseline."""
        grown: list[smaps.MapGrowth] | None = None
        if self.baseline is not None:
            try:
                now = smaps.read(self.pid)
            except OSError:
                now = None
            if now is not None:
                grown = smaps.name_stacks(smaps.grown(self.baseline, now),
                                          smaps.thread_stack_names(self.pid, now))
        return self.classify(times, grown)
