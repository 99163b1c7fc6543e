"""What the loop publishes for the metrics' readers: an immutable `Snapshot`
of its processes (`ProcessFigures`) and its own counters (`DaemonFigures`).
The readers' threads see nothing else of the loop."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProcessFigures:
    """One monitored process as the loop last saw it. live_* are None for a
    process whose allocations the module does not track; verdict is "" and
    the slopes None before the detector's first run."""

    pid: int
    start_time: int  # pmd's key: ns since boot, tick resolution
    comm: str
    unit: str
    start_unix: float
    rss: int
    vm: int
    live_bytes: int | None
    live_blocks: int | None
    verdict: str = ""
    slope: float | None = None
    slope_low: float | None = None
    slope_high: float | None = None
    lost_bytes: int | None = None  # the last scan's (pmd --scan-on-leak), None: none
    indirect_bytes: int | None = None
    alert: bool = False  # pmd's LEAK alert stands (raised, not resolved)
    # the latest sample's split (pmm.analysis.growthkind; None: unknown) and the kind
    # of growth at the detector's last run ("" none)
    rss_anon: int | None = None
    rss_file: int | None = None
    rss_shmem: int | None = None
    heap_free: int | None = None
    kind: str = ""


@dataclass(frozen=True)
class DaemonFigures:
    """pmd's own counters and health."""

    events: int = 0
    malformed_events: int = 0
    failed_events: int = 0
    lost_events: int = 0
    module_connected: bool = False
    samples_written: int = 0
    pending_rows: int = 0
    dropped_rows: int = 0
    write_failures: int = 0
    last_commit_unix: float = 0.0
    harvests: int = 0
    harvest_failures: int = 0


@dataclass(frozen=True)
class Snapshot:
    """What the loop publishes: its processes and its counters. `up` is
    False only in the textfile written as pmd exits."""

    processes: tuple[ProcessFigures, ...] = ()
    daemon: DaemonFigures = DaemonFigures()
    up: bool = True

    def process(self, pid: int) -> ProcessFigures | None:
        """The process with that pid, if pmd holds it."""
        for p in self.processes:
            if p.pid == pid:
                return p
        return None
