"""What pmd keeps in memory per process (`ProcState`): the detector's window
of samples, the latest figures and trend the metrics show, the alert's
state."""

from __future__ import annotations

import array
import collections
from dataclasses import dataclass, field

from pmm.analysis.growthkind import Classification
from pmm.analysis.trend import Trend
from pmm.daemon.kindtrack import Tracker

Key = tuple[int, int]  # (pid, start_time)


class SeriesWindow:
    """A process's last `size` samples (time in seconds, rss) in two arrays
    of doubles used as rings: 16 bytes a sample where a deque of floats
    takes 64 (pmd holds an hour of samples for hundreds of processes)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.t = array.array("d")
        self.rss = array.array("d")
        self.head = 0  # the oldest sample, once full

    def __len__(self) -> int:
        return len(self.t)

    def append(self, t: float, rss: float) -> None:
        """Adds a sample; the oldest goes once `size` are held."""
        if len(self.t) < self.size:
            self.t.append(t)
            self.rss.append(rss)
            return
        self.t[self.head] = t
        self.rss[self.head] = rss
        self.head = (self.head + 1) % self.size

    def samples(self) -> tuple[array.array[float], array.array[float]]:
        """(times, rss), oldest first."""
        h = self.head
        return self.t[h:] + self.t[:h], self.rss[h:] + self.rss[:h]


@dataclass
class ProcState:
    """What pmd keeps in memory per process: the detector's window, and its
    latest figures and trend (for the metrics)."""

    key: Key
    comm: str
    source: str
    window: int
    unit: str = ""  # its systemd unit ('' none)
    start_unix: float = 0.0  # unix time it started
    rss_now: int = 0
    vm_now: int = 0
    live_bytes: int | None = None  # None: the module does not track its heap
    live_blocks: int | None = None
    trend: Trend | None = None  # the detector's last result
    series: SeriesWindow = field(init=False)
    snaps: collections.deque[tuple[int, float, int, int]] = field(init=False)
    since_detect: int = 0
    alerted: bool = False  # a LEAK alert stands (not resolved)
    first_s: float | None = None  # the time of its first sample pmd saw (seconds)
    last_kmod_ns: int = 0
    verdict: str = ""
    described: set[int] = field(default_factory=set)  # site ids asked to describe
    lost_bytes: int | None = None  # the last scan's definitely lost bytes (scan_on_leak)
    indirect_bytes: int | None = None
    kinds: Tracker = field(init=False)  # the split of its window, its mappings' baseline
    kind: Classification | None = None  # the kind of growth, while the verdict says growth
    kind_runs: int = 0  # detector runs since it was named

    def __post_init__(self) -> None:
        self.series = SeriesWindow(self.window)
        self.kinds = Tracker(self.key[0], self.window)
        self.snaps = collections.deque(maxlen=4096)
