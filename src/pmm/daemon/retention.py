"""Retention (`Options.retain`): samples, site snapshots and exited processes
older than that are deleted in rounds every `Options.retain_every` seconds,
in small steps (Store.prune_step) 10 ms apart while there is something to
delete, so the loop serves events between them."""

from __future__ import annotations

import collections
import logging
import time

from pmm.kernel import sampler
from pmm.store import Store, StoreError
from pmm.units import format_duration

log = logging.getLogger("pmd")


class Retention:
    """When the next step is due, and what this round deleted so far."""

    def __init__(self, store: Store, retain: float, every: float) -> None:
        self.store = store
        self.retain = retain  # seconds of samples kept, 0: for good
        self.every = every
        self.next_retain = time.monotonic() + every  # after the start's work
        self.pruned = collections.Counter[str]()  # this round of retention
        self.longest_prune_s = 0.0  # the longest step so far

    def deadline(self) -> float | None:
        """When the loop must wake for the next step (None: never)."""
        return self.next_retain if self.retain > 0 else None

    def maybe_retain(self, now: float) -> None:
        """A step of retention when one is due; a line once a round deleted
        something."""
        if self.retain <= 0 or now < self.next_retain:
            return
        self.next_retain = now + self.every
        before = sampler.boottime_ns() - int(self.retain * 1e9)
        if before <= 0:
            return
        began = time.monotonic()
        try:
            step = self.store.prune_step(before)
        except StoreError as e:
            log.error("%s (retention: tried again later)", e)
            self.next_retain = now + 60.0
            return
        self.longest_prune_s = max(self.longest_prune_s, time.monotonic() - began)
        self.pruned.update(samples=step.samples, snapshots=step.snapshots,
                           processes=step.processes)
        if step.more:
            self.next_retain = now + 0.01
            return
        if self.pruned.total():
            log.info("retention: deleted %d samples, %d site snapshots and %d exited "
                     "processes older than %s (the longest step took %.0f ms)",
                     self.pruned["samples"], self.pruned["snapshots"],
                     self.pruned["processes"], format_duration(self.retain),
                     self.longest_prune_s * 1000)
            self.pruned.clear()
