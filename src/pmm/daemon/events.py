"""The module's generic-netlink events (pmm.kernel.genl) on pmd's side: samples,
exits, monitoring start/stop, per-site live bytes. A malformed event is
logged and skipped, and so is an event whose handling fails: nothing that
arrives stops the loop. When a process the module monitors exits (its
EXITED event, or, at start, an exited entry the module still holds), its
post-mortem record is asked for (pmm.daemon.harvests); the sites named in
SITES events get their descriptions asked for while the process runs."""

from __future__ import annotations

import logging

from pmm.daemon.harvests import Harvests
from pmm.daemon.processes import Processes
from pmm.daemon.rows import Rows
from pmm.daemon.worker import PostmortemWorker
from pmm.kernel import sampler, uapi
from pmm.kernel.genl import Event, MalformedEvent
from pmm.store import SampleRow, start_key

log = logging.getLogger("pmd")


class Events:
    """Acts on the module's events; counts them."""

    def __init__(self, processes: Processes, rows: Rows, harvests: Harvests,
                 worker: PostmortemWorker) -> None:
        self.processes = processes
        self.rows = rows
        self.harvests = harvests
        self.worker = worker
        self.events = 0
        self.malformed = 0
        self.failed_events = 0

    def handle(self, ev: Event | MalformedEvent) -> None:
        """Acts on one event of the module: a sample, a process started, listed,
        exited or stopped, per-site live figures, or dropped records. A malformed
        event is counted and skipped; a failure raises (see handle_safely)."""
        if isinstance(ev, MalformedEvent):
            self.malformed += 1
            log.warning("malformed event skipped: %s", ev)
            return
        if ev.start_time is None:
            return
        procs = self.processes
        key = (ev.pid, start_key(ev.start_time))
        if ev.cmd == uapi.Cmd.SAMPLE:
            assert ev.time is not None and ev.vm is not None and ev.rss is not None
            heap_free, trimmable, allocator = ev.heap_figures()
            procs.add_sample(SampleRow(ev.pid, key[1], ev.time, ev.vm, ev.rss, ev.rss_anon,
                                       ev.rss_file, ev.rss_shmem, ev.live_bytes,
                                       ev.live_blocks, "kmod", heap_free, trimmable, allocator,
                                       ev.cgroup_usage))
        elif ev.cmd == uapi.Cmd.GET_PIDS and ev.state == uapi.STATE_EXITED:
            # exited while pmd was down: the harvest stores its exit time
            st = procs.state(key, "kmod", ev.comm)
            procs.procs.pop(key, None)
            self.harvests.request(key, st.comm)
        elif ev.cmd in (uapi.Cmd.STARTED, uapi.Cmd.GET_PIDS):
            procs.state(key, "kmod", ev.comm)
        elif ev.cmd == uapi.Cmd.EXITED:
            st = procs.state(key, "kmod", ev.comm)
            log.info("pid %d (%s) exited", ev.pid, ev.comm or "?")
            procs.exited(key, ev.time or sampler.boottime_ns())
            # the module keeps the entry for exited_ttl_s: read it now
            self.harvests.request(key, st.comm)
        elif ev.cmd == uapi.Cmd.STOPPED:
            procs.procs.pop(key, None)
        elif ev.cmd == uapi.Cmd.SITES:
            st = procs.state(key, "kmod")
            t = ev.time or 0
            for s in ev.sites:
                self.rows.snaps.append((key[0], key[1], t, s.site, s.live_bytes,
                                        s.live_blocks))
                st.snaps.append((s.site, t / 1e9, s.live_bytes, s.live_blocks))
            new = sorted({s.site for s in ev.sites} - st.described)
            if new:
                st.described.update(new)
                self.worker.describe(key, new)
        elif ev.cmd == uapi.Cmd.DROPPED:
            log.info("pid %d: the module dropped %d records so far", ev.pid, ev.dropped or 0)

    def handle_safely(self, ev: Event | MalformedEvent) -> None:
        """handle, except that a failure is logged and the event skipped:
        one event pmd cannot handle must not stop the loop."""
        self.events += 1
        try:
            self.handle(ev)
        except Exception as e:  # noqa: BLE001 - whatever arrives, pmd keeps running
            self.failed_events += 1
            log.error("event skipped (%d so far): %s: %s: %r", self.failed_events,
                      type(e).__name__, e, ev)
