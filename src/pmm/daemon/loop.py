"""pmd's loop (`Daemon`) and the whole daemon (`serve`). Daemon owns the
parts, each with one concern, and runs them in turn: the module's events
(pmm.daemon.events) and the processes' state and /proc samples
(pmm.daemon.processes), the detector and its alerts (pmm.daemon.detector),
the worker's harvests and scans (pmm.daemon.worker, .harvests, .scans),
the rows waiting to be written (pmm.daemon.rows), retention
(pmm.daemon.retention), and the snapshot the metrics' readers get
(pmm.daemon.metrics).

SIGTERM/SIGINT flush and end the loop. When the module is unloaded the loop
keeps running and reconnects when it is back. The loop publishes an
immutable snapshot of its processes and counters at most every
PUBLISH_PERIOD seconds; the HTTP and textfile threads read only that.

Service managers: `Daemon.notify_ready` is called once, when pmd is ready
(the listener connected or not, before the loop), and `Daemon.notify_status`
every STATUS_PERIOD seconds with a one-line status (`status_line`), when set.
"""

from __future__ import annotations

import logging
import selectors
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pmm.analysis.trend import Verdict
from pmm.daemon import sdnotify
from pmm.daemon.detector import Detector
from pmm.daemon.events import Events
from pmm.daemon.harvests import Harvests
from pmm.daemon.options import Options
from pmm.daemon.processes import Processes, missing_pids
from pmm.daemon.procstate import Key, ProcState
from pmm.daemon.retention import Retention
from pmm.daemon.rows import Rows
from pmm.daemon.scans import Scans
from pmm.daemon.worker import (
    HarvestFailed,
    OpenDevice,
    PostmortemWorker,
    ScanDone,
    SiteDescriptions,
    open_module_device,
)
from pmm.errors import NoSuchPid
from pmm.kernel import sampler
from pmm.kernel.genl import Event, Listener, MalformedEvent
from pmm.store import ExitRecord, SampleRow, Store, StoreError
from pmm.units import format_duration

if TYPE_CHECKING:
    from pmm.daemon.metrics import Exporter, Snapshot

log = logging.getLogger("pmd")

PUBLISH_PERIOD = 0.5  # seconds between snapshots for the metrics readers
STATUS_PERIOD = 10.0  # seconds between notify_status calls


class Daemon:
    """The loop over its parts; `run()` returns the exit status."""

    def __init__(self, store: Store, opts: Options,
                 open_device: OpenDevice = open_module_device,
                 exporter: Exporter | None = None) -> None:
        self.store = store
        self.opts = opts
        self.exporter = exporter  # publish()ed to when set
        # a service manager's hooks (sdnotify): ready once, status periodically,
        # stopping once signalled (None: not called; their results are
        # ignored, so pmm.daemon.sdnotify's functions fit as they are)
        self.notify_ready: Callable[[], object] | None = None
        self.notify_status: Callable[[str], object] | None = None
        self.notify_stopping: Callable[[], object] | None = None
        self.procs: dict[Key, ProcState] = {}
        self.worker = PostmortemWorker(open_device)
        self.harvests = Harvests(store, self.worker)
        self.rows = Rows(store, self.harvests, opts.max_pending, opts.commit_interval)
        self.scans = Scans(store, self.worker, self.procs, opts.scan_age)
        self.detector = Detector(store, opts, self.rows, self.worker, self.scans)
        self.processes = Processes(store, opts, self.rows, self.detector, self.procs)
        self.events = Events(self.processes, self.rows, self.harvests, self.worker)
        self.retention = Retention(store, opts.retain, opts.retain_every)
        self.listener: Listener | None = None
        self.stop_signal = 0
        now = time.monotonic()
        self.next_publish = now
        self.next_status = now

    # -- what embedders and tests call ------------------------------------

    def handle_event(self, ev: Event | MalformedEvent) -> None:
        """Acts on one event of the module (Events.handle)."""
        self.events.handle(ev)

    def add_sample(self, s: SampleRow, comm: str | None = None) -> None:
        """Records a sample (Processes.add_sample)."""
        self.processes.add_sample(s, comm)

    def flush_now(self) -> None:
        """Writes every row waiting (Rows.flush_now)."""
        self.rows.flush_now()

    def take_results(self) -> None:
        """Moves the worker's results to where they go: records and site
        descriptions to the rows waiting to be written, scans to Scans; a
        harvest that found nothing is logged, one that failed counted."""
        for r in self.worker.take():
            if isinstance(r, ExitRecord):
                self.harvests.keep(r)
            elif isinstance(r, SiteDescriptions):
                self.rows.sites.extend((*r.key, site, where)
                                       for site, where in sorted(r.wheres.items()))
            elif isinstance(r, ScanDone):
                self.scans.scanned(r)
            else:
                self._no_record(r)
        dropped = self.harvests.bound()
        if dropped:
            self.rows.unsaid_drops["post-mortem records"] += dropped

    def _no_record(self, r: HarvestFailed) -> None:
        self.harvests.given_up(r.key)
        # its exit time, unless the EXITED event gave it (that one stays)
        self.rows.exits.append((*r.key, sampler.boottime_ns()))
        if r.why is None:
            log.info("pid %d (%s): the module no longer holds it: nothing kept of its "
                     "sites", r.key[0], r.comm or "?")
        else:
            self.harvests.failed(r.key[0], r.comm, r.why)

    def wait_for_worker(self, timeout: float = 30.0) -> bool:
        """Waits until the worker answered every request so far and takes
        its results (for tests, and for a clean exit); False on timeout."""
        done = self.worker.wait_idle(timeout)
        self.take_results()
        return done

    # -- what others read -----------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The processes and counters as the metrics show them (immutable:
        the loop's state is never shared with the readers' threads)."""
        from pmm.daemon.metrics import DaemonFigures, ProcessFigures, Snapshot

        procs = []
        for st in self.procs.values():
            t = st.trend
            procs.append(ProcessFigures(
                pid=st.key[0], start_time=st.key[1], comm=st.comm, unit=st.unit,
                start_unix=st.start_unix, rss=st.rss_now, vm=st.vm_now,
                live_bytes=st.live_bytes, live_blocks=st.live_blocks, verdict=st.verdict,
                slope=t.slope if t else None, slope_low=t.slope_low if t else None,
                slope_high=t.slope_high if t else None, lost_bytes=st.lost_bytes,
                indirect_bytes=st.indirect_bytes, alert=st.alerted, **_split_figures(st)))
        listener, rows = self.listener, self.rows
        return Snapshot(tuple(procs), DaemonFigures(
            events=self.events.events, malformed_events=self.events.malformed,
            failed_events=self.events.failed_events,
            lost_events=listener.lost if listener is not None else 0,
            module_connected=listener is not None and listener.connected,
            samples_written=rows.written, pending_rows=rows.pending(),
            dropped_rows=rows.dropped_rows, write_failures=rows.write_failures,
            last_commit_unix=rows.last_commit_unix, harvests=self.harvests.harvests,
            harvest_failures=self.harvests.failures))

    def publish(self) -> None:
        """Hands the exporter a new snapshot (when there is one)."""
        if self.exporter is not None:
            self.exporter.publish(self.snapshot())

    def status_line(self) -> str:
        """One line on how pmd is doing, for a service manager's status."""
        leaking = sum(1 for st in self.procs.values() if st.verdict == str(Verdict.LEAK))
        module = "module connected" if self.listener is not None and \
            self.listener.connected else "module not connected"
        rows = self.rows
        line = (f"{len(self.procs)} process{'' if len(self.procs) == 1 else 'es'}, "
                f"{leaking} leaking; {module}; {rows.written} samples written")
        if rows.write_failures:
            line += f"; database not writable ({rows.pending()} rows waiting)"
        return line

    def _periodic(self, now: float) -> None:
        """What the loop does for its readers: a snapshot every
        PUBLISH_PERIOD, a status every STATUS_PERIOD."""
        if now >= self.next_publish:
            self.next_publish = now + PUBLISH_PERIOD
            self.publish()
        if self.notify_status is not None and now >= self.next_status:
            self.next_status = now + STATUS_PERIOD
            self.notify_status(self.status_line())

    # -- the loop -----------------------------------------------------------

    def _connect(self) -> Listener | None:
        """The module's listener (None with --no-genl); when it connects, the
        module's processes it lists are handled."""
        if not self.opts.genl:
            return None
        listener = Listener()
        self.listener = listener
        if listener.connect():
            for pev in listener.dump_pids():
                self.events.handle_safely(pev)
        else:
            log.info("the pmm module is not loaded: waiting for it%s",
                     "; sampling /proc meanwhile" if self.processes.targets else "")
        return listener

    def _timeout(self, listener: Listener | None) -> float:
        """Seconds until the loop's next deadline."""
        now = time.monotonic()
        deadlines = [self.rows.next_flush]
        retain = self.retention.deadline()
        if retain is not None:
            deadlines.append(retain)
        if self.processes.targets:
            deadlines.append(self.processes.next_sample)
        if listener is not None:
            t = listener.timeout()
            if t is not None:
                deadlines.append(now + t)
        return max(0.0, min(deadlines) - now)

    def _turn(self, listener: Listener | None) -> None:
        """One turn of the loop, after its wait: events, the worker's
        results, lost exits, retention, /proc samples, writing, readers."""
        if listener is not None:
            for ev in listener.poll():
                self.events.handle_safely(ev)
        self.take_results()
        now = time.monotonic()
        self.processes.maybe_prune(now, listener.lost if listener is not None else 0,
                                   listener.connects if listener is not None else 0)
        self.retention.maybe_retain(now)
        self.processes.maybe_sample_targets(now)
        if self.rows.due(now):
            self.rows.flush()
        elif self.rows.write_failures:
            self.rows.bound_pending(say=False)  # between retries too
        self._periodic(now)

    def run(self) -> int:
        """The loop: handles the module's events, samples `opts.pids` from /proc and
        writes in batches until SIGTERM or SIGINT, then writes what is pending.
        Returns 0, or 1 when the last rows could not be written."""
        sel = selectors.DefaultSelector()
        rsock, wsock = socket.socketpair()
        rsock.setblocking(False)
        wsock.setblocking(False)
        old_fd = signal.set_wakeup_fd(wsock.fileno(), warn_on_full_buffer=False)

        def on_signal(signum: int, _frame: object) -> None:
            self.stop_signal = signum

        old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        sel.register(rsock, selectors.EVENT_READ, "signal")
        threading.Thread(target=self.detector.warm_up, name="pmd-warm-up",
                         daemon=True).start()
        listener = self._connect()
        registered: set[int] = set()
        log.info("pmd running: db %s, %d pid(s) from /proc every %s", self.store.path,
                 len(self.processes.targets), format_duration(self.opts.interval))
        self.publish()
        if self.exporter is not None:
            self.exporter.start()
        # ready: the one place a service manager is told so
        if self.notify_ready is not None:
            self.notify_ready()
        try:
            while not self.stop_signal and not self.processes.finished:
                if listener is not None:
                    fds = set(listener.fds())
                    for fd in registered - fds:
                        sel.unregister(fd)
                    for fd in fds - registered:
                        sel.register(fd, selectors.EVENT_READ, "genl")
                    registered = fds
                for sk, _ in sel.select(self._timeout(listener)):
                    if sk.data == "signal":
                        try:
                            rsock.recv(512)
                        except BlockingIOError:
                            pass
                self._turn(listener)
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            signal.set_wakeup_fd(old_fd)
            sel.close()
            rsock.close()
            wsock.close()
            if listener is not None:
                listener.close()
        return self._finish()

    def _finish(self) -> int:
        """After the loop: the worker's request in hand, the last rows, the
        exporter's last snapshot; the exit status."""
        name = signal.Signals(self.stop_signal).name if self.stop_signal else \
            "no --pid target left"
        if self.notify_stopping is not None:
            self.notify_stopping()
        # what the worker has in hand, briefly; the rest stays in the module
        # for the next pmd to harvest
        self.worker.stop()
        self.wait_for_worker(timeout=5.0)
        try:
            self.rows.flush_now()
        except StoreError as e:
            log.error("%s: %d rows could not be written", e, self.rows.pending())
            return 1
        finally:
            if self.exporter is not None:
                self.publish()
                self.exporter.close()
        if self.harvests.failures:
            log.info("the sites of %d exited processes could not be kept",
                     self.harvests.failures)
        log.info("%s: wrote %d samples in all, exiting", name, self.rows.written)
        return 0


def _split_figures(st: ProcState) -> dict[str, Any]:
    """The metrics' split of the process's latest sample and its kind of growth."""
    last = st.kinds.split.last
    if last is None:
        return {"kind": str(st.kind.kind) if st.kind is not None else ""}
    return {"rss_anon": last.rss_anon, "rss_file": last.rss_file,
            "rss_shmem": last.rss_shmem, "heap_free": last.heap_free,
            "kind": str(st.kind.kind) if st.kind is not None else ""}


def serve(opts: Options, create_parents: bool = False) -> int:
    """Runs pmd on opts.db until SIGTERM or SIGINT. The exit status: 0 when
    everything was written, 1 when the last rows could not be. Raises
    NoSuchPid when a pid of opts.pids names no process (a mistyped pid would
    leave pmd watching nothing), before the database is touched; StoreError
    when the database cannot be opened; create_parents makes its missing
    directories first (for the default path, not for one given);
    pmm.daemon.metrics.MetricsError when the metrics endpoint cannot listen
    or the textfile's directory cannot be written."""
    missing = missing_pids(opts.pids)
    if missing:
        listed = ", ".join(map(str, missing))
        raise NoSuchPid(f"no such process: pid {listed}" if len(missing) == 1
                        else f"no such processes: pids {listed}")
    exporter = None
    if opts.metrics_address is not None or opts.metrics_textfile is not None:
        from pmm.daemon.metrics import Exporter

        # bound before the database is opened: a port in use is said at once
        exporter = Exporter(opts.metrics_address, opts.metrics_textfile,
                            opts.pprof_allow_uids, host_names=opts.metrics_host_names)
    try:
        store = Store.open(opts.db, create_parents=create_parents)
    except BaseException:
        if exporter is not None:
            exporter.close()
        raise
    try:
        daemon = Daemon(store, opts, exporter=exporter)
        daemon.notify_ready = lambda: sdnotify.ready(daemon.status_line())
        daemon.notify_status = sdnotify.status
        daemon.notify_stopping = sdnotify.stopping
        try:
            return daemon.run()
        except BaseException:
            # the loop failed: the textfile must not keep saying pmd is up
            if exporter is not None:
                exporter.close()
            raise
    finally:
        store.close()
