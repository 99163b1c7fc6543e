"""The rows the store writes and reads, as dataclasses.

start_time is the process start (task->start_boottime) rounded down to the
clock tick (1/CLK_TCK s): /proc/PID/stat only has ticks, the module has
nanoseconds, and both must name the same process.
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, field
from typing import Any

TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def start_key(start_time_ns: int) -> int:
    """A process start time as stored: nanoseconds rounded down to the clock tick."""
    return start_time_ns - start_time_ns % TICK_NS


@dataclass(frozen=True)
class SampleRow:
    """One memory sample of a process as stored; source: "kmod" (the module)
    or "proc" (/proc, which gives no live heap figures: None)."""

    pid: int
    start_time: int
    time: int
    vm: int
    rss: int
    rss_anon: int | None = None
    rss_file: int | None = None
    rss_shmem: int | None = None
    live_bytes: int | None = None
    live_blocks: int | None = None
    source: str = "kmod"
    # the allocator's figures and the memory cgroup's usage (pmm.kernel.model.Sample;
    # None: unknown)
    heap_free: int | None = None
    heap_trimmable: int | None = None
    allocator: str | None = None
    cgroup_usage: int | None = None


@dataclass(frozen=True)
class ProcessRow:
    """A process as stored: what it runs, when pmd first saw it (`started`)
    and when it exited (None while it runs)."""

    pid: int
    start_time: int
    comm: str = ""
    exe: str = ""
    cmdline: str = ""
    started: int = 0
    exited: int | None = None
    source: str = "kmod"


@dataclass(frozen=True)
class AlertRow:
    """A stored alert: the detector's verdict on a process, its rates (bytes/s)
    and growth (bytes), the fastest growing site and the message logged."""

    pid: int
    start_time: int
    time: int
    wall_time: float
    comm: str
    verdict: str
    slope: float
    slope_low: float
    slope_high: float
    confidence: float
    growth: float
    site: int | None
    message: str
    resolved: int | None = None  # CLOCK_BOOTTIME ns when the verdict cleared
    resolved_wall: float | None = None  # the same in Unix seconds
    # the kind of growth (pmm.analysis.growthkind.Kind) and its evidence
    # (Classification.to_dict: the split, the mappings that grew), None
    # when unknown (an alert of an older pmd)
    kind: str | None = None
    evidence: dict[str, Any] | None = None


@dataclass(frozen=True)
class PruneStep:
    """What one Store.prune_step deleted, and whether more is left."""

    samples: int = 0
    snapshots: int = 0
    processes: int = 0
    more: bool = False


@dataclass(frozen=True)
class ExitSiteRow:
    """One site of an exited process as stored (table exit_sites): its final
    figures, the age of its live blocks as of the exit and its call chain
    symbolized, with no absolute address."""

    site: int
    registered: bool = True  # False: known only by its blocks (never registered)
    flags: int = 0
    func: str = ""  # what the program registered (the shim), else ""
    file: str = ""
    line: int = 0
    live_bytes: int = 0
    live_blocks: int = 0
    alloc_bytes: int = 0
    free_bytes: int = 0
    alloc_count: dict[str, int] = field(default_factory=dict)  # per operation name
    oldest_age_s: float | None = None  # None: no live block
    newest_age_s: float | None = None
    histogram: tuple[int, ...] = ()  # live blocks per pmm.analysis.leaks.AGE_LABELS
    frames: tuple[dict[str, Any], ...] = ()  # Frame.as_dict() each, addr 0
    where: str = ""  # one line (pmm.sitestack.describe_site); "" when unknown


@dataclass(frozen=True)
class ExitRecord:
    """What pmd keeps of an exited process (see the module docstring): the
    module's entry (`info`, PidInfo.to_dict), the files of its frames
    (`objects`, ObjectFile.to_dict), its sites and its statistics
    (StatsInfo.to_dict, None when unknown). Times are CLOCK_BOOTTIME ns."""

    pid: int
    start_time: int  # the stored key (start_key)
    comm: str
    exit_time: int  # 0: unknown
    harvested: int
    info: dict[str, Any]
    objects: tuple[dict[str, Any], ...] = ()
    sites: tuple[ExitSiteRow, ...] = ()
    stats: dict[str, Any] | None = None


@dataclass(frozen=True)
class ScanSiteRow:
    """A site of a scan: its lost blocks and bytes, and where it is."""

    site: int
    where: str
    definite_blocks: int
    definite_bytes: int
    indirect_blocks: int
    indirect_bytes: int


@dataclass(frozen=True)
class ScanRow:
    """A scan of a process (`pmd --scan-on-leak`): its totals, how long the
    process was stopped and the scan took, its lost sites worst first; or
    the error that stopped it (`error`, then no figures)."""

    pid: int
    start_time: int
    time: int  # CLOCK_BOOTTIME ns
    wall_time: float
    definite_blocks: int = 0
    definite_bytes: int = 0
    indirect_blocks: int = 0
    indirect_bytes: int = 0
    unknown_blocks: int = 0
    young_blocks: int = 0
    longest_stop_us: int = 0
    scan_us: int = 0
    error: str | None = None
    sites: tuple[ScanSiteRow, ...] = ()


@dataclass(frozen=True)
class Series:
    """One process's samples as arrays, oldest first."""

    time_ns: array[int]  # 64-bit ints ("q"), compact for long histories
    vm: array[int]
    rss: array[int]

    def __len__(self) -> int:
        return len(self.time_ns)

