"""`pmctl report PID -o FILE.html`: one self-contained HTML page about a
process: its rss and vm over time, the leak verdict and its evidence, the
sites whose live bytes grow fastest with their call chains, live bytes by
call chain (a flame graph), and the age and size tables. A thin front end
over pmm.report (gather, render, write_report).

The module is read while it holds the process (running, and for a while
after its exit), pmd's database (--db, $PMM_DB, else the default path) for
the whole history; either alone is enough, and the page says what it lacks.
The file needs no network to be viewed (plotly.js is inside it).

Exit status: 0 the file is written; 1 a --db or $PMM_DB that cannot be
read, or the file could not be written; 2 an -o that cannot be written
(refused before anything is read); 5 no such pid (and nothing of it
anywhere); 6 the process runs but neither source holds anything of it.

--json prints {"output", "bytes", "pid", "start_time", "comm", "state",
"verdict" (null without samples), "sources", "missing"}.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pmctl.exitcodes import handle_errors
from pmctl.options import DbOpt, PidArg
from pmctl.paths import check_output
from pmm.errors import ModuleNotLoaded, PmmError
from pmm.output import dump_json
from pmm.text import printable
from pmm.units import human_bytes

if TYPE_CHECKING:
    from pmm.kernel.device import Device
    from pmm.store import Store



def _open_device() -> tuple[Device | None, str]:
    """The module's device, or None and why not (for the report's page)."""
    from pmm.kernel.device import Device

    try:
        return Device.open(), ""
    except ModuleNotLoaded:
        return None, "the module is not loaded"
    except PmmError as e:
        return None, f"the module could not be opened ({e})"


def _open_store(db: Path | None) -> tuple[Store | None, str]:
    """pmd's database, or None and why not. A database named with --db or
    $PMM_DB must open (else its error); the default one may be missing."""
    from pmm.store import Store, StoreError, default_db_path

    if db is not None:
        return Store.open(db, readonly=True), ""
    path = default_db_path()
    if not path.exists():
        return None, f"there is no pmd database at {path} (pmd writes it)"
    try:
        return Store.open(path, readonly=True), ""
    except StoreError as e:
        return None, str(e)


@handle_errors
def report_command(
    pid: PidArg,
    output: Annotated[Path, typer.Option(
        "--output", "-o", metavar="FILE.html", show_default=False,
        help="The HTML file to write (replaced whole, or not at all).")],
    db: DbOpt = None,
    start_time: Annotated[int | None, typer.Option(
        "--start-time", metavar="NS", show_default=False,
        help="Which process, when the pid was reused (start time in ns, as `pmctl trend "
        "--json` gives it).")] = None,
    json_: Annotated[bool, typer.Option(
        "--json", help="Print one JSON document with stable keys instead of a summary.")
    ] = False,
) -> None:
    """Write an HTML report of PID: memory chart, verdict, growing sites, flame graph.

    One self-contained page (no network needed to view it): rss and vm over
    time, the leak verdict with its evidence, the sites whose live bytes
    grow fastest with their call chains, live bytes by call chain as a flame
    graph, and live blocks by site with their ages and allocations by size.
    From the module while it holds the process, and from pmd's database
    (also long after the process exited); the page says what is missing.
    """
    from pmm.report import gather, render, verdict_of, write_report

    check_output(output, "'-o' / '--output'", "report.html", renamed_over=True)
    device, device_note = _open_device()
    store, store_note = _open_store(db)
    try:
        data = gather(pid, device, store, start_time, device_note, store_note)
        page = render(data)
    finally:
        if store is not None:
            store.close()
        if device is not None:
            device.close()
    try:
        write_report(page, output)
    except OSError as e:
        raise PmmError(f"cannot write the report {output}: {e.strerror or e}") from None
    size = len(page.encode())
    verdict = verdict_of(data)
    if json_:
        typer.echo(dump_json({
            "output": str(output), "bytes": size, "pid": data.pid,
            "start_time": data.start_time, "comm": data.comm, "state": data.state,
            "verdict": str(verdict) if verdict is not None else None,
            "sources": data.sources, "missing": data.missing}))
        return
    said = f", {verdict}" if verdict is not None else ", no verdict (no samples)"
    typer.echo(f"wrote {printable(str(output))} ({human_bytes(size)}): pid {data.pid} "
               f"({printable(data.comm or '?')}, {data.state}){said}")
    for note in data.missing:
        typer.echo(f"  not in it: {printable(note)}")
