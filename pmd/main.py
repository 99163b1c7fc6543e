"""pmd: the pmm monitoring daemon's command line (runs in the foreground).

The daemon itself is pmm.daemon; this parses the options, sets up logging
(one line per record on stderr, "TIME pmd: LEVEL: ...", control characters
escaped; under systemd the journal's priority prefix instead of the time)
and says why pmd cannot start in one line, "pmd: ...", as pmctl does.

Exit status: 0 after SIGTERM/SIGINT with everything written; 1 if a --pid
names no process, the database cannot be opened, the metrics endpoint cannot
listen (port in use, no such address) or its textfile cannot be written, or
the last rows could not be written; 2 bad arguments (nothing to watch, a
malformed --metrics or --metrics-host, an unknown --pprof-allow-user
included). pmd has no exit
status of its own for a missing pid (pmctl's 5): a daemon's callers tell
only success, failure and misuse apart.
"""

from __future__ import annotations

import logging
import os
import pwd
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

import pmm
from pmm.analysis.trend import Params
from pmm.daemon import DEFAULT_MIN_SPAN, DEFAULT_RETAIN, Options, serve
from pmm.daemon.journal import JournalFormatter, PlainFormatter, stream_is_journal, syslog_priority
from pmm.errors import error_handler
from pmm.store import default_db_path
from pmm.text import printable
from pmm.units import format_duration, parse_duration

log = logging.getLogger("pmd")

USAGE = 2
MIN_INTERVAL, MAX_INTERVAL = 0.01, 3600.0

app = typer.Typer(
    name="pmd",
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def duration(text: str) -> float:
    """A duration option's value: '100ms', '2s', '1m'; a bare number is
    seconds; between MIN_INTERVAL and MAX_INTERVAL."""
    try:
        return parse_duration(text, MIN_INTERVAL, MAX_INTERVAL)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


def span(text: str) -> float:
    """--min-span's and --retain's value: a duration of 0 or more ('10m',
    '7d'; a bare number is seconds)."""
    try:
        return parse_duration(text)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


def user_id(text: str) -> int:
    """--pprof-allow-user's value: a user name or a numeric uid."""
    if text.isdigit():
        return int(text)
    try:
        return pwd.getpwnam(text).pw_uid
    except KeyError:
        raise typer.BadParameter(f"no such user: {text!r}") from None


def stderr_is_journal() -> bool:
    """Whether stderr is the journal stream systemd connected (a test's
    captured stderr has no descriptor)."""
    try:
        return stream_is_journal(sys.stderr.fileno())
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return False


def err(msg: str) -> None:
    prefix = f"<{syslog_priority(logging.ERROR)}>" if stderr_is_journal() else ""
    sys.stderr.write(f"{prefix}pmd: {printable(msg)}\n")
    sys.stderr.flush()


# a PmmError (a database that cannot be opened, a --pid that names no
# process) and anything unexpected: one line on stderr and exit 1
handle_errors = error_handler(err, lambda e: 1, typer.Exit,
                              (typer.Exit, typer.Abort, typer.TyperException))


PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4


def drop_ambient_capabilities() -> None:
    """Clears pmd's ambient capabilities (its unit grants them), which every
    program it runs would inherit: addr2line and debuginfod-find parse files
    that monitored processes' owners control, and need no privilege. pmd
    keeps its own."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)  # fails only pre-4.3


def show_version(value: bool) -> None:
    if value:
        typer.echo(f"pmd {pmm.__version__}")
        raise typer.Exit(0)


def setup_logging(verbose: bool) -> logging.Handler:
    """pmd's log (the library's "pmd" logger) on stderr, one line a record."""
    handler = logging.StreamHandler(sys.stderr)
    # under systemd, each line carries its priority for the journal
    handler.setFormatter(JournalFormatter("pmd") if stderr_is_journal()
                         else PlainFormatter("pmd", timestamps=True))
    log.addHandler(handler)
    log.setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.getLogger("pyroute2").setLevel(logging.CRITICAL)
    return handler


@app.command(
    help="Record the memory of monitored processes into SQLite and log a line when one "
    "leaks. Samples come from the pmm module's events (processes started with "
    "`pmctl start` or the hook) and, for each --pid, from /proc when the module does not "
    "sample that process. Runs in the foreground; SIGTERM or SIGINT writes what is pending "
    "and exits.",
    epilog="Durations take a unit: 100ms, 2s, 5m, 1h; a bare number is seconds. "
    "Exit status: 0 stopped by SIGTERM/SIGINT with everything written; 1 a --pid names no "
    "process, the database cannot be opened, the metrics endpoint cannot listen or its "
    "textfile cannot be written, or the last rows could not be written; 2 bad arguments.",
)
@handle_errors
def pmd(
    db: Annotated[Path | None, typer.Option(
        # readable=False: the store's message says why it cannot be read
        "--db", metavar="FILE", show_default=False, readable=False,
        help="Database file (default: $PMM_DB, else /var/lib/pmm/pmm.db as root, else "
        "~/.local/share/pmm/pmm.db).")] = None,
    pid: Annotated[list[int] | None, typer.Option(
        "--pid", metavar="PID", min=1, show_default=False,
        help="Also sample this process from /proc when the module does not; repeat for "
        "more (--pid 1 --pid 2).")] = None,
    interval: Annotated[float, typer.Option(
        "--interval", metavar="DURATION", parser=duration,
        help="Time between /proc samples.")] = "1s",  # type: ignore[assignment]
    commit_interval: Annotated[float, typer.Option(
        "--commit-interval", metavar="DURATION", parser=duration,
        help="Time between database commits.")] = "1s",  # type: ignore[assignment]
    detect_every: Annotated[int, typer.Option(
        "--detect-every", metavar="N", min=1,
        help="Run the leak detector every N samples of a process (and at most every "
        "1/20 of the samples it holds: an hour of them is looked at every 3 minutes).")] = 20,
    window: Annotated[int, typer.Option(
        "--window", metavar="N", min=Params().min_samples,
        help="The detector looks at a process's last N samples.")] = 3600,
    min_span: Annotated[float, typer.Option(
        "--min-span", metavar="DURATION", parser=span,
        help="Raise no LEAK alert before a process has been watched this long (a "
        "service's caches filling at its start are not a leak); 0: as soon as the "
        "detector says LEAK.")] = format_duration(DEFAULT_MIN_SPAN),  # type: ignore[assignment]
    retain: Annotated[float, typer.Option(
        "--retain", metavar="DURATION", parser=span,
        help="Delete samples and site snapshots older than this, and processes that "
        "exited before it (unless they have an alert: alerts are kept for good), in "
        "small steps every minute; 0 keeps everything.")] = format_duration(DEFAULT_RETAIN),  # type: ignore[assignment]
    max_pending: Annotated[int, typer.Option(
        "--max-pending", metavar="N", min=1,
        help="Samples kept in memory while the database cannot be written (the oldest "
        "go first).")] = 200_000,
    # a str parsed below: typer takes a tuple-typed option for two words
    metrics: Annotated[str | None, typer.Option(
        "--metrics", metavar="ADDRESS:PORT", show_default=False,
        help="Serve Prometheus metrics at http://ADDRESS:PORT/metrics (OpenMetrics when "
        "asked), each monitored process's live heap as a pprof profile at "
        "/debug/pprof/heap?pid=N, and the processes as Prometheus HTTP service discovery "
        "at /debug/pprof/targets; e.g. 127.0.0.1:9466 ([::1]:9466 for IPv6; port 0 takes a "
        "free one, logged). Off by default. /metrics is open to whoever can connect: an "
        "address beyond localhost shows every monitored process's memory figures to the "
        "network.")] = None,
    metrics_textfile: Annotated[Path | None, typer.Option(
        "--metrics-textfile", metavar="FILE", show_default=False, dir_okay=False,
        help="Also write the metrics to FILE every 15 s and at exit, replaced whole (for "
        "node_exporter's textfile collector, which reads *.prom files), without pmd's "
        "process_* metrics; at exit pmm_pmd_up is 0 and no process is listed.")] = None,
    pprof_allow_user: Annotated[list[str] | None, typer.Option(
        "--pprof-allow-user", metavar="USER", show_default=False,
        help="Also serve heap profiles to this local user (name or uid), for every "
        "process: e.g. a Pyroscope, Alloy or Parca agent's user; repeat for more. Without "
        "it a profile names a process's call sites only to root and the process's owner "
        "connecting over loopback (the user is read from the kernel's socket table).")]
        = None,
    metrics_host: Annotated[list[str] | None, typer.Option(
        "--metrics-host", metavar="NAME[:PORT]", show_default=False,
        help="Also answer requests that name pmd NAME (a DNS name or an address; with "
        "pmd's port unless given), e.g. the name Prometheus scrapes it by; repeat for more. "
        "Without it pmd answers only requests for its --metrics address (when that is "
        "0.0.0.0 or [::], the address connected to) and, over loopback, localhost: other "
        "Host headers get 421, so a web page whose DNS name was rebound to pmd's address "
        "reads nothing.")] = None,
    scan_on_leak: Annotated[bool, typer.Option(
        "--scan-on-leak", help="When a monitored process is called LEAK, scan it for the "
        "blocks it can no longer reach (as `pmctl unreachable`; exact mode only): its lost "
        "bytes per site go into the database beside the alert, the metrics and the log. "
        "Needs ptrace of the process: pmd's own user's processes, or CAP_SYS_PTRACE and "
        "the ptrace system call (a drop-in for pmd.service: see the README).")] = False,
    no_genl: Annotated[bool, typer.Option(
        "--no-genl", help="Do not listen to the module's events (generic netlink); "
        "sample only the --pid processes.")] = False,
    verbose: Annotated[bool, typer.Option(
        "-v", "--verbose", help="Log debug messages too.")] = False,
    version: Annotated[bool, typer.Option(
        "--version", callback=show_version, is_eager=True,
        help="Print pmd's version and exit.")] = False,
) -> None:
    if no_genl and not pid:
        err("nothing to watch: --no-genl without --pid; give --pid PID, or drop --no-genl "
            "to record the processes the module monitors (see `pmd --help`)")
        raise typer.Exit(USAGE)
    try:
        allowed = frozenset(user_id(u) for u in pprof_allow_user or [])
    except typer.BadParameter as e:
        err(f"--pprof-allow-user: {e.message} (see `pmd --help`)")
        raise typer.Exit(USAGE) from None
    address = None
    if metrics is not None:
        from pmm.daemon.metrics import parse_address

        try:
            address = parse_address(metrics)
        except ValueError as e:
            err(f"--metrics: {e} (see `pmd --help`)")
            raise typer.Exit(USAGE) from None
    from pmm.daemon.metrics import parse_host

    try:
        host_names = frozenset(parse_host(h) for h in metrics_host or [])
    except ValueError as e:
        err(f"--metrics-host: {e} (see `pmd --help`)")
        raise typer.Exit(USAGE) from None
    drop_ambient_capabilities()
    handler = setup_logging(verbose)
    explicit = db is not None or bool(os.environ.get("PMM_DB"))
    path = db or default_db_path(writer=True)
    opts = Options(db=path, pids=list(dict.fromkeys(pid or [])), interval=interval,
                   commit_interval=commit_interval, detect_every=detect_every,
                   window=window, genl=not no_genl, max_pending=max_pending,
                   metrics_address=address, metrics_textfile=metrics_textfile,
                   pprof_allow_uids=allowed, metrics_host_names=host_names,
                   scan_on_leak=scan_on_leak, min_span=min_span, retain=retain)
    try:
        rc = serve(opts, create_parents=not explicit)
    finally:
        log.removeHandler(handler)
    raise typer.Exit(rc)


def _spread_pid_lists(argv: Sequence[str]) -> list[str]:
    """`--pid 1 2 3` (the form before pmd took --pid once per process) as
    `--pid 1 --pid 2 --pid 3`: pmd takes no arguments, so a bare number
    after a --pid's value can only be another pid."""
    out: list[str] = []
    state = ""  # "value": the next word is --pid's; "more": numbers are more pids
    for arg in argv:
        if state == "value":
            out.append(arg)
            state = "more"
            continue
        if state == "more" and re.fullmatch(r"[0-9]+", arg):
            out += ["--pid", arg]
            continue
        out.append(arg)
        state = "value" if arg == "--pid" else "more" if arg.startswith("--pid=") else ""
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """Console script: a usage error as one line and exit 2 (the command's
    own errors: handle_errors)."""
    args = _spread_pid_lists(sys.argv[1:] if argv is None else argv)
    try:
        rv = app(args=args, prog_name="pmd", standalone_mode=False)
    except typer.Exit as e:
        sys.stdout.flush()
        sys.exit(e.exit_code)
    except typer.Abort:
        sys.exit(130)
    except typer.TyperException as e:  # typer's click: UsageError, BadParameter, ...
        code = int(getattr(e, "exit_code", 1))
        fmt = getattr(e, "format_message", None)
        msg = fmt() if callable(fmt) else str(e)
        err(f"{msg} (see `pmd --help`)" if code == USAGE else msg)
        sys.exit(code)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
