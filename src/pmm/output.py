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
import math
from collections.abc import Collection, Sequence
from typing import Any

from pmm.text import printable
from pmm.units import human_bytes

__all__ = ["dump_json", "dump_json_at", "format_table", "human_age", "human_bytes"]


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


_JSON_STR_CACHE: dict[str, str] = {}


def _json_scalar(v: Any) -> str | None:
    """A scalar as json.dumps writes it (None: not a scalar)."""
    if v is None:
        return "null"
    t = type(v)
    if t is bool:
        return "true" if v else "false"
    if t is int:
        return int.__repr__(v)
    if t is float and math.isfinite(v):
        return float.__repr__(v)
    if t is str:
        out = _JSON_STR_CACHE.get(v)
        if out is None:
            out = json.dumps(v, ensure_ascii=False)
            if len(_JSON_STR_CACHE) < 4096 and len(v) < 256:
                _JSON_STR_CACHE[v] = out
        return out
    return None


def dump_json_at(obj: Any, level: int) -> str:
    """obj as dump_json writes it where it sits `level` deep in a document
    (2 spaces a level; its first line indented too): one item of a long list
    written as it comes. Flat dicts of scalars (a block) take a fast path
    that writes what json.dumps would."""
    pad = "  " * level
    if isinstance(obj, dict) and obj:
        parts = []
        for k, v in obj.items():
            sv = _json_scalar(v)
            if sv is None or type(k) is not str:
                break
            parts.append(f"{pad}  {_json_scalar(k)}: {sv}")
        else:
            return f"{pad}{{\n" + ",\n".join(parts) + f"\n{pad}}}"
    return "\n".join(pad + line for line in dump_json(obj).split("\n"))


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
