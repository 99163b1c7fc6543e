"""pmd's engine: it records memory samples of processes into SQLite
(pmm.store) and raises an alert when the trend detector (pmm.trend) says LEAK.

Samples come:

- with the module loaded, from its generic-netlink events (pmm.genl):
  samples, exits, monitoring start/stop, per-site live bytes;
- for the processes in `Options.pids`, from /proc, read every
  `Options.interval` seconds (pmm.procsampler), unless the module already
  samples that process.

Writes are batched: one transaction every `Options.commit_interval` seconds.
The detector runs every `Options.detect_every` samples of a process over its
last `Options.window` samples, and no more often than every 1/DETECT_SPAN of
the samples it holds (its cost grows with them: an hour of samples is looked
at every three minutes, not every 20 s); a new LEAK verdict is written once to
`alerts` and logged as one line.

Robustness: SIGTERM/SIGINT flush and end the loop. A write that fails at run
time (disk full, file made read-only) is logged and retried with a growing
delay (5 s up to 60 s, one log line per retry) while rows wait in memory (at
most `Options.max_pending` samples, and as many processes, exits and site
snapshots; the oldest go first, counted). Rows the database refuses
themselves (a value it cannot store) are found by splitting the batch,
logged and skipped; the rest is written. When the module is unloaded the
loop keeps running and reconnects when it is back. A malformed event is
logged and skipped, and so is an event whose handling fails: nothing that
arrives stops the loop. Processes whose exit event was lost (receive buffer
overrun, module reloaded) are found every 30 s, and at once after an overrun
or a reconnect, by checking /proc for the pid with the same start time; they
are marked exited.

Scans (`Options.scan_on_leak`): at a process's LEAK alert, the worker runs
pmm.unreachable's scan of it (its threads stopped for milliseconds, its
copy swept) and the loop stores the result beside the alert (`scans`,
`scan_sites`), logs one line and shows the lost bytes in the metrics. The
scan needs ptrace of the process: pmd's unit has no CAP_SYS_PTRACE (an
administrator's drop-in adds it), so without it only pmd's own user's
processes are scanned, and pmd says so once.

Post-mortem records: when a process the module monitors exits (its EXITED
event, or, at start, an exited entry the module still holds that the
database has none of: pmd was down then), pmd reads the module's entry and
stores what `pmctl leaks`, `stats`, `trend` and `alerts` need once the
module dropped it (pmm.postmortem). The sites named in SITES events get
their one-line description the same way while the process runs. Reading
and symbolizing (addr2line on large objects may take seconds) happen in one
worker thread (`PostmortemWorker`), never in the loop; the loop writes the
results with the other rows, so the database keeps one writer. An alert
names its site's description when the worker has given it by then (it is
asked when the site first appears), else the site's number alone. A harvest that fails is
counted, and logged the first time it fails that way (one line); the entry
is not read again.

Metrics (`Options.metrics_address`, `Options.metrics_textfile`; pmm.metrics):
the loop publishes an immutable snapshot of its processes (latest sample,
the detector's last trend) and counters at most every PUBLISH_PERIOD
seconds; the HTTP and textfile threads read only that, never the loop's
state.

Service managers: `Daemon.notify_ready` is called once, when pmd is ready
(the listener connected or not, before the loop), and `Daemon.notify_status`
every STATUS_PERIOD seconds with a one-line status (`status_line`), when set.

`serve(options)` is the whole daemon: it opens the database (StoreError if it
cannot), runs the loop until SIGTERM or SIGINT and returns the exit status.
Log records go to the "pmd" logger; they quote what monitored processes
named themselves, so a handler should escape control characters
(pmm.text.printable).
"""

from __future__ import annotations

import array
import collections
import contextlib
import dataclasses
import logging
import os
import queue
import selectors
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pmm import procsampler, sdnotify, uapi
from pmm.errors import NoSuchPid
from pmm.genl import Event, Listener, MalformedEvent
from pmm.growthkind import Classification
from pmm.kindtrack import Tracker
from pmm.store import (
    AlertRow,
    BadRowError,
    ExitRecord,
    ProcessRow,
    SampleRow,
    ScanRow,
    ScanSiteRow,
    Store,
    StoreError,
    start_key,
)
from pmm.trend import Params, Trend, Verdict, detect, site_growth
from pmm.units import format_duration, human_bytes, human_rate

if TYPE_CHECKING:
    from pmm.metrics import Exporter, Snapshot
    from pmm.postmortem import ModuleReader
    from pmm.symbolize import Symbolizer

log = logging.getLogger("pmd")

Key = tuple[int, int]  # (pid, start_time)

# A device of the module for the worker: pmm.device.Device.open, or a test's.
OpenDevice = Callable[[], AbstractContextManager["ModuleReader"]]

MAX_PENDING_HARVESTS = 256  # records waiting for a writable database
SYMBOLIZER_USES = 200  # requests per Symbolizer (its memory cache grows)
PUBLISH_PERIOD = 0.5  # seconds between snapshots for the metrics readers
DETECT_SPAN = 20  # the detector runs at most every len(window) // DETECT_SPAN samples
STATUS_PERIOD = 10.0  # seconds between notify_status calls
DEFAULT_MIN_SPAN = 600.0  # pmd --min-span: a service's warm-up is not a leak
DEFAULT_RETAIN = 7 * 86400.0  # pmd --retain: 73 B a sample, 42 MiB a process-week at 1 s
KIND_EVERY = 10  # detector runs between two namings of a growing process's kind


def open_module_device() -> AbstractContextManager[ModuleReader]:
    """The module's device (pmm.device.Device.open)."""
    from pmm.device import Device

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
    """One-line descriptions of a process's sites, by site id."""

    key: Key
    wheres: dict[int, str]


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
        from pmm import postmortem

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
        from pmm.run import find_hooklib

        pid, start = key
        now, wall = procsampler.boottime_ns(), time.time()
        try:
            with self.open_device() as dev:
                info = dev.pid_info(pid)
                if info is None or start_key(info.start_time_ns) != start:
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


class SeriesWindow:
    """A process's last `size` samples (time in seconds, rss) in two arrays
    of doubles used as rings: 16 bytes a sample where a deque of floats
    takes 64 (pmd holds an hour of samples for hundreds of processes)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.t = array.array("d")
        self.rss = array.array("d")
        self.head = 0  # the oldest sample, once full

    def __len__(self) -> int:
        return len(self.t)

    def append(self, t: float, rss: float) -> None:
        """Adds a sample; the oldest goes once `size` are held."""
        if len(self.t) < self.size:
            self.t.append(t)
            self.rss.append(rss)
            return
        self.t[self.head] = t
        self.rss[self.head] = rss
        self.head = (self.head + 1) % self.size

    def samples(self) -> tuple[array.array[float], array.array[float]]:
        """(times, rss), oldest first."""
        h = self.head
        return self.t[h:] + self.t[:h], self.rss[h:] + self.rss[:h]


@dataclass
class ProcState:
    """What pmd keeps in memory per process: the detector's window, and its
    latest figures and trend (for the metrics)."""

    key: Key
    comm: str
    source: str
    window: int
    unit: str = ""  # its systemd unit ('' none)
    start_unix: float = 0.0  # unix time it started
    rss_now: int = 0
    vm_now: int = 0
    live_bytes: int | None = None  # None: the module does not track its heap
    live_blocks: int | None = None
    trend: Trend | None = None  # the detector's last result
    series: SeriesWindow = field(init=False)
    snaps: collections.deque[tuple[int, float, int, int]] = field(init=False)
    since_detect: int = 0
    alerted: bool = False  # a LEAK alert stands (not resolved)
    first_s: float | None = None  # the time of its first sample pmd saw (seconds)
    last_kmod_ns: int = 0
    verdict: str = ""
    described: set[int] = field(default_factory=set)  # site ids asked to describe
    lost_bytes: int | None = None  # the last scan's definitely lost bytes (scan_on_leak)
    indirect_bytes: int | None = None
    kinds: Tracker = field(init=False)  # the split of its window, its mappings' baseline
    kind: Classification | None = None  # the kind of growth, while the verdict says growth
    kind_runs: int = 0  # detector runs since it was named

    def __post_init__(self) -> None:
        self.series = SeriesWindow(self.window)
        self.kinds = Tracker(self.key[0], self.window)
        self.snaps = collections.deque(maxlen=4096)


@dataclass
class Options:
    """What pmd's command line sets; times in seconds."""

    db: Path
    pids: list[int]  # processes sampled from /proc when the module does not
    interval: float = 1.0  # between /proc samples
    commit_interval: float = 1.0
    detect_every: int = 20  # run the detector every N samples of a process
    window: int = 3600  # over its last N samples
    genl: bool = True
    max_pending: int = 200_000
    prune_interval: float = 30.0  # seconds between checks for lost exits
    params: Params = field(default_factory=Params)
    metrics_address: tuple[str, int] | None = None  # HTTP endpoint (pmm.metrics)
    metrics_textfile: Path | None = None  # node_exporter textfile
    pprof_allow_uids: frozenset[int] = frozenset()  # may read every process's profile
    # names requests may give the endpoint in Host (pmm.metrics.parse_host's)
    metrics_host_names: frozenset[tuple[str, int | None]] = frozenset()
    scan_on_leak: bool = False  # scan a process for unreachable blocks at its LEAK alert
    scan_age: float = 1.0  # the scan's age gate, seconds
    # no LEAK alert before a process has been watched this long: a service's
    # warm-up (caches filling) must not alarm at every start (pmd's command
    # line: DEFAULT_MIN_SPAN; 0 here, for callers that feed samples themselves)
    min_span: float = 0.0
    retain: float = 0.0  # seconds of samples kept, 0: for good (pmd's: DEFAULT_RETAIN)
    retain_every: float = 60.0  # seconds between two rounds of pruning


def verdict_line(pid: int, comm: str, r: Trend, samples: int, named: bool = True) -> str:
    """The detector's verdict for the log: "pid 7 (x): STABLE after 40
    samples: why", with the rate only where the verdict rests on it (LEAK,
    GROWING: a STABLE shows no growth that would contradict it)."""
    head = f"pid {pid} ({comm or '?'}): " if named else ""
    rate = f" (rss {human_rate(r.slope * 60)})" if r.verdict in (
        Verdict.LEAK, Verdict.GROWING) else ""
    return f"{head}{r.verdict} after {samples} samples{rate}: {r.reason}"


class Daemon:
    """The loop and its state; `run()` returns the exit status."""

    def __init__(self, store: Store, opts: Options,
                 open_device: OpenDevice = open_module_device,
                 exporter: Exporter | None = None) -> None:
        self.store = store
        self.exporter = exporter  # publish()ed to when set
        # a service manager's hooks (sdnotify): ready once, status periodically,
        # stopping once signalled (None: not called; their results are
        # ignored, so pmm.sdnotify's functions fit as they are)
        self.notify_ready: Callable[[], object] | None = None
        self.notify_status: Callable[[str], object] | None = None
        self.notify_stopping: Callable[[], object] | None = None
        self.opts = opts
        self.open_device = open_device
        self.worker = PostmortemWorker(open_device)
        self.harvesting: set[Key] = set()  # asked, not yet written
        self.pending_harvests: list[ExitRecord] = []
        self.pending_sites: list[tuple[int, int, int, str]] = []
        self.harvests = 0
        self.harvest_failures = 0
        self.harvest_failure_kinds: set[str] = set()
        self.scans = 0
        self.scan_failures = 0
        self.ptrace_said = False  # the scan's missing capability, said once
        self.procs: dict[Key, ProcState] = {}
        # --pid targets: pid -> start_time once seen (None before)
        self.targets: dict[int, int | None] = dict.fromkeys(opts.pids)
        self.pending_samples: collections.deque[SampleRow] = collections.deque()
        self.pending_procs: list[ProcessRow] = []
        self.pending_exits: list[tuple[int, int, int]] = []
        self.pending_snaps: list[tuple[int, int, int, int, int, int]] = []
        self.dropped_rows = 0
        self.unsaid_drops: collections.Counter[str] = collections.Counter()
        self.events = 0
        self.malformed = 0
        self.failed_events = 0
        self.bad_rows = 0
        self.write_failures = 0
        self.stop_signal = 0
        self.finished = False  # nothing left to watch (the last --pid gone, --no-genl)
        self.listener: Listener | None = None
        # the detector's first run imports and warms what it needs (slow on a
        # slow file system): a thread runs it while the loop records samples
        self.detector_ready = threading.Event()
        now = time.monotonic()
        self.next_sample = now
        self.next_flush = now + opts.commit_interval
        self.next_prune = now + opts.prune_interval
        self.seen_lost = 0  # Listener.lost and .connects at the last prune
        self.seen_connects = 0
        self.written = 0
        self.last_commit_unix = time.time()  # the database held every row then
        self.next_publish = now
        self.next_status = now
        self.next_retain = now + opts.retain_every  # after the start's work
        self.pruned = collections.Counter[str]()  # this round of retention
        self.longest_prune_s = 0.0  # the longest step so far

    # -- events and samples -------------------------------------------------

    def _proc(self, key: Key, source: str, comm: str | None = None) -> ProcState:
        st = self.procs.get(key)
        if st is not None:
            if comm and not st.comm:
                st.comm = comm
            return st
        pid, start = key
        row = ProcessRow(pid, start, comm or "", "", "", procsampler.boottime_ns(), None, source)
        try:
            d = procsampler.describe(pid, start, source=source)
            row = ProcessRow(pid, start, comm or d.comm, d.exe, d.cmdline, d.started, None,
                             source)
        except procsampler.ProcessGone:
            pass
        from pmm.proclabels import boot_unix_time, systemd_unit

        st = ProcState(key, row.comm, source, self.opts.window, unit=systemd_unit(pid),
                       start_unix=boot_unix_time() + start / 1e9)
        self.procs[key] = st
        self.pending_procs.append(row)
        # a restarted pmd must not alert twice for the same process
        try:
            st.alerted = any(a.verdict == str(Verdict.LEAK) and a.resolved is None
                             for a in self.store.alerts(pid) if a.start_time == start)
        except StoreError as e:
            log.warning("%s (pid %d: alerts so far unknown)", e, pid)
        return st

    def add_sample(self, s: SampleRow, comm: str | None = None) -> None:
        """Queues the sample for writing, adds it to its process's window, and
        runs the detector every `detect_interval` samples once the window holds
        enough. `comm` names a process seen for the first time."""
        st = self._proc((s.pid, s.start_time), s.source, comm)
        if s.source == "kmod":
            st.last_kmod_ns = s.time
        st.rss_now, st.vm_now = s.rss, s.vm
        st.live_bytes, st.live_blocks = s.live_bytes, s.live_blocks
        self.pending_samples.append(s)
        if st.first_s is None:
            st.first_s = s.time / 1e9
        st.series.append(s.time / 1e9, float(s.rss))
        st.kinds.split.append(s)
        st.kinds.look()
        st.since_detect += 1
        if st.since_detect >= self.detect_interval(len(st.series)) and \
                len(st.series) >= self.opts.params.min_samples:
            st.since_detect = 0
            self.run_detector(st, s.time)

    def detect_interval(self, held: int) -> int:
        """Samples between two runs of the detector over a window of `held`."""
        return max(self.opts.detect_every, held // DETECT_SPAN)

    def run_detector(self, st: ProcState, now_ns: int) -> None:
        """Runs the trend detector over the process's window. At its first LEAK
        verdict for the process, stores an alert naming the fastest growing site
        (or the largest) and logs it. Until the detector is ready, it is tried
        again at the next sample."""
        if not self.detector_ready.is_set():
            st.since_detect = sys.maxsize  # try again at the next sample
            return
        from pmm.trendsource import available_memory

        r = self._gate(st, detect(*st.series.samples(), self.opts.params,
                                  available=available_memory(st.key[0])))
        st.trend = r
        self._name_kind(st, r)
        changed = str(r.verdict) != st.verdict
        st.verdict = str(r.verdict)
        if r.verdict is Verdict.STABLE and st.alerted:
            self._resolve(st, r, now_ns)
        elif changed and not (r.verdict is Verdict.LEAK and not st.alerted):
            # a new LEAK alert is its own line (below), at warning
            log.info("%s", verdict_line(st.key[0], st.comm, r, len(st.series)))
        if r.verdict is not Verdict.LEAK or st.alerted:
            return
        st.alerted = True
        pid, start = st.key
        kib = r.rate_kib_min
        pct = round(r.confidence * 100)
        msg = (f"LEAK pid {pid} ({st.comm or '?'}): rss {human_rate(kib[0] * 1024)} "
               f"[{pct}% CI {human_rate(kib[1] * 1024)} .. {human_rate(kib[2] * 1024)}], "
               f"+{human_bytes(r.growth)} over {format_duration(round(r.span_s))}")
        site: int | None = None
        g = site_growth(st.snaps, limit=1)
        if g:
            site = g[0].site
            where = self._site_where(st, site)
            msg += f"; fastest site {site}{' ' + where if where else ''} "
            msg += human_rate(g[0].rate_kib_min * 1024)
        elif st.snaps:
            # one snapshot so far: no growth rate yet, name the largest site
            last_t = st.snaps[-1][1]
            big = max((x for x in st.snaps if x[1] == last_t), key=lambda x: (x[2], -x[0]))
            site = big[0]
            where = self._site_where(st, site)
            msg += f"; largest site {site}{' ' + where if where else ''} "
            msg += f"{human_bytes(big[2])} live"
        kind = self._alert_kind(st)
        if kind is not None:
            msg += f"; kind {kind.kind}: {kind.reason}"
        a = AlertRow(pid, start, now_ns, time.time(), st.comm, str(r.verdict), r.slope,
                     r.slope_low, r.slope_high, r.confidence, r.growth, site, msg,
                     kind=str(kind.kind) if kind is not None else None,
                     evidence=kind.to_dict() if kind is not None else None)
        try:
            self.flush_now()
            added = self.store.add_alert(a)
        except StoreError as e:
            log.error("%s (alert not stored)", e)
            added = True
        if added:
            log.warning("%s", msg)
            if self.opts.scan_on_leak and st.source == "kmod":
                self.request_scan(st)

    def _gate(self, st: ProcState, r: Trend) -> Trend:
        """LEAK only once the process has been watched opts.min_span: before,
        the same figures say GROWING (no alert), with why."""
        watched = (st.series.t[st.series.head - 1] if len(st.series) else 0.0) - \
            (st.first_s or 0.0)
        if r.verdict is not Verdict.LEAK or watched >= self.opts.min_span:
            return r
        return dataclasses.replace(
            r, verdict=Verdict.GROWING,
            reason=f"{r.reason}; no alert before {format_duration(self.opts.min_span)} of "
            f"samples (--min-span), {format_duration(round(watched))} so far")

    def _resolve(self, st: ProcState, r: Trend, now_ns: int) -> None:
        """The verdict cleared: the standing LEAK alert is marked resolved in
        the store and said at the alert's priority (warning)."""
        st.alerted = False
        pid, start = st.key
        try:
            self.store.resolve_alerts(pid, start, now_ns, time.time())
        except StoreError as e:
            log.error("%s (the alert's resolution not stored)", e)
        log.warning("RESOLVED pid %d (%s): its LEAK alert: %s", pid, st.comm or "?",
                    verdict_line(pid, st.comm, r, len(st.series), named=False))
    def _name_kind(self, st: ProcState, r: Trend) -> None:
        """The kind of the process's growth while the detector sees growth
        (pmm.growthkind; None otherwise): named when growth is first seen,
        then again every KIND_EVERY runs (it fits five slopes where the
        detector fits one)."""
        if r.verdict not in (Verdict.LEAK, Verdict.GROWING):
            st.kind, st.kind_runs = None, 0
            return
        if st.kind is None or st.kind_runs >= KIND_EVERY:
            st.kind = st.kinds.classify(st.series.samples()[0])
            st.kind_runs = 0
        st.kind_runs += 1

    def _alert_kind(self, st: ProcState) -> Classification | None:
        """The kind of growth for an alert: with the mappings that grew since
        the baseline (read now: the alert keeps them)."""
        st.kind = st.kinds.at_alert(st.series.samples()[0])
        return st.kind

    def request_scan(self, st: ProcState) -> None:
        """Asks the worker to scan the process for unreachable blocks, unless
        pmd may not ptrace it (said once: the unit's missing capability)."""
        why = ptrace_refusal(st.key[0])
        if why:
            if not self.ptrace_said:
                self.ptrace_said = True
                log.warning("--scan-on-leak: %s; processes of other users are not scanned "
                            "(this is said once)", why)
            return
        self.worker.scan(st.key, st.comm, self.opts.scan_age)

    def _site_where(self, st: ProcState, site: int) -> str:
        """The site's description if the worker gave it already (stored or
        waiting to be), else '' (the worker, asked when the site was first
        seen, stores it in the sites table when it has it): the loop never
        symbolizes, which may take seconds an object."""
        pid, start = st.key
        for p, s_start, s, where in reversed(self.pending_sites):
            if (p, s_start, s) == (pid, start, site):
                return where
        try:
            known = self.store.sites(pid, start).get(site)
        except StoreError as e:
            log.debug("no description for site %d of pid %d: %s", site, pid, e)
            known = None
        if known:
            return known
        if site not in st.described:
            st.described.add(site)
            self.worker.describe(st.key, [site])
        return ""

    # -- post-mortem records --------------------------------------------------

    def request_harvest(self, key: Key, comm: str) -> None:
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

    def take_results(self) -> None:
        """Moves the worker's results to the rows waiting to be written; a
        harvest that failed is counted (see _harvest_failed), one that found
        nothing is logged."""
        for r in self.worker.take():
            if isinstance(r, ExitRecord):
                self.pending_harvests.append(r)
            elif isinstance(r, SiteDescriptions):
                self.pending_sites.extend((*r.key, site, where)
                                          for site, where in sorted(r.wheres.items()))
            elif isinstance(r, ScanDone):
                self._scanned(r)
            else:
                self.harvesting.discard(r.key)
                # its exit time, unless the EXITED event gave it (that one stays)
                self.pending_exits.append((*r.key, procsampler.boottime_ns()))
                if r.why is None:
                    log.info("pid %d (%s): the module no longer holds it: nothing kept of its "
                             "sites", r.key[0], r.comm or "?")
                else:
                    self._harvest_failed(r.key[0], r.comm, r.why)
        if len(self.pending_harvests) > MAX_PENDING_HARVESTS:
            over = len(self.pending_harvests) - MAX_PENDING_HARVESTS
            for r in self.pending_harvests[:over]:
                self.harvesting.discard((r.pid, r.start_time))
            del self.pending_harvests[:over]
            self.unsaid_drops["post-mortem records"] += over

    def _scanned(self, r: ScanDone) -> None:
        """Stores a scan's row, logs it, and keeps its lost bytes for the metrics."""
        from pmm.unreachable import short_duration

        row = r.row
        try:
            self.store.add_scan(row)
        except StoreError as e:
            log.error("%s (the scan of pid %d not stored)", e, row.pid)
        if row.error is not None:
            self.scan_failures += 1
            if "ptrace" in row.error and "refused" in row.error:
                if self.ptrace_said:
                    log.debug("pid %d: not scanned: %s", row.pid, row.error)
                    return
                self.ptrace_said = True
                row_error = (f"{row.error}; pmd.service allows neither ptrace (its system "
                             "call filter) nor other users' processes (no CAP_SYS_PTRACE): "
                             "a drop-in with SystemCallFilter=@debug and the capability in "
                             "AmbientCapabilities= and CapabilityBoundingSet= lets it scan "
                             "(this is said once)")
            else:
                row_error = row.error
            log.error("pid %d (%s): the scan after LEAK failed: %s", row.pid, r.comm or "?",
                      row_error)
            return
        self.scans += 1
        st = self.procs.get(r.key)
        if st is not None:
            st.lost_bytes, st.indirect_bytes = row.definite_bytes, row.indirect_bytes
        worst = f"; most at {row.sites[0].where or f'site {row.sites[0].site}'}" \
            if row.sites else ""
        log.warning("pid %d (%s): %d blocks (%s) definitely lost, %d (%s) indirectly, in %d "
                    "sites%s (stopped %s, scanned in %s)", row.pid, r.comm or "?",
                    row.definite_blocks, human_bytes(row.definite_bytes), row.indirect_blocks,
                    human_bytes(row.indirect_bytes), len(row.sites), worst,
                    short_duration(row.longest_stop_us / 1e6),
                    short_duration(row.scan_us / 1e6))

    def _harvest_failed(self, pid: int, comm: str, why: str) -> None:
        """Counts a failed harvest; logs the first of each kind (the error's
        type: one cause, as the device closed to pmd, fails every exit)."""
        self.harvest_failures += 1
        kind = why.split(":", 1)[0]
        if kind in self.harvest_failure_kinds:
            log.debug("pid %d (%s): its sites could not be kept: %s", pid, comm or "?", why)
            return
        self.harvest_failure_kinds.add(kind)
        log.error("pid %d (%s): its sites could not be kept (%d so far; more of this kind are "
                  "counted, not logged): %s", pid, comm or "?", self.harvest_failures, why)

    def wait_for_worker(self, timeout: float = 30.0) -> bool:
        """Waits until the worker answered every request so far and takes
        its results (for tests, and for a clean exit); False on timeout."""
        done = self.worker.wait_idle(timeout)
        self.take_results()
        return done

    def _warm_up(self) -> None:
        t = time.monotonic()
        detect(range(30), [float(i) for i in range(30)], self.opts.params)
        self.detector_ready.set()
        log.info("detector ready (%.1fs to warm up)", time.monotonic() - t)

    def handle_event(self, ev: Event | MalformedEvent) -> None:
        """Acts on one event of the module: a sample, a process started, listed,
        exited or stopped, per-site live figures, or dropped records. A malformed
        event is counted and skipped; a failure raises (see handle_event_safely)."""
        if isinstance(ev, MalformedEvent):
            self.malformed += 1
            log.warning("malformed event skipped: %s", ev)
            return
        if ev.start_time is None:
            return
        key = (ev.pid, start_key(ev.start_time))
        if ev.cmd == uapi.Cmd.SAMPLE:
            assert ev.time is not None and ev.vm is not None and ev.rss is not None
            heap_free, trimmable, allocator = ev.heap_figures()
            self.add_sample(SampleRow(ev.pid, key[1], ev.time, ev.vm, ev.rss, ev.rss_anon,
                                      ev.rss_file, ev.rss_shmem, ev.live_bytes, ev.live_blocks,
                                      "kmod", heap_free, trimmable, allocator, ev.cgroup_usage))
        elif ev.cmd == uapi.Cmd.GET_PIDS and ev.state == uapi.STATE_EXITED:
            # exited while pmd was down: the harvest stores its exit time
            st = self._proc(key, "kmod", ev.comm)
            self.procs.pop(key, None)
            self.request_harvest(key, st.comm)
        elif ev.cmd in (uapi.Cmd.STARTED, uapi.Cmd.GET_PIDS):
            self._proc(key, "kmod", ev.comm)
        elif ev.cmd == uapi.Cmd.EXITED:
            st = self._proc(key, "kmod", ev.comm)
            self.pending_exits.append((key[0], key[1], ev.time or procsampler.boottime_ns()))
            log.info("pid %d (%s) exited", ev.pid, ev.comm or "?")
            self.procs.pop(key, None)
            # the module keeps the entry for exited_ttl_s: read it now
            self.request_harvest(key, st.comm)
        elif ev.cmd == uapi.Cmd.STOPPED:
            self.procs.pop(key, None)
        elif ev.cmd == uapi.Cmd.SITES:
            st = self._proc(key, "kmod")
            t = ev.time or 0
            for s in ev.sites:
                self.pending_snaps.append((key[0], key[1], t, s.site, s.live_bytes,
                                           s.live_blocks))
                st.snaps.append((s.site, t / 1e9, s.live_bytes, s.live_blocks))
            new = sorted({s.site for s in ev.sites} - st.described)
            if new:
                st.described.update(new)
                self.worker.describe(key, new)
        elif ev.cmd == uapi.Cmd.DROPPED:
            log.info("pid %d: the module dropped %d records so far", ev.pid, ev.dropped or 0)

    def handle_event_safely(self, ev: Event | MalformedEvent) -> None:
        """handle_event, except that a failure is logged and the event skipped:
        one event pmd cannot handle must not stop the loop."""
        self.events += 1
        try:
            self.handle_event(ev)
        except Exception as e:  # noqa: BLE001 - whatever arrives, pmd keeps running
            self.failed_events += 1
            log.error("event skipped (%d so far): %s: %s: %r", self.failed_events,
                      type(e).__name__, e, ev)

    def prune_gone(self) -> int:
        """Marks exited the module's processes that are gone from /proc (or are
        another process under the same pid now) and forgets them: their exit
        event was lost. The number forgotten."""
        now_ns = procsampler.boottime_ns()
        gone = []
        for key, st in self.procs.items():
            if st.source != "kmod":
                continue  # --pid targets: sample_targets notices their exit
            try:
                ps = procsampler.read_stat(key[0])
                alive = ps.start_time == key[1] and ps.state not in ("Z", "X")
            except procsampler.ProcessGone:
                alive = False
            except OSError:
                alive = True  # cannot tell: keep it
            if not alive:
                gone.append(key)
        for key in gone:
            st = self.procs.pop(key)
            self.pending_exits.append((key[0], key[1], now_ns))
            log.info("pid %d (%s) is gone; its exit event was lost: marked exited", key[0],
                     st.comm or "?")
        return len(gone)

    def maybe_prune(self, now: float) -> None:
        """prune_gone every opts.prune_interval, and at once when the listener
        lost events (overrun) or connected again (the module was reloaded)."""
        lost = self.listener.lost if self.listener is not None else 0
        connects = self.listener.connects if self.listener is not None else 0
        if now < self.next_prune and lost == self.seen_lost and \
                connects == self.seen_connects:
            return
        self.seen_lost, self.seen_connects = lost, connects
        self.next_prune = now + self.opts.prune_interval
        self.prune_gone()

    def sample_targets(self) -> None:
        """Samples from /proc each process of `opts.pids` that the module does not
        sample (none from it for 2.5 intervals). One that exits is marked exited;
        one that does not exist or may not be read is no longer sampled."""
        now_ns = procsampler.boottime_ns()
        stale_ns = int(2.5 * self.opts.interval * 1e9)
        for pid, start in list(self.targets.items()):
            if start is not None:
                st = self.procs.get((pid, start))
                if st is not None and st.last_kmod_ns and now_ns - st.last_kmod_ns < stale_ns:
                    continue  # the module samples it
            try:
                s = procsampler.sample(pid, start)
            except procsampler.ProcessGone:
                if start is None:
                    log.warning("pid %d does not exist: not sampled", pid)
                else:
                    log.info("pid %d exited", pid)
                    self.pending_exits.append((pid, start, now_ns))
                    self.procs.pop((pid, start), None)
                del self.targets[pid]
                continue
            except PermissionError as e:
                log.warning("pid %d: %s: not sampled", pid, e)
                if start is not None:
                    procsampler.forget(pid, start)
                del self.targets[pid]
                continue
            if start is None:
                self.targets[pid] = s.start_time
            self.add_sample(s)
        if not self.targets and self.opts.pids and not self.finished:
            self._no_targets_left()

    def _no_targets_left(self) -> None:
        """Says that the last --pid target has gone, and what pmd does now:
        with the module's events it goes on with those; with --no-genl
        nothing is left to watch, and it writes what is pending and exits 0."""
        if self.opts.genl:
            log.warning("the last --pid target has gone: pmd goes on recording the processes "
                        "the module monitors")
            return
        log.warning("the last --pid target has gone and --no-genl leaves nothing to watch: "
                    "pmd writes what is pending and exits")
        self.finished = True

    # -- retention ------------------------------------------------------------

    def maybe_retain(self, now: float) -> None:
        """A round of retention every opts.retain_every seconds: small steps
        (Store.prune_step) 10 ms apart while there is something to delete,
        so the loop serves events between them; a line once a round deleted
        something."""
        if self.opts.retain <= 0 or now < self.next_retain:
            return
        self.next_retain = now + self.opts.retain_every
        before = procsampler.boottime_ns() - int(self.opts.retain * 1e9)
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
                     self.pruned["processes"], format_duration(self.opts.retain),
                     self.longest_prune_s * 1000)
            self.pruned.clear()

    # -- writing ------------------------------------------------------------

    def pending(self) -> int:
        """The number of rows waiting to be written."""
        return (len(self.pending_samples) + len(self.pending_procs) + len(self.pending_exits)
                + len(self.pending_snaps) + len(self.pending_sites)
                + len(self.pending_harvests))

    def flush_now(self) -> None:
        """Writes everything pending in one transaction; StoreError leaves it
        pending. Rows the database refuses (BadRowError) are logged and
        dropped, the others written."""
        if not self.pending():
            self.last_commit_unix = time.time()
            return
        samples = list(self.pending_samples)
        try:
            self.store.write(samples, self.pending_procs, self.pending_exits,
                             self.pending_snaps, self.pending_sites)
            self.written += len(samples)
        except BadRowError:
            self._write_isolating(samples)
        self.pending_samples.clear()
        self.pending_procs = []
        self.pending_exits = []
        self.pending_snaps = []
        self.pending_sites = []
        self.last_commit_unix = time.time()
        # after the process rows: a record's process is in the database
        while self.pending_harvests:
            r = self.pending_harvests[0]
            try:
                self.store.write_exit(r)
                self.harvests += 1
                log.info("pid %d (%s): kept its %d site%s and statistics for after the module "
                         "drops it", r.pid, r.comm or "?", len(r.sites),
                         "" if len(r.sites) == 1 else "s")
            except BadRowError as e:
                self._harvest_failed(r.pid, r.comm, f"{type(e).__name__}: {e}")
            self.pending_harvests.pop(0)
            self.harvesting.discard((r.pid, r.start_time))

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
        if self.pending_procs:
            split("process", self.pending_procs, lambda r: st.write(processes=r))
        if self.pending_exits:
            split("exit", self.pending_exits, lambda r: st.write(exits=r))
        if samples:
            split("sample", samples, lambda r: st.write(samples=r))
        if self.pending_snaps:
            split("site snapshot", self.pending_snaps, lambda r: st.write(snapshots=r))
        if self.pending_sites:
            split("site description", self.pending_sites, lambda r: st.write(sites=r))
        self.bad_rows += len(bad)
        self.written += len(samples) - sum(1 for kind, _, _ in bad if kind == "sample")
        for kind, row, e in bad[:5]:
            log.error("skipped a %s row: %s: %r", kind, e, row)
        if len(bad) > 5:
            log.error("skipped %d more rows the database refused", len(bad) - 5)

    def flush(self) -> None:
        """flush_now, except that a StoreError is logged and the write retried
        after a growing delay (5 s, doubling up to 60 s), with at most
        `opts.max_pending` rows of each kind kept meanwhile."""
        now = time.monotonic()
        try:
            self.flush_now()
        except StoreError as e:
            self.write_failures += 1
            delay = min(60.0, 5.0 * 2 ** (self.write_failures - 1))
            self.next_flush = now + delay
            self._bound_pending()
            log.error("%s; %d rows kept in memory, retrying in %s", e, self.pending(),
                      format_duration(delay))
            return
        if self.write_failures:
            log.info("database writable again: wrote the rows kept in memory")
            self.write_failures = 0
        self.next_flush = now + self.opts.commit_interval

    def _bound_pending(self, say: bool = True) -> None:
        """At most opts.max_pending rows of each kind wait in memory; the
        oldest go first, counted, and logged when `say` (at a failed retry,
        not at every event in between)."""
        cap = self.opts.max_pending
        over = len(self.pending_samples) - cap
        if over > 0:
            for _ in range(over):
                self.pending_samples.popleft()
            self.unsaid_drops["samples"] += over
        lists: list[tuple[str, list[Any]]] = [
            ("processes", self.pending_procs), ("exits", self.pending_exits),
            ("site snapshots", self.pending_snaps), ("site descriptions", self.pending_sites)]
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

    # -- what others read -----------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The processes and counters as the metrics show them (immutable:
        the loop's state is never shared with the readers' threads)."""
        from pmm.metrics import DaemonFigures, ProcessFigures, Snapshot

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
        listener = self.listener
        return Snapshot(tuple(procs), DaemonFigures(
            events=self.events, malformed_events=self.malformed,
            failed_events=self.failed_events,
            lost_events=listener.lost if listener is not None else 0,
            module_connected=listener is not None and listener.connected,
            samples_written=self.written, pending_rows=self.pending(),
            dropped_rows=self.dropped_rows, write_failures=self.write_failures,
            last_commit_unix=self.last_commit_unix, harvests=self.harvests,
            harvest_failures=self.harvest_failures))

    def publish(self) -> None:
        """Hands the exporter a new snapshot (when there is one)."""
        if self.exporter is not None:
            self.exporter.publish(self.snapshot())

    def status_line(self) -> str:
        """One line on how pmd is doing, for a service manager's status."""
        leaking = sum(1 for st in self.procs.values() if st.verdict == str(Verdict.LEAK))
        module = "module connected" if self.listener is not None and \
            self.listener.connected else "module not connected"
        line = (f"{len(self.procs)} process{'' if len(self.procs) == 1 else 'es'}, "
                f"{leaking} leaking; {module}; {self.written} samples written")
        if self.write_failures:
            line += f"; database not writable ({self.pending()} rows waiting)"
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
        threading.Thread(target=self._warm_up, name="pmd-warm-up", daemon=True).start()
        listener = None
        registered: set[int] = set()
        if self.opts.genl:
            listener = Listener()
            self.listener = listener
            if listener.connect():
                for pev in listener.dump_pids():
                    self.handle_event_safely(pev)
            else:
                log.info("the pmm module is not loaded: waiting for it%s",
                         "; sampling /proc meanwhile" if self.targets else "")
        log.info("pmd running: db %s, %d pid(s) from /proc every %s", self.store.path,
                 len(self.targets), format_duration(self.opts.interval))
        self.publish()
        if self.exporter is not None:
            self.exporter.start()
        # ready: the one place a service manager is told so
        if self.notify_ready is not None:
            self.notify_ready()
        try:
            while not self.stop_signal and not self.finished:
                if listener is not None:
                    fds = set(listener.fds())
                    for fd in registered - fds:
                        sel.unregister(fd)
                    for fd in fds - registered:
                        sel.register(fd, selectors.EVENT_READ, "genl")
                    registered = fds
                now = time.monotonic()
                deadlines = [self.next_flush]
                if self.opts.retain > 0:
                    deadlines.append(self.next_retain)
                if self.targets:
                    deadlines.append(self.next_sample)
                if listener is not None:
                    t = listener.timeout()
                    if t is not None:
                        deadlines.append(now + t)
                timeout = max(0.0, min(deadlines) - now)
                ready = sel.select(timeout)
                for sk, _ in ready:
                    if sk.data == "signal":
                        try:
                            rsock.recv(512)
                        except BlockingIOError:
                            pass
                if listener is not None:
                    for ev in listener.poll():
                        self.handle_event_safely(ev)
                self.take_results()
                now = time.monotonic()
                self.maybe_prune(now)
                self.maybe_retain(now)
                if self.targets and now >= self.next_sample:
                    try:
                        self.sample_targets()
                    except Exception as e:  # noqa: BLE001 - pmd keeps running
                        log.error("sampling /proc failed: %s: %s", type(e).__name__, e)
                    self.next_sample += self.opts.interval
                    if self.next_sample < now:  # we were late: do not catch up in a burst
                        self.next_sample = now + self.opts.interval
                if now >= self.next_flush or len(self.pending_samples) >= 10_000 and \
                        not self.write_failures:
                    self.flush()
                elif self.write_failures:
                    self._bound_pending(say=False)  # between retries too
                self._periodic(now)
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            signal.set_wakeup_fd(old_fd)
            sel.close()
            rsock.close()
            wsock.close()
            if listener is not None:
                listener.close()
        name = signal.Signals(self.stop_signal).name if self.stop_signal else \
            "no --pid target left"
        if self.notify_stopping is not None:
            self.notify_stopping()
        # what the worker has in hand, briefly; the rest stays in the module
        # for the next pmd to harvest
        self.worker.stop()
        self.wait_for_worker(timeout=5.0)
        try:
            self.flush_now()
        except StoreError as e:
            log.error("%s: %d rows could not be written", e, self.pending())
            return 1
        finally:
            if self.exporter is not None:
                self.publish()
                self.exporter.close()
        if self.harvest_failures:
            log.info("the sites of %d exited processes could not be kept",
                     self.harvest_failures)
        log.info("%s: wrote %d samples in all, exiting", name, self.written)
        return 0


def _split_figures(st: ProcState) -> dict[str, Any]:
    """The metrics' split of the process's latest sample and its kind of growth."""
    last = st.kinds.split.last
    if last is None:
        return {"kind": str(st.kind.kind) if st.kind is not None else ""}
    return {"rss_anon": last.rss_anon, "rss_file": last.rss_file,
            "rss_shmem": last.rss_shmem, "heap_free": last.heap_free,
            "kind": str(st.kind.kind) if st.kind is not None else ""}


CAP_SYS_PTRACE = 19


def ptrace_refusal(pid: int) -> str:
    """Why pmd may not ptrace pid ('' when it may, as far as it can tell):
    another user's process needs CAP_SYS_PTRACE, which pmd's unit does not
    grant."""
    def field_of(path: str, key: str) -> str:
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith(key + ":"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return ""

    cap = field_of("/proc/self/status", "CapEff")
    if cap and int(cap, 16) >> CAP_SYS_PTRACE & 1:
        return ""
    uid = field_of(f"/proc/{pid}/status", "Uid").split()
    if uid and all(int(u) == os.geteuid() for u in uid[:3]):
        return ""
    return (f"pmd (uid {os.geteuid()}) has no CAP_SYS_PTRACE, and pid {pid} is another "
            "user's: a drop-in for pmd.service with AmbientCapabilities= and "
            "CapabilityBoundingSet=CAP_NET_ADMIN CAP_SYS_PTRACE and SystemCallFilter=@debug "
            "lets it scan")


def missing_pids(pids: list[int]) -> list[int]:
    """Those of pids that name no process now (no /proc/PID)."""
    missing = []
    for pid in pids:
        try:
            procsampler.read_stat(pid)
        except procsampler.ProcessGone:
            missing.append(pid)
        except OSError:
            pass  # there, but not readable: sample_targets says so
    return missing


def serve(opts: Options, create_parents: bool = False) -> int:
    """Runs pmd on opts.db until SIGTERM or SIGINT. The exit status: 0 when
    everything was written, 1 when the last rows could not be. Raises
    NoSuchPid when a pid of opts.pids names no process (a mistyped pid would
    leave pmd watching nothing), before the database is touched; StoreError
    when the database cannot be opened; create_parents makes its missing
    directories first (for the default path, not for one given);
    pmm.metrics.MetricsError when the metrics endpoint cannot listen or the
    textfile's directory cannot be written."""
    missing = missing_pids(opts.pids)
    if missing:
        listed = ", ".join(map(str, missing))
        raise NoSuchPid(f"no such process: pid {listed}" if len(missing) == 1
                        else f"no such processes: pids {listed}")
    exporter = None
    if opts.metrics_address is not None or opts.metrics_textfile is not None:
        from pmm.metrics import Exporter

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
