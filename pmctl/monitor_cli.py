"""`pmctl start`, `attach` and `stop`: begin and end monitoring a process
(pmm.kernel.device for the module, pmm.attach to load the hook into a running one).
JSON keys: pmctl/cli.py's docstring."""

from __future__ import annotations

from typing import Annotated

import typer

from pmctl.exitcodes import handle_errors
from pmctl.options import (
    ATTACH_TIMEOUT_MS,
    DURATION_FORMS,
    BufferOpt,
    DepthOpt,
    JsonOpt,
    PidArg,
    SampleOpt,
    echo_json,
    interval_option,
)
from pmm.errors import PmmError
from pmm.kernel.device import Device
from pmm.text import printable
from pmm.units import human_bytes


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


@handle_errors
def stop(pid: PidArg, json_: JsonOpt = False) -> None:
    """Stop monitoring PID; the module drops its blocks, sites and samples."""
    with Device.open() as dev:
        dev.stop(pid)
    if json_:
        echo_json({"pid": pid, "monitored": False})
        return
    typer.echo(f"stopped monitoring pid {pid}")
