"""What the HTML report shows of a process, gathered from the module and
from pmd's database.

`gather` asks the module first (while it holds the process: running, and for
a while after its exit) for the live blocks by site with their ages, the
sites' call chains, the size table and its sample ring; pmd's database for
the process's whole rss/vm history and its site snapshots (the growing
sites, and its scans for unreachable blocks at a LEAK alert). Either alone
makes a report (pmm.procview.view finds the process in each); what one
lacks is said in `ReportData.missing`. The verdict is pmm.analysis.trend's on rss,
as `pmctl trend` gives it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pmm.analysis.leaks import LeakGroup
from pmm.analysis.samplesource import Data, alert_maps, available_memory, data_of
from pmm.analysis.trend import Verdict, seconds_until_exhausted, site_growth
from pmm.analysis.trendview import Report, detect_on, kind_of
from pmm.errors import NoSuchPid, NotMonitored, PmmError
from pmm.kernel.model import STATE_RUNNING, PidInfo, Site, StatsInfo, StatsTable
from pmm.kernel.sampler import boottime_ns
from pmm.procview import InModule, ModuleReader, Samples, live_start, view
from pmm.report.stacks import StackFrame, site_stacks
from pmm.store import ProcessRow, ScanRow

if TYPE_CHECKING:
    from pmm.store import Store

# the growing sites listed (`pmctl trend` prints 5)
GROWING_SITES = 10

StackFunction = Callable[..., dict[int, list[StackFrame]]]


@dataclass
class ReportData:
    """Everything the report shows of one process. Times are CLOCK_BOOTTIME
    nanoseconds, sizes bytes; empty or None where the sources had nothing
    (`missing` says what and why)."""

    pid: int
    start_time: int  # the process's start, to the clock tick (pmm.store.start_key)
    comm: str
    state: str  # "running" or "exited"
    made_at: float  # Unix time when gathered
    now_ns: int  # CLOCK_BOOTTIME when gathered
    monitored_from_ns: int | None = None
    monitored_to_ns: int | None = None  # the exit, or the last sample; None: until now
    # Unix time (ns) = boot-time ns + wall_offset_ns; None when the process ran
    # in an earlier boot (or nothing ties its clock to the wall clock)
    wall_offset_ns: int | None = None
    cmdline: str = ""
    sources: list[str] = field(default_factory=list)  # what was read, for people
    missing: list[str] = field(default_factory=list)  # what is not in the report, and why
    trend: Report | None = None  # samples, verdict, growing sites (trend.sites)
    leaks: list[LeakGroup] = field(default_factory=list)  # live blocks by site, ages
    leaks_at_exit: bool = False  # leaks are pmd's record at the exit (ages as of then)
    stats: StatsTable | None = None  # allocations by size
    stacks: dict[int, list[StackFrame]] = field(default_factory=dict)  # allocating call first
    described: dict[int, str] = field(default_factory=dict)  # pmd's one-line descriptions
    live_by_site: list[tuple[int, int]] = field(default_factory=list)  # (site, live bytes)
    live_from: str = ""  # what live_by_site is, for people
    scan: ScanRow | None = None  # pmd's last scan for unreachable blocks (--scan-on-leak)

    @property
    def monitored_s(self) -> float | None:
        """Seconds monitored: from the first sight to the exit (or now)."""
        if self.monitored_from_ns is None:
            return None
        end = self.monitored_to_ns if self.monitored_to_ns is not None else self.now_ns
        return max(0, end - self.monitored_from_ns) / 1e9

    def wall_time(self, boottime_ns_: int) -> float | None:
        """The Unix time of a boot-time instant of this process (None: unknown)."""
        if self.wall_offset_ns is None:
            return None
        return (boottime_ns_ + self.wall_offset_ns) / 1e9

    def where(self, site: int) -> str:
        """A site's one line: its first frame, else pmd's description, else 'site N'."""
        stack = self.stacks.get(site)
        if stack:
            return stack[0].text
        return self.described.get(site) or ("unknown site" if site == 0 else f"site {site}")


@dataclass
class _Module:
    """What the module holds of the process."""

    info: PidInfo
    sites: list[Site]
    groups: list[LeakGroup]
    stats: StatsTable | None
    samples: Samples


def _read_module(entry: InModule) -> _Module:
    groups, sites = entry.grouped(time.clock_gettime_ns(time.CLOCK_MONOTONIC))
    return _Module(entry.info, sites, groups, entry.stats().table(), entry.samples())


def gather(
    pid: int,
    device: ModuleReader | None = None,
    store: Store | None = None,
    start_time: int | None = None,
    device_note: str = "",
    store_note: str = "",
    stacks: StackFunction = site_stacks,
) -> ReportData:
    """The report's data on pid from the module (`device`, open) and pmd's
    database (`store`, open), either of which may be None; device_note and
    store_note say why one is missing ('the module is not loaded'), for the
    report. start_time (ns) picks one of several processes that had the pid.
    `stacks` names the sites' frames (`site_stacks`'s signature).

    Raises NoSuchPid (the process does not exist) or NotMonitored (it runs)
    when neither source holds anything of it."""
    made_at = time.time()
    now_ns = boottime_ns()
    v = view(pid, device, store, start_time, device_note, store_note)
    if not v.holds:
        raise v.nothing()
    entry, rec = v.module, v.db
    info = entry.info if entry is not None else None
    proc = rec.proc if rec is not None else None
    key = v.start_time
    module_said = v.module_said

    d = ReportData(pid, key, "", "exited", made_at, now_ns)
    mod: _Module | None = None
    if entry is not None:
        try:
            mod = _read_module(entry)
        except (NoSuchPid, NotMonitored):
            module_said = "the module dropped its records while they were read"
        except PmmError as e:  # a refusal: the rest of the report stands
            module_said = f"the module's records could not be read ({e})"
    _header(d, mod, proc, store)

    # samples: pmd's history when it has them, else the module's ring
    stored = rec.samples() if rec is not None else None
    snaps = rec.snapshots() if rec is not None else []
    d.described = rec.described() if rec is not None else {}
    data: Data | None = None
    if rec is not None and stored is not None and len(stored):
        data = data_of(stored, pid, key, d.comm, db=str(rec.store.path), snapshots=snaps,
                       where=dict(d.described))
        data.alert_maps = alert_maps(rec.store, pid, key)
    elif mod is not None and len(mod.samples):
        data = data_of(mod.samples, pid, key, d.comm)

    if mod is not None:
        d.sources.append("the module (live blocks, sites, sizes, samples)")
        d.leaks = mod.groups
        d.stats = mod.stats
        d.live_by_site = [(g.site, g.bytes) for g in mod.groups if g.bytes > 0]
        d.live_from = "the module's live blocks"
    if store is not None and proc is not None:
        d.sources.append(f"pmd's database {store.path}")
        scans = store.scans(pid, key)
        d.scan = scans[-1] if scans else None
    if mod is None:
        kept = _exit_record(d, store, proc)
        lacking = [what for what, have in (("live blocks by site with their ages",
                                            bool(d.leaks)), ("size table", d.stats is not None))
                   if not have]
        if lacking:
            why = module_said
            if info is None and device is not None:
                why += (" (it keeps an exited process's records for a while after its exit, "
                        "not after `pmctl stop` or a restart)")
            if store is not None and proc is not None and not kept:
                why += ", and pmd's database holds no record of its exit"
            d.missing.append(f"No {' and no '.join(lacking)}: {why}.")
        if not d.live_by_site and snaps:
            last = max(t for _, t, _, _ in snaps)
            d.live_by_site = [(s, b) for s, t, b, _ in snaps if t == last and b > 0]
            d.live_from = "pmd's last site snapshot"

    if proc is None:
        d.missing.append(
            "No growing sites and only the module's recent samples: "
            + (f"pmd's database {store.path} has no record of this process."
               if store is not None else f"{store_note or 'no pmd database was read'}."))
    elif not snaps:
        d.missing.append("No growing sites: pmd kept no site snapshots of this process (sites "
                         "are tracked only in processes that run with the hook).")
    if data is None:
        d.missing.append("No memory samples: no chart and no verdict.")

    if data is not None:
        # the rate that matters as `pmctl trend` takes it: from what is left to the process
        available = available_memory(pid) if d.state == "running" else None
        r = detect_on(data, available)
        growing = site_growth(((s, t / 1e9, lb, lk) for s, t, lb, lk in data.snapshots),
                              limit=GROWING_SITES)
        exhausted = seconds_until_exhausted(r.slope, available) if (
            available is not None and r.verdict in (Verdict.LEAK, Verdict.GROWING)) else None
        d.trend = Report(data, r, available, exhausted, growing, kind_of(data))
        if d.monitored_to_ns is None and d.state != "running" and data.time_ns:
            d.monitored_to_ns = data.time_ns[-1]

    d.stacks = stacks(pid, info.start_time_ns if info is not None else key,
                      mod.sites if mod is not None else [], d.described, device=device,
                      store=store)
    return d


def _exit_record(d: ReportData, store: Store | None, proc: ProcessRow | None) -> bool:
    """What pmd kept of the process at its exit, once the module dropped it:
    its live blocks by site (ages as of the exit) and its size table. False
    when pmd kept nothing (an older pmd, or it was not running then)."""
    if store is None or proc is None:
        return False
    rows = store.exit_sites(d.pid, d.start_time)
    stats = store.exit_stats(d.pid, d.start_time)
    groups = [LeakGroup(site=r.site, blocks=r.live_blocks, bytes=r.live_bytes,
                        oldest_age_s=r.oldest_age_s or 0.0, newest_age_s=r.newest_age_s or 0.0,
                        histogram=tuple(r.histogram), desc=None)
              for r in rows if sum(r.histogram)]  # no live block at the exit: not a leak
    groups.sort(key=lambda g: (-g.bytes, -g.blocks, g.site))
    d.leaks = groups
    if groups:
        d.leaks_at_exit = True
        d.live_by_site = [(g.site, g.bytes) for g in groups if g.bytes > 0]
        d.live_from = "pmd's record of the process at its exit"
    if stats is not None:
        d.stats = StatsInfo.from_dict(stats).table()
    if groups or stats is not None:
        d.sources.append("pmd's record of its exit (live blocks by site, sizes)")
        return True
    return bool(rows)


def _header(d: ReportData, mod: _Module | None, proc: ProcessRow | None,
            store: Store | None) -> None:
    """The process's name, state and monitoring period, and how its boot-time
    clock maps to the wall clock."""
    live = live_start(d.pid)
    alive = live is not None and live[0] == d.start_time
    if mod is not None:
        info = mod.info
        d.comm = info.comm
        d.state = "running" if info.state == STATE_RUNNING else "exited"
        d.monitored_from_ns = info.monitor_start_ns
        d.monitored_to_ns = info.exit_time_ns or None
    if proc is not None:
        d.comm = d.comm or proc.comm
        d.cmdline = proc.cmdline
        if mod is None:
            d.state = "running" if alive and proc.exited is None else "exited"
            d.monitored_from_ns = proc.started or None
            d.monitored_to_ns = proc.exited
    if mod is not None or alive:  # this boot's process: the clocks are this boot's
        d.wall_offset_ns = int(d.made_at * 1e9) - d.now_ns
    elif store is not None:
        alert = next((a for a in store.alerts(d.pid) if a.start_time == d.start_time), None)
        if alert is not None:  # pmd wrote both clocks of one instant
            d.wall_offset_ns = int(alert.wall_time * 1e9) - alert.time

