"""Output helpers shared by pmctl's commands (and `pmctl trend`, pmd).

- `format_table`: aligned plain-text columns for people; every cell goes
  through `pmm.text.printable` (cells often hold what a monitored process
  named itself or its sites), so callers pass raw strings.
- `dump_json`: the machine form: UTF-8 JSON, 2-space indent, keys in the
  documented order, one document per command run.
- `human_bytes` (pmm.units's, the one rendering of sizes: '1.5 KiB'),
  `human_age`: short human renderings (tables only; JSON always carries
  exact integers, bytes and seconds).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

from pmm.text import printable
from pmm.units import human_bytes

__all__ = ["dump_json", "format_table", "human_age", "human_bytes"]


def format_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    right: Collection[int] = (),
    sep: str = "  ",
) -> str:
    """Columns padded to their widest cell; columns in `right` align right.
    Cells are escaped for the terminal (pmm.text.printable)."""
    headers = [printable(h) for h in headers]
    rows = [[printable(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def fmt(row: Sequence[str]) -> str:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        return sep.join(cells).rstrip()

    return "\n".join([fmt(headers), *(fmt(r) for r in rows)])


def dump_json(obj: Any) -> str:
    """obj as JSON indented by 2, non-ASCII characters kept as they are."""
    return json.dumps(obj, indent=2, ensure_ascii=False)


def human_age(seconds: float) -> str:
    """Seconds as '0.4s', '12s', '3m05s', '2h03m', '3d04h'."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"
