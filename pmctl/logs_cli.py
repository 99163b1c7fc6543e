"""`pmctl logs PID`: a process's live blocks, oldest first, in
/proc/pmm/pid's format or as JSON (pmm.blocklog writes them; keys:
pmctl/cli.py's docstring)."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

from pmctl import options
from pmctl.exitcodes import handle_errors
from pmctl.options import DURATION_FORMS, JsonOpt, PidArg, duration_seconds
from pmm.kernel.device import Device


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
    # bounded (runs spilled to a temporary file, pmm.kernel.blockstream), then
    # written as they come out of the merge, never as one list or string.
    from pmm import blocklog
    from pmm.kernel.blockstream import BlockSorter, read_pages
    from pmm.symbolize import capture_maps

    now = options.now_monotonic_ns()
    real = time.time_ns()  # the wall clock at `now`: the lines' times
    with BlockSorter(blocklog.since_cut(now, since), limit) as sorter:
        with Device.open() as dev:
            info = dev.require_monitored(pid)
            for page in read_pages(dev, pid):
                sorter.add_page(page)
            sites = {s.site: s for s in dev.sites(pid)}
        capture_maps(pid)
        if json_:
            blocklog.write_json(sys.stdout, info, sorter, sites, now)
        else:
            blocklog.write_text(sys.stdout, info, sorter, sites, now, real)
