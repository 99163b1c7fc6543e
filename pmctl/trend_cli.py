"""`pmctl trend PID`: is the process leaking, how fast, when does memory run
out, and where. A thin front end over pmm.analysis.samplesource (the samples) and
pmm.analysis.trendview (the verdict and its forms).

Samples come from, in this order (or as --source says):
  db    pmd's SQLite database (--db, $PMM_DB, else the default path) when it
        holds samples of the process;
  kmod  the module's sample ring of a monitored process;
  proc  with --watch DURATION: pmctl samples /proc/PID itself for that long,
        printing a line per report interval; Ctrl-C or SIGTERM ends the watch
        early with the verdict on the samples so far. Needs neither the
        module nor pmd.

Durations take units (100ms, 5s, 2m, 1h; a bare number is seconds). Text
shows sizes and rates in binary units (+119.5 MiB/min); JSON keeps exact
numbers.

Exit status: 0 STABLE (the 95% interval rules out every rate that matters:
the rate that would use up the available memory, MemAvailable or the
cgroup's room, within 30 days, kept between 16 and 64 KiB/min), 10 LEAK,
11 GROWING (growth not yet significant), 12 NOT ENOUGH DATA (fewer than 30
samples), 13 INCONCLUSIVE (no growth shown, but the interval still admits a
rate that matters: the text says about how much longer to watch), also
after a watch ended early; 1-9 errors as in
pmctl/exitcodes.py (1: a --db or $PMM_DB that does not exist, 2: options
that do not go together, an --interval longer than the watch, a --plot file
that cannot be written, 3: --source kmod without the module, 5: no such pid,
6: no samples of it anywhere). A watch too short for the detector's 30
samples gets a warning on stderr before it starts.

--json prints one document: {"pid", "start_time", "comm", "source", "db",
"watch": null | {"interval_s", "duration_s", "elapsed_s", "ended": "time" |
"exited" | "stopped"}, "samples", "span_s", "verdict", "reason", "exit_code",
"rate_kib_min", "rate_kib_min_low", "rate_kib_min_high", "rate_bytes_min",
"rate_bytes_min_low", "rate_bytes_min_high", "confidence", "slope_bytes_s",
"growth_bytes", "min_growth_bytes", "noise_bytes", "late_slope_bytes_s",
"level_bytes", "rss_first", "rss_last", "vm_first", "vm_last",
"mem_available", "exhausted_in_s", "exited", "matters_bytes_min",
"watch_more_s", "sites": [{"site", "rate_kib_min",
"rate_bytes_min", "first_bytes", "last_bytes", "last_blocks", "snapshots",
"where"}], "table": [{"time_s", "rss", "vm"}], "kind", "kind_evidence"}.
time_s: seconds since the first sample. kind: the kind of growth (LEAK,
RETENTION, OUTSIDE THE HEAP, NOT IN LIVE BLOCKS, FILE, SHMEM, HEAP UNKNOWN,
NONE; pmm.analysis.growthkind), null when the samples lack rss's split;
kind_evidence: {"kind", "reason", "advice", "heap_known", "also", "parts":
{PART: {"verdict", "rate_bytes_min", "rate_bytes_min_low",
"rate_bytes_min_high", "growth_bytes"}}, "latest": {"live", "heap_free",
"anon_other", "file", "shmem"}, "allocator", "heap_free", "heap_trimmable",
"mappings": [{"mapping", "start", "rss_before", "rss_after", "growth",
"allocator"}]} or null.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated, Any

import typer

from pmctl.exitcodes import BY_VERDICT, handle_errors
from pmctl.options import DbOpt, JsonOpt, PidArg, duration_parser, given, refuse
from pmctl.paths import check_output
from pmm.analysis.samplesource import Data, Source, WatchEnd, from_watch, planned_samples, stored
from pmm.analysis.trend import Params
from pmm.analysis.trendview import (
    PlotFormatUnknown,
    Report,
    analyse,
    plot_file,
    plot_png,
    plot_target,
    render,
    watch_header,
    watch_line,
)
from pmm.errors import NoSuchPid, PmmError
from pmm.installed import python_hint
from pmm.output import dump_json, human_age
from pmm.procview import live_start
from pmm.stoprequest import StopRequest
from pmm.text import printable
from pmm.units import format_duration

DEFAULT_INTERVAL = 0.1
DEFAULT_REPORT_EVERY = 1.0
# the durations of a watch: at least 10ms; --report-every 0 prints no lines
WATCH_DURATION = duration_parser(0.01, out_of_range="{text!r} is shorter than {minimum}")
REPORT_EVERY = duration_parser(0.01, zero_ok=True,
                               out_of_range="{text!r} is shorter than {minimum}")
SINCE = duration_parser(0.0, out_of_range="{text!r} is shorter than {minimum}")


def _escaped(text: str) -> str:
    """text in a help string: typer's rich markup would take '[plot]' for a tag."""
    return text.replace("[", "\\[")


def _check_options(ctx: typer.Context, source: Source, watch: float | None,
                   json_: bool) -> None:
    """Options that do not apply to the chosen source are refused (exit 2)."""
    if source == Source.proc and watch is None:
        raise refuse("--source", "proc needs --watch DURATION (how long to sample /proc)")
    if watch is not None:
        if source in (Source.db, Source.kmod):
            raise refuse("--watch", f"does not apply with --source {source}: a watch "
                         "samples /proc/PID itself (leave out --source, or say proc)")
        if given(ctx, "since"):
            raise refuse("--since", "does not apply to --watch: a watch samples from now "
                         "on, for the duration --watch gives")
        if given(ctx, "start_time"):
            raise refuse("--start-time", "does not apply to --watch: a watch samples the "
                         "live process of that pid")
        if given(ctx, "db"):
            raise refuse("--db", "does not apply to --watch: a watch samples /proc/PID, "
                         "not pmd's database")
        if json_ and given(ctx, "report_every"):
            raise refuse("--report-every", "does not apply to --json: the running report "
                         "is for people; --json prints one document at the end")
    else:
        for name, option in (("interval", "--interval"), ("report_every", "--report-every")):
            if given(ctx, name):
                raise refuse(option, "applies only to --watch DURATION")
        if source == Source.kmod and given(ctx, "db"):
            raise refuse("--db", "does not apply with --source kmod: the samples come "
                         "from the module's ring")


def _check_watch(watch: float, interval: float, quiet: bool) -> None:
    """A watch that cannot give a verdict: refused when it would take a
    single sample (exit 2), a warning on stderr (unless quiet) when it takes
    fewer than the detector needs."""
    if interval > watch:
        raise refuse("--interval", f"{format_duration(interval)} is longer than --watch "
                     f"{format_duration(watch)}: the watch would take a single sample")
    taken = planned_samples(watch, interval)
    need = Params().min_samples
    if taken < need and not quiet:
        enough = format_duration(round((need - 1) * interval, 6))
        typer.echo(f"pmctl: warning: --watch {format_duration(watch)} at --interval "
                   f"{format_duration(interval)} takes {taken} samples, and the verdict needs "
                   f"at least {need}: use a longer --watch (at least {enough}) or a shorter "
                   "--interval", err=True)


def _watched(pid: int, duration: float, interval: float, report_every: float,
             quiet: bool) -> Data:
    """pid sampled from /proc for `duration`, with a line every `report_every`
    seconds (none when quiet or 0); SIGINT/SIGTERM end it early."""
    live = live_start(pid)
    if live is None:
        raise NoSuchPid(f"no such process: pid {pid} does not exist")
    stop = StopRequest()
    next_report = report_every
    report = not quiet and report_every > 0

    def on_sample(d: Data) -> None:
        nonlocal next_report
        elapsed = d.span_s
        # within half an interval of the due time: the sample meant for it
        if elapsed + interval / 2 >= next_report:
            typer.echo(watch_line(d, elapsed))
            while next_report <= elapsed + interval / 2:
                next_report += report_every

    if not quiet:
        typer.echo(f"watching pid {pid} ({printable(live[1])}): a sample every "
                   f"{format_duration(interval)} for {format_duration(duration)}; "
                   "Ctrl-C ends it early with the verdict so far", err=True)
    if report:
        typer.echo(watch_header())
    with stop.installed():
        d = from_watch(pid, duration, interval, on_sample if report else None, stop)
    assert d.watch is not None
    if not quiet:
        after = human_age(d.watch.elapsed_s)
        if d.watch.ended == WatchEnd.EXITED:
            typer.echo(f"pid {pid} exited after {after} of watching")
        elif d.watch.ended == WatchEnd.STOPPED and stop.signum is not None:
            typer.echo(f"watch stopped by {signal.Signals(stop.signum).name} after {after}")
        typer.echo("")
    return d


def _document(rep: Report, code: int) -> dict[str, Any]:
    """The report's JSON document with pmctl's exit status after "reason"."""
    doc: dict[str, Any] = {}
    for key, value in rep.to_dict().items():
        doc[key] = value
        if key == "reason":
            doc["exit_code"] = code
    return doc


@handle_errors
def trend_command(
    ctx: typer.Context,
    pid: PidArg,
    db: DbOpt = None,
    source: Annotated[Source, typer.Option(
        "--source", help="Where the samples come from: auto (pmd's database, then the "
        "module), db, kmod, or proc (with --watch).")] = Source.auto,
    watch: Annotated[float | None, typer.Option(
        "--watch", metavar="DURATION", parser=WATCH_DURATION, show_default=False,
        help="Sample /proc/PID now, for DURATION (e.g. 30s, 10m), printing a line per "
        "report interval; Ctrl-C ends it early with the verdict so far. Needs neither "
        "pmd nor the module.")] = None,
    interval: Annotated[float, typer.Option(
        "--interval", metavar="DURATION", parser=WATCH_DURATION, show_default=False,
        help="Time between the samples of --watch (default 100ms).")] = DEFAULT_INTERVAL,
    report_every: Annotated[float, typer.Option(
        "--report-every", metavar="DURATION", parser=REPORT_EVERY,
        show_default=False,
        help="Time between the lines --watch prints (time, rss, vm, growth rate so "
        "far; default 1s, 0: none).")] = DEFAULT_REPORT_EVERY,
    since: Annotated[float | None, typer.Option(
        "--since", metavar="DURATION", parser=SINCE, show_default=False,
        help="Only use the samples of the last DURATION (e.g. 2m, 1h).")] = None,
    start_time: Annotated[int | None, typer.Option(
        "--start-time", metavar="NS", show_default=False,
        help="Which process, when the pid was reused (start time in ns, as in --json).")
    ] = None,
    plot: Annotated[Path | None, typer.Option(
        "--plot", metavar="FILE.png", show_default=False,
        help="Also draw rss, vm and the fitted floor of rss over time into FILE.png "
        "(or .svg, .pdf, .jpg, ...: a format matplotlib writes, checked before the watch; "
        "without an extension, .png is added; needs matplotlib: "
        f"{_escaped(python_hint('matplotlib', 'python3-matplotlib', 'plot'))}).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Say whether PID is leaking: rss and vm over time, the growth rate with its
    confidence interval, the verdict, the kind of growth (the live heap, memory
    the allocator keeps, mappings outside the heap, file, shmem) and what to do,
    when the available memory runs out, what to run next, and the sites that
    grow fastest. Exit status: 0 STABLE (the interval rules out every rate that
    matters), 10 LEAK, 11 GROWING, 12 NOT ENOUGH DATA, 13 INCONCLUSIVE (watch
    longer: it says about how long)."""
    from pmm.store import default_db_path

    _check_options(ctx, source, watch, json_)
    if watch is not None:
        _check_watch(watch, interval, quiet=json_)
    if plot is not None:  # before a watch, not after it
        check_output(plot if plot.is_dir() else plot_file(plot), "'--plot'", "trend.png",
                     renamed_over=False)
        try:
            plot_target(plot)  # imports matplotlib: says so when it is missing
        except PlotFormatUnknown as e:
            raise refuse("--plot", str(e)) from None
    if watch is not None:
        d = _watched(pid, watch, interval, report_every, quiet=json_)
    else:
        d = stored(pid, db or default_db_path(), db is not None, source, start_time, since)
    rep = analyse(d)
    code = BY_VERDICT[rep.trend.verdict]
    if plot is not None:
        try:
            plot = plot_png(rep, plot)
        except (OSError, ValueError) as e:
            raise PmmError(f"cannot write the plot {plot}: {e}") from None
    if json_:
        typer.echo(dump_json(_document(rep, code)))
    else:
        typer.echo(render(rep))
        if plot is not None:
            typer.echo(f"plot:     {plot}")
    raise typer.Exit(code)
