"""Where `pmctl trend` gets a process's memory samples from.

- `from_db`: pmd's SQLite database (samples, per-site snapshots, site names);
- `from_kmod`: the module's sample ring of a monitored process (both read
  the process through pmm.procview, which picks it and gives its samples);
- `stored`: the first two in the order `pmctl trend --source` asks, and
  an error that says where it looked and what to do when neither has any;
- `from_watch`: /proc/PID sampled now, for a while, with a callback after
  each sample and a `stop` check, so a front end can print a running report
  and end the watch early (on Ctrl-C) with the samples so far. It needs
  neither the module nor pmd.

Each returns a `Data`: the samples oldest first, as plain integers (times are
CLOCK_BOOTTIME nanoseconds, sizes bytes).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pmm.kernel.device import Device

from pmm.errors import ModuleNotLoaded, NoSuchPid, NotMonitored, PmmError
from pmm.kernel import smaps
from pmm.kernel.sampler import ProcessGone, boottime_ns, sample
from pmm.procview import InDatabase, InModule, Samples, live_start
from pmm.store import Store


class WatchEnd(enum.StrEnum):
    """Why a watch ended."""

    TIME = "time"  # its duration passed
    EXITED = "exited"  # the process exited (or its pid names another process now)
    STOPPED = "stopped"  # the caller's `stop` said so (Ctrl-C, SIGTERM)


@dataclass
class Watch:
    """How a watch went: its settings, how long it ran and why it ended."""

    interval_s: float
    duration_s: float
    elapsed_s: float = 0.0
    ended: WatchEnd = WatchEnd.TIME


@dataclass(kw_only=True)
class Data(Samples):
    """The samples of one process (pmm.procview.Samples, whose `source` may
    also be "proc": a watch of /proc), with what the process is and what else
    was read of it."""

    pid: int
    start_time: int
    comm: str
    db: str = ""
    # pmd's per-site snapshots: (site, time ns, live bytes, live blocks)
    snapshots: list[tuple[int, int, int, int]] = field(default_factory=list)
    where: dict[int, str] = field(default_factory=dict)  # site -> description
    watch: Watch | None = None  # set by from_watch
    exited: bool = False  # the process is known to have exited
    # the process's mappings at the start and the end of a watch (None: not read)
    maps_start: list[smaps.Mapping] | None = None
    maps_end: list[smaps.Mapping] | None = None
    stacks: dict[int, str] = field(default_factory=dict)  # thread stacks at the end
    # the mappings that grew as pmd's alert kept them (from_db), when no
    # snapshots were taken
    alert_maps: list[smaps.MapGrowth] | None = None

    def grown_maps(self) -> list[smaps.MapGrowth] | None:
        """The mappings that grew over the watch, else those pmd's alert kept
        (None: neither)."""
        if self.maps_start is None or self.maps_end is None:
            return self.alert_maps
        return smaps.name_stacks(smaps.grown(self.maps_start, self.maps_end), self.stacks)

    @property
    def span_s(self) -> float:
        """Seconds from the first sample to the last."""
        return (self.time_ns[-1] - self.time_ns[0]) / 1e9 if self.time_ns else 0.0

    def seconds(self) -> list[float]:
        """Each sample's time in seconds since the first sample."""
        t0 = self.time_ns[0] if self.time_ns else 0
        return [(t - t0) / 1e9 for t in self.time_ns]


def data_of(samples: Samples, pid: int, start_time: int, comm: str, exited: bool = False,
            db: str = "", snapshots: list[tuple[int, int, int, int]] | None = None,
            where: dict[int, str] | None = None) -> Data:
    """The Data of samples read from pmd's database or the module (pmm.procview)."""
    return Data(**samples.figures(), pid=pid, start_time=start_time, comm=comm,
                exited=exited, db=db, snapshots=snapshots or [], where=where or {})


def mem_available(path: str = "/proc/meminfo") -> int | None:
    """MemAvailable in bytes (None when it cannot be read)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class NoRecentSamples(NotMonitored):
    """The database holds samples of the process, none of them recent enough."""


def available_memory(pid: int | None = None, meminfo: str = "/proc/meminfo",
                     cgroup_root: str = "/sys/fs/cgroup") -> int | None:
    """The bytes the process may still take: MemAvailable, or the room left
    under its cgroup's memory.max (v2; the tightest of its cgroup and their
    ancestors) when smaller. None when neither can be read."""
    avail = mem_available(meminfo)
    if pid is None:
        return avail
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            rel = next((line.split(":", 2)[2].strip() for line in f
                        if line.startswith("0::")), None)
    except (OSError, IndexError):
        return avail
    if not rel:
        return avail
    d = Path(cgroup_root + rel)
    root = Path(cgroup_root)
    while d != root and root in d.parents:
        try:
            limit = (d / "memory.max").read_text().strip()
            if limit != "max":
                room = max(0, int(limit) - int((d / "memory.current").read_text()))
                avail = room if avail is None else min(avail, room)
        except (OSError, ValueError):
            pass
        d = d.parent
    return avail


def from_db(path: Path, pid: int, start_time: int | None, since_s: float | None,
            missing_ok: bool = True) -> Data | None:
    """pid's samples in pmd's database at path (None: it holds none).

    Of several processes that had this pid: pmm.procview.InDatabase.find's.
    A missing database is None when missing_ok, else the store's error."""
    if missing_ok and not path.exists():
        return None
    store = Store.open(path, readonly=True)
    try:
        found = InDatabase.find(store, pid, start_time)
        if found is None:
            return None
        proc = found.proc
        since_ns = None
        now = boottime_ns()
        if since_s is not None:
            since_ns = now - int(since_s * 1e9)
        samples = found.samples(since_ns)
        if len(samples) == 0:
            latest = store.latest_sample(pid, proc.start_time) if since_ns is not None else None
            if latest is not None:
                from pmm.output import human_age
                from pmm.units import format_duration

                raise NoRecentSamples(
                    f"no samples of pid {pid} in the last {format_duration(since_s or 0)} in "
                    f"{path} (the latest is {human_age(max(0, now - latest) / 1e9)} old"
                    f"{': the process exited' if proc.exited is not None else ''})")
            return None
        d = data_of(samples, pid, proc.start_time, proc.comm, found.exited, str(path),
                    found.snapshots(since_ns), found.described())
        d.alert_maps = alert_maps(store, pid, proc.start_time)
        return d
    finally:
        store.close()


def alert_maps(store: Store, pid: int, start_time: int) -> list[smaps.MapGrowth] | None:
    """The mappings that grew, as the process's latest alert with evidence
    kept them (None: no such alert)."""
    from pmm.store import StoreError

    try:
        alerts = store.alerts(pid)
    except StoreError:  # a database without the alerts table
        return None
    for a in reversed(alerts):
        maps = (a.evidence or {}).get("mappings") if a.start_time == start_time else None
        if isinstance(maps, list):
            try:
                return [smaps.MapGrowth(str(m["mapping"]), int(m["start"]),
                                        int(m["rss_before"]), int(m["rss_after"]),
                                        bool(m["allocator"])) for m in maps]
            except (KeyError, TypeError, ValueError):
                return None
    return None


def device_sites(pid: int, start_time: int, wanted: set[int]) -> dict[int, str]:
    """Descriptions of the wanted sites from the module, when it is loaded and
    holds this process (same start time, running or exited); frames
    symbolized through their objects. Empty when the module cannot tell."""
    from pmm.kernel.device import Device
    from pmm.sitestack import describe_module_sites

    try:
        with Device.open() as dev:
            if InModule.find(dev, pid, start_time) is None:
                return {}
            return describe_module_sites(dev, pid, wanted)
    except PmmError:
        return {}


def from_kmod(pid: int, since_s: float | None, start_time: int | None = None) -> Data | None:
    """pid's samples in the module's ring (None: it does not monitor pid, or
    monitors another process of that pid than start_time's, or has no samples
    in the window). Raises ModuleNotLoaded when the module is not loaded."""
    from pmm.kernel.device import Device

    with Device.open() as dev:
        entry = InModule.find(dev, pid, start_time)
        if entry is None:
            return None
        samples = entry.samples(boottime_ns() - int(since_s * 1e9)
                                if since_s is not None else None)
    if not len(samples):
        return None
    return data_of(samples, pid, entry.start_time, entry.info.comm, entry.exited)


class ModuleView:
    """The module's view of a watched process, when it monitors that very
    process: its live heap now, its sites' live bytes, and the allocator's
    figures in its latest sample. Every read is None or empty when the
    module cannot tell (not loaded, not monitored, not permitted)."""

    def __init__(self, pid: int, start_time: int) -> None:
        self.pid = pid
        self.dev: Device | None = None
        try:
            from pmm.kernel.device import Device

            dev = Device.open()
        except PmmError:
            return
        try:
            entry = InModule.find(dev, pid, start_time)
        except PmmError:
            entry = None
        if entry is not None:
            self.dev = dev
        else:
            dev.close()

    def live(self) -> int | None:
        """Bytes in the process's live blocks now."""
        if self.dev is None:
            return None
        try:
            info = self.dev.pid_info(self.pid)
        except PmmError:
            return None
        return info.live_bytes if info is not None else None

    def sites(self, now_ns: int) -> list[tuple[int, int, int, int]]:
        """(site, time, live bytes, live blocks) of each site with live blocks."""
        if self.dev is None:
            return []
        try:
            return [(s.site, now_ns, s.live_bytes, s.live_blocks)
                    for s in self.dev.sites(self.pid) if s.live_bytes]
        except PmmError:
            return []

    def allocator(self) -> tuple[int | None, int | None, str | None]:
        """(heap_free, heap_trimmable, allocator) of the latest sample in the
        module's ring (Nones: no sample, or none with the figures)."""
        if self.dev is None:
            return None, None, None
        try:
            ring = self.dev.samples(self.pid)
        except PmmError:
            return None, None, None
        if not ring:
            return None, None, None
        last = ring[-1]
        return last.heap_free, last.heap_trimmable, last.allocator

    def close(self) -> None:
        """Closes the device, if open."""
        if self.dev is not None:
            self.dev.close()
            self.dev = None


def _maps(pid: int) -> list[smaps.Mapping] | None:
    try:
        return smaps.read(pid)
    except OSError:
        return None


def planned_samples(seconds: float, interval: float) -> int:
    """How many samples a watch of `seconds` at `interval` takes when the
    process lives to its end: one at 0, then one each interval up to and
    including `seconds` (with a tolerance, so that 0.1 x 35 counts as 3.5)."""
    limit = seconds * (1 + 1e-9)
    taken = int(limit // interval) + 1
    # the same comparisons as from_watch's loop, whatever the floor division rounded
    while taken * interval <= limit:
        taken += 1
    while taken > 1 and (taken - 1) * interval > limit:
        taken -= 1
    return taken


def from_watch(pid: int, seconds: float, interval: float,
               on_sample: Callable[[Data], None] | None = None,
               stop: Callable[[], bool] | None = None) -> Data:
    """Samples /proc/PID every `interval` seconds for `seconds`, until the
    process exits, or until `stop()` returns true (checked at least every
    50 ms while waiting). `on_sample` gets the data so far after each sample.
    Data.watch says how long it ran and why it ended.

    Raises NoSuchPid when pid names no live process at the start."""
    live = live_start(pid)
    if live is None:
        raise NoSuchPid(f"no such process: pid {pid} does not exist")
    start, comm = live
    d = Data(source="proc", pid=pid, start_time=start, comm=comm,
             watch=Watch(interval, seconds))
    assert d.watch is not None
    module = ModuleView(pid, start)
    try:
        d.maps_start = _maps(pid)
        d.snapshots = module.sites(boottime_ns())
        _watch_loop(d, pid, start, seconds, interval, module, on_sample, stop)
        if d.watch.ended != WatchEnd.EXITED:
            d.maps_end = _maps(pid)
            if d.maps_end is not None:
                d.stacks = smaps.thread_stack_names(pid, d.maps_end)
            d.snapshots += module.sites(boottime_ns())
            free, trim, alloc = module.allocator()
            d.heap_trimmable, d.allocator = trim, alloc
            if free is not None and d.heap_free and d.heap_free[-1] is None:
                d.heap_free[-1] = free
    finally:
        module.close()
    return d


def _watch_loop(d: Data, pid: int, start: int, seconds: float, interval: float,
                module: ModuleView, on_sample: Callable[[Data], None] | None,
                stop: Callable[[], bool] | None) -> None:
    """from_watch's sampling, into d (d.watch says how it ended)."""
    assert d.watch is not None
    last = planned_samples(seconds, interval)
    began = time.monotonic()
    ended = WatchEnd.TIME
    taken = 0
    while True:
        if stop is not None and stop():
            ended = WatchEnd.STOPPED
            break
        try:
            s = sample(pid, start)
        except ProcessGone:
            ended = WatchEnd.EXITED
            break
        d.time_ns.append(s.time)
        d.vm.append(s.vm)
        d.rss.append(s.rss)
        d.anon.append(s.rss_anon)
        d.file.append(s.rss_file)
        d.shmem.append(s.rss_shmem)
        d.live.append(module.live())
        d.heap_free.append(None)
        taken += 1
        if on_sample is not None:
            on_sample(d)
        # the k-th sample is due at k x interval, the last one at `seconds`
        if taken >= last:
            break
        due = began + taken * interval
        # short naps, so that a stop request ends a long interval promptly
        while (left := due - time.monotonic()) > 0:
            if stop is not None and stop():
                break
            time.sleep(min(left, 0.05))
    d.watch.elapsed_s = time.monotonic() - began
    d.watch.ended = ended
    d.exited = ended == WatchEnd.EXITED


# -- the stored samples, by source ----------------------------------------------


class Source(enum.StrEnum):
    """Where `pmctl trend` takes the samples from (auto: pmd's database, then
    the module; proc: a watch)."""

    auto = "auto"
    db = "db"
    kmod = "kmod"
    proc = "proc"


# what the no-samples hints suggest: long enough for the detector's 30 samples
SUGGESTED_WATCH = "--watch DURATION (e.g. --watch 30s)"


def stored(pid: int, path: Path, named: bool, source: Source, start_time: int | None,
           since: float | None) -> Data:
    """The samples pmd or the module kept of pid; NotMonitored/NoSuchPid when
    there are none, ModuleNotLoaded for Source.kmod without the module.

    A database that was `named` (--db, $PMM_DB) must exist: its absence is
    the store's error. The default one may be missing in auto mode (pmd has
    not run), and the module is asked then."""
    d: Data | None = None
    module_missing = False
    db_missing = source == Source.auto and not named and not path.exists()
    if source in (Source.auto, Source.db) and not db_missing:
        d = from_db(path, pid, start_time, since, missing_ok=False)
    if d is None and source in (Source.auto, Source.kmod):
        try:
            d = from_kmod(pid, since, start_time)
        except ModuleNotLoaded:
            if source == Source.kmod:
                raise
            module_missing = True
    if d is not None:
        return d
    alive = live_start(pid) is not None
    what = {Source.auto: f"no samples of pid {pid} in {path} nor in the module's ring",
            Source.db: f"no samples of pid {pid} in {path}",
            Source.kmod: f"no samples of pid {pid} in the module's ring"}[source]
    if db_missing:
        what = (f"no samples of pid {pid}: there is no pmd database at {path} (pmd writes "
                "it), and " + ("the module is not loaded" if module_missing
                               else "none in the module's ring"))
    elif module_missing:
        what = f"no samples of pid {pid} in {path}, and the module is not loaded"
    if not alive:
        hint = "the process does not exist"
    elif module_missing:  # `pmctl start` needs the module
        hint = f"use {SUGGESTED_WATCH}, or run pmd"
    else:
        hint = f"run pmd, or `pmctl start {pid}`, or use {SUGGESTED_WATCH}"
    cls = NotMonitored if alive else NoSuchPid
    raise cls(f"{what}: {hint}")
