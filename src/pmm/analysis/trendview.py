"""`pmctl trend`'s report: the verdict on a process's samples, and its forms.

`analyse` runs the detector (pmm.analysis.trend) over a `pmm.analysis.samplesource.Data` and
ranks the sites whose live bytes grow fastest; a `Report` then renders as
text (a table, a terminal chart, the verdict, the rate, the time until
the available memory is used up, what to run next, the sites), as a JSON
document (`to_dict`), or as a PNG (`plot_png`, with matplotlib). `watch_header`/`watch_line` are the
running report of a watch, one line per report interval.

Text shows sizes and rates in binary units (pmm.units); JSON keeps exact
numbers (bytes, seconds; rates in KiB/min and bytes/min).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pmm.analysis.growthkind import Classification, Kind, classify
from pmm.analysis.samplesource import Data, available_memory, device_sites
from pmm.analysis.trend import (
    SiteGrowth,
    Trend,
    Verdict,
    detect,
    seconds_until_exhausted,
    site_growth,
)
from pmm.errors import PmmError
from pmm.output import format_table, human_age
from pmm.text import printable
from pmm.units import human_bytes, human_rate

TABLE_ROWS = 12
# a plot file named without an extension gets this one (matplotlib's default)
PLOT_DEFAULT_FORMAT = "png"


def plot_install_hint() -> str:
    """What to run to install matplotlib, as this copy of pmm was installed
    (not "pip install 'pmm[plot]'": pmm on PyPI is another project)."""
    from pmm.installed import python_hint

    return f"install matplotlib ({python_hint('matplotlib', 'python3-matplotlib', 'plot')})"


class PlotUnavailable(PmmError):
    """matplotlib, which draws the plot, is not installed."""


@dataclass
class Report:
    """The detector's verdict on one process's samples, and what goes with it."""

    data: Data
    trend: Trend
    mem_available: int | None = None
    exhausted_in_s: float | None = None
    sites: list[SiteGrowth] = field(default_factory=list)
    kind: Classification | None = None  # None: the samples have no split

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (see pmctl/trend_cli.py for its keys)."""
        d, r = self.data, self.trend
        kib = r.rate_kib_min
        w = d.watch
        return {
            "pid": d.pid,
            "start_time": d.start_time,
            "comm": d.comm,
            "source": d.source,
            "db": d.db or None,
            "watch": None if w is None else {
                "interval_s": w.interval_s, "duration_s": w.duration_s,
                "elapsed_s": w.elapsed_s, "ended": str(w.ended)},
            "samples": r.samples,
            "span_s": d.span_s,
            "verdict": str(r.verdict),
            "reason": r.reason,
            "rate_kib_min": kib[0],
            "rate_kib_min_low": kib[1],
            "rate_kib_min_high": kib[2],
            "rate_bytes_min": r.slope * 60.0,
            "rate_bytes_min_low": r.slope_low * 60.0,
            "rate_bytes_min_high": r.slope_high * 60.0,
            "confidence": r.confidence,
            "slope_bytes_s": r.slope,
            "growth_bytes": r.growth,
            "min_growth_bytes": r.min_growth,
            "noise_bytes": r.noise,
            "late_slope_bytes_s": r.late_slope,
            "level_bytes": r.level,
            "rss_first": d.rss[0] if d.rss else None,
            "rss_last": d.rss[-1] if d.rss else None,
            "vm_first": d.vm[0] if d.vm else None,
            "vm_last": d.vm[-1] if d.vm else None,
            "mem_available": self.mem_available,
            "exhausted_in_s": self.exhausted_in_s,
            "exited": d.exited,
            "matters_bytes_min": r.matters * 60.0,
            "watch_more_s": r.watch_more_s,
            "sites": [
                {"site": s.site, "rate_kib_min": s.rate_kib_min,
                 "rate_bytes_min": s.slope * 60.0, "first_bytes": s.first_bytes,
                 "last_bytes": s.last_bytes, "last_blocks": s.last_blocks,
                 "snapshots": s.snapshots, "where": d.where.get(s.site, "")}
                for s in self.sites
            ],
            "table": [{"time_s": ts, "rss": rss, "vm": vm} for ts, rss, vm in table_rows(d)],
            "kind": str(self.kind.kind) if self.kind is not None else None,
            "kind_evidence": self.kind.to_dict() if self.kind is not None else None,
        }


def detect_on(d: Data, available: int | None = None) -> Trend:
    """The detector on d's rss (times in seconds since its first sample);
    available: the bytes it may still take (the rate that matters)."""
    return detect(d.seconds(), [float(v) for v in d.rss], available=available)


def analyse(d: Data, available: int | None = None) -> Report:
    """The verdict on d, the time until `available` bytes (default: MemAvailable
    now, or the room under the process's cgroup limit when smaller) are used up
    at its rate (not for an exited process), and the five sites that grow
    fastest (their descriptions from the module when the database lacks them)."""
    kind = kind_of(d)
    if available is None:
        available = available_memory(None if d.exited else d.pid)
    r = detect_on(d, available)
    exhausted = seconds_until_exhausted(r.slope, available) if (
        available is not None and not d.exited
        and r.verdict in (Verdict.LEAK, Verdict.GROWING)) else None
    sites = site_growth(((s, t / 1e9, lb, lk) for s, t, lb, lk in d.snapshots), limit=5)
    missing = {s.site for s in sites if s.site not in d.where}
    if missing and (d.source in ("db", "kmod") or d.snapshots):
        d.where = {**device_sites(d.pid, d.start_time, missing), **d.where}
    return Report(d, r, available, exhausted, sites, kind)


def kind_of(d: Data) -> Classification | None:
    """The kind of d's growth (pmm.analysis.growthkind), None when its samples lack
    the kernel's split (anon, file, shmem: a database of an older pmd)."""
    n = len(d)
    parts = (d.anon, d.file, d.shmem)
    if n == 0 or any(len(p) != n or any(v is None for v in p) for p in parts):
        return None
    live = d.live if len(d.live) == n else None
    free = d.heap_free if len(d.heap_free) == n else None
    return classify(d.seconds(), [int(v or 0) for v in d.anon], [int(v or 0) for v in d.file],
                    [int(v or 0) for v in d.shmem], live, free, d.heap_trimmable, d.allocator,
                    d.grown_maps(), live_now=d.live_now)


# -- text ----------------------------------------------------------------------


def table_rows(d: Data, rows: int = TABLE_ROWS) -> list[tuple[float, int, int]]:
    """(seconds since the first sample, rss, vm) at `rows` evenly spaced samples."""
    n = len(d)
    if n == 0:
        return []
    k = min(rows, n)
    picks = sorted({round(i * (n - 1) / (k - 1)) for i in range(k)} if k > 1 else {0})
    t0 = d.time_ns[0]
    return [((d.time_ns[i] - t0) / 1e9, d.rss[i], d.vm[i]) for i in picks]


def chart(t_s: Sequence[float], v: Sequence[float], r: Trend | None,
          width: int = 64, height: int = 10) -> list[str]:
    """v over time (t_s in order): '*' spans each column's min..max, '.' the
    fitted floor of r (whose times are on t_s's axis)."""
    if not t_s:
        return []
    lo, hi = min(v), max(v)
    fitted = r is not None and r.buckets > 0
    if r is not None and fitted:
        fit_ends = (r.fit(t_s[0]), r.fit(t_s[-1]))
        lo, hi = min(lo, *fit_ends), max(hi, *fit_ends)
    if hi <= lo:
        hi = lo + 1.0
    span = (t_s[-1] - t_s[0]) or 1.0
    # the times are in order: each column is a slice, found by bisection
    ends = [bisect_left(t_s, t_s[0] + (c + 1) * span / width) for c in range(width - 1)]
    starts = [0, *ends]
    ends.append(len(t_s))
    grid = [[" "] * width for _ in range(height)]

    def row_of(x: float) -> int:
        return min(height - 1, max(0, int((x - lo) / (hi - lo) * (height - 1) + 0.5)))

    if r is not None and fitted:
        for c in range(width):
            grid[row_of(r.fit(t_s[0] + (c + 0.5) / width * span))][c] = "."
    for c in range(width):
        if starts[c] < ends[c]:
            column = v[starts[c]:ends[c]]
            for rr in range(row_of(min(column)), row_of(max(column)) + 1):
                grid[rr][c] = "*"
    lines = []
    for i in range(height - 1, -1, -1):
        label = human_bytes(hi) if i == height - 1 else human_bytes(lo) if i == 0 else ""
        lines.append(f"{label:>10} |{''.join(grid[i])}|")
    lines.append(f"{'':>10}  0s{human_age(span):>{width - 2}}")
    return lines


def _source_text(d: Data) -> str:
    if d.source == "db":
        return f"pmd database {d.db}"
    if d.source == "kmod":
        return "the module's sample ring"
    return f"/proc/{d.pid}"


def rests_on(d: Data) -> str:
    """What a verdict on d rests on: '58 samples over 5.8s'."""
    return f"{len(d)} sample{'' if len(d) == 1 else 's'} over {human_age(d.span_s)}"


def render(rep: Report) -> str:
    """The report for people: table, chart, verdict, rate, memory, sites."""
    d, r = rep.data, rep.trend
    out = [f"pid {d.pid} ({printable(d.comm or '?')}): {rests_on(d)} from "
           f"{printable(_source_text(d))}", ""]
    rows = [[f"+{human_age(ts)}", human_bytes(rss), human_bytes(vm)]
            for ts, rss, vm in table_rows(d)]
    out.append(format_table(["time", "rss", "vm"], rows, right={1, 2}))
    out.append("")
    out.append("rss ('*' samples, '.' fitted floor):")
    # detect_on's times start at the first sample, as the chart's axis does
    out.extend(chart(d.seconds(), [float(v) for v in d.rss], r))
    out.append("")
    out.append(f"verdict:  {r.verdict} ({rests_on(d)}): {r.reason}")
    if r.buckets:
        pct = round(r.confidence * 100)
        sign = "+" if r.growth >= 0 else "-"
        out.append(f"rate:     {human_rate(r.slope * 60)} ({pct}% CI "
                   f"{human_rate(r.slope_low * 60)} .. {human_rate(r.slope_high * 60)}), "
                   f"floor {human_bytes(r.level)}, {sign}{human_bytes(abs(r.growth))} "
                   "over the window")
    kinds = kind_lines(rep)
    out.extend(kinds)
    if d.exited:
        out.append(f"process:  exited: {_exited_text(d)}")
    elif rep.mem_available is not None:
        ex = rep.exhausted_in_s
        when = ""  # no rate, no forecast
        if ex is not None:
            when = f", exhausted in {human_age(ex)} at this rate"
        elif r.buckets and r.verdict is not Verdict.INCONCLUSIVE:
            when = ", not exhausted at this rate"
        out.append(f"memory:   available {human_bytes(rep.mem_available)}{when}")
    # the kind's advice is the next step for growth; the watch's length otherwise
    if r.verdict not in (Verdict.LEAK, Verdict.GROWING) or \
            not any(line.startswith("next:") for line in kinds):
        out.extend(next_steps(rep))
    if rep.sites:
        out.append("")
        out.append("sites whose live bytes grow fastest:")
        srows = [[str(s.site), human_rate(s.slope * 60), human_bytes(s.last_bytes),
                  str(s.last_blocks), d.where.get(s.site, "")] for s in rep.sites]
        out.append(format_table(["site", "rate", "live", "blocks", "where"], srows,
                                right={1, 2, 3}))
    return "\n".join(out)


def _exited_text(d: Data) -> str:
    if d.source == "db":
        return "these are the samples pmd kept of it"
    if d.source == "kmod":
        return "these are the samples the module kept of it"
    return "the watch ended with it"


def _watch_hint(d: Data, more: float) -> str:
    """How long a watch to run: the time seen so far plus `more`, rounded up."""
    total = max(1, int(d.span_s + more + 0.999))
    for unit, size in (("h", 3600), ("m", 60)):
        if total >= 2 * size:
            return f"{-(-total // size)}{unit}"
    return f"{total}s"


def next_steps(rep: Report) -> list[str]:
    """What to run next after the verdict: for INCONCLUSIVE and NOT ENOUGH
    DATA how long to watch, for LEAK and GROWING how to find the sites
    (unless they are listed below)."""
    d, r = rep.data, rep.trend
    pid = d.pid
    if r.verdict in (Verdict.INCONCLUSIVE, Verdict.NOT_ENOUGH_DATA):
        if d.exited:
            return ["next:     the process exited: no longer watch can decide"]
        if r.watch_more_s is None:
            return [f"next:     watch longer: pmctl trend {pid} --watch 1m"]
        about = f"about {human_age(r.watch_more_s)} more" if r.watch_more_s > 0 else "longer"
        cmd = (f"pmctl trend {pid} --watch {_watch_hint(d, r.watch_more_s)}"
               if d.source == "proc" else f"pmctl trend {pid} later (pmd keeps sampling)")
        return [f"next:     watch {about} to decide: {cmd}"]
    if r.verdict in (Verdict.LEAK, Verdict.GROWING) and not rep.sites:
        if d.exited:
            return [f"next:     pmctl leaks {pid} names the sites that held memory when it "
                    "exited, if the hook was in it"]
        return [f"next:     find the sites: pmctl attach {pid} (or start it with pmctl run), "
                f"then pmctl leaks {pid}; or pmctl report {pid} -o FILE.html"]
    return []
def kind_lines(rep: Report) -> list[str]:
    """The kind of growth, its evidence and what to do ([] without a split)."""
    c = rep.kind
    if c is None:
        return []
    out = [f"kind:     {c.kind}: {printable(c.reason)}"]  # it names mappings' paths
    p = c.latest
    if p is not None:
        parts = [f"live heap {human_bytes(p.live)}" if p.live is not None
                 else "live heap unknown"]
        if p.heap_free is not None:
            parts.append(f"allocator-held {human_bytes(p.heap_free)}")
        parts += [f"other anon {human_bytes(p.anon_other)}", f"file {human_bytes(p.file)}",
                  f"shmem {human_bytes(p.shmem)}"]
        out.append(f"split:    {', '.join(parts)}")
    if c.mappings and c.kind not in (Kind.LEAK, Kind.NONE) and "grew:" not in c.reason:
        out.append("grew:     " + ", ".join(f"{printable(m.label)} +{human_bytes(m.growth)}"
                                            for m in c.mappings[:5]))
    if c.kind is Kind.LEAK and rep.sites:
        s = rep.sites[0]
        where = rep.data.where.get(s.site, "") or f"site {s.site}"
        out.append(f"site:     {printable(where)} {human_rate(s.slope * 60)}")
    if c.advice:
        out.append(f"next:     {c.advice.replace('PID', str(rep.data.pid))}")
    return out


# -- the running report of a watch ----------------------------------------------

_WATCH_COLUMNS = "{:<8}  {:>8}  {:>10}  {:>10}  {:>15}  {:>7}"


def watch_header() -> str:
    """The heading of the watch's lines."""
    return _WATCH_COLUMNS.format("time", "elapsed", "rss", "vm", "rate", "samples")


def watch_line(d: Data, elapsed_s: float, now: float | None = None) -> str:
    """One line of the running report: wall-clock time, seconds watched, the
    last sample's rss and vm, and the growth rate of the rss floor so far
    ('-' while the detector has too few samples to fit one)."""
    r = detect_on(d)
    rate = human_rate(r.slope * 60) if r.buckets else "-"
    clock = time.strftime("%H:%M:%S", time.localtime(now))
    rss = human_bytes(d.rss[-1]) if d.rss else "-"
    vm = human_bytes(d.vm[-1]) if d.vm else "-"
    return _WATCH_COLUMNS.format(clock, human_age(elapsed_s), rss, vm, rate, len(d))


# -- the plot --------------------------------------------------------------------


def require_matplotlib() -> None:
    """Raises PlotUnavailable, with what to install, unless a plot can be drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
    except ImportError:
        raise PlotUnavailable(
            f"drawing a plot needs matplotlib, which is not installed: {plot_install_hint()}"
        ) from None


class PlotFormatUnknown(PmmError):
    """A plot file whose extension names no format matplotlib writes."""


def plot_formats() -> list[str]:
    """The extensions plot_png writes, as matplotlib says (not pgf, which
    needs a TeX installation). Raises PlotUnavailable without matplotlib."""
    require_matplotlib()
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(f for f in FigureCanvasBase.get_supported_filetypes() if f != "pgf")


def plot_file(path: Path) -> Path:
    """The file plot_png writes for `path`: path, with PLOT_DEFAULT_FORMAT's
    extension added when it has none (without matplotlib: a quick check)."""
    if path.suffix:
        return path
    return path.with_name(path.name.rstrip(".") + "." + PLOT_DEFAULT_FORMAT)


def plot_target(path: Path) -> tuple[Path, str]:
    """The file plot_png will write for `path` (plot_file) and its format:
    the extension's, or PLOT_DEFAULT_FORMAT when it has none. Raises
    PlotFormatUnknown (saying the formats that work) for an extension
    matplotlib does not write, PlotUnavailable without matplotlib: both
    before any sample is taken."""
    formats = plot_formats()
    ext = path.suffix.lower().removeprefix(".")
    if not ext:
        return plot_file(path), PLOT_DEFAULT_FORMAT
    if ext not in formats:
        raise PlotFormatUnknown(f"{path}: .{ext} is not a format the plot can be written in; "
                                f"use one of {', '.join('.' + f for f in formats)}")
    return path, ext


def _axis_unit(largest: float) -> tuple[str, float]:
    """The binary unit for an axis whose largest value is `largest` bytes."""
    for name, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if largest >= size:
            return name, float(size)
    return "B", 1.0


def plot_png(rep: Report, path: Path) -> Path:
    """rss, vm, the lowest sample of each time slice (the detector's buckets)
    and the floor fitted through them over time, into path, in the format
    its extension names (plot_target: PNG, and .png added, without one); the
    size axis in the binary unit of the largest value. Returns the file
    written. Raises PlotUnavailable without matplotlib, PlotFormatUnknown,
    OSError/ValueError when the file cannot be written."""
    target, fmt = plot_target(path)
    import matplotlib.pyplot as plt

    d, r = rep.data, rep.trend
    t = d.seconds()
    unit, scale = _axis_unit(max([*d.rss, *d.vm, 0]))
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=100)
    try:
        ax.plot(t, [v / scale for v in d.rss], lw=0.8, label="rss")
        ax.plot(t, [v / scale for v in d.vm], lw=0.8, label="vm")
        if r.buckets and t:
            ax.plot([bt - r.t0 for bt in r.bucket_times], [m / scale for m in r.bucket_minima],
                    "o", ms=3, label="lowest sample of each time slice")
            ax.plot([0, t[-1]], [r.fit(r.t0) / scale, r.fit(r.t0 + t[-1]) / scale], "--",
                    label=f"fitted floor {human_rate(r.slope * 60)}")
        ax.set_xlabel("seconds")
        ax.set_ylabel(unit)
        ax.set_title(f"pid {d.pid} ({d.comm}): {r.verdict}, {rests_on(d)}")
        ax.legend(loc="best", fontsize="small")
        fig.tight_layout()
        fig.savefig(target, format=fmt)
    finally:
        plt.close(fig)
    return target
