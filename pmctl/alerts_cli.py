"""`pmctl alerts [PID]`: the leak alerts pmd raised, from its database
(pmm.alertlist; JSON keys: pmctl/cli.py's docstring)."""

from __future__ import annotations

from typing import Annotated

import typer

from pmctl.exitcodes import handle_errors
from pmctl.options import DbOptUser, JsonOpt, echo_json


@handle_errors
def alerts(
    pid: Annotated[
        int | None,
        typer.Argument(help="Only the alerts of this process id.", min=1, metavar="PID",
                       show_default=False),
    ] = None,
    db: DbOptUser = None,
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
    from pmm.alertlist import alert_rows, render
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
    typer.echo(render(rows))
