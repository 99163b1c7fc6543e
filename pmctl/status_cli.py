"""`pmctl status` and `pmctl config`: the module's monitored pids, settings
and global counters, and changes to the settings (pmm.kernel.device; the tables:
pmm.statusview). JSON keys: pmctl/cli.py's docstring."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from pmctl.exitcodes import handle_errors
from pmctl.options import DURATION_FORMS, EXITED_TTL_S, JsonOpt, echo_json, interval_option
from pmm.kernel import uapi
from pmm.kernel.device import Device
from pmm.kernel.sampler import boottime_ns
from pmm.statusview import render_config, render_counters, render_pids
from pmm.units import format_duration


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
    typer.echo(render_pids(pids, now))
    typer.echo(f"\n{render_counters(cfg)}")


class Switch(StrEnum):
    on = "on"
    off = "off"


def _limit_opt(name: str, what: str, bound: int) -> Any:
    return typer.Option(
        name, help=f"Set the maximum {what} (the module accepts 1..{bound}).", min=1,
        show_default=False,
    )


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
