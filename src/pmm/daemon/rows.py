"""The rows pmd's loop has yet to write (`Rows`), and their writing: one
transaction every `Options.commit_interval` seconds. A write that fails at
run time (disk full, file made read-only) is logged and retried with a
growing delay (5 s up to 60 s, one log line per retry) while rows wait in
memory (at most `Options.max_pending` of each kind; the oldest go first,
counted). Rows the database refuses themselves (a value it cannot store) are
found by splitting the batch, logged and skipped; the rest is written."""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pmm.daemon.harvests import Harvests
from pmm.store import BadRowError, ProcessRow, SampleRow, Store, StoreError
from pmm.units import format_duration

if TYPE_CHECKING:
    from pmm.symbolize import Frame

log = logging.getLogger("pmd")


class Rows:
    """The rows waiting, by kind, and the writing's counters."""

    def __init__(self, store: Store, harvests: Harvests, max_pending: int,
                 commit_interval: float) -> None:
        self.store = store
        self.harvests = harvests  # their records are written after the rows
        self.max_pending = max_pending
        self.commit_interval = commit_interval
        self.samples: collections.deque[SampleRow] = collections.deque()
        self.procs: list[ProcessRow] = []
        self.exits: list[tuple[int, int, int]] = []
        self.snaps: list[tuple[int, int, int, int, int, int]] = []
        self.sites: list[tuple[int, int, int, Frame]] = []  # site descriptions
        self.written = 0  # samples
        self.bad_rows = 0
        self.dropped_rows = 0
        self.unsaid_drops: collections.Counter[str] = collections.Counter()
        self.write_failures = 0  # in a row: the retry's delay grows with them
        self.last_commit_unix = time.time()  # the database held every row then
        self.next_flush = time.monotonic() + commit_interval

    def pending(self) -> int:
        """The number of rows waiting to be written."""
        return (len(self.samples) + len(self.procs) + len(self.exits) + len(self.snaps)
                + len(self.sites) + len(self.harvests.pending))

    def flush_now(self) -> None:
        """Writes everything pending in one transaction; StoreError leaves it
        pending. Rows the database refuses (BadRowError) are logged and
        dropped, the others written."""
        if not self.pending():
            self.last_commit_unix = time.time()
            return
        samples = list(self.samples)
        try:
            self.store.write(samples, self.procs, self.exits, self.snaps, self.sites)
            self.written += len(samples)
        except BadRowError:
            self._write_isolating(samples)
        self.samples.clear()
        self.procs = []
        self.exits = []
        self.snaps = []
        self.sites = []
        self.last_commit_unix = time.time()
        self.harvests.write()

    def _write_isolating(self, samples: list[SampleRow]) -> None:
        """Writes each kind of row apart, halving a refused batch down to the
        rows refused alone, which are logged and left out. Rows written again
        are harmless (Store.write ignores duplicates), so a StoreError about
        the database midway leaves everything pending for the next try."""
        bad: list[tuple[str, object, BadRowError]] = []

        def split(kind: str, rows: list[Any], write: Callable[[list[Any]], None]) -> None:
            try:
                write(rows)
            except BadRowError as e:
                if len(rows) == 1:
                    bad.append((kind, rows[0], e))
                    return
                half = len(rows) // 2
                split(kind, rows[:half], write)
                split(kind, rows[half:], write)

        st = self.store
        if self.procs:
            split("process", self.procs, lambda r: st.write(processes=r))
        if self.exits:
            split("exit", self.exits, lambda r: st.write(exits=r))
        if samples:
            split("sample", samples, lambda r: st.write(samples=r))
        if self.snaps:
            split("site snapshot", self.snaps, lambda r: st.write(snapshots=r))
        if self.sites:
            split("site description", self.sites, lambda r: st.write(sites=r))
        self.bad_rows += len(bad)
        self.written += len(samples) - sum(1 for kind, _, _ in bad if kind == "sample")
        for kind, row, e in bad[:5]:
            log.error("skipped a %s row: %s: %r", kind, e, row)
        if len(bad) > 5:
            log.error("skipped %d more rows the database refused", len(bad) - 5)

    def flush(self) -> None:
        """flush_now, except that a StoreError is logged and the write retried
        after a growing delay (5 s, doubling up to 60 s), with at most
        `max_pending` rows of each kind kept meanwhile."""
        now = time.monotonic()
        try:
            self.flush_now()
        except StoreError as e:
            self.write_failures += 1
            delay = min(60.0, 5.0 * 2 ** (self.write_failures - 1))
            self.next_flush = now + delay
            self.bound_pending()
            log.error("%s; %d rows kept in memory, retrying in %s", e, self.pending(),
                      format_duration(delay))
            return
        if self.write_failures:
            log.info("database writable again: wrote the rows kept in memory")
            self.write_failures = 0
        self.next_flush = now + self.commit_interval

    def due(self, now: float) -> bool:
        """Whether the loop should flush now: its time came, or many samples
        wait and the database is writable."""
        return now >= self.next_flush or len(self.samples) >= 10_000 and \
            not self.write_failures

    def bound_pending(self, say: bool = True) -> None:
        """At most max_pending rows of each kind wait in memory; the oldest
        go first, counted, and logged when `say` (at a failed retry, not at
        every event in between)."""
        cap = self.max_pending
        over = len(self.samples) - cap
        if over > 0:
            for _ in range(over):
                self.samples.popleft()
            self.unsaid_drops["samples"] += over
        lists: list[tuple[str, list[Any]]] = [
            ("processes", self.procs), ("exits", self.exits),
            ("site snapshots", self.snaps), ("site descriptions", self.sites)]
        for what, rows in lists:
            over = len(rows) - cap
            if over > 0:
                del rows[:over]
                self.unsaid_drops[what] += over
        if not say:
            return
        for what, n in self.unsaid_drops.items():
            if n:
                self.dropped_rows += n
                log.error("dropped the %d oldest %s (%d rows so far): the database is not "
                          "writable", n, what, self.dropped_rows)
        self.unsaid_drops.clear()
