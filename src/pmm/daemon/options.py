"""What pmd's command line sets (`Options`), and the defaults pmd gives
where a library caller gets none."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pmm.analysis.trend import Params

DEFAULT_MIN_SPAN = 600.0  # pmd --min-span: a service's warm-up is not a leak
DEFAULT_RETAIN = 7 * 86400.0  # pmd --retain: 73 B a sample, 42 MiB a process-week at 1 s


@dataclass
class Options:
    """What pmd's command line sets; times in seconds."""

    db: Path
    pids: list[int]  # processes sampled from /proc when the module does not
    interval: float = 1.0  # between /proc samples
    commit_interval: float = 1.0
    detect_every: int = 20  # run the detector every N samples of a process
    window: int = 3600  # over its last N samples
    genl: bool = True
    max_pending: int = 200_000
    prune_interval: float = 30.0  # seconds between checks for lost exits
    params: Params = field(default_factory=Params)
    metrics_address: tuple[str, int] | None = None  # HTTP endpoint (pmm.daemon.metrics)
    metrics_textfile: Path | None = None  # node_exporter textfile
    pprof_allow_uids: frozenset[int] = frozenset()  # may read every process's profile
    # names requests may give the endpoint in Host (pmm.daemon.metrics' parse_host)
    metrics_host_names: frozenset[tuple[str, int | None]] = frozenset()
    scan_on_leak: bool = False  # scan a process for unreachable blocks at its LEAK alert
    scan_age: float = 1.0  # the scan's age gate, seconds
    # no LEAK alert before a process has been watched this long: a service's
    # warm-up (caches filling) must not alarm at every start (pmd's command
    # line: DEFAULT_MIN_SPAN; 0 here, for callers that feed samples themselves)
    min_span: float = 0.0
    retain: float = 0.0  # seconds of samples kept, 0: for good (pmd's: DEFAULT_RETAIN)
    retain_every: float = 60.0  # seconds between two rounds of pruning
