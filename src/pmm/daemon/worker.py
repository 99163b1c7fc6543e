"""pmd's worker thread (`PostmortemWorker`): what takes the module's reads and
symbolizing (addr2line on large objects may take seconds) out of the loop.
It harvests exited processes' records, describes sites and scans processes
for unreachable blocks; the loop takes the results and writes them with
its other rows, so the database keeps one writer."""

from __future__ import annotations

import collections
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pmm.daemon.procstate import Key
from pmm.kernel import sampler
from pmm.store import ExitRecord, ScanRow, ScanSiteRow

if TYPE_CHECKING:
    from pmm.procview import ModuleReader
    from pmm.symbolize import Frame, Symbolizer

log = logging.getLogger("pmd")

# A device of the module for the worker: pmm.kernel.device.Device.open, or a test's.
OpenDevice = Callable[[], AbstractContextManager["ModuleReader"]]

SYMBOLIZER_USES = 200  # requests per Symbolizer (its memory cache grows)

def open_module_device() -> AbstractContextManager[ModuleReader]:
    """The module's device (pmm.kernel.device.Device.open)."""
    from pmm.kernel.device import Device

    return Device.open()


@dataclass(frozen=True)
class HarvestFailed:
    """A harvest that found nothing (`why` None: the module no longer holds
    the exited process) or failed (`why` says how)."""

    key: Key
    comm: str
    why: str | None


@dataclass(frozen=True)
class SiteDescriptions:
    """The frames that describe a process's sites, by site id."""

    key: Key
    wheres: dict[int, Frame]


@dataclass(frozen=True)
class ScanDone:
    """A scan of a process (`Options.scan_on_leak`): its row, an error in it
    when it failed."""

    key: Key
    comm: str
    row: ScanRow


WorkResult = ExitRecord | HarvestFailed | SiteDescriptions | ScanDone


class PostmortemWorker:
    """One thread that reads the module and symbolizes for pmd: exited
    processes to harvest (`harvest`) and sites to describe (`describe`).
    Results wait in `results` for the loop, which writes them: the thread
    never touches the database. Started at the first request."""

    def __init__(self, open_device: OpenDevice) -> None:
        self.open_device = open_device
        self.requests: queue.Queue[tuple[str, Key, Any] | None] = queue.Queue()
        self.results: collections.deque[WorkResult] = collections.deque()
        self.thread: threading.Thread | None = None
        self.busy = 0  # requests queued or in hand
        self.cond = threading.Condition()
        self.symbolizer: Symbolizer | None = None
        self.uses = 0

    def _submit(self, req: tuple[str, Key, Any]) -> None:
        with self.cond:
            self.busy += 1
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="pmd-postmortem", daemon=True)
            self.thread.start()
        self.requests.put(req)

    def harvest(self, key: Key, comm: str) -> None:
        """Asks for the exited process's record (an ExitRecord, else a
        HarvestFailed)."""
        self._submit(("harvest", key, comm))

    def describe(self, key: Key, sites: list[int]) -> None:
        """Asks for the sites' descriptions (a SiteDescriptions; nothing when
        they cannot be read: a description is a nicety)."""
        self._submit(("describe", key, sites))

    def scan(self, key: Key, comm: str, age_s: float) -> None:
        """Asks for a scan of the running process (a ScanDone)."""
        self._submit(("scan", key, (comm, age_s)))

    def take(self) -> list[WorkResult]:
        """The results so far, oldest first."""
        out = []
        while self.results:
            out.append(self.results.popleft())
        return out

    def wait_idle(self, timeout: float) -> bool:
        """Waits until every request so far is answered; False on timeout."""
        with self.cond:
            return self.cond.wait_for(lambda: self.busy == 0, timeout)

    def stop(self) -> None:
        """Ends the thread after the request in hand (those queued are
        dropped: the module keeps the exited entries, and the next pmd
        harvests them)."""
        if self.thread is None:
            return
        with contextlib.suppress(queue.Empty):
            while True:
                if self.requests.get_nowait() is not None:
                    with self.cond:
                        self.busy -= 1
        self.requests.put(None)

    def _symbolizer(self) -> Symbolizer:
        from pmm.symbolize import Symbolizer

        # no disk cache: pmd's user is often root, whose home is not pmd's
        # to fill; what it names is kept in the database
        if self.symbolizer is None or self.uses >= SYMBOLIZER_USES:
            self.symbolizer = Symbolizer(disk_cache=False)
            self.uses = 0
        self.uses += 1
        return self.symbolizer

    def _run(self) -> None:
        from pmm.store import postmortem

        while True:
            req = self.requests.get()
            if req is None:
                return
            kind, key, arg = req
            if kind == "scan":
                try:
                    self.results.append(ScanDone(key, arg[0], self._scan(key, arg[1])))
                finally:
                    with self.cond:
                        self.busy -= 1
                        self.cond.notify_all()
                continue
            try:
                # the device only for the reads: symbolizing may take seconds,
                # and an open /dev/pmm keeps the module from unloading
                with self.open_device() as dev:
                    snap = postmortem.snapshot(dev, key[0], key[1], kind == "harvest")
                if kind == "harvest":
                    rec = postmortem.collect(snap, key[0], key[1], self._symbolizer())
                    self.results.append(rec if rec is not None
                                        else HarvestFailed(key, arg, None))
                else:
                    wheres = postmortem.describe(snap, key[0], key[1], arg,
                                                 self._symbolizer())
                    self.results.append(SiteDescriptions(key, wheres))
            except Exception as e:  # noqa: BLE001 - the thread serves every request
                if kind == "harvest":
                    self.results.append(HarvestFailed(key, arg, f"{type(e).__name__}: {e}"))
                else:
                    log.debug("no description for the sites of pid %d: %s", key[0], e)
            finally:
                with self.cond:
                    self.busy -= 1
                    self.cond.notify_all()

    def _scan(self, key: Key, age_s: float) -> ScanRow:
        """Scans the process (pmm.unreachable) and makes its row: the sites
        described from their objects and offsets (no address goes into the
        database), or the error that stopped it."""
        from pmm import unreachable
        from pmm.errors import PmmError
        from pmm.procview import InModule
        from pmm.run import find_hooklib

        pid, start = key
        now, wall = sampler.boottime_ns(), time.time()
        try:
            with self.open_device() as dev:
                if InModule.find(dev, pid, start) is None:
                    return ScanRow(pid, start, now, wall, error="not monitored any more")
                r = unreachable.from_module(
                    dev, pid, find_hooklib(), age_s=age_s,  # type: ignore[arg-type]
                    disk_cache=False, addresses=False, pass_ptrace=True)
        except PmmError as e:
            return ScanRow(pid, start, now, wall, error=str(e))
        except Exception as e:  # noqa: BLE001 - the worker serves every request
            return ScanRow(pid, start, now, wall, error=f"{type(e).__name__}: {e}")
        t = r.totals()
        return ScanRow(
            pid, start, now, wall, definite_blocks=t["definite"]["blocks"],
            definite_bytes=t["definite"]["bytes"], indirect_blocks=t["indirect"]["blocks"],
            indirect_bytes=t["indirect"]["bytes"], unknown_blocks=t["unknown"]["blocks"],
            young_blocks=t["young"]["blocks"], longest_stop_us=r.scan["stop"]["longest_us"],
            scan_us=r.scan["scan"]["us"],
            sites=tuple(ScanSiteRow(e["site"], e["where"], e["definite"]["blocks"],
                                    e["definite"]["bytes"], e["indirect"]["blocks"],
                                    e["indirect"]["bytes"]) for e in r.sites))
