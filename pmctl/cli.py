"""pmctl: the command line of pmm, the process memory monitor.

Commands: start, attach, stop, status, config, run, logs, leaks, stats, alerts
(and trend, report and unreachable, from pmctl/trend_cli.py, report_cli.py and
unreachable_cli.py, whose docstrings give their JSON). Each is one call into the pmm library
(src/pmm) and prints a readable table by default and, with --json, one JSON
document with these stable keys (the models' `to_dict()`, pmm.model):

start   {"pid", "monitored": true, "interval_ms"}
attach  {"pid", "monitored": true, "mode": "exact"|"sampled", "sample", "injector"}
stop    {"pid", "monitored": false}
status  {"config": <config keys>, "pids": [{"pid", "ppid", "comm", "state",
         "uptime_s", "monitored_s", "live_blocks", "live_bytes", "rss_bytes",
         "vm_bytes", "records", "dropped_records", "unmatched_frees",
         "older_frees", "pending_frees", "samples", "start_time_ns", "exit_time_ns"}]}
config  {"interval_ms", "scan", "start_pid", "stop_pid", "max_pids",
         "max_blocks_per_pid", "max_sites_per_pid", "max_samples_per_pid",
         "max_pids_per_uid", "exited_ttl_s", "abi_version", "monitored_pids",
         "records_accepted", "records_dropped", "unmatched_frees", "kmem_bytes",
         "records_queued", "older_frees"}
run     on stderr at start: {"pid", "argv", "hooklib"}; stdout is the command's
logs    {"pid", "comm", "state", "total", "blocks": [{"op", "time_ns", "age_s",
         "size", "weight", "ptr", "prev_ptr", "site", "caller", "func",
         "file", "line"}]}
leaks   {"pid", "comm", "state", "live_blocks", "live_bytes", "age_buckets",
         "sites": [{"site", "blocks", "bytes", "oldest_age_s", "newest_age_s",
         "histogram": {"<1s", "<10s", "<100s", "<1000s", "older"}, "source",
         "func", "file", "line", "object", "offset", "where", "frames":
         [{"addr", "object", "offset", "func", "file", "line", "build_id",
         "lines": [{"func", "file", "line"}], "symbol"}], "alloc_blocks",
         "alloc_bytes"}], "source": "pmd database" (only when read from there)}
         (a frame: its object's path and build-id and the offset in that file;
         addr 0 unless only the address is known; lines: the inlined calls,
         innermost first)
stats   {"pid", "buckets": [{"bucket", "max_size", "malloc", "calloc",
         "realloc", "free", "alloc_bytes", "freed_bytes", "inuse_bytes"}],
         "totals": {same keys}, "failed_allocs", "unmatched_frees", "older_frees"}
alerts  {"db", "alerts": [{"pid", "start_time", "time", "wall_time", "comm",
         "verdict", "slope", "slope_low", "slope_high", "confidence", "growth",
          "site", "resolved", "resolved_wall", "kind", "evidence", "where",
          "message"}]}  (pmd's alerts table: slope* in bytes/s, growth in bytes,
          time and resolved CLOCK_BOOTTIME ns, wall_time and resolved_wall Unix
          seconds, resolved* null while the alert stands, start_time the
          process start in ns, to the clock tick; kind: the kind of growth,
          evidence: its split and the mappings that grew, as `trend --json`'s
          kind_evidence, both null when unknown; where: the site's
          description, or null)

Times: *_ns as the module gives them (blocks: CLOCK_MONOTONIC; pids:
CLOCK_BOOTTIME), *_s in seconds. Sizes in bytes. Addresses as integers.
Tables print sizes in binary units (1.5 KiB, pmm.units.human_bytes) but for
`stats`, an account in exact bytes, and `logs`, in /proc/pmm/pid's format.
Durations given to options take units (100ms, 5s, 2m; a bare number is
seconds) and print with them.
Exit codes: see pmctl/exitcodes.py (0 ok, 1 generic, 2 usage, 3 module not
loaded, 4 permission denied, 5 no such pid, 6 not monitored, 7 invalid
value, 8 not a pmm device, 9 limit reached; 10+ trend; 20-26 attach; 30-36
unreachable).
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer
from typer.core import TyperCommand

import pmm
from pmctl.exitcodes import ExitCode, err, handle_errors
from pmctl.paths import check_output
from pmm import leaks as leaks_mod
from pmm import stats as stats_mod
from pmm import uapi
from pmm.device import Device
from pmm.errors import PmmError
from pmm.model import Block, ConfigInfo, PidInfo, Site, StatsInfo, op_name
from pmm.output import dump_json, dump_json_at, format_table, human_age
from pmm.procsampler import boottime_ns
from pmm.text import printable
from pmm.units import format_duration, human_bytes, human_rate, parse_duration, parse_size

if TYPE_CHECKING:
    from pmm.store import Store  # sqlite-utils: loaded by `alerts` only

app = typer.Typer(
    name="pmctl",
    help="Control pmm, the process memory monitor: start and stop monitoring, "
    "show live blocks, leaks by site, allocation statistics and pmd's alerts. "
    "Device: $PMM_DEVICE or /dev/pmm.",
    epilog="Exit codes: 0 ok, 1 error, 2 usage, 3 module not loaded, 4 permission denied, "
    "5 no such pid, 6 pid not monitored, 7 value refused by the module, 8 not a pmm "
    "device, 9 limit reached, 10+ `pmctl trend` verdicts, 20-26 `pmctl attach` refusals, "
    "30-36 `pmctl unreachable` refusals; "
    "`run` exits with the command's status.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class Command(TyperCommand):
    """A pmctl command: its usage line names arguments as people write them,
    `pmctl start [OPTIONS] PID`, `pmctl run [OPTIONS] CMD...` (typer's own
    shows a required argument as `{pid}`), and `pmctl --help` lists it with
    its help's first paragraph as one line (typer keeps a docstring's line
    breaks there)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.short_help and self.help:
            self.short_help = " ".join(inspect.cleandoc(self.help).split("\n\n")[0].split())
        for p in self.params:
            if p.param_type_name == "argument" and p.metavar is None and p.name:
                p.metavar = p.name.upper()  # also in the help's list and in errors

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for p in self.get_params(ctx):
            if p.param_type_name != "argument":
                continue
            name = p.metavar or (p.name or "ARG").upper()
            name = name if p.required else f"[{name}]"
            pieces.append(f"{name}..." if p.nargs != 1 else name)
        return pieces


P = ParamSpec("P")
R = TypeVar("R")


def command(name: str | None = None, **kwargs: Any) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """app.command with pmctl's Command class."""
    return app.command(name, cls=Command, **kwargs)


def print_version(value: bool) -> None:
    if value:
        typer.echo(f"pmctl {pmm.__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option("--version", help="Print pmctl's version and exit.", is_eager=True,
                     callback=print_version),
    ] = False,
) -> None:
    # the group's own options; the help is app's
    pass


JsonOpt = Annotated[
    bool,
    typer.Option("--json", help="Print one JSON document with stable keys instead of a table."),
]
PidArg = Annotated[
    int, typer.Argument(help="Process id (the tgid).", min=1, metavar="PID", show_default=False)
]
# the hook's settings, for `run` and `attach`
DepthOpt = Annotated[
    int | None,
    typer.Option("--depth", help="Frames recorded per site, 1-32 (PMM_DEPTH).", min=1, max=32,
                 show_default=False),
]
def sample_bytes(value: str | int) -> int:
    """--sample's size (pmm.units.parse_size: 4096, 512K, 1M), at least 1 byte."""
    try:
        n = value if isinstance(value, int) else parse_size(value)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    if n < 1:
        raise typer.BadParameter(f"{value} is not a sampling size: give 1 byte or more")
    return n


SampleOpt = Annotated[
    int | None,
    typer.Option("--sample", parser=sample_bytes, metavar="SIZE", show_default=False,
                 help="Sampled tracking: on average one record per SIZE allocated "
                 "(4096, 512K, 1M; K = 1024; PMM_SAMPLE)."),
]
BufferOpt = Annotated[
    int | None,
    typer.Option("--buffer", help="Records each thread buffers before sending, 512-32768 "
                 "(PMM_BUFFER; default 32768, 1.5 MiB a thread at most: fewer use less memory "
                 "and more cpu).", min=512, max=32768, show_default=False),
]


# -- durations ---------------------------------------------------------------

def duration_seconds(value: str) -> float:
    """An option's duration (pmm.units.parse_duration) as a usage error when
    it is not one."""
    try:
        return parse_duration(value)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


def duration_in(per_second: int, lo: int, hi: int | None) -> Callable[[str | int], int]:
    """A typer parser for a duration option whose value the library takes as
    a whole number of 1/per_second seconds (1000: milliseconds) between lo and
    hi (None: no bound; else the module's range); out of range is a usage
    error that says the range in units. A default (an int) is taken as it is."""

    def parse(value: str | int) -> int:
        if isinstance(value, int):
            return value
        n = round(duration_seconds(value) * per_second)
        if n < lo or (hi is not None and n > hi):
            accepted = (f"the module accepts {format_duration(lo / per_second)} to "
                        f"{format_duration(hi / per_second)}" if hi is not None
                        else f"at least {format_duration(lo / per_second)}")
            raise typer.BadParameter(f"{value} is out of range: {accepted}")
        return n

    return parse


INTERVAL_MS = duration_in(1000, uapi.INTERVAL_MIN_MS, uapi.INTERVAL_MAX_MS)
EXITED_TTL_S = duration_in(1, uapi.EXITED_TTL_MIN_S, uapi.EXITED_TTL_MAX_S)
ATTACH_TIMEOUT_MS = duration_in(1000, 1, None)
DURATION_FORMS = "100ms, 5s, 2m, 1h; a bare number is seconds"


def interval_option(help_: str) -> Any:
    return typer.Option(
        "--interval", parser=INTERVAL_MS, metavar="DURATION", show_default=False,
        help=f"{help_} ({DURATION_FORMS}; "
        f"{format_duration(uapi.INTERVAL_MIN_MS / 1000)} to "
        f"{format_duration(uapi.INTERVAL_MAX_MS / 1000)}).",
    )


# -- errors and output -------------------------------------------------------

def refuse(option: str, why: str) -> typer.BadParameter:
    """A usage error for an option that does not apply."""
    return typer.BadParameter(why, param_hint=f"'{option}'")


def echo_json(obj: Any) -> None:
    typer.echo(dump_json(obj))


def now_monotonic_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


# -- start / stop ----------------------------------------------------------


@command()
@handle_errors
def start(
    pid: PidArg,
    interval: Annotated[int | None, interval_option("Also set the sampling interval")] = None,
    json_: JsonOpt = False,
) -> None:
    """Start monitoring PID: the module accepts its records and samples its memory."""
    with Device.open() as dev:
        dev.start(pid, interval_ms=interval)
        info = dev.pid_info(pid)
    if json_:
        echo_json({"pid": pid, "monitored": True, "interval_ms": interval})
        return
    comm = f" ({printable(info.comm)})" if info else ""
    typer.echo(f"monitoring pid {pid}{comm}")


@command()
@handle_errors
def attach(
    pid: PidArg,
    depth: DepthOpt = None,
    sample: SampleOpt = None,
    buffer: BufferOpt = None,
    timeout: Annotated[
        int,
        typer.Option(
            "--timeout", parser=ATTACH_TIMEOUT_MS, metavar="DURATION", show_default=False,
            help=f"How long to wait for a thread at a safe point (default 2s; "
            f"{DURATION_FORMS}).",
        ),
    ] = 2000,
    allow_seccomp: Annotated[
        bool,
        typer.Option("--allow-seccomp",
                     help="Attach to a process with a seccomp filter all the same."),
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """Track PID's call sites without a restart: load the hook into the running process.

    The hook is loaded with ptrace, one thread stopped for milliseconds, and
    the process is monitored. Any dynamically linked glibc program; exact, or
    sampled with --sample. `pmctl stop PID` ends it (the hook stays, passing
    calls to libc); attach again to restart. Blocks allocated before the
    attach are not tracked.
    """
    from pmm import attach as attach_mod
    from pmm.run import find_hooklib
    from pmm.symbolize import capture_maps

    hooklib = find_hooklib()
    Device.open().close()  # fail early: module missing or not permitted
    line = attach_mod.attach(pid, hooklib, sample=sample, depth=depth, buffer=buffer,
                             timeout_ms=timeout, allow_seccomp=allow_seccomp)
    with Device.open() as dev:
        info = dev.pid_info(pid)
    if info is None:
        raise PmmError(f"pid {pid}: the hook is loaded but the module does not monitor it "
                       f"(see `pmctl status`)")
    capture_maps(pid)  # with the hook's library in it: symbolizes sites after an exit
    if json_:
        echo_json({"pid": pid, "monitored": True, "mode": "sampled" if sample else "exact",
                   "sample": sample, "injector": line})
        return
    memfd = " (the hook loaded from a memfd: not at its path in the process's mount " \
        "namespace)" if "memfd" in line else ""
    mode = f"sampled, 1 record per {human_bytes(sample)} allocated" if sample else "exact"
    typer.echo(f"attached to pid {pid} ({printable(info.comm)}): {mode}{memfd}")


@command()
@handle_errors
def stop(pid: PidArg, json_: JsonOpt = False) -> None:
    """Stop monitoring PID; the module drops its blocks, sites and samples."""
    with Device.open() as dev:
        dev.stop(pid)
    if json_:
        echo_json({"pid": pid, "monitored": False})
        return
    typer.echo(f"stopped monitoring pid {pid}")


# -- status / config -------------------------------------------------------


def render_config(c: ConfigInfo) -> str:
    rows = [
        ["interval", format_duration(c.interval_ms / 1000)],
        ["scan", "on" if c.scan else "off"],
        ["last started pid", str(c.start_pid)],
        ["last stopped pid", str(c.stop_pid)],
        ["max pids", str(c.max_pids)],
        ["max blocks per pid", str(c.max_blocks_per_pid)],
        ["max sites per pid", str(c.max_sites_per_pid)],
        ["max samples per pid", str(c.max_samples_per_pid)],
        ["max pids per user", str(c.max_pids_per_uid)],
        ["exited pids kept", format_duration(c.exited_ttl_s)],
        ["abi version", str(c.abi_version)],
        ["monitored pids", str(c.monitored_pids)],
        ["records accepted", str(c.records_accepted)],
        ["records dropped", str(c.records_dropped)],
        ["unmatched frees", str(c.unmatched_frees)],
        ["kernel memory", human_bytes(c.kmem_bytes)],
        ["records queued", str(c.records_queued)],
        ["frees of older blocks", str(c.older_frees)],
    ]
    return format_table(["setting", "value"], rows)


@command()
@handle_errors
def status(json_: JsonOpt = False) -> None:
    """Show the monitored pids and the global counters.

    Per pid: pid, comm, state, uptime, live blocks and bytes, latest rss and vm,
    dropped records, unmatched frees, and frees of blocks allocated before
    monitoring began (OLDER: expected after an attach or a late start).
    """
    with Device.open() as dev:
        cfg = dev.get_config()
        pids = dev.monitored_pids()
    now = boottime_ns()
    if json_:
        echo_json({"config": cfg.to_dict(), "pids": [p.to_dict(now) for p in pids]})
        return
    headers = ["PID", "COMM", "STATE", "UPTIME", "BLOCKS", "LIVE", "RSS", "VM", "DROPPED",
               "UNMATCHED", "OLDER"]
    rows = [
        [
            str(p.pid),
            p.comm,
            p.state_name,
            human_age(p.uptime_s(now)),
            str(p.live_blocks),
            human_bytes(p.live_bytes),
            human_bytes(p.rss_bytes),
            human_bytes(p.vm_bytes),
            str(p.dropped_records),
            str(p.unmatched_frees),
            str(p.older_frees),
        ]
        for p in pids
    ]
    if rows:
        typer.echo(format_table(headers, rows, right={0, 3, 4, 5, 6, 7, 8, 9, 10}))
    else:
        typer.echo("no monitored pids (start one with `pmctl start PID` or `pmctl run`)")
    typer.echo(
        f"\ninterval {format_duration(cfg.interval_ms / 1000)}, "
        f"scan {'on' if cfg.scan else 'off'}, "
        f"monitored {cfg.monitored_pids}/{cfg.max_pids}, "
        f"records accepted {cfg.records_accepted}, dropped {cfg.records_dropped}, "
        f"unmatched frees {cfg.unmatched_frees}, frees of older blocks {cfg.older_frees}, "
        f"kernel memory {human_bytes(cfg.kmem_bytes)}"
    )


class Switch(StrEnum):
    on = "on"
    off = "off"


def _limit_opt(name: str, what: str, bound: int) -> Any:
    return typer.Option(
        name, help=f"Set the maximum {what} (the module accepts 1..{bound}).", min=1,
        show_default=False,
    )


@command()
@handle_errors
def config(
    interval: Annotated[int | None, interval_option("Set the sampling interval")] = None,
    scan: Annotated[
        Switch | None,
        typer.Option("--scan", help="Turn the sampler thread on or off.", show_default=False),
    ] = None,
    max_pids: Annotated[int | None, _limit_opt("--max-pids", "number of monitored pids", 1024)]
    = None,
    max_blocks: Annotated[
        int | None, _limit_opt("--max-blocks", "live blocks per pid", 16 << 20)
    ] = None,
    max_sites: Annotated[int | None, _limit_opt("--max-sites", "sites per pid", 1 << 20)] = None,
    max_samples: Annotated[
        int | None, _limit_opt("--max-samples", "samples kept per pid", 1 << 20)
    ] = None,
    max_pids_per_uid: Annotated[
        int | None,
        _limit_opt("--max-pids-per-uid", "monitored pids one user may start (root is exempt)",
                   1024),
    ] = None,
    exited_ttl: Annotated[
        int | None,
        typer.Option(
            "--exited-ttl", parser=EXITED_TTL_S, metavar="DURATION", show_default=False,
            help="Set how long an exited process's entry is kept after its exit or its last "
            f"read ({DURATION_FORMS}; "
            f"{format_duration(uapi.EXITED_TTL_MIN_S)} to "
            f"{format_duration(uapi.EXITED_TTL_MAX_S)}).",
        ),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Show the configuration and global counters, or change settings.

    Changing needs CAP_SYS_ADMIN. The changes are applied together: a value
    the module refuses changes nothing.
    """
    with Device.open() as dev:
        dev.set_config(
            interval_ms=interval,
            scan=None if scan is None else scan == Switch.on,
            max_pids=max_pids,
            max_blocks_per_pid=max_blocks,
            max_sites_per_pid=max_sites,
            max_samples_per_pid=max_samples,
            max_pids_per_uid=max_pids_per_uid,
            exited_ttl_s=exited_ttl,
        )
        cfg = dev.get_config()
    if json_:
        echo_json(cfg.to_dict())
    else:
        typer.echo(render_config(cfg))


# -- run -------------------------------------------------------------------


def next_steps(info: PidInfo, exited_ttl_s: int, follow_fork: bool) -> list[str]:
    """What `pmctl run` says once the command ended: how long the module keeps
    its records and the commands that read them (each works on an exited
    process's entry)."""
    pid = info.pid
    cmds = [
        (f"pmctl leaks {pid}", "live blocks by allocation site, largest first"),
        (f"pmctl logs {pid}", "live blocks, oldest first"),
        (f"pmctl stats {pid}", "allocations by size"),
    ]
    if info.samples:  # the module's sampler took some: a verdict on them
        cmds.append((f"pmctl trend {pid} --source kmod",
                     f"whether its memory grew ({info.samples} "
                     f"sample{'s' if info.samples != 1 else ''})"))
    if follow_fork:
        cmds.append(("pmctl status", "its children monitored with it"))
    width = max(len(c) for c, _ in cmds)
    return [
        f"pmctl: pid {pid} was monitored; the module keeps its records for "
        f"{format_duration(exited_ttl_s)} after its exit or their last read, "
        f"or until `pmctl stop {pid}`. To see them:",
        *(f"  {c.ljust(width)}  {what}" for c, what in cmds),
    ]


@command(context_settings={"allow_interspersed_args": False})
@handle_errors
def run(
    cmd: Annotated[
        list[str],
        typer.Argument(help="The command and its arguments (after --).", show_default=False),
    ],
    follow_fork: Annotated[
        bool,
        typer.Option("--follow-fork", help="Monitor the command's children too (PMM_FOLLOW_FORK)."),
    ] = False,
    depth: DepthOpt = None,
    sample: SampleOpt = None,
    buffer: BufferOpt = None,
    no_preload: Annotated[
        bool,
        typer.Option("--no-preload",
                     help="No LD_PRELOAD: attach the hook at CMD's entry point (pmm-inject "
                     "--exec). Its environment is unchanged and the programs it runs are "
                     "not monitored; a static program is refused."),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q",
                     help="Print nothing of pmctl's own on stderr but errors and warnings "
                     "(no pid line, no closing hint)."),
    ] = False,
    json_: Annotated[
        bool,
        typer.Option("--json", help="Print the pid as one JSON document on stderr (stdout is "
                     "the command's); no closing hint."),
    ] = False,
) -> None:
    """Run a command with the hook preloaded, monitored from its first allocation.

    Use `pmctl run [OPTIONS] -- CMD ARGS...`. Prints the pid on stderr and exits
    with CMD's exit status; CMD's memory map is captured while it runs, so
    `pmctl leaks PID` symbolizes its sites after it exited. When CMD has ended
    it prints how long its records are kept and the commands that show them.
    With --no-preload the hook is attached as `pmctl attach` does, before
    CMD's own code runs.
    """
    from pmm.run import child_env, find_hooklib, injector_argv, run_command

    if quiet and json_:
        raise refuse("--quiet", "not with --json (--json prints the pid on stderr, --quiet "
                     "nothing): choose one")
    hooklib = find_hooklib()
    injector = None
    if no_preload:
        from pmm.attach import find_inject

        injector = injector_argv(find_inject(hooklib), hooklib, dict(os.environ), follow_fork,
                                 depth, sample, buffer)
    Device.open().close()  # fail early: module missing or not permitted
    env = dict(os.environ) if no_preload else \
        child_env(dict(os.environ), hooklib, follow_fork, depth, sample, buffer)

    started: list[int] = []

    def on_start(pid: int) -> None:
        started.append(pid)
        if json_:
            sys.stderr.write(dump_json({"pid": pid, "argv": cmd, "hooklib": str(hooklib)}))
            sys.stderr.write("\n")
        elif not quiet:
            sys.stderr.write(f"pmctl: pid {pid}\n")
        sys.stderr.flush()

    rc = run_command(cmd, env, on_start, follow_fork=follow_fork, injector=injector)
    if started:
        try:
            with Device.open() as dev:
                info = dev.pid_info(started[0])
                exited_ttl_s = dev.get_config().exited_ttl_s
        except PmmError:
            pass  # cannot tell; say nothing
        else:
            if info is None:
                err(f"warning: pid {started[0]} was not monitored (the hook could not start "
                    "it: run with PMM_QUIET unset to see why)")
            elif not (quiet or json_):
                sys.stderr.write("".join(f"{ln}\n" for ln in
                                         next_steps(info, exited_ttl_s, follow_fork)))
                sys.stderr.flush()
    raise typer.Exit(rc)


# -- logs / leaks / stats --------------------------------------------------


def proc_line(d: dict[str, Any], now_mono: int, now_real: int | None = None) -> str:
    """A block (Block.to_dict's form) in /proc/pmm/pid's format (the time is
    UTC, as the module prints it); the function and file names the program
    registered are escaped."""
    real = time.time_ns() if now_real is None else now_real
    wall_s = (d["time_ns"] + (real - now_mono)) // 1_000_000_000
    t = time.strftime("%H:%M:%S", time.gmtime(wall_s))
    s = f"{{{d['op']} @{t}}} Sz: {d['size']}B "
    if d["op"] in ("REALLOC", "MREMAP"):
        s += f"Prev Pointer: 0x{d['prev_ptr']:x} "
    s += f"Pointer: 0x{d['ptr']:x} Caller: 0x{d['caller'] or 0:x}"
    if d["func"] is not None:
        s += f" {printable(d['func'])}() {d['line']} {printable(str(d['file']))}"
    return s


def select_blocks(
    blocks: list[Block], now_mono: int, since_s: float | None, limit: int | None
) -> list[Block]:
    """Oldest first; only those younger than since_s; at most limit (the oldest)."""
    from pmm.blockstream import BlockSorter, pages_of

    with BlockSorter(since_cut(now_mono, since_s), limit) as sorter:
        for page in pages_of(blocks):
            sorter.add_page(page)
        return [Block(p, pp, sz, t, s, w, op) for t, p, pp, sz, s, w, op in sorter]


def since_cut(now_mono: int, since_s: float | None) -> int | None:
    """The oldest allocation time `--since` keeps (None: all)."""
    return None if since_s is None else now_mono - int(since_s * 1e9)


class BlockLines:
    """`pmctl logs`'s line for one block at a time, as proc_line gives it,
    with what depends on the site computed once per site and the clock
    formatted once per second: ten million blocks go through here."""

    def __init__(self, sites: dict[int, Site], now_mono: int, now_real: int) -> None:
        self.sites = sites
        self.now = now_mono
        self.offset = now_real - now_mono
        self.second = -1
        self.stamp = ""
        self.text_tails: dict[int, tuple[int, str]] = {}

    def _text_tail(self, site_id: int) -> tuple[int, str]:
        tail = self.text_tails.get(site_id)
        if tail is None:
            d = Block(0, 0, 0, 0, site_id, 1, 0).to_dict(self.sites.get(site_id), 0)
            suffix = (f" {printable(d['func'])}() {d['line']} {printable(str(d['file']))}"
                      if d["func"] is not None else "")
            tail = self.text_tails[site_id] = (d["caller"] or 0, suffix)
        return tail

    def text(self, t: int, ptr: int, prev_ptr: int, size: int, site: int, op: int) -> str:
        """The block's line (proc_line's)."""
        wall_s = (t + self.offset) // 1_000_000_000
        if wall_s != self.second:
            self.second = wall_s
            self.stamp = time.strftime("%H:%M:%S", time.gmtime(wall_s))
        name = op_name(op)
        caller, suffix = self._text_tail(site)
        prev = f"Prev Pointer: 0x{prev_ptr:x} " if name in ("REALLOC", "MREMAP") else ""
        return (f"{{{name} @{self.stamp}}} Sz: {size}B {prev}Pointer: 0x{ptr:x} "
                f"Caller: 0x{caller:x}{suffix}")


def write_chunked(lines: Iterable[str], every: int = 4096) -> None:
    """Writes lines to stdout a few thousand at a time (not one call each)."""
    out = sys.stdout
    buf: list[str] = []
    for line in lines:
        buf.append(line)
        if len(buf) >= every:
            out.write("\n".join(buf) + "\n")
            buf = []
    if buf:
        out.write("\n".join(buf) + "\n")
    out.flush()


@command()
@handle_errors
def logs(
    pid: PidArg,
    since: Annotated[
        float | None,
        typer.Option(
            "--since", parser=duration_seconds, metavar="DURATION", show_default=False,
            help=f"Only records of the last DURATION ({DURATION_FORMS}).",
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", help="At most N records (the oldest N of those selected).", min=1,
            metavar="N", show_default=False,
        ),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Show PID's unpaired records (live blocks), oldest first.

    The same fields as /proc/pmm/pid shows for that pid.
    """
    # Millions of blocks: read page by page into a sorter whose memory is
    # bounded (runs spilled to a temporary file, pmm.blockstream), then
    # written as they come out of the merge, never as one list or string.
    from pmm.blockstream import BlockSorter, read_pages
    from pmm.symbolize import capture_maps

    now = now_monotonic_ns()
    real = time.time_ns()  # the wall clock at `now`: the lines' times
    with BlockSorter(since_cut(now, since), limit) as sorter:
        with Device.open() as dev:
            info = dev.require_monitored(pid)
            for page in read_pages(dev, pid):
                sorter.add_page(page)
            sites = {s.site: s for s in dev.sites(pid)}
        capture_maps(pid)
        lines = BlockLines(sites, now, real)
        if json_:
            head = dump_json({"pid": pid, "comm": info.comm, "state": info.state_name,
                              "total": sorter.total})
            rows = iter(sorter)
            first = next(rows, None)
            if first is None:
                typer.echo(head[:-2] + ',\n  "blocks": []\n}')
                return
            sys.stdout.write(head[:-2] + ',\n  "blocks": [\n')

            def items() -> Iterator[str]:
                for t, p, pp, sz, site, w, op in itertools.chain((first,), rows):
                    b = Block(p, pp, sz, t, site, w, op)
                    yield dump_json_at(b.to_dict(sites.get(b.site), now), 2)

            body = _commas(items())
            write_chunked(body)
            sys.stdout.write("  ]\n}\n")
            sys.stdout.flush()
            return
        typer.echo(
            f"PID: {info.pid}, Comp: {printable(info.comm)}, PPID: {info.ppid}, "
            f"State: {info.state}, Log count: {info.live_blocks}"
        )
        if (info.dropped_records or info.unmatched_frees or info.pending_frees
                or info.older_frees):  # as /proc does
            typer.echo(
                f"Dropped: {info.dropped_records}, Unmatched frees: {info.unmatched_frees}, "
                f"Pending frees: {info.pending_frees}, Older frees: {info.older_frees}"
            )
        sys.stdout.flush()
        write_chunked(lines.text(t, p, pp, sz, s, op) for t, p, pp, sz, s, w, op in sorter)


def _commas(items: Iterable[str]) -> Iterator[str]:
    """The items, each but the last followed by a comma (a JSON list's)."""
    prev: str | None = None
    for x in items:
        if prev is not None:
            yield prev + ","
        prev = x
    if prev is not None:
        yield prev


DbOpt = Annotated[
    Path | None,
    typer.Option("--db", metavar="PATH", show_default=False, readable=False,
                 help="pmd's database (default: $PMM_DB, else the system database "
                 "/var/lib/pmm/pmm.db when this user may read it, else "
                 "~/.local/share/pmm/pmm.db, where a pmd of this user writes)."),
]


def open_db_for(db: Path | None) -> Callable[[], Store]:
    """Opens pmd's database read-only (the given path, else the default)."""
    def open_() -> Store:
        from pmm.store import Store, default_db_path

        return Store.open(db if db is not None else default_db_path(), readonly=True)
    return open_


@command()
@handle_errors
def leaks(
    pid: PidArg,
    depth: Annotated[
        int,
        typer.Option("--depth", help="Frames shown per site (1 = the allocating call only).",
                     min=1, max=32),
    ] = 1,
    limit: Annotated[
        int,
        typer.Option("--limit", help="Show the N sites with most live bytes (0: all).", min=0,
                     metavar="N"),
    ] = 20,
    pprof: Annotated[
        Path | None,
        typer.Option("--pprof", metavar="FILE", show_default=False, dir_okay=False,
                     help="Also write the live heap as a pprof profile (gzipped "
                     "profile.proto: go tool pprof FILE), every site."),
    ] = None,
    db: DbOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Show PID's live blocks grouped by site, largest live bytes first.

    Per site: function and file:line (library+offset without debug info), blocks,
    bytes, the oldest block's age and an age histogram (<1s, <10s, <100s, <1000s,
    older). While the module keeps the process (running, or exited less than
    its exited-ttl ago) it comes from the module; after that from what pmd
    saved when the process exited.
    """
    from pmm import leakreport

    if pprof is not None:
        check_output(pprof, "'--pprof'", "heap.pb.gz", renamed_over=True)
    report = leakreport.gather(Device.open, open_db_for(db), pid, now_monotonic_ns(),
                               0 if pprof is not None else limit, db_named=db is not None)
    if pprof is not None:
        from pmm.pprof import write_profile

        write_profile(pprof, leakreport.pprof_samples(report), period=1,
                      time_ns=time.time_ns(),
                      comments=[f"pmctl leaks {pid} ({report.comm}, {report.state}), "
                                f"from the {report.source}"])
        report.sites = report.sites[:limit] if limit else report.sites
    if json_:
        echo_json(report.to_dict(depth))
        return
    live_blocks, nsites = report.live_blocks, report.nsites
    came = "" if report.source == leakreport.SOURCE_MODULE else f", from the {report.source}"
    typer.echo(
        f"pid {pid} ({printable(report.comm)}, {report.state}{came}): {live_blocks} live "
        f"block{'' if live_blocks == 1 else 's'}, {human_bytes(report.live_bytes)} in "
        f"{nsites} site{'' if nsites == 1 else 's'}"
    )
    if pprof is not None:
        typer.echo(f"pprof profile written to {pprof}")
    if not report.sites:
        return
    headers = ["BYTES", "BLOCKS", "OLDEST", *leaks_mod.AGE_LABELS, "SITE"]
    rows: list[list[str]] = []
    for e in report.sites:
        rows.append(
            [
                human_bytes(e["bytes"]),
                str(e["blocks"]),
                human_age(e["oldest_age_s"]),
                *(str(v) for v in e["histogram"].values()),
                e["where"],
            ]
        )
        if depth > 1:
            for line in leakreport.frames_as_text(e["frames"][:depth]):
                rows.append([""] * 8 + [f"  {line}"])
    typer.echo(format_table(headers, rows, right=set(range(8))))


@command()
@handle_errors
def stats(pid: PidArg, db: DbOpt = None, json_: JsonOpt = False) -> None:
    """Show PID's allocation statistics by allocation size.

    Per size range (<=16 ... larger bytes): malloc, calloc, realloc and free
    calls and the allocated, freed and in-use bytes (exact), then totals and
    failed allocations. From the module while it keeps the process, else from
    what pmd saved when the process exited.
    """
    from pmm import postmortem

    def read_module() -> StatsInfo:
        with Device.open() as dev:
            dev.require_monitored(pid)
            return dev.stats(pid)

    st = postmortem.module_else_database(
        read_module, lambda store: postmortem.stats_from_db(store, pid), open_db_for(db),
        db_named=db is not None, pid=pid)
    if json_:
        echo_json(st.to_dict())
    else:
        typer.echo(stats_mod.render(stats_mod.build_table(st)))


# -- alerts ----------------------------------------------------------------


def alert_rows(store: Store, pid: int | None) -> list[dict[str, Any]]:
    """pmd's alerts (of pid, if given) as `alerts --json` gives them: the
    store's fields and the site's description ("where", None when pmd has
    none)."""
    out = []
    described: dict[tuple[int, int], dict[int, str]] = {}
    for a in store.alerts(pid):
        where = None
        if a.site is not None:
            key = (a.pid, a.start_time)
            if key not in described:
                described[key] = store.sites(a.pid, a.start_time)
            where = described[key].get(a.site)
        d = dataclasses.asdict(a)
        message = d.pop("message")
        out.append({**d, "where": where, "message": message})
    return out


def _alert_state(r: dict[str, Any]) -> str:
    """"active" while the alert stands, else "resolved" and when."""
    if r.get("resolved_wall") is None:
        return "active" if r.get("resolved") is None else "resolved"
    return "resolved " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["resolved_wall"]))


@command()
@handle_errors
def alerts(
    pid: Annotated[
        int | None,
        typer.Argument(help="Only the alerts of this process id.", min=1, metavar="PID",
                       show_default=False),
    ] = None,
    db: DbOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Show the leak alerts pmd raised, oldest first.

    Per alert: when, the process, the verdict, whether it stands or was
    resolved (pmd resolves it when the verdict clears to STABLE) and when, the
    kind of growth (LEAK, RETENTION, OUTSIDE THE HEAP, ...), the rate rss grew
    at, the site whose live bytes grew fastest (when the module tracked the
    process's sites) and pmd's message. Reads pmd's database; it does not need
    the module.
    """
    from pmm.store import Store, default_db_path

    path = db if db is not None else default_db_path()
    store = Store.open(path, readonly=True)  # no database: says where and that pmd writes it
    try:
        rows = alert_rows(store, pid)
    finally:
        store.close()
    if json_:
        echo_json({"db": str(path), "alerts": rows})
        return
    if not rows:
        whose = f" for pid {pid}" if pid is not None else ""
        typer.echo(f"no alerts{whose} in {path}")
        return
    headers = ["TIME", "PID", "COMM", "VERDICT", "STATE", "KIND", "RATE", "SITE", "MESSAGE"]
    table = [
        [
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["wall_time"])),
            str(r["pid"]),
            r["comm"] or "?",
            r["verdict"],
            _alert_state(r),
            r["kind"] or "-",
            human_rate(r["slope"] * 60),
            r["where"] or (f"site {r['site']}" if r["site"] is not None else "-"),
            r["message"],
        ]
        for r in rows
    ]
    typer.echo(format_table(headers, table, right={1}))


# -- trend (another module; optional) --------------------------------------

def _register_trend() -> None:
    """`pmctl trend` lives in pmctl/trend_cli.py (another part); pmctl works without it."""
    try:
        from pmctl.trend_cli import trend_command
    except ImportError:  # pragma: no cover - trend not installed
        return
    command("trend")(trend_command)


_register_trend()


def _register_report() -> None:
    """`pmctl report` lives in pmctl/report_cli.py (another part); pmctl works without it."""
    try:
        from pmctl.report_cli import report_command
    except ImportError:  # pragma: no cover - report not installed
        return
    command("report")(report_command)


_register_report()


def _register_unreachable() -> None:
    """`pmctl unreachable` lives in pmctl/unreachable_cli.py."""
    from pmctl.unreachable_cli import unreachable_command

    command("unreachable")(unreachable_command)


_register_unreachable()


# -- entry point -----------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """Console script: usage errors as one line and exit 2, other errors per
    pmctl/exitcodes.py."""
    try:
        rv = app(args=argv, prog_name="pmctl", standalone_mode=False)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        sys.exit(130)
    except typer.TyperException as e:  # typer's click: UsageError, BadParameter, ...
        code = int(getattr(e, "exit_code", ExitCode.GENERIC))
        fmt = getattr(e, "format_message", None)
        msg = fmt() if callable(fmt) else str(e)
        ctx = getattr(e, "ctx", None)
        path = getattr(ctx, "command_path", None) or "pmctl"
        if msg.strip():  # NoArgsIsHelpError has printed the help already
            err(f"{msg} (see `{path} --help`)" if code == ExitCode.USAGE else msg)
        sys.exit(code)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
