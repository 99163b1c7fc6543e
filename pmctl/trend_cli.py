"""`pmctl trend PID`: is the process leaking, how fast, when does memory run
out, and where.

Samples come from, in this order (or as --source says):
  db    pmd's SQLite database (--db, $PMM_DB, else the default path) when it
        holds samples of the process;
  kmod  the module's sample ring of a monitored process (PMM_READ_SAMPLES);
  proc  with --watch SECONDS: pmctl samples /proc/PID itself for that long.

It prints rss and vm over time (a compact table and a terminal chart), the
growth rate of rss in KiB/min with its confidence interval, the verdict, the
time until MemAvailable is used up at that rate, and the sites whose live
bytes grow fastest (from pmd's per-site snapshots). The verdict comes from
src/pmm/trend.py (Theil-Sen on bucket minima; see its docstring).

Exit status: 0 STABLE, 10 LEAK, 11 GROWING (growth not yet significant),
12 NOT ENOUGH DATA; 1-9 errors as in src/pmm/errors.py (5: no such pid,
6: no samples of it anywhere).

--json prints one document: {"pid", "start_time", "comm", "source", "db",
"samples", "span_s", "verdict", "reason", "exit_code", "rate_kib_min",
"rate_kib_min_low", "rate_kib_min_high", "confidence", "slope_bytes_s",
"growth_bytes", "min_growth_bytes", "noise_bytes", "late_slope_bytes_s",
"level_bytes", "rss_first", "rss_last", "vm_first", "vm_last",
"mem_available", "exhausted_in_s", "sites": [{"site", "rate_kib_min",
"first_bytes", "last_bytes", "last_blocks", "snapshots", "where"}],
"table": [{"time_s", "rss", "vm"}]}. time_s: seconds since the first sample.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import numpy as np
import numpy.typing as npt
import typer

from pmctl.exitcodes import exit_code_for
from pmm.errors import NoSuchPid, NotMonitored, PmmError
from pmm.output import dump_json, format_table, human_age, human_bytes
from pmm.text import printable
from pmm.trend import Trend, Verdict, detect, seconds_until_exhausted, site_growth

EXIT_STABLE = 0
EXIT_LEAK = 10
EXIT_GROWING = 11
EXIT_NOT_ENOUGH_DATA = 12

EXIT_CODES: dict[Verdict, int] = {
    Verdict.STABLE: EXIT_STABLE,
    Verdict.LEAK: EXIT_LEAK,
    Verdict.GROWING: EXIT_GROWING,
    Verdict.NOT_ENOUGH_DATA: EXIT_NOT_ENOUGH_DATA,
}

I64 = npt.NDArray[np.int64]


class Source(enum.StrEnum):
    auto = "auto"
    db = "db"
    kmod = "kmod"
    proc = "proc"


@dataclass
class Data:
    """The samples of one process, oldest first (times CLOCK_BOOTTIME ns)."""

    pid: int
    start_time: int
    comm: str
    source: str
    time_ns: I64
    vm: I64
    rss: I64
    db: str = ""
    snapshots: list[tuple[int, int, int, int]] = field(default_factory=list)
    where: dict[int, str] = field(default_factory=dict)


def boottime_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def mem_available(path: str = "/proc/meminfo") -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


# -- sources -------------------------------------------------------------------


def _live_start(pid: int) -> tuple[int, str] | None:
    from pmm.procsampler import ProcessGone, read_stat

    try:
        st = read_stat(pid)
    except (ProcessGone, OSError):
        return None
    return st.start_time, st.comm


def from_db(path: Path, pid: int, start_time: int | None, since_s: float | None) -> Data | None:
    from pmm.store import Store, start_key

    if not path.exists():
        return None
    store = Store.open(path, readonly=True)
    try:
        procs = store.processes(pid)
        if not procs:
            return None
        if start_time is not None:
            want = start_key(start_time)
        else:
            live = _live_start(pid)
            want = live[0] if live is not None and any(
                p.start_time == live[0] for p in procs) else procs[0].start_time
        proc = next((p for p in procs if p.start_time == want), None)
        if proc is None:
            return None
        since_ns = None
        if since_s is not None:
            since_ns = boottime_ns() - int(since_s * 1e9)
        s = store.series(pid, proc.start_time, since_ns)
        if len(s) == 0:
            return None
        snaps = store.site_snapshots(pid, proc.start_time, since_ns)
        where = store.sites(pid, proc.start_time)
        return Data(pid, proc.start_time, proc.comm, "db", s.time_ns, s.vm, s.rss, str(path),
                    snaps, where)
    finally:
        store.close()


def _device_sites(pid: int, start_time: int, wanted: set[int]) -> dict[int, str]:
    """Descriptions of the wanted sites from the module, when it is loaded and
    monitors this process (same start time); frames symbolized with its map."""
    from pmm.device import Device
    from pmm.store import start_key
    from pmm.symbolize import describe_sites, maps_for

    try:
        with Device.open() as dev:
            info = dev.pid_info(pid)
            if info is None or start_key(info.start_time_ns) != start_time:
                return {}
            sites = [s for s in dev.sites(pid) if s.site in wanted]
    except PmmError:
        return {}
    return describe_sites(sites, maps_for(pid, info.start_time_ns))


def from_kmod(pid: int, since_s: float | None) -> Data | None:
    from pmm.device import Device
    from pmm.errors import ModuleNotLoaded
    from pmm.store import start_key

    try:
        dev = Device.open()
    except ModuleNotLoaded:
        return None
    with dev:
        info = dev.pid_info(pid)
        if info is None:
            return None
        samples = dev.samples(pid)
    a = np.array([(s.time_ns, s.vm, s.rss) for s in samples], dtype=np.int64).reshape(-1, 3)
    if since_s is not None:
        a = a[a[:, 0] >= boottime_ns() - int(since_s * 1e9)]
    if a.shape[0] == 0:
        return None
    return Data(pid, start_key(info.start_time_ns), info.comm, "kmod", a[:, 0].copy(),
                a[:, 1].copy(), a[:, 2].copy())


def from_watch(pid: int, seconds: float, interval: float,
               progress: Callable[[int], None] | None = None) -> Data:
    from pmm.procsampler import ProcessGone, sample

    live = _live_start(pid)
    if live is None:
        raise NoSuchPid(f"no such process: pid {pid} does not exist")
    start, comm = live
    rows: list[tuple[int, int, int]] = []
    end = time.monotonic() + seconds
    nxt = time.monotonic()
    while True:
        try:
            s = sample(pid, start)
        except ProcessGone:
            break
        rows.append((s.time, s.vm, s.rss))
        if progress is not None:
            progress(len(rows))
        nxt += interval
        now = time.monotonic()
        if nxt > end:
            break
        time.sleep(max(0.0, nxt - now))
    a = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return Data(pid, start, comm, "proc", a[:, 0].copy(), a[:, 1].copy(), a[:, 2].copy())


# -- rendering -----------------------------------------------------------------


def table_rows(d: Data, rows: int = 12) -> list[tuple[float, int, int]]:
    """(seconds since the first sample, rss, vm) at `rows` evenly spaced samples."""
    n = int(d.time_ns.size)
    if n == 0:
        return []
    idx = sorted(set(np.linspace(0, n - 1, min(rows, n)).round().astype(int).tolist()))
    t0 = int(d.time_ns[0])
    return [((int(d.time_ns[i]) - t0) / 1e9, int(d.rss[i]), int(d.vm[i])) for i in idx]


def chart(t_s: npt.NDArray[np.float64], v: npt.NDArray[np.float64], r: Trend | None,
          width: int = 64, height: int = 10) -> list[str]:
    """rss over time: '*' spans each column's min..max, '.' the fitted floor."""
    if t_s.size == 0:
        return []
    lo, hi = float(v.min()), float(v.max())
    if r is not None and r.buckets:
        fit = [r.fit(float(t_s[0])), r.fit(float(t_s[-1]))]
        lo, hi = min(lo, *fit), max(hi, *fit)
    if hi <= lo:
        hi = lo + 1.0
    span = float(t_s[-1] - t_s[0]) or 1.0
    col = np.minimum(((t_s - t_s[0]) / span * width).astype(int), width - 1)
    grid = [[" "] * width for _ in range(height)]

    def row_of(x: float) -> int:
        return min(height - 1, max(0, int((x - lo) / (hi - lo) * (height - 1) + 0.5)))

    if r is not None and r.buckets:
        for c in range(width):
            tc = float(t_s[0]) + (c + 0.5) / width * span
            grid[row_of(r.fit(tc))][c] = "."
    for c in range(width):
        sel = v[col == c]
        if sel.size == 0:
            continue
        for rr in range(row_of(float(sel.min())), row_of(float(sel.max())) + 1):
            grid[rr][c] = "*"
    lines = []
    for i in range(height - 1, -1, -1):
        label = human_bytes(int(hi)) if i == height - 1 else (
            human_bytes(int(lo)) if i == 0 else "")
        lines.append(f"{label:>8} |{''.join(grid[i])}|")
    lines.append(f"{'':>8}  0s{human_age(span):>{width - 2}}")
    return lines


def plot_png(d: Data, r: Trend, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = (d.time_ns - d.time_ns[0]) / 1e9
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=100)
    ax.plot(t, d.rss / 2**20, lw=0.8, label="rss")
    ax.plot(t, d.vm / 2**20, lw=0.8, label="vm")
    if r.buckets:
        bt = np.array(r.bucket_times) - r.t0
        ax.plot(bt, np.array(r.bucket_minima) / 2**20, "o", ms=3, label="bucket minima")
        ax.plot([0, t[-1]], [r.fit(r.t0) / 2**20, r.fit(r.t0 + t[-1]) / 2**20], "--",
                label=f"Theil-Sen fit {r.rate_kib_min[0]:+.1f} KiB/min")
    ax.set_xlabel("seconds")
    ax.set_ylabel("MiB")
    ax.set_title(f"pid {d.pid} ({d.comm}): {r.verdict}")
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def build(d: Data) -> tuple[Trend, dict[str, Any]]:
    t_s = d.time_ns.astype(np.float64) / 1e9
    r = detect(t_s, d.rss.astype(np.float64))
    avail = mem_available()
    exhausted = seconds_until_exhausted(r.slope, avail) if (
        avail is not None and r.verdict in (Verdict.LEAK, Verdict.GROWING)) else None
    sites = site_growth(((s, t / 1e9, lb, lk) for s, t, lb, lk in d.snapshots), limit=5)
    missing = {s.site for s in sites if s.site not in d.where}
    if missing and d.source in ("db", "kmod"):
        d.where = {**_device_sites(d.pid, d.start_time, missing), **d.where}
    kib = r.rate_kib_min
    doc: dict[str, Any] = {
        "pid": d.pid,
        "start_time": d.start_time,
        "comm": d.comm,
        "source": d.source,
        "db": d.db or None,
        "samples": r.samples,
        "span_s": r.span_s,
        "verdict": str(r.verdict),
        "reason": r.reason,
        "exit_code": EXIT_CODES[r.verdict],
        "rate_kib_min": kib[0],
        "rate_kib_min_low": kib[1],
        "rate_kib_min_high": kib[2],
        "confidence": r.confidence,
        "slope_bytes_s": r.slope,
        "growth_bytes": r.growth,
        "min_growth_bytes": r.min_growth,
        "noise_bytes": r.noise,
        "late_slope_bytes_s": r.late_slope,
        "level_bytes": r.level,
        "rss_first": int(d.rss[0]) if d.rss.size else None,
        "rss_last": int(d.rss[-1]) if d.rss.size else None,
        "vm_first": int(d.vm[0]) if d.vm.size else None,
        "vm_last": int(d.vm[-1]) if d.vm.size else None,
        "mem_available": avail,
        "exhausted_in_s": exhausted,
        "sites": [
            {"site": s.site, "rate_kib_min": s.rate_kib_min, "first_bytes": s.first_bytes,
             "last_bytes": s.last_bytes, "last_blocks": s.last_blocks,
             "snapshots": s.snapshots, "where": d.where.get(s.site, "")}
            for s in sites
        ],
        "table": [{"time_s": ts, "rss": rss, "vm": vm} for ts, rss, vm in table_rows(d)],
    }
    return r, doc


def render(d: Data, r: Trend, doc: dict[str, Any]) -> str:
    src = {"db": f"pmd database {d.db}", "kmod": "the module's sample ring",
           "proc": "/proc (--watch)"}[d.source]
    out = [f"pid {d.pid} ({printable(d.comm or '?')}): {r.samples} samples over "
           f"{human_age(r.span_s)} from {printable(src)}", ""]
    rows = [[f"+{human_age(ts)}", human_bytes(rss), human_bytes(vm)]
            for ts, rss, vm in table_rows(d)]
    out.append(format_table(["time", "rss", "vm"], rows, right={1, 2}))
    out.append("")
    t_s = (d.time_ns - (d.time_ns[0] if d.time_ns.size else 0)).astype(np.float64) / 1e9
    fit = r if r.buckets else None
    if fit is not None:
        # the chart's time axis starts at 0; shift the fit accordingly
        fit = dataclasses.replace(r, t0=0.0)
    out.append("rss ('*' samples, '.' fitted floor):")
    out.extend(chart(t_s, d.rss.astype(np.float64), fit))
    out.append("")
    pct = round(r.confidence * 100)
    out.append(f"verdict:  {r.verdict}: {r.reason}")
    if r.buckets:
        k = r.rate_kib_min
        out.append(f"rate:     {k[0]:+.1f} KiB/min ({pct}% CI {k[1]:+.1f} .. {k[2]:+.1f}), "
                   f"floor {human_bytes(int(r.level))}, {'+' if r.growth >= 0 else '-'}"
                   f"{human_bytes(int(abs(r.growth)))} over the window")
    avail = doc["mem_available"]
    if avail is not None:
        ex = doc["exhausted_in_s"]
        when = f"exhausted in {human_age(ex)} at this rate" if ex is not None else \
            "not exhausted at this rate"
        out.append(f"memory:   MemAvailable {human_bytes(avail)}, {when}")
    if doc["sites"]:
        out.append("")
        out.append("sites whose live bytes grow fastest:")
        srows = [[str(s["site"]), f"{s['rate_kib_min']:+.1f}", human_bytes(s["last_bytes"]),
                  str(s["last_blocks"]), s["where"]] for s in doc["sites"]]
        out.append(format_table(["site", "KiB/min", "live", "blocks", "where"], srows,
                                right={1, 2, 3}))
    return "\n".join(out)


# -- the command ---------------------------------------------------------------

P = ParamSpec("P")
R = TypeVar("R")


def _errors(fn: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except PmmError as e:
            typer.echo(f"pmctl: {printable(str(e))}", err=True)
            raise typer.Exit(exit_code_for(e)) from None

    return wrapper


@_errors
def trend_command(
    pid: Annotated[int, typer.Argument(help="Process id (the tgid).", min=1, show_default=False)],
    db: Annotated[Path | None, typer.Option(
        "--db", envvar="PMM_DB", show_default=False,
        help="pmd's database (default: /var/lib/pmm/pmm.db as root, else "
        "~/.local/share/pmm/pmm.db; env PMM_DB).")] = None,
    source: Annotated[Source, typer.Option(
        "--source", help="Where the samples come from: auto (db, then kmod), db, kmod, "
        "or proc (needs --watch).")] = Source.auto,
    watch: Annotated[float | None, typer.Option(
        "--watch", metavar="SECONDS", min=0.1,
        help="Sample /proc/PID live for SECONDS instead (when pmd and the module "
        "have no samples).")] = None,
    interval: Annotated[float, typer.Option(
        "--interval", min=0.01, help="Seconds between --watch samples.")] = 0.1,
    since: Annotated[float | None, typer.Option(
        "--since", metavar="SECONDS", min=0.0,
        help="Only use the samples of the last SECONDS.")] = None,
    start_time: Annotated[int | None, typer.Option(
        "--start-time", metavar="NS", show_default=False,
        help="Which process, when the pid was reused (start time in ns, as in --json).")
    ] = None,
    plot: Annotated[Path | None, typer.Option(
        "--plot", metavar="FILE.png", show_default=False,
        help="Also draw rss, vm, the bucket minima and the fit into FILE.png "
        "(matplotlib).")] = None,
    json_: Annotated[bool, typer.Option(
        "--json", help="Print one JSON document with stable keys instead of a table.")
    ] = False,
) -> None:
    """Say whether PID is leaking: rss/vm over time, the growth rate (KiB/min) with its
    confidence interval, the verdict, when MemAvailable runs out, and the sites that grow
    fastest. Exit status: 0 STABLE, 10 LEAK, 11 GROWING, 12 NOT ENOUGH DATA."""
    from pmm.store import default_db_path

    path = db or default_db_path()
    d: Data | None = None
    if watch is not None or source == Source.proc:
        if watch is None:
            raise typer.BadParameter("--source proc needs --watch SECONDS")
        if not json_:
            typer.echo(f"sampling /proc/{pid} every {interval:g} s for {watch:g} s ...",
                       err=True)
        d = from_watch(pid, watch, interval)
    else:
        if source in (Source.auto, Source.db):
            d = from_db(path, pid, start_time, since)
        if d is None and source in (Source.auto, Source.kmod):
            d = from_kmod(pid, since)
    if d is None:
        alive = _live_start(pid) is not None
        where = {Source.auto: f"in {path} nor in the module's ring",
                 Source.db: f"in {path}", Source.kmod: "in the module's ring"}[source]
        hint = ("run pmd, or `pmctl start PID`, or use --watch SECONDS" if alive
                else "the process does not exist")
        cls = NotMonitored if alive else NoSuchPid
        raise cls(f"no samples of pid {pid} {where}: {hint}")
    r, doc = build(d)
    if plot is not None:
        try:
            plot_png(d, r, plot)
        except (OSError, ValueError) as e:
            raise PmmError(f"cannot write the plot {plot}: {e}") from None
    if json_:
        typer.echo(dump_json(doc))
    else:
        typer.echo(render(d, r, doc))
        if plot is not None:
            typer.echo(f"plot:     {plot}")
    raise typer.Exit(EXIT_CODES[r.verdict])
