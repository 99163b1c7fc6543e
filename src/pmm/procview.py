"""One reader of a process: what the module holds of it while it does, else
what pmd's database kept.

The module holds a monitored process's entry (its state, live blocks,
sites, the objects their frames are in, statistics by size and a ring of
samples) while it runs and for exited_ttl_s after its exit, and nothing
after a reboot. pmd's database holds the process's whole sample history,
its site snapshots and descriptions, and what pmd harvested at its exit
(pmm.store.postmortem). Every command, and pmd's endpoints, read a process here:

- `ModuleReader`: what is read of the module (pmm.kernel.device.Device has it,
  and so do pmm.store.postmortem.ModuleSnapshot and the tests' fakes);
- `InModule`: the module's entry of one process (`find`, `require`), with
  its live blocks by site, sites, objects, statistics and samples;
- `InDatabase`: pmd's record of one process (`find`: which of the
  processes that had the pid), with its samples, snapshots and sites;
- `ProcessView` (`view`): both, as far as each holds the process, and why
  one does not (the error when neither does);
- `read` (over `module_else_database`): one read from the module's entry,
  else from the database, and which error tells of neither (`pmctl leaks`,
  `pmctl stats`).

Samples come out as `Samples` columns (plain ints, times CLOCK_BOOTTIME ns)
whichever source gave them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, SupportsInt, TypeVar

from pmm.errors import NoSuchPid, NotMonitored, PmmError
from pmm.kernel.model import STATE_EXITED, Block, ObjectFile, PidInfo, Sample, Site, StatsInfo
from pmm.kernel.sampler import ProcessGone, read_stat
from pmm.store.rows import ProcessRow, SampleRow, start_key

if TYPE_CHECKING:
    from pmm.analysis.leaks import LeakGroup
    from pmm.kernel.device import Device
    from pmm.store import Store

T = TypeVar("T")

SOURCE_MODULE = "module"  # what `pmctl leaks --json` says it read from
SOURCE_DB = "pmd database"


class ModuleReader(Protocol):
    """What is read of the module (pmm.kernel.device.Device has it). A reader may
    also have `samples(pid)` (the ring) and `block_pages(pid)` (the blocks
    page by page): `ring` and pmm.kernel.blockstream.read_pages use them when it
    does."""

    def pid_info(self, pid: int) -> PidInfo | None:
        """The pid's entry, or None."""

    def sites(self, pid: int) -> list[Site]:
        """The pid's sites."""

    def objects(self, pid: int) -> list[ObjectFile]:
        """The files the pid's sites' frames are in."""

    def blocks(self, pid: int) -> list[Block]:
        """The pid's live blocks."""

    def stats(self, pid: int) -> StatsInfo:
        """The pid's allocations by size."""


def ring(reader: ModuleReader, pid: int) -> list[Sample]:
    """The pid's samples in the module's ring, oldest first; none when the
    reader keeps no ring (a harvest's snapshot)."""
    samples: Callable[[int], list[Sample]] | None = getattr(reader, "samples", None)
    return samples(pid) if samples is not None else []


def live_start(pid: int) -> tuple[int, str] | None:
    """(start time key, comm) of the live process pid, or None if there is none."""
    try:
        st = read_stat(pid)
    except (ProcessGone, OSError):
        return None
    return st.start_time, st.comm


# -- samples, from either source --------------------------------------------------


@dataclass
class Samples:
    """A process's memory samples, oldest first, one list per figure (times
    CLOCK_BOOTTIME ns, sizes bytes; None where a sample lacks the figure);
    source: "db" (pmd's history) or "kmod" (the module's ring); a watch of
    /proc (pmm.analysis.samplesource.Data) says "proc"."""

    source: str
    time_ns: list[int] = field(default_factory=list)
    vm: list[int] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)
    anon: list[int | None] = field(default_factory=list)
    file: list[int | None] = field(default_factory=list)
    shmem: list[int | None] = field(default_factory=list)
    live: list[int | None] = field(default_factory=list)
    heap_free: list[int | None] = field(default_factory=list)
    heap_trimmable: int | None = None  # the latest figures
    allocator: str | None = None
    live_now: int | None = None  # the module's live heap now, when `live` lacks it

    def __len__(self) -> int:
        return len(self.time_ns)

    def figures(self) -> dict[str, Any]:
        """The fields, by name (shared, not copied): to build a subclass's
        instance from these samples."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(Samples)}

    def split(self, rows: Sequence[SampleRow]) -> None:
        """The split of each sample from the stored rows of the same samples
        (Store.sample_rows); left empty when they do not match."""
        if len(rows) != len(self):
            return
        self.anon = [r.rss_anon for r in rows]
        self.file = [r.rss_file for r in rows]
        self.shmem = [r.rss_shmem for r in rows]
        self.live = [r.live_bytes for r in rows]
        self.heap_free = [r.heap_free for r in rows]
        trim = [r.heap_trimmable for r in rows if r.heap_trimmable is not None]
        self.heap_trimmable = trim[-1] if trim else None
        alloc = [r.allocator for r in rows if r.allocator]
        self.allocator = alloc[-1] if alloc else None


def _ints(values: Iterable[SupportsInt]) -> list[int]:
    """Plain ints from whatever sequence the store hands out (array or list)."""
    tolist = getattr(values, "tolist", None)  # an array's, far faster than int() each
    if tolist is not None:
        return list(tolist())
    return [int(v) for v in values]


# -- the module -------------------------------------------------------------------


@dataclass
class InModule:
    """The module's entry of one process, read through `reader` (open)."""

    reader: ModuleReader
    info: PidInfo

    @property
    def pid(self) -> int:
        """The process's pid."""
        return self.info.pid

    @property
    def start_time(self) -> int:
        """The process's start time as pmd stores it (pmm.store.start_key)."""
        return start_key(self.info.start_time_ns)

    @property
    def exited(self) -> bool:
        """The module saw it exit (it keeps the entry for exited_ttl_s)."""
        return self.info.state == STATE_EXITED

    @classmethod
    def find(cls, reader: ModuleReader, pid: int,
             start_time: int | None = None) -> InModule | None:
        """The module's entry of pid (the process that started at start_time,
        ns, when given), or None when it holds none."""
        info = reader.pid_info(pid)
        if info is None:
            return None
        if start_time is not None and start_key(info.start_time_ns) != start_key(start_time):
            return None
        return cls(reader, info)

    @classmethod
    def require(cls, dev: Device, pid: int) -> InModule:
        """The module's entry of pid, or NoSuchPid/NotMonitored saying so
        (pmm.kernel.device.Device.require_monitored's errors)."""
        return cls(dev, dev.require_monitored(pid))

    def sites(self) -> list[Site]:
        """Its sites, with their counters."""
        return self.reader.sites(self.pid)

    def objects(self) -> list[ObjectFile]:
        """The files its sites' frames are in."""
        return self.reader.objects(self.pid)

    def stats(self) -> StatsInfo:
        """Its allocations by size."""
        return self.reader.stats(self.pid)

    def leak_groups(self, now_mono_ns: int) -> list[LeakGroup]:
        """The live blocks by site, largest first, with their ages as of
        now_mono_ns (CLOCK_MONOTONIC) and each site's description: read page
        by page, folded per site, never a list of every block."""
        return self.grouped(now_mono_ns)[0]

    def grouped(self, now_mono_ns: int) -> tuple[list[LeakGroup], list[Site]]:
        """`leak_groups`, and all the sites. The blocks are read first: a
        site a block names is then among the sites read."""
        from pmm.analysis import leaks
        from pmm.kernel.blockstream import read_pages

        groups = leaks.group_pages(read_pages(self.reader, self.pid), {}, now_mono_ns)
        sites = self.sites()
        by_id = {s.site: s for s in sites}
        return [dataclasses.replace(g, desc=by_id.get(g.site)) for g in groups], sites

    def samples(self, since_ns: int | None = None) -> Samples:
        """The samples in the module's ring (from since_ns, CLOCK_BOOTTIME, on
        when given). A ring without the live heap leaves `live` unknown and
        gives the module's current figure as live_now: it shows the figure
        is known, not how it moved."""
        ring_ = ring(self.reader, self.pid)
        if since_ns is not None:
            ring_ = [s for s in ring_ if s.time_ns >= since_ns]
        out = Samples("kmod", [s.time_ns for s in ring_], [s.vm for s in ring_],
                      [s.rss for s in ring_], [s.rss_anon for s in ring_],
                      [s.rss_file for s in ring_], [s.rss_shmem for s in ring_],
                      [s.live_bytes for s in ring_], [s.heap_free for s in ring_])
        if ring_:
            out.heap_trimmable = ring_[-1].heap_trimmable
            out.allocator = ring_[-1].allocator
        if any(v is None for v in out.live):
            out.live = [None] * len(ring_)
            out.live_now = self.info.live_bytes if self.info.records else None
        return out


# -- pmd's database ---------------------------------------------------------------


@dataclass
class InDatabase:
    """pmd's record of one process in `store` (open)."""

    store: Store
    proc: ProcessRow

    @property
    def pid(self) -> int:
        """The process's pid."""
        return self.proc.pid

    @property
    def start_time(self) -> int:
        """Its start time as stored (pmm.store.start_key)."""
        return self.proc.start_time

    @property
    def exited(self) -> bool:
        """pmd saw it exit, or the pid is no longer this process."""
        live = live_start(self.pid)
        return self.proc.exited is not None or live is None or live[0] != self.start_time

    @classmethod
    def find(cls, store: Store, pid: int, start_time: int | None = None) -> InDatabase | None:
        """pmd's record of pid, or None. Of several processes that had this
        pid: the one that started at start_time (ns) if given, else the live
        one if pmd recorded it, else the latest."""
        procs = store.processes(pid)  # latest first
        if not procs:
            return None
        if start_time is not None:
            want = start_key(start_time)
        else:
            live = live_start(pid)
            want = live[0] if live is not None and any(
                p.start_time == live[0] for p in procs) else procs[0].start_time
        proc = next((p for p in procs if p.start_time == want), None)
        return cls(store, proc) if proc is not None else None

    def samples(self, since_ns: int | None = None) -> Samples:
        """pmd's samples of the process (from since_ns on when given), with
        their split when the stored rows have it."""
        series = self.store.series(self.pid, self.start_time, since_ns)
        out = Samples("db", _ints(series.time_ns), _ints(series.vm), _ints(series.rss))
        if len(out):
            out.split(self.store.sample_rows(self.pid, self.start_time, since_ns))
        return out

    def snapshots(self, since_ns: int | None = None) -> list[tuple[int, int, int, int]]:
        """pmd's per-site snapshots: (site, time ns, live bytes, live blocks)."""
        return self.store.site_snapshots(self.pid, self.start_time, since_ns)

    def described(self) -> dict[int, str]:
        """pmd's one-line descriptions of the sites, by site id."""
        return self.store.sites(self.pid, self.start_time)


# -- both -------------------------------------------------------------------------


@dataclass
class ProcessView:
    """One process as the module and pmd's database hold it (either may be
    None); `module_said` and `db_said` say why one holds nothing."""

    pid: int
    module: InModule | None
    db: InDatabase | None
    module_said: str = ""
    db_said: str = ""

    @property
    def source(self) -> str:
        """Where the process's live state comes from: the module while it
        holds the process, else pmd's database."""
        return SOURCE_MODULE if self.module is not None else SOURCE_DB

    @property
    def start_time(self) -> int:
        """The process's start time key (pmm.store.start_key)."""
        if self.module is not None:
            return self.module.start_time
        assert self.db is not None
        return self.db.start_time

    @property
    def holds(self) -> bool:
        """Either source holds the process."""
        return self.module is not None or self.db is not None

    def nothing(self) -> PmmError:
        """The error for a process neither source holds: NotMonitored when
        the pid runs (with how to monitor it), else NoSuchPid."""
        if live_start(self.pid) is not None:
            return NotMonitored(
                f"nothing to report on pid {self.pid}: {self.module_said}, and "
                f"{self.db_said} (monitor it with `pmctl start {self.pid}` or run pmd)")
        return NoSuchPid(f"no such process: pid {self.pid} does not exist, "
                         f"{self.module_said}, and {self.db_said}")


def view(pid: int, reader: ModuleReader | None, store: Store | None,
         start_time: int | None = None, device_note: str = "",
         store_note: str = "") -> ProcessView:
    """pid as the module (`reader`, open) and pmd's database (`store`,
    open) hold it, either of which may be None (device_note, store_note:
    why, 'the module is not loaded'). start_time (ns) picks one of several
    processes that had the pid; without it the module's process, else the
    live one pmd recorded, else pmd's latest. The view's notes say why a
    source holds nothing of it (`ProcessView.nothing`: neither does)."""
    module = InModule.find(reader, pid, start_time) if reader is not None else None
    db = None
    if store is not None:
        db = InDatabase.find(store, pid,
                             module.info.start_time_ns if module is not None else start_time)
    module_said = ("" if module is not None else "the module holds nothing of it"
                   if reader is not None else device_note or "the module was not asked")
    db_said = ("" if db is not None else f"pmd's database {store.path} has no record of it"
               if store is not None else store_note or "no pmd database was read")
    return ProcessView(pid, module, db, module_said, db_said)


# -- the module, else the database ------------------------------------------------


def module_else_database(read_module: Callable[[], T], read_db: Callable[[Store], T | None],
                         open_store: Callable[[], Store], db_named: bool = False,
                         pid: int | None = None) -> T:
    """What the module says of a process, else what pmd's database kept of
    it (the module drops an exited process after its TTL, and everything at
    a reboot). When neither has it: that pmd sampled `pid` without the hook
    (sampled_only) when it did, else the module's error, or the database's
    when the user named the database (`db_named`) and it cannot be read."""
    try:
        return read_module()
    except PmmError as module_error:
        try:
            store = open_store()
        except PmmError:
            if db_named:
                raise
            raise module_error from None
        try:
            found = read_db(store)
            unhooked = None if found is not None or pid is None else sampled_only(store, pid)
        finally:
            store.close()
        if unhooked is not None:
            raise unhooked from None
        if found is None:
            raise module_error from None
        return found


def read(pid: int, open_device: Callable[[], Device], open_store: Callable[[], Store],
         from_module: Callable[[InModule], T], from_db: Callable[[Store], T | None],
         db_named: bool = False) -> T:
    """`from_module` of pid's entry in the module (NotMonitored/NoSuchPid
    when it holds none, ModuleNotLoaded...), else `from_db` of pmd's
    database (`module_else_database` says which error tells of neither)."""
    def read_module() -> T:
        with open_device() as dev:
            return from_module(InModule.require(dev, pid))

    return module_else_database(read_module, from_db, open_store, db_named, pid)


def sampled_only(store: Store, pid: int) -> NotMonitored | None:
    """The error that says pmd recorded the pid's latest process from /proc
    alone (`pmd --pid`: no hook in it, so no sites and no statistics), with
    how to get them; None when pmd did not record it so."""
    procs = store.processes(pid)
    if not procs or procs[0].source != "proc":
        return None
    comm = f" ({procs[0].comm})" if procs[0].comm else ""
    return NotMonitored(
        f"pmd recorded no sites for pid {pid}{comm} in {store.path}: it sampled its memory "
        "from /proc only (the hook was not in it). To get its sites, start it with the hook "
        f"(`pmctl run -- CMD`) or run `pmctl attach {pid}` while pmd runs")


__all__ = ["SOURCE_DB", "SOURCE_MODULE", "InDatabase", "InModule", "ModuleReader",
           "ProcessView", "Samples", "live_start", "module_else_database", "read",
           "ring", "sampled_only", "view"]
