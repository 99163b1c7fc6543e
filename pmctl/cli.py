"""pmctl: the command line of pmm, the process memory monitor.

Commands: start, attach, stop, status, config, run, logs, leaks, stats (and trend,
from pmctl/trend_cli.py). Each prints a readable table by default and, with
--json, one JSON document with these stable keys:

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
         [{"addr", "object", "offset", "func", "file", "line"}]}]}
stats   {"pid", "buckets": [{"bucket", "max_size", "malloc", "calloc",
         "realloc", "free", "alloc_bytes", "freed_bytes", "inuse_bytes"}],
         "totals": {same keys}, "failed_allocs", "unmatched_frees", "older_frees"}

Times: *_ns as the module gives them (blocks: CLOCK_MONOTONIC; pids:
CLOCK_BOOTTIME), *_s in seconds. Sizes in bytes. Addresses as integers.
Exit codes: see src/pmm/errors.py (0 ok, 1 generic, 2 usage, 3 module not
loaded, 4 permission denied, 5 no such pid, 6 not monitored, 7 invalid
value, 8 not a pmm device, 9 limit reached; 10+ trend; 20-26 attach).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, ParamSpec, TypeVar

import typer

from pmctl.exitcodes import ExitCode, exit_code_for
from pmm import leaks as leaks_mod
from pmm import stats as stats_mod
from pmm.device import Device
from pmm.errors import PmmError
from pmm.model import SITE_F_SOURCE, Block, ConfigInfo, PidInfo, Site, op_name
from pmm.output import dump_json, format_table, human_age, human_bytes
from pmm.text import printable

app = typer.Typer(
    name="pmctl",
    help="Control pmm, the process memory monitor: start and stop monitoring, "
    "show live blocks, leaks by site and allocation statistics. "
    "Device: $PMM_DEVICE or /dev/pmm.",
    epilog="Exit codes: 0 ok, 1 error, 2 usage, 3 module not loaded, 4 permission denied, "
    "5 no such pid, 6 pid not monitored, 7 value refused by the module, 8 not a pmm "
    "device, 9 limit reached, 10+ `pmctl trend` verdicts, 20-26 `pmctl attach` refusals; "
    "`run` exits with the command's status.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

P = ParamSpec("P")
R = TypeVar("R")

JsonOpt = Annotated[
    bool,
    typer.Option("--json", help="Print one JSON document with stable keys instead of a table."),
]
PidArg = Annotated[int, typer.Argument(help="Process id (the tgid).", min=1, show_default=False)]
# the hook's settings, for `run` and `attach`
DepthOpt = Annotated[
    int | None,
    typer.Option("--depth", help="Frames recorded per site, 1-32 (PMM_DEPTH).", min=1, max=32,
                 show_default=False),
]
SampleOpt = Annotated[
    int | None,
    typer.Option("--sample", help="Sampled tracking: on average one record per BYTES "
                 "allocated (PMM_SAMPLE).", min=1, show_default=False),
]
BufferOpt = Annotated[
    int | None,
    typer.Option("--buffer", help="Records each thread buffers before sending, 512-32768 "
                 "(PMM_BUFFER; default 32768, 1.5 MiB a thread at most: fewer use less memory "
                 "and more cpu).", min=512, max=32768, show_default=False),
]


def err(msg: str) -> None:
    # messages can quote what a process supplied (an object path, a name)
    sys.stderr.write(f"pmctl: {printable(msg)}\n")
    sys.stderr.flush()


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turns PmmError (and anything unexpected) into one line on stderr and
    its exit code; never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except PmmError as e:
            err(str(e))
            raise typer.Exit(exit_code_for(e)) from None
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        except BrokenPipeError:
            raise typer.Exit(int(ExitCode.GENERIC)) from None
        except Exception as e:  # noqa: BLE001 - the CLI's last resort
            err(f"internal error: {type(e).__name__}: {e} (please report this)")
            raise typer.Exit(int(ExitCode.GENERIC)) from None

    return wrapper


def echo_json(obj: Any) -> None:
    typer.echo(dump_json(obj))


def now_boottime_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def now_monotonic_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


# -- start / stop ----------------------------------------------------------


@app.command()
@handle_errors
def start(
    pid: PidArg,
    interval: Annotated[
        int | None,
        typer.Option(
            "--interval",
            help="Also set the sampling interval in milliseconds (the module accepts "
            "10..3600000).",
            min=0,
            show_default=False,
        ),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Start monitoring PID (START_PID): the module accepts its records and samples it."""
    with Device.open() as dev:
        dev.start(pid, interval_ms=interval)
        info = dev.pid_info(pid)
    if json_:
        echo_json({"pid": pid, "monitored": True, "interval_ms": interval})
        return
    comm = f" ({printable(info.comm)})" if info else ""
    typer.echo(f"monitoring pid {pid}{comm}")


@app.command()
@handle_errors
def attach(
    pid: PidArg,
    depth: DepthOpt = None,
    sample: SampleOpt = None,
    buffer: BufferOpt = None,
    timeout: Annotated[
        int,
        typer.Option(
            "--timeout", help="Milliseconds to wait for a thread at a safe point.", min=1,
        ),
    ] = 2000,
    allow_seccomp: Annotated[
        bool,
        typer.Option("--allow-seccomp",
                     help="Attach to a process with a seccomp filter all the same."),
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """Track PID's call sites without a restart: load the hook into the running
    process (ptrace, one thread stopped for milliseconds) and monitor it.

    Any dynamically linked glibc program; exact, or sampled with --sample.
    `pmctl stop PID` ends it (the hook stays, passing calls to libc); attach
    again to restart. Blocks allocated before the attach are not tracked.
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
    typer.echo(f"attached to pid {pid} ({printable(info.comm)}): "
               f"{'sampled, 1 per ' + str(sample) + ' bytes' if sample else 'exact'}{memfd}")


@app.command()
@handle_errors
def stop(pid: PidArg, json_: JsonOpt = False) -> None:
    """Stop monitoring PID (STOP_PID); the module drops its blocks, sites and samples."""
    with Device.open() as dev:
        dev.stop(pid)
    if json_:
        echo_json({"pid": pid, "monitored": False})
        return
    typer.echo(f"stopped monitoring pid {pid}")


# -- status / config -------------------------------------------------------


def config_dict(c: ConfigInfo) -> dict[str, int]:
    return {
        "interval_ms": c.interval_ms,
        "scan": c.scan,
        "start_pid": c.start_pid,
        "stop_pid": c.stop_pid,
        "max_pids": c.max_pids,
        "max_blocks_per_pid": c.max_blocks_per_pid,
        "max_sites_per_pid": c.max_sites_per_pid,
        "max_samples_per_pid": c.max_samples_per_pid,
        "max_pids_per_uid": c.max_pids_per_uid,
        "exited_ttl_s": c.exited_ttl_s,
        "abi_version": c.abi_version,
        "monitored_pids": c.monitored_pids,
        "records_accepted": c.records_accepted,
        "records_dropped": c.records_dropped,
        "unmatched_frees": c.unmatched_frees,
        "kmem_bytes": c.kmem_bytes,
        "records_queued": c.records_queued,
        "older_frees": c.older_frees,
    }


def pid_dict(p: PidInfo, now_boot_ns: int) -> dict[str, Any]:
    end = p.exit_time_ns or now_boot_ns
    return {
        "pid": p.pid,
        "ppid": p.ppid,
        "comm": p.comm,
        "state": p.state_name,
        "uptime_s": round(p.uptime_s(now_boot_ns), 3),
        "monitored_s": round(max(0, end - p.monitor_start_ns) / 1e9, 3),
        "live_blocks": p.live_blocks,
        "live_bytes": p.live_bytes,
        "rss_bytes": p.rss_bytes,
        "vm_bytes": p.vm_bytes,
        "records": p.records,
        "dropped_records": p.dropped_records,
        "unmatched_frees": p.unmatched_frees,
        "older_frees": p.older_frees,
        "pending_frees": p.pending_frees,
        "samples": p.samples,
        "start_time_ns": p.start_time_ns,
        "exit_time_ns": p.exit_time_ns,
    }


def render_config(c: ConfigInfo) -> str:
    rows = [
        ["interval", f"{c.interval_ms} ms"],
        ["scan", "on" if c.scan else "off"],
        ["last started pid", str(c.start_pid)],
        ["last stopped pid", str(c.stop_pid)],
        ["max pids", str(c.max_pids)],
        ["max blocks per pid", str(c.max_blocks_per_pid)],
        ["max sites per pid", str(c.max_sites_per_pid)],
        ["max samples per pid", str(c.max_samples_per_pid)],
        ["max pids per user", str(c.max_pids_per_uid)],
        ["exited pids kept", f"{c.exited_ttl_s} s"],
        ["abi version", str(c.abi_version)],
        ["monitored pids", str(c.monitored_pids)],
        ["records accepted", str(c.records_accepted)],
        ["records dropped", str(c.records_dropped)],
        ["unmatched frees", str(c.unmatched_frees)],
        ["kernel memory", f"{c.kmem_bytes} ({human_bytes(c.kmem_bytes)})"],
        ["records queued", str(c.records_queued)],
        ["frees of older blocks", str(c.older_frees)],
    ]
    return format_table(["setting", "value"], rows)


@app.command()
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
    now = now_boottime_ns()
    if json_:
        echo_json({"config": config_dict(cfg), "pids": [pid_dict(p, now) for p in pids]})
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
            str(p.live_bytes),
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
        f"\ninterval {cfg.interval_ms} ms, scan {'on' if cfg.scan else 'off'}, "
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
        name, help=f"Set the maximum {what} (the module accepts 1..{bound}).", min=0,
        show_default=False,
    )


@app.command()
@handle_errors
def config(
    interval: Annotated[
        int | None,
        typer.Option(
            "--interval",
            help="Set the sampling interval in milliseconds (the module accepts 10..3600000).",
            min=0,
            show_default=False,
        ),
    ] = None,
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
            "--exited-ttl",
            help="Set how many seconds an exited process's entry is kept after its exit or "
            "its last read (the module accepts 1..604800).",
            min=0,
            show_default=False,
        ),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Show the configuration and global counters, or change settings.

    Changing needs CAP_SYS_ADMIN. All changes go in one PMM_SET_CONFIG, so a
    refused value changes nothing.
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
        echo_json(config_dict(cfg))
    else:
        typer.echo(render_config(cfg))


# -- run -------------------------------------------------------------------


@app.command(
    context_settings={"allow_interspersed_args": False},
)
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
    json_: JsonOpt = False,
) -> None:
    """Run a command with the hook preloaded, monitored from its first allocation.

    Use `pmctl run [OPTIONS] -- CMD ARGS...`. Prints the pid on stderr and exits
    with CMD's exit status; CMD's memory map is captured while it runs, so
    `pmctl leaks PID` symbolizes its sites after it exited. With --no-preload
    the hook is attached as `pmctl attach` does, before CMD's own code runs.
    """
    from pmm.run import child_env, find_hooklib, injector_argv, run_command

    hooklib = find_hooklib()
    injector = None
    if no_preload:
        from pmm.attach import find_inject

        injector = injector_argv(find_inject(hooklib), hooklib, dict(os.environ), follow_fork,
                                 depth, sample, buffer)
    Device.open().close()  # fail early: module missing or not permitted
    env = dict(os.environ) if no_preload else \
        child_env(dict(os.environ), hooklib, follow_fork, depth, sample, buffer)

    def on_start(pid: int) -> None:
        if json_:
            sys.stderr.write(dump_json({"pid": pid, "argv": cmd, "hooklib": str(hooklib)}))
            sys.stderr.write("\n")
        else:
            sys.stderr.write(f"pmctl: pid {pid}\n")
        sys.stderr.flush()

    started: list[int] = []

    def on_start_and_note(pid: int) -> None:
        started.append(pid)
        on_start(pid)

    rc = run_command(cmd, env, on_start_and_note, follow_fork=follow_fork, injector=injector)
    if started:
        try:
            with Device.open() as dev:
                monitored = dev.pid_info(started[0]) is not None
        except PmmError:
            monitored = True  # cannot tell; say nothing
        if not monitored:
            err(f"warning: pid {started[0]} was not monitored (the hook could not start it: "
                "run with PMM_QUIET unset to see why)")
    raise typer.Exit(rc)


# -- logs / leaks / stats --------------------------------------------------


def _read_pid(dev: Device, pid: int) -> PidInfo:
    return dev.require_monitored(pid)


def block_dict(b: Block, site: Site | None, now_mono: int) -> dict[str, Any]:
    return {
        "op": op_name(b.op),
        "time_ns": b.time_ns,
        "age_s": round(max(0, now_mono - b.time_ns) / 1e9, 3),
        "size": b.size,
        "weight": b.weight,
        "ptr": b.ptr,
        "prev_ptr": b.prev_ptr,
        "site": b.site,
        "caller": site.frames[0] if site and site.frames else None,
        "func": site.func if site and site.flags & SITE_F_SOURCE else None,
        "file": site.file if site and site.flags & SITE_F_SOURCE else None,
        "line": site.line if site and site.flags & SITE_F_SOURCE else None,
    }


def proc_line(d: dict[str, Any], now_mono: int, now_real: int | None = None) -> str:
    """A block in /proc/pmm/pid's format (the time is UTC, as the module prints it);
    the function and file names the program registered are escaped."""
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
    out = sorted(blocks, key=lambda b: (b.time_ns, b.ptr))
    if since_s is not None:
        cut = now_mono - int(since_s * 1e9)
        out = [b for b in out if b.time_ns >= cut]
    if limit:
        out = out[:limit]
    return out


@app.command()
@handle_errors
def logs(
    pid: PidArg,
    since: Annotated[
        float | None,
        typer.Option(
            "--since", help="Only records of the last SECONDS seconds.", min=0,
            show_default=False,
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", help="At most N records (the oldest N of those selected).", min=1,
            show_default=False,
        ),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Show PID's unpaired records (live blocks), oldest first.

    The same fields as /proc/pmm/pid shows for that pid.
    """
    from pmm.symbolize import capture_maps

    with Device.open() as dev:
        info = _read_pid(dev, pid)
        blocks = dev.blocks(pid)
        sites = {s.site: s for s in dev.sites(pid)}
    capture_maps(pid)
    now = now_monotonic_ns()
    sel = select_blocks(blocks, now, since, limit)
    dicts = [block_dict(b, sites.get(b.site), now) for b in sel]
    if json_:
        echo_json(
            {
                "pid": pid,
                "comm": info.comm,
                "state": info.state_name,
                "total": len(blocks),
                "blocks": dicts,
            }
        )
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
    real = time.time_ns()
    for d in dicts:
        typer.echo(proc_line(d, now, real))


def site_dict(
    g: leaks_mod.LeakGroup, frames: list[Any], depth: int
) -> dict[str, Any]:
    """A leak group as JSON; frames are pmm.symbolize.Frame objects."""
    d: dict[str, Any] = {
        "site": g.site,
        "blocks": g.blocks,
        "bytes": g.bytes,
        "oldest_age_s": round(g.oldest_age_s, 3),
        "newest_age_s": round(g.newest_age_s, 3),
        "histogram": dict(zip(leaks_mod.AGE_LABELS, g.histogram, strict=True)),
    }
    desc = g.desc
    top = frames[0] if frames else None
    if desc is not None and desc.has_source:
        d.update(source="shim", func=desc.func or None, file=desc.file or None,
                 line=desc.line or None, object=top.object if top else None,
                 offset=top.offset if top else None)
        d["where"] = f"{desc.func}() {desc.file}:{desc.line}"
    elif top is not None:
        source = (
            "debuginfo" if top.line else "symbol" if top.func else
            "object" if top.object else "address"
        )
        d.update(source=source, func=top.func, file=top.file, line=top.line,
                 object=top.object, offset=top.offset, where=top.describe())
    else:
        d.update(source="unknown", func=None, file=None, line=None, object=None,
                 offset=None,
                 where="unknown site" if g.site == 0 else f"site {g.site} (not registered)")
    d["frames"] = [f.as_dict() for f in frames[:depth]]
    return d


@app.command()
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
        typer.Option("--limit", help="Show the N sites with most live bytes (0: all).", min=0),
    ] = 20,
    json_: JsonOpt = False,
) -> None:
    """Show PID's live blocks grouped by site, largest live bytes first.

    Per site: function and file:line (library+offset without debug info), blocks,
    bytes, the oldest block's age and an age histogram (<1s, <10s, <100s, <1000s,
    older).
    """
    from pmm.symbolize import Symbolizer, maps_for

    with Device.open() as dev:
        info = _read_pid(dev, pid)
        blocks = dev.blocks(pid)
        sites = {s.site: s for s in dev.sites(pid)}
    now = now_monotonic_ns()
    groups = leaks_mod.group_blocks(blocks, sites, now)
    shown = groups[:limit] if limit else groups
    addrs = [
        a
        for g in shown
        if g.desc is not None
        for a in g.desc.frames[:depth]
    ]
    sym = Symbolizer(maps_for(pid, info.start_time_ns))
    frames_by_addr = sym.symbolize(addrs) if addrs else {}
    entries = []
    site_frames = []
    for g in shown:
        fr = [frames_by_addr[a] for a in (g.desc.frames[:depth] if g.desc else ())]
        entries.append(site_dict(g, fr, depth))
        site_frames.append(fr)
    if json_:
        echo_json(
            {
                "pid": pid,
                "comm": info.comm,
                "state": info.state_name,
                "live_blocks": sum(g.blocks for g in groups),
                "live_bytes": leaks_mod.total_bytes(groups),
                "age_buckets": list(leaks_mod.AGE_LABELS),
                "sites": entries,
            }
        )
        return
    typer.echo(
        f"pid {pid} ({printable(info.comm)}, {info.state_name}): "
        f"{sum(g.blocks for g in groups)} live "
        f"blocks, {leaks_mod.total_bytes(groups)} bytes in {len(groups)} sites"
    )
    if not entries:
        return
    headers = ["BYTES", "BLOCKS", "OLDEST", *leaks_mod.AGE_LABELS, "SITE"]
    rows: list[list[str]] = []
    for e, fr in zip(entries, site_frames, strict=True):
        rows.append(
            [
                str(e["bytes"]),
                str(e["blocks"]),
                human_age(e["oldest_age_s"]),
                *(str(v) for v in e["histogram"].values()),
                e["where"],
            ]
        )
        if depth > 1:
            for i, f in enumerate(fr):
                rows.append([""] * 8 + [f"  #{i} 0x{f.addr:x} {f.describe()}"])
    typer.echo(format_table(headers, rows, right=set(range(8))))


@app.command()
@handle_errors
def stats(pid: PidArg, json_: JsonOpt = False) -> None:
    """Show PMMM's allocation statistics table for PID.

    Per size bucket (<=16 ... larger): malloc, calloc, realloc and free counts and
    the allocated, freed and in-use bytes, then totals and failed allocations.
    """
    with Device.open() as dev:
        _read_pid(dev, pid)
        st = dev.stats(pid)
    table = stats_mod.build_table(st)
    if json_:
        echo_json(table.as_dict())
    else:
        typer.echo(stats_mod.render(table))


# -- trend (another module; optional) --------------------------------------

def _register_trend() -> None:
    """`pmctl trend` lives in pmctl/trend_cli.py (another part); pmctl works without it."""
    try:
        from pmctl.trend_cli import trend_command
    except ImportError:  # pragma: no cover - trend not installed
        return
    app.command("trend")(trend_command)


_register_trend()


# -- entry point -----------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """Console script: usage errors as one line and exit 2, other errors per
    pmm.errors."""
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
