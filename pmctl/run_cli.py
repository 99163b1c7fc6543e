"""`pmctl run -- CMD...`: a command run with the hook, monitored from its
first allocation (pmm.run does the work). JSON: pmctl/cli.py's docstring."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from pmctl.exitcodes import err, handle_errors
from pmctl.options import BufferOpt, DepthOpt, SampleOpt, refuse
from pmm.errors import PmmError
from pmm.kernel.device import Device
from pmm.output import dump_json


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
    from pmm.run import child_env, find_hooklib, injector_argv, next_steps, run_command

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
