"""pmd's trend detector over each process's window (pmm.analysis.trend): when it runs,
the verdict it logs, and the alert it raises. The detector runs every
`Options.detect_every` samples of a process over its last `Options.window`
samples, and no more often than every 1/DETECT_SPAN of the samples it holds
(its cost grows with them: an hour of samples is looked at every three
minutes, not every 20 s); a new LEAK verdict is written once to `alerts`
and logged as one line, naming the fastest growing site (its description
when the worker has given it by then, else its number) and the kind of
growth (pmm.analysis.growthkind)."""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
import time

from pmm.analysis.growthkind import Classification
from pmm.analysis.trend import Trend, Verdict, detect, site_growth
from pmm.daemon.options import Options
from pmm.daemon.procstate import ProcState
from pmm.daemon.rows import Rows
from pmm.daemon.scans import Scans
from pmm.daemon.worker import PostmortemWorker
from pmm.store import AlertRow, Store, StoreError
from pmm.units import format_duration, human_bytes, human_rate

log = logging.getLogger("pmd")

DETECT_SPAN = 20  # the detector runs at most every len(window) // DETECT_SPAN samples
KIND_EVERY = 10  # detector runs between two namings of a growing process's kind


def verdict_line(pid: int, comm: str, r: Trend, samples: int, named: bool = True) -> str:
    """The detector's verdict for the log: "pid 7 (x): STABLE after 40
    samples: why", with the rate only where the verdict rests on it (LEAK,
    GROWING: a STABLE shows no growth that would contradict it)."""
    head = f"pid {pid} ({comm or '?'}): " if named else ""
    rate = f" (rss {human_rate(r.slope * 60)})" if r.verdict in (
        Verdict.LEAK, Verdict.GROWING) else ""
    return f"{head}{r.verdict} after {samples} samples{rate}: {r.reason}"


class Detector:
    """Runs the detector over a process's window and acts on its verdict."""

    def __init__(self, store: Store, opts: Options, rows: Rows, worker: PostmortemWorker,
                 scans: Scans) -> None:
        self.store = store
        self.opts = opts
        self.rows = rows  # flushed before an alert; the site descriptions waiting
        self.worker = worker
        self.scans = scans
        # the detector's first run imports and warms what it needs (slow on a
        # slow file system): a thread runs it while the loop records samples
        self.ready = threading.Event()

    def warm_up(self) -> None:
        """The detector's first run, for the warm-up thread."""
        t = time.monotonic()
        detect(range(30), [float(i) for i in range(30)], self.opts.params)
        self.ready.set()
        log.info("detector ready (%.1fs to warm up)", time.monotonic() - t)

    def interval(self, held: int) -> int:
        """Samples between two runs of the detector over a window of `held`."""
        return max(self.opts.detect_every, held // DETECT_SPAN)

    def sampled(self, st: ProcState, now_ns: int) -> None:
        """Counts a sample of the process; runs the detector every `interval`
        samples once the window holds enough."""
        st.since_detect += 1
        if st.since_detect >= self.interval(len(st.series)) and \
                len(st.series) >= self.opts.params.min_samples:
            st.since_detect = 0
            self.run(st, now_ns)

    def run(self, st: ProcState, now_ns: int) -> None:
        """Runs the trend detector over the process's window. At its first LEAK
        verdict for the process, stores an alert naming the fastest growing site
        (or the largest) and logs it. Until the detector is ready, it is tried
        again at the next sample."""
        if not self.ready.is_set():
            st.since_detect = sys.maxsize  # try again at the next sample
            return
        from pmm.analysis.samplesource import available_memory

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
        self._alert(st, r, now_ns)

    def _alert(self, st: ProcState, r: Trend, now_ns: int) -> None:
        """Stores and logs the process's LEAK alert; asks for its scan."""
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
            self.rows.flush_now()
            added = self.store.add_alert(a)
        except StoreError as e:
            log.error("%s (alert not stored)", e)
            added = True
        if added:
            log.warning("%s", msg)
            if self.opts.scan_on_leak and st.source == "kmod":
                self.scans.request(st)

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
        (pmm.analysis.growthkind; None otherwise): named when growth is first seen,
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

    def _site_where(self, st: ProcState, site: int) -> str:
        """The site's description if the worker gave it already (stored or
        waiting to be), else '' (the worker, asked when the site was first
        seen, stores it in the sites table when it has it): the loop never
        symbolizes, which may take seconds an object."""
        pid, start = st.key
        for p, s_start, s, where in reversed(self.rows.sites):
            if (p, s_start, s) == (pid, start, site):
                return where.describe()
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
