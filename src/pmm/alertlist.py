"""pmd's alerts as `pmctl alerts` shows them: the store's rows with each
site's description, as JSON (`alerts --json`) and as a table."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from pmm.output import format_table
from pmm.units import human_rate

if TYPE_CHECKING:
    from pmm.store import Store


def alert_rows(store: Store, pid: int | None) -> list[dict[str, Any]]:
    """pmd's alerts (of pid, if given) as `alerts --json` gives them: the
    store's fields and the site's description ("where", None when pmd has
    none)."""
    out = []
    described: dict[tuple[int, int], dict[int, str]] = {}
    for a in store.alerts(pid):
        where = None
        if a.site is not None:
            key = (a.pid, a.start_time)
            if key not in described:
                described[key] = store.sites(a.pid, a.start_time)
            where = described[key].get(a.site)
        d = dataclasses.asdict(a)
        message = d.pop("message")
        out.append({**d, "where": where, "message": message})
    return out


def _alert_state(r: dict[str, Any]) -> str:
    """"active" while the alert stands, else "resolved" and when."""
    if r.get("resolved_wall") is None:
        return "active" if r.get("resolved") is None else "resolved"
    return "resolved " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["resolved_wall"]))


def render(rows: list[dict[str, Any]]) -> str:
    """The alerts (alert_rows) as a table, a row each, local times."""
    headers = ["TIME", "PID", "COMM", "VERDICT", "STATE", "KIND", "RATE", "SITE", "MESSAGE"]
    table = [
        [
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["wall_time"])),
            str(r["pid"]),
            r["comm"] or "?",
            r["verdict"],
            _alert_state(r),
            r["kind"] or "-",
            human_rate(r["slope"] * 60),
            r["where"] or (f"site {r['site']}" if r["site"] is not None else "-"),
            r["message"],
        ]
        for r in rows
    ]
    return format_table(headers, table, right={1})
