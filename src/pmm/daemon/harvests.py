"""Post-mortem records (pmm.store.postmortem) on pmd's side: asking the worker for
an exited process's record once, keeping the records until the database
takes them, and counting the harvests that failed (logged once per kind)."""

from __future__ import annotations

import logging

from pmm.daemon.procstate import Key
from pmm.daemon.worker import PostmortemWorker
from pmm.store import BadRowError, ExitRecord, Store, StoreError

log = logging.getLogger("pmd")

MAX_PENDING_HARVESTS = 256  # records waiting for a writable database


class Harvests:
    """The records asked for, those waiting to be written, and the counts."""

    def __init__(self, store: Store, worker: PostmortemWorker) -> None:
        self.store = store
        self.worker = worker
        self.harvesting: set[Key] = set()  # asked, not yet written
        self.pending: list[ExitRecord] = []
        self.harvests = 0
        self.failures = 0
        self.failure_kinds: set[str] = set()

    def request(self, key: Key, comm: str) -> None:
        """Asks the worker for the exited process's record, unless it is
        asked for already or stored."""
        if key in self.harvesting:
            return
        try:
            if self.store.harvested(*key):
                return
        except StoreError as e:
            log.warning("%s (pid %d: harvested anyway)", e, key[0])
        self.harvesting.add(key)
        self.worker.harvest(key, comm)

    def keep(self, rec: ExitRecord) -> None:
        """A record the worker gave, to write at the next flush."""
        self.pending.append(rec)

    def given_up(self, key: Key) -> None:
        """The worker found nothing for key, or failed: it may be asked again."""
        self.harvesting.discard(key)

    def bound(self) -> int:
        """Keeps at most MAX_PENDING_HARVESTS records, dropping the oldest;
        the number dropped."""
        over = len(self.pending) - MAX_PENDING_HARVESTS
        if over <= 0:
            return 0
        for r in self.pending[:over]:
            self.harvesting.discard((r.pid, r.start_time))
        del self.pending[:over]
        return over

    def write(self) -> None:
        """Writes the records waiting, each in its own transaction (after the
        process rows: a record's process is in the database). A record the
        database refuses counts as a failed harvest."""
        while self.pending:
            r = self.pending[0]
            try:
                self.store.write_exit(r)
                self.harvests += 1
                log.info("pid %d (%s): kept its %d site%s and statistics for after the module "
                         "drops it", r.pid, r.comm or "?", len(r.sites),
                         "" if len(r.sites) == 1 else "s")
            except BadRowError as e:
                self.failed(r.pid, r.comm, f"{type(e).__name__}: {e}")
            self.pending.pop(0)
            self.harvesting.discard((r.pid, r.start_time))

    def failed(self, pid: int, comm: str, why: str) -> None:
        """Counts a failed harvest; logs the first of each kind (the error's
        type: one cause, as the device closed to pmd, fails every exit)."""
        self.failures += 1
        kind = why.split(":", 1)[0]
        if kind in self.failure_kinds:
            log.debug("pid %d (%s): its sites could not be kept: %s", pid, comm or "?", why)
            return
        self.failure_kinds.add(kind)
        log.error("pid %d (%s): its sites could not be kept (%d so far; more of this kind are "
                  "counted, not logged): %s", pid, comm or "?", self.failures, why)
