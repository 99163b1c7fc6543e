"""Pure logic of `pmctl stats`: the allocation statistics table as text.

Per allocation size range (bucket), the malloc, calloc, realloc and free
calls and the allocated, freed and in-use bytes, then the totals and the
failed allocations. The module keeps the buckets in struct pmm_stats
(PMM_GET_STATS); pmm.kernel.model builds the table from them (StatsInfo.table,
`build_table`: one side builds it, so that this module imports the model
and never the reverse), and this module turns it into text. No I/O.

The table keeps exact byte counts (not human units): it is an account whose
columns add up (allocated - freed = in use, the buckets to the totals).
"""

from __future__ import annotations

from pmm.kernel.model import BUCKET_BOUNDS, BUCKET_LABELS, StatsRow, StatsTable, build_table
from pmm.output import format_table

# the table's names, where its callers have always found them (defined in pmm.kernel.model)
__all__ = ["BUCKET_BOUNDS", "BUCKET_LABELS", "HEADERS", "StatsRow", "StatsTable",
           "build_table", "render"]

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
