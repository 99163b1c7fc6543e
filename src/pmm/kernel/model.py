"""Plain data read from the module, independent of ctypes.

src/pmm/kernel/device.py converts the uapi ctypes structures into these frozen
dataclasses so that the pure logic (leaks, stats, formatting) and its tests
never need the module or ctypes. Field names follow kmod/uapi/pmm.h.

Each model has its JSON form, `to_dict()`: what `pmctl ... --json` prints
for it (keys in a stable order; sizes in bytes, times as the module gives
them, *_s in seconds, addresses as integers).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from pmm.kernel import uapi

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
# ops whose pmm_site_stats.alloc_count is of frees, not allocations
FREE_OP_NAMES = frozenset({"FREE", "MUNMAP"})
OP_MALLOC, OP_CALLOC, OP_REALLOC, OP_FREE = 1, 2, 3, 4

STATE_RUNNING = 1
STATE_EXITED = 2
STATE_NAMES: dict[int, str] = {STATE_RUNNING: "running", STATE_EXITED: "exited"}

SITE_F_SOURCE = 1


def op_name(op: int) -> str:
    """An operation's name as /proc/pmm/pid prints it ('MALLOC'); 'OP<n>' for an
    unknown one."""
    return OP_NAMES.get(op, f"OP{op}")


def _fields_dict(obj: Any) -> dict[str, Any]:
    """A flat dataclass's fields in declaration order."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


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

    def to_dict(self) -> dict[str, int]:
        """Every field, as struct pmm_config names it."""
        return _fields_dict(self)


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
        """'running' or 'exited' (the number, for a state this version does not know)."""
        return STATE_NAMES.get(self.state, str(self.state))

    def uptime_s(self, now_boottime_ns: int) -> float:
        """Seconds the process lived (until its exit when it exited)."""
        end = self.exit_time_ns if self.exit_time_ns else now_boottime_ns
        return max(0, end - self.start_time_ns) / 1e9

    def monitored_s(self, now_boottime_ns: int) -> float:
        """Seconds it has been monitored (until its exit when it exited)."""
        end = self.exit_time_ns if self.exit_time_ns else now_boottime_ns
        return max(0, end - self.monitor_start_ns) / 1e9

    def to_dict(self, now_boottime_ns: int) -> dict[str, Any]:
        """The JSON form; uptime_s and monitored_s are as of now_boottime_ns."""
        return {
            "pid": self.pid,
            "ppid": self.ppid,
            "comm": self.comm,
            "state": self.state_name,
            "uptime_s": round(self.uptime_s(now_boottime_ns), 3),
            "monitored_s": round(self.monitored_s(now_boottime_ns), 3),
            "live_blocks": self.live_blocks,
            "live_bytes": self.live_bytes,
            "rss_bytes": self.rss_bytes,
            "vm_bytes": self.vm_bytes,
            "records": self.records,
            "dropped_records": self.dropped_records,
            "unmatched_frees": self.unmatched_frees,
            "older_frees": self.older_frees,
            "pending_frees": self.pending_frees,
            "samples": self.samples,
            "start_time_ns": self.start_time_ns,
            "exit_time_ns": self.exit_time_ns,
        }


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

    def age_s(self, now_monotonic_ns: int) -> float:
        """Seconds since it was allocated (0 for a time after now)."""
        return max(0, now_monotonic_ns - self.time_ns) / 1e9

    def to_dict(self, site: Site | None, now_monotonic_ns: int) -> dict[str, Any]:
        """The JSON form, with its site's first frame (caller) and, when the
        program registered them, its function, file and line."""
        source = site is not None and bool(site.flags & SITE_F_SOURCE)
        return {
            "op": op_name(self.op),
            "time_ns": self.time_ns,
            "age_s": round(self.age_s(now_monotonic_ns), 3),
            "size": self.size,
            "weight": self.weight,
            "ptr": self.ptr,
            "prev_ptr": self.prev_ptr,
            "site": self.site,
            "caller": site.frames[0] if site is not None and site.frames else None,
            "func": site.func if site is not None and source else None,
            "file": site.file if site is not None and source else None,
            "line": site.line if site is not None and source else None,
        }


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
    # per frame: (object number, file offset), or None when the frame was in
    # no file's mapping (pmm_site_stats.loc); empty for an older module
    locs: tuple[tuple[int, int] | None, ...] = ()

    @property
    def alloc_calls(self) -> int:
        """The calls that allocated at the site (weighted; frees left out)."""
        return sum(n for op, n in enumerate(self.alloc_count)
                   if op_name(op) not in FREE_OP_NAMES)

    @property
    def has_source(self) -> bool:
        """Whether the program registered where the site is (its function or file)."""
        return bool(self.flags & SITE_F_SOURCE) and bool(self.file or self.func)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: the call chain's addresses, the function, file and
        line the program registered (None when it did not), the live and
        total figures, and the allocation calls per operation."""
        source = self.has_source
        return {
            "site": self.site,
            "frames": list(self.frames),
            "func": self.func if source else None,
            "file": self.file if source else None,
            "line": self.line if source else None,
            "live_bytes": self.live_bytes,
            "live_blocks": self.live_blocks,
            "alloc_bytes": self.alloc_bytes,
            "free_bytes": self.free_bytes,
            "alloc_count": {op_name(op): n for op, n in enumerate(self.alloc_count) if n},
            "locations": [list(loc) if loc else None for loc in self.locs],
        }


@dataclass(frozen=True)
class ObjectFile:
    """struct pmm_object: a file a site's frames are in, as the process mapped
    it (`obj` numbers it in Site.locs)."""

    obj: int
    path: str
    build_id: str | None = None  # GNU build-id, lowercase hex
    dev: int = 0
    ino: int = 0
    size: int = 0
    path_cut: bool = False  # path is the start of a longer one
    deleted: bool = False  # unlinked when the module first saw it

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: number, path, build-id (None without one), identity
        (dev, inode, size) and whether the path was cut or the file deleted."""
        return {
            "obj": self.obj,
            "path": self.path,
            "build_id": self.build_id,
            "dev": self.dev,
            "ino": self.ino,
            "size": self.size,
            "path_cut": self.path_cut,
            "deleted": self.deleted,
        }


@dataclass(frozen=True)
class Bucket:
    """struct pmm_bucket_stats: the calls and bytes of one allocation size range."""

    malloc_count: int = 0
    calloc_count: int = 0
    realloc_count: int = 0
    free_count: int = 0
    alloc_bytes: int = 0
    free_bytes: int = 0

    def to_dict(self) -> dict[str, int]:
        """The JSON form: the fields by name."""
        return _fields_dict(self)


@dataclass(frozen=True)
class StatsInfo:
    """struct pmm_stats: per-pid size statistics."""

    pid: int
    buckets: tuple[Bucket, ...]
    failed_allocs: int
    unmatched_frees: int
    older_frees: int = 0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StatsInfo:
        """The statistics back from their JSON form (`to_dict`, as pmd stores
        them at a process's exit)."""
        return cls(
            pid=int(d["pid"]),
            buckets=tuple(Bucket(malloc_count=b["malloc"], calloc_count=b["calloc"],
                                 realloc_count=b["realloc"], free_count=b["free"],
                                 alloc_bytes=b["alloc_bytes"], free_bytes=b["freed_bytes"])
                          for b in d["buckets"]),
            failed_allocs=int(d["failed_allocs"]),
            unmatched_frees=int(d["unmatched_frees"]),
            older_frees=int(d.get("older_frees", 0)),
        )

    def table(self) -> StatsTable:
        """The statistics table: a row per size bucket and the totals."""
        return build_table(self)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of `pmctl stats`: a row per size bucket, with its
        bounds and in-use bytes, and the totals (StatsTable)."""
        return build_table(self).to_dict()


# Upper bounds of the buckets (bytes, inclusive); None: larger.
BUCKET_BOUNDS: tuple[int | None, ...] = (16, 256, 1024, 4096, 16384, 65536, None)
BUCKET_LABELS: tuple[str, ...] = (
    "<= 16",
    "<= 256",
    "<= 1024",
    "<= 4096",
    "<= 16384",
    "<= 65536",
    "larger",
)


@dataclass(frozen=True)
class StatsRow:
    """One row of the statistics table: a size range (or the totals), its calls
    and its bytes."""

    label: str
    max_size: int | None  # None: unbounded (and for the totals row)
    malloc: int
    calloc: int
    realloc: int
    free: int
    alloc_bytes: int
    freed_bytes: int

    @property
    def inuse_bytes(self) -> int:
        """Bytes allocated and not freed."""
        return self.alloc_bytes - self.freed_bytes

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of the row, in-use bytes included."""
        return {
            "bucket": self.label,
            "max_size": self.max_size,
            "malloc": self.malloc,
            "calloc": self.calloc,
            "realloc": self.realloc,
            "free": self.free,
            "alloc_bytes": self.alloc_bytes,
            "freed_bytes": self.freed_bytes,
            "inuse_bytes": self.inuse_bytes,
        }


@dataclass(frozen=True)
class StatsTable:
    """One process's statistics table: a row per size range, the totals, failed
    allocations, unmatched frees and frees of blocks older than monitoring."""

    pid: int
    rows: tuple[StatsRow, ...]
    totals: StatsRow
    failed_allocs: int
    unmatched_frees: int
    older_frees: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, as `pmctl stats --json` prints it."""
        return {
            "pid": self.pid,
            "buckets": [r.to_dict() for r in self.rows],
            "totals": self.totals.to_dict(),
            "failed_allocs": self.failed_allocs,
            "unmatched_frees": self.unmatched_frees,
            "older_frees": self.older_frees,
        }


def _row(label: str, bound: int | None, b: Bucket) -> StatsRow:
    return StatsRow(
        label=label,
        max_size=bound,
        malloc=b.malloc_count,
        calloc=b.calloc_count,
        realloc=b.realloc_count,
        free=b.free_count,
        alloc_bytes=b.alloc_bytes,
        freed_bytes=b.free_bytes,
    )


def build_table(stats: StatsInfo) -> StatsTable:
    """Rows per bucket plus a totals row."""
    if len(stats.buckets) != len(BUCKET_LABELS):
        raise ValueError(f"expected {len(BUCKET_LABELS)} buckets, got {len(stats.buckets)}")
    rows = tuple(
        _row(label, bound, b)
        for label, bound, b in zip(BUCKET_LABELS, BUCKET_BOUNDS, stats.buckets, strict=True)
    )
    totals = StatsRow(
        label="Totals",
        max_size=None,
        malloc=sum(r.malloc for r in rows),
        calloc=sum(r.calloc for r in rows),
        realloc=sum(r.realloc for r in rows),
        free=sum(r.free for r in rows),
        alloc_bytes=sum(r.alloc_bytes for r in rows),
        freed_bytes=sum(r.freed_bytes for r in rows),
    )
    return StatsTable(
        pid=stats.pid,
        rows=rows,
        totals=totals,
        failed_allocs=stats.failed_allocs,
        unmatched_frees=stats.unmatched_frees,
        older_frees=stats.older_frees,
    )


@dataclass(frozen=True)
class Sample:
    """struct pmm_sample (bytes; time is CLOCK_BOOTTIME ns)."""

    time_ns: int
    vm: int
    rss: int
    rss_anon: int
    rss_file: int
    rss_shmem: int
    # the live heap and the allocator's figures (None: unknown, e.g. no hook)
    live_bytes: int | None = None
    live_blocks: int | None = None
    heap_free: int | None = None
    heap_trimmable: int | None = None
    allocator: str | None = None
    cgroup_usage: int | None = None

    def to_dict(self) -> dict[str, int | str | None]:
        """The JSON form: the fields by name."""
        return _fields_dict(self)


ALLOCATORS = {uapi.ALLOC_GLIBC: "glibc", uapi.ALLOC_JEMALLOC: "jemalloc"}


def heap_figures(allocator: int, free: int, top: int) -> tuple[int | None, int | None, str | None]:
    """(heap_free, heap_trimmable, allocator) of a struct pmm_heap, the
    allocator's own report (kmod/uapi/pmm.h): what it holds free (glibc:
    mallinfo2's fordblks; jemalloc: resident beyond allocated) and, for glibc,
    what malloc_trim(0) is sure to give back (the top chunk, keepcost: free
    chunks below it give back only their whole pages, which mallinfo2 does
    not tell). None where the allocator made no report or cannot say."""
    name = ALLOCATORS.get(allocator)
    if name is None:
        return None, None, None
    return free, top if allocator == uapi.ALLOC_GLIBC else None, name
