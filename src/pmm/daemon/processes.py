"""The processes pmd watches (`Processes`): their in-memory state, the
samples that feed it, the --pid targets sampled from /proc (pmm.kernel.sampler)
for the processes the module does not sample, and the exits it must find
itself: processes whose exit event was lost (receive buffer overrun, module
reloaded) are found every `Options.prune_interval` seconds, and at once
after an overrun or a reconnect, by checking /proc for the pid with the
same start time; they are marked exited."""

from __future__ import annotations

import logging
import time

from pmm.analysis.trend import Verdict
from pmm.daemon.detector import Detector
from pmm.daemon.options import Options
from pmm.daemon.procstate import Key, ProcState
from pmm.daemon.rows import Rows
from pmm.kernel import sampler
from pmm.store import ProcessRow, SampleRow, Store, StoreError

log = logging.getLogger("pmd")


class Processes:
    """The state of each process (`procs`) and of the --pid targets."""

    def __init__(self, store: Store, opts: Options, rows: Rows, detector: Detector,
                 procs: dict[Key, ProcState]) -> None:
        self.store = store
        self.opts = opts
        self.rows = rows
        self.detector = detector
        self.procs = procs
        # --pid targets: pid -> start_time once seen (None before)
        self.targets: dict[int, int | None] = dict.fromkeys(opts.pids)
        self.finished = False  # nothing left to watch (the last --pid gone, --no-genl)
        now = time.monotonic()
        self.next_sample = now
        self.next_prune = now + opts.prune_interval
        self.seen_lost = 0  # Listener.lost and .connects at the last prune
        self.seen_connects = 0

    def state(self, key: Key, source: str, comm: str | None = None) -> ProcState:
        """The process's state; a process seen for the first time is described
        from /proc and queued for writing."""
        st = self.procs.get(key)
        if st is not None:
            if comm and not st.comm:
                st.comm = comm
            return st
        pid, start = key
        row = ProcessRow(pid, start, comm or "", "", "", sampler.boottime_ns(), None, source)
        try:
            d = sampler.describe(pid, start, source=source)
            row = ProcessRow(pid, start, comm or d.comm, d.exe, d.cmdline, d.started, None,
                             source)
        except sampler.ProcessGone:
            pass
        from pmm.daemon.labels import boot_unix_time, systemd_unit

        st = ProcState(key, row.comm, source, self.opts.window, unit=systemd_unit(pid),
                       start_unix=boot_unix_time() + start / 1e9)
        self.procs[key] = st
        self.rows.procs.append(row)
        # a restarted pmd must not alert twice for the same process
        try:
            st.alerted = any(a.verdict == str(Verdict.LEAK) and a.resolved is None
                             for a in self.store.alerts(pid) if a.start_time == start)
        except StoreError as e:
            log.warning("%s (pid %d: alerts so far unknown)", e, pid)
        return st

    def add_sample(self, s: SampleRow, comm: str | None = None) -> None:
        """Queues the sample for writing, adds it to its process's window, and
        lets the detector count it. `comm` names a process seen for the
        first time."""
        st = self.state((s.pid, s.start_time), s.source, comm)
        if s.source == "kmod":
            st.last_kmod_ns = s.time
        st.rss_now, st.vm_now = s.rss, s.vm
        st.live_bytes, st.live_blocks = s.live_bytes, s.live_blocks
        self.rows.samples.append(s)
        if st.first_s is None:
            st.first_s = s.time / 1e9
        st.series.append(s.time / 1e9, float(s.rss))
        st.kinds.split.append(s)
        st.kinds.look()
        self.detector.sampled(st, s.time)

    def exited(self, key: Key, time_ns: int) -> ProcState | None:
        """Forgets the process and queues its exit time; its state, if any."""
        self.rows.exits.append((key[0], key[1], time_ns))
        return self.procs.pop(key, None)

    def prune_gone(self) -> int:
        """Marks exited the module's processes that are gone from /proc (or are
        another process under the same pid now) and forgets them: their exit
        event was lost. The number forgotten."""
        now_ns = sampler.boottime_ns()
        gone = []
        for key, st in self.procs.items():
            if st.source != "kmod":
                continue  # --pid targets: sample_targets notices their exit
            try:
                ps = sampler.read_stat(key[0])
                alive = ps.start_time == key[1] and ps.state not in ("Z", "X")
            except sampler.ProcessGone:
                alive = False
            except OSError:
                alive = True  # cannot tell: keep it
            if not alive:
                gone.append(key)
        for key in gone:
            st = self.procs.pop(key)
            self.rows.exits.append((key[0], key[1], now_ns))
            log.info("pid %d (%s) is gone; its exit event was lost: marked exited", key[0],
                     st.comm or "?")
        return len(gone)

    def maybe_prune(self, now: float, lost: int, connects: int) -> None:
        """prune_gone every opts.prune_interval, and at once when the listener
        lost events (`lost`, an overrun) or connected again (`connects`: the
        module was reloaded) since the last time."""
        if now < self.next_prune and lost == self.seen_lost and \
                connects == self.seen_connects:
            return
        self.seen_lost, self.seen_connects = lost, connects
        self.next_prune = now + self.opts.prune_interval
        self.prune_gone()

    def maybe_sample_targets(self, now: float) -> None:
        """sample_targets every opts.interval, skipping the samples it is late
        for rather than catching up in a burst; a failure is logged."""
        if not self.targets or now < self.next_sample:
            return
        try:
            self.sample_targets()
        except Exception as e:  # noqa: BLE001 - pmd keeps running
            log.error("sampling /proc failed: %s: %s", type(e).__name__, e)
        self.next_sample += self.opts.interval
        if self.next_sample < now:  # we were late: do not catch up in a burst
            self.next_sample = now + self.opts.interval

    def sample_targets(self) -> None:
        """Samples from /proc each process of `opts.pids` that the module does not
        sample (none from it for 2.5 intervals). One that exits is marked exited;
        one that does not exist or may not be read is no longer sampled."""
        now_ns = sampler.boottime_ns()
        stale_ns = int(2.5 * self.opts.interval * 1e9)
        for pid, start in list(self.targets.items()):
            if start is not None:
                st = self.procs.get((pid, start))
                if st is not None and st.last_kmod_ns and now_ns - st.last_kmod_ns < stale_ns:
                    continue  # the module samples it
            try:
                s = sampler.sample(pid, start)
            except sampler.ProcessGone:
                if start is None:
                    log.warning("pid %d does not exist: not sampled", pid)
                else:
                    log.info("pid %d exited", pid)
                    self.exited((pid, start), now_ns)
                del self.targets[pid]
                continue
            except PermissionError as e:
                log.warning("pid %d: %s: not sampled", pid, e)
                if start is not None:
                    sampler.forget(pid, start)
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


def missing_pids(pids: list[int]) -> list[int]:
    """Those of pids that name no process now (no /proc/PID)."""
    missing = []
    for pid in pids:
        try:
            sampler.read_stat(pid)
        except sampler.ProcessGone:
            missing.append(pid)
        except OSError:
            pass  # there, but not readable: sample_targets says so
    return missing
