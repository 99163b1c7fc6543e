"""The report's figures as plotly JSON: rss and vm over time with the
fitted floor, the rss split into its kinds, live bytes by call chain.

Each is a plain dict (data, layout, config) that plotly.js draws as it is;
nothing here writes HTML or reads a file. pmm.report.html puts them in the
page.
"""

from __future__ import annotations

import hashlib
import html
import time
from collections.abc import Iterable, Sequence
from typing import Any

from pmm.report.data import ReportData
from pmm.report.stacks import StackFrame
from pmm.text import printable
from pmm.units import human_bytes, human_rate

# a chart of more samples shows each slice's lowest and highest (the shape stays)
CHART_POINTS = 4000
FLAME_SITES = 500  # the largest sites drawn; the rest are one box


def _plot_text(s: str) -> str:
    """A label for plotly, which reads a few HTML-like tags in its text and
    decodes entities after that: escaped, '<b>' stays text."""
    return html.escape(printable(s), quote=False)


def _axis_unit(largest: float) -> tuple[str, float]:
    for name, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if largest >= size:
            return name, float(size)
    return "B", 1.0


def thin(n: int, series: Sequence[Sequence[int]], most: int = CHART_POINTS) -> list[int]:
    """Indices of at most about `most` of n samples that keep the shape of
    each series: in each of most/2 equal slices, each series' lowest and
    highest sample (the first and last samples always)."""
    if n <= most:
        return list(range(n))
    slices = max(1, most // (2 * max(1, len(series))))
    keep = {0, n - 1}
    for k in range(slices):
        lo, hi = k * n // slices, (k + 1) * n // slices
        if lo >= hi:
            continue
        for values in series:
            part = values[lo:hi]
            keep.add(lo + part.index(min(part)))
            keep.add(lo + part.index(max(part)))
    return sorted(keep)


def _clock(d: ReportData, t0_ns: int, seconds: Iterable[float]) -> list[Any]:
    """x values: local wall-clock times when known, else seconds."""
    if d.wall_offset_ns is None:
        return [round(s, 3) for s in seconds]
    out = []
    for s in seconds:
        wall = (t0_ns + s * 1e9 + d.wall_offset_ns) / 1e9
        out.append(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall))
                   + f".{int(wall * 1000) % 1000:03d}")
    return out


def memory_figure(d: ReportData) -> dict[str, Any] | None:
    """rss and vm over time, the lowest sample of each time slice and the
    floor fitted through them (the verdict's evidence); None without samples."""
    if d.trend is None or not len(d.trend.data):
        return None
    data, r = d.trend.data, d.trend.trend
    t = data.seconds()
    t0 = data.time_ns[0]
    unit, scale = _axis_unit(max([*data.rss, *data.vm, 1]))
    keep = thin(len(t), [data.rss, data.vm])
    x = _clock(d, t0, [t[i] for i in keep])
    hover = f"%{{y:.1f}} {unit}<extra>%{{fullData.name}}</extra>"
    traces: list[dict[str, Any]] = [
        {"type": "scatter", "mode": "lines", "name": "rss", "x": x,
         "y": [round(data.rss[i] / scale, 3) for i in keep], "hovertemplate": hover,
         "line": {"width": 1.5, "color": "#1f77b4"}},
        {"type": "scatter", "mode": "lines", "name": "vm", "x": x,
         "y": [round(data.vm[i] / scale, 3) for i in keep], "hovertemplate": hover,
         "line": {"width": 1.2, "color": "#ff7f0e"}},
    ]
    if r.buckets:
        traces.append({
            "type": "scatter", "mode": "markers", "name": "lowest rss of each time slice",
            "x": _clock(d, t0, [bt - r.t0 for bt in r.bucket_times]),
            "y": [round(m / scale, 3) for m in r.bucket_minima], "hovertemplate": hover,
            "marker": {"size": 6, "color": "#2ca02c"}})
        traces.append({
            "type": "scatter", "mode": "lines",
            "name": f"fitted floor {human_rate(r.slope * 60)}",
            "x": _clock(d, t0, [0.0, t[-1]]),
            "y": [round(r.fit(r.t0) / scale, 3), round(r.fit(r.t0 + t[-1]) / scale, 3)],
            "hovertemplate": hover, "line": {"dash": "dash", "width": 2, "color": "#d62728"}})
    xaxis: dict[str, Any] = {"title": {"text": "local time" if d.wall_offset_ns is not None
                                       else "seconds since the first sample"}}
    if d.wall_offset_ns is not None:
        xaxis["type"] = "date"
    return {
        "data": traces,
        "layout": {
            "height": 420, "margin": {"l": 70, "r": 20, "t": 30, "b": 60},
            "xaxis": xaxis, "yaxis": {"title": {"text": unit}},
            "legend": {"orientation": "h", "y": -0.2},
            "hovermode": "x unified",
        },
    }


# the split's layers, bottom first: (name, color)
SPLIT_LAYERS = (("live heap", "#1f77b4"), ("allocator-held", "#ff7f0e"),
                ("other anon", "#9467bd"), ("file + shmem", "#7f7f7f"))


def split_figure(d: ReportData) -> dict[str, Any] | None:
    """Where the rss is over time, stacked: the live heap, what the allocator
    holds free, the rest of anonymous memory, file pages and shared memory
    (pmm.analysis.growthkind.split_point); None when the samples lack the split."""
    from pmm.analysis.growthkind import split_point

    if d.trend is None or d.trend.kind is None:
        return None
    data = d.trend.data
    n = len(data)
    if n == 0 or any(len(p) != n for p in (data.anon, data.file, data.shmem)):
        return None
    live = data.live if len(data.live) == n and None not in data.live else [None] * n
    free = data.heap_free if len(data.heap_free) == n else [None] * n
    points = [split_point(data.anon[i] or 0, data.file[i] or 0, data.shmem[i] or 0, live[i],
                          free[i] if live[i] is not None else None) for i in range(n)]
    layers = [[p.live or 0 for p in points], [p.heap_free or 0 for p in points],
              [p.anon_other for p in points], [p.file + p.shmem for p in points]]
    names = [name for name, _ in SPLIT_LAYERS]
    if live[-1] is None:
        names[2] = "anon (heap unknown)"
    unit, scale = _axis_unit(max([sum(col) for col in zip(*layers, strict=True)] + [1]))
    keep = thin(n, layers)
    t = data.seconds()
    x = _clock(d, data.time_ns[0], [t[i] for i in keep])
    hover = f"%{{y:.1f}} {unit}<extra>%{{fullData.name}}</extra>"
    traces = [{"type": "scatter", "mode": "lines", "stackgroup": "rss", "name": name,
               "x": x, "y": [round(layer[i] / scale, 3) for i in keep],
               "hovertemplate": hover, "line": {"width": 0.5, "color": color}}
              for layer, name, (_, color) in zip(layers, names, SPLIT_LAYERS, strict=True)
              if any(layer)]
    xaxis: dict[str, Any] = {"title": {"text": "local time" if d.wall_offset_ns is not None
                                       else "seconds since the first sample"}}
    if d.wall_offset_ns is not None:
        xaxis["type"] = "date"
    return {"data": traces, "layout": {
        "height": 360, "margin": {"l": 70, "r": 20, "t": 30, "b": 60}, "xaxis": xaxis,
        "yaxis": {"title": {"text": unit}}, "legend": {"orientation": "h", "y": -0.2},
        "hovermode": "x unified"}}


def flame_rows(d: ReportData) -> list[tuple[list[str], int]]:
    """(call chain outermost first, live bytes) per site, the largest
    FLAME_SITES; the rest as one chain 'N more sites'."""
    rows = sorted(d.live_by_site, key=lambda r: (-r[1], r[0]))
    out: list[tuple[list[str], int]] = []
    for site, size in rows[:FLAME_SITES]:
        stack = d.stacks.get(site) or [StackFrame(d.where(site))]
        out.append(([f.text for f in reversed(stack)], size))
    rest = rows[FLAME_SITES:]
    if rest:
        out.append(([f"{len(rest)} more sites"], sum(b for _, b in rest)))
    return out


def flame_color(label: str) -> str:
    """A flame graph's warm colour for a frame, the same for the same frame
    wherever it is (so one function reads as one colour)."""
    h = hashlib.blake2b(label.encode(), digest_size=3).digest()
    return f"rgb({205 + h[0] % 50},{60 + h[1] % 150},{20 + h[2] % 50})"


def flame_figure(d: ReportData) -> dict[str, Any] | None:
    """Live bytes by call chain as a plotly icicle (flame-graph orientation);
    None when no site has live bytes."""
    rows = flame_rows(d)
    total = sum(b for _, b in rows)
    if total <= 0:
        return None
    ids, labels, parents, values = ["all"], ["all live bytes"], [""], [0]
    index: dict[tuple[str, str], int] = {}
    depth = 1
    for chain, size in rows:
        parent = "all"
        values[0] += size
        for text in chain:
            key = (parent, text)
            i = index.get(key)
            if i is None:
                i = len(ids)
                index[key] = i
                ids.append(f"n{i}")
                labels.append(text)
                parents.append(parent)
                values.append(0)
            values[i] += size
            parent = ids[i]
        depth = max(depth, len(chain) + 1)
    share = [f"{human_bytes(v)}, {100.0 * v / total:.1f}%" for v in values]
    colors = ["#e3e7ee", *(flame_color(label) for label in labels[1:])]
    return {
        "data": [{
            "type": "icicle", "ids": ids, "labels": [_plot_text(s) for s in labels],
            "parents": parents, "values": values, "branchvalues": "total",
            "customdata": share, "sort": False,
            "tiling": {"orientation": "v", "flip": "y"},
            "texttemplate": "%{label}<br>%{customdata}",
            "hovertemplate": "%{label}<br>%{customdata}<extra></extra>",
            "textfont": {"size": 12, "color": "#1d2330"}, "pathbar": {"visible": False},
            "marker": {"colors": colors, "line": {"color": "#ffffff", "width": 1}},
        }],
        # a row of about 36 px per frame, as flame graphs are drawn
        "layout": {"height": max(150, min(1200, 36 * depth + 20)),
                   "margin": {"l": 0, "r": 0, "t": 10, "b": 10}},
        "config": {"displayModeBar": False},
    }
