"""Pure logic of `pmctl stats`: the allocation statistics table.

Per allocation size range (bucket), the malloc, calloc, realloc and free
calls and the allocated, freed and in-use bytes, then the totals and the
failed allocations. The module keeps the buckets in struct pmm_stats
(PMM_GET_STATS); this module turns them into rows and text. No I/O.

The table keeps exact byte counts (not human units): it is an account whose
columns add up (allocated - freed = in use, the buckets to the totals).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pmm.model import Bucket, StatsInfo
from pmm.output import format_table

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


HEADERS: tuple[str, ...] = (
    "Allocation size",
    "malloc",
    "calloc",
    "realloc",
    "free",
    "Alloc. bytes",
    "Freed bytes",
    "InUse bytes",
)


def render(table: StatsTable) -> str:
    """The table as aligned text."""
    body = [
        [
            r.label if r.label == "Totals" else f"{r.label} bytes" if r.max_size else r.label,
            str(r.malloc),
            str(r.calloc),
            str(r.realloc),
            str(r.free),
            str(r.alloc_bytes),
            str(r.freed_bytes),
            str(r.inuse_bytes),
        ]
        for r in (*table.rows, table.totals)
    ]
    text = format_table(list(HEADERS), body, right=range(1, len(HEADERS)))
    return (
        f"pid {table.pid}\n{text}\n"
        f"Failed allocations: {table.failed_allocs}\n"
        f"Unmatched frees: {table.unmatched_frees}\n"
        f"Frees of blocks older than monitoring: {table.older_frees}"
    )
