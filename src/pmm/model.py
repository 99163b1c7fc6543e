"""Plain data read from the module, independent of ctypes.

src/pmm/device.py converts the uapi ctypes structures into these frozen
dataclasses so that the pure logic (leaks, stats, formatting) and its tests
never need the module or ctypes. Field names follow kmod/uapi/pmm.h.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# enum pmm_op, names as /proc/pmm/pid prints them ("{MALLOC @...}")
OP_NAMES: dict[int, str] = {
    0: "NONE",
    1: "MALLOC",
    2: "CALLOC",
    3: "REALLOC",
    4: "FREE",
    5: "POSIX_MEMALIGN",
    6: "ALIGNED_ALLOC",
    7: "MEMALIGN",
    8: "VALLOC",
    9: "PVALLOC",
    10: "MMAP",
    11: "MUNMAP",
    12: "MREMAP",
}
OP_NR = 13
OP_MALLOC, OP_CALLOC, OP_REALLOC, OP_FREE = 1, 2, 3, 4

STATE_RUNNING = 1
STATE_EXITED = 2
STATE_NAMES: dict[int, str] = {STATE_RUNNING: "running", STATE_EXITED: "exited"}

SITE_F_SOURCE = 1


def op_name(op: int) -> str:
    return OP_NAMES.get(op, f"OP{op}")


@dataclass(frozen=True)
class ConfigInfo:
    """struct pmm_config as PMM_GET_CONFIG fills it."""

    interval_ms: int
    scan: int
    start_pid: int
    stop_pid: int
    max_pids: int
    max_blocks_per_pid: int
    max_sites_per_pid: int
    max_samples_per_pid: int
    max_pids_per_uid: int
    exited_ttl_s: int
    abi_version: int
    monitored_pids: int
    records_accepted: int
    records_dropped: int
    unmatched_frees: int
    kmem_bytes: int
    records_queued: int
    older_frees: int = 0  # frees of blocks allocated before monitoring began


@dataclass(frozen=True)
class PidInfo:
    """struct pmm_pid_info: one monitored process."""

    pid: int
    ppid: int
    state: int
    comm: str
    start_time_ns: int
    monitor_start_ns: int
    exit_time_ns: int
    live_blocks: int
    live_bytes: int
    records: int
    dropped_records: int
    unmatched_frees: int
    pending_frees: int
    samples: int
    vm_bytes: int
    rss_bytes: int
    older_frees: int = 0  # frees of blocks allocated before monitoring began

    @property
    def state_name(self) -> str:
        return STATE_NAMES.get(self.state, str(self.state))

    def uptime_s(self, now_boottime_ns: int) -> float:
        """Seconds the process lived (until its exit when it exited)."""
        end = self.exit_time_ns if self.exit_time_ns else now_boottime_ns
        return max(0, end - self.start_time_ns) / 1e9


@dataclass(frozen=True)
class Block:
    """struct pmm_block: one live allocation."""

    ptr: int
    prev_ptr: int
    size: int
    time_ns: int  # CLOCK_MONOTONIC, from the hook
    site: int
    weight: int
    op: int


@dataclass(frozen=True)
class Site:
    """struct pmm_site_stats: a site's description and counters."""

    site: int
    flags: int = 0
    frames: tuple[int, ...] = ()
    file: str = ""
    func: str = ""
    line: int = 0
    live_bytes: int = 0
    live_blocks: int = 0
    alloc_bytes: int = 0
    free_bytes: int = 0
    alloc_count: tuple[int, ...] = field(default=(0,) * OP_NR)

    @property
    def has_source(self) -> bool:
        return bool(self.flags & SITE_F_SOURCE) and bool(self.file or self.func)


@dataclass(frozen=True)
class Bucket:
    """struct pmm_bucket_stats: one size bucket of PMMM's table."""

    malloc_count: int = 0
    calloc_count: int = 0
    realloc_count: int = 0
    free_count: int = 0
    alloc_bytes: int = 0
    free_bytes: int = 0


@dataclass(frozen=True)
class StatsInfo:
    """struct pmm_stats: per-pid size statistics."""

    pid: int
    buckets: tuple[Bucket, ...]
    failed_allocs: int
    unmatched_frees: int
    older_frees: int = 0


@dataclass(frozen=True)
class Sample:
    """struct pmm_sample (bytes; time is CLOCK_BOOTTIME ns)."""

    time_ns: int
    vm: int
    rss: int
    rss_anon: int
    rss_file: int
    rss_shmem: int
