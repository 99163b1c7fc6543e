"""`pmctl leaks PID` and `pmctl stats PID`: live blocks by site and
allocations by size, from the module while it keeps the process, else from
what pmd saved at its exit (read through pmm.procview). JSON keys:
pmctl/cli.py's docstring."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pmctl import options
from pmctl.exitcodes import handle_errors
from pmctl.options import DbOptUser, JsonOpt, PidArg, ShownDepthOpt, echo_json
from pmctl.paths import check_output
from pmm.analysis import stats as stats_mod
from pmm.kernel.device import Device
from pmm.text import printable
from pmm.units import human_bytes

if TYPE_CHECKING:
    from pmm.store import Store  # sqlite-utils: loaded only when the database is read


def open_db_for(db: Path | None) -> Callable[[], Store]:
    """Opens pmd's database read-only (the given path, else the default)."""
    def open_() -> Store:
        from pmm.store import Store, default_db_path

        return Store.open(db if db is not None else default_db_path(), readonly=True)
    return open_


@handle_errors
def leaks(
    pid: PidArg,
    depth: ShownDepthOpt = 1,
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
    db: DbOptUser = None,
    json_: JsonOpt = False,
) -> None:
    """Show PID's live blocks grouped by site, largest live bytes first.

    Per site: function and file:line (library+offset without debug info), blocks,
    bytes, the oldest block's age and an age histogram (<1s, <10s, <100s, <1000s,
    older). While the module keeps the process (running, or exited less than
    its exited-ttl ago) it comes from the module; after that from what pmd
    saved when the process exited.
    """
    from pmm.analysis import leakview

    if pprof is not None:
        check_output(pprof, "'--pprof'", "heap.pb.gz", renamed_over=True)
    now = options.now_monotonic_ns()
    report = leakview.gather(Device.open, open_db_for(db), pid, now,
                               0 if pprof is not None else limit, db_named=db is not None)
    if pprof is not None:
        from pmm.pprof import write_profile

        write_profile(pprof, leakview.pprof_samples(report), period=1,
                      time_ns=time.time_ns(),
                      comments=[f"pmctl leaks {pid} ({report.comm}, {report.state}), "
                                f"from the {report.source}"])
        report.sites = report.sites[:limit] if limit else report.sites
    if json_:
        echo_json(report.to_dict(depth))
        return
    live_blocks, nsites = report.live_blocks, report.nsites
    came = "" if report.source == leakview.SOURCE_MODULE else f", from the {report.source}"
    typer.echo(
        f"pid {pid} ({printable(report.comm)}, {report.state}{came}): {live_blocks} live "
        f"block{'' if live_blocks == 1 else 's'}, {human_bytes(report.live_bytes)} in "
        f"{nsites} site{'' if nsites == 1 else 's'}"
    )
    if pprof is not None:
        typer.echo(f"pprof profile written to {pprof}")
    if report.sites:
        typer.echo(leakview.render(report, depth))


@handle_errors
def stats(pid: PidArg, db: DbOptUser = None, json_: JsonOpt = False) -> None:
    """Show PID's allocation statistics by allocation size.

    Per size range (<=16 ... larger bytes): malloc, calloc, realloc and free
    calls and the allocated, freed and in-use bytes (exact), then totals and
    failed allocations. From the module while it keeps the process, else from
    what pmd saved when the process exited.
    """
    from pmm import procview
    from pmm.store import postmortem

    st = procview.read(pid, Device.open, open_db_for(db), lambda entry: entry.stats(),
                       lambda store: postmortem.stats_from_db(store, pid), db_named=db is not None)
    if json_:
        echo_json(st.to_dict())
    else:
        typer.echo(stats_mod.render(st.table()))
