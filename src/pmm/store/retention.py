"""Retention (`Store.prune_step`, pmd --retain): samples and site snapshots older
than the horizon go, and so does every row of a process that exited before
it, unless the process has an alert: its process row, sites, post-mortem
record and scans stay with its alerts, which are kept for good (a row each).
The horizon is on CLOCK_BOOTTIME, as the rows' times: rows of an earlier
boot go once the current boot's clock has passed them by the horizon.
"""

from __future__ import annotations

import sqlite3

from pmm.store.connection import Connection
from pmm.store.errors import describe
from pmm.store.rows import PruneStep


class Retention(Connection):
    """Store's pruning."""

    def prune_step(self, before_ns: int, batch: int = 2000) -> PruneStep:
        """One small transaction of retention (see the module docstring):
        at most `batch` samples, then `batch` site snapshots, older than
        before_ns, else one process that exited before it (with its sites
        and post-mortem rows) unless it has an alert. Each batch deletes by
        the primary key's ranges, process by process, so a step costs about
        the same on a database of any size. `more`: call again."""
        try:
            with self.db.atomic():
                c = self.db.conn
                for table in ("samples", "site_snapshots"):
                    n = 0
                    for pid, start in c.execute(
                            "SELECT pid, start_time FROM processes").fetchall():
                        n += c.execute(
                            f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} "
                            "WHERE pid = ? AND start_time = ? AND time < ? LIMIT ?)",
                            (pid, start, before_ns, batch - n)).rowcount
                        if n >= batch:
                            break
                    if n:
                        return PruneStep(**{"samples" if table == "samples" else
                                            "snapshots": n}, more=True)
                row = c.execute(
                    "SELECT pid, start_time FROM processes p WHERE exited IS NOT NULL AND "
                    "exited < ? AND NOT EXISTS (SELECT 1 FROM alerts a WHERE a.pid = p.pid "
                    "AND a.start_time = p.start_time) LIMIT 1", (before_ns,)).fetchone()
                if row is None:
                    return PruneStep()
                for table in ("samples", "site_snapshots", "sites", "exit_info", "exit_sites",
                              "exit_stats", "scans", "scan_sites", "processes"):
                    c.execute(f"DELETE FROM {table} WHERE pid = ? AND start_time = ?", row)
                return PruneStep(processes=1, more=True)
        except sqlite3.Error as e:
            raise describe(e, self.path, "cannot write to the database") from None

