"""pmctl: the command line of pmm, the process memory monitor.

This module only assembles the app: each command group is a module of its own
(monitor_cli: start, attach, stop; status_cli: status, config; run_cli: run;
logs_cli: logs; leaks_cli: leaks, stats; alerts_cli: alerts; trend_cli,
report_cli and unreachable_cli, whose docstrings give their JSON), the options
they share are pmctl/options.py's. Each is one call into the pmm library
(src/pmm) and prints a readable table by default and, with --json, one JSON
document with these stable keys (the models' `to_dict()`, pmm.kernel.model):

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

import inspect
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

import pmm
from pmctl import (
    alerts_cli,
    leaks_cli,
    logs_cli,
    monitor_cli,
    report_cli,
    run_cli,
    status_cli,
    trend_cli,
    unreachable_cli,
)
from pmctl.exitcodes import ExitCode, err

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


# the commands, in the order `pmctl --help` lists them
app.command("start", cls=Command)(monitor_cli.start)
app.command("attach", cls=Command)(monitor_cli.attach)
app.command("stop", cls=Command)(monitor_cli.stop)
app.command("status", cls=Command)(status_cli.status)
app.command("config", cls=Command)(status_cli.config)
app.command("run", cls=Command, context_settings={"allow_interspersed_args": False})(
    run_cli.run)
app.command("logs", cls=Command)(logs_cli.logs)
app.command("leaks", cls=Command)(leaks_cli.leaks)
app.command("stats", cls=Command)(leaks_cli.stats)
app.command("alerts", cls=Command)(alerts_cli.alerts)
app.command("trend", cls=Command)(trend_cli.trend_command)
app.command("report", cls=Command)(report_cli.report_command)
app.command("unreachable", cls=Command)(unreachable_cli.unreachable_command)


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
