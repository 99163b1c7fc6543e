"""What pmd keeps of a process once it exited, and reading it back.

The module keeps an exited process's entry (blocks, sites, objects,
statistics) for exited_ttl_s, then drops it; after a reboot it has nothing.
`harvest` reads the entry once the process exited and stores, in pmd's
database (pmm.store: exit_info, exit_sites, exit_stats, sites), what
`pmctl leaks`, `stats`, `trend` and `alerts` need to name file:line without
the module: per site its final figures, the age histogram of its live
blocks as of the exit, and its call chain symbolized from the (object, file
offset) pairs the module gives (pmm.sitestack), so that the names survive
the program's upgrade or removal. No absolute address is stored (a frame
the module could not place is kept as unknown): the database's readers are
not checked for access to the process.

Ages: blocks carry CLOCK_MONOTONIC times and the exit time is
CLOCK_BOOTTIME; the ages stored are as of the exit (monotonic now less the
boot-time since the exit), so they do not grow while the record waits.

`leaks_from_db` and `stats_from_db` give back what `pmctl leaks --json` and
`pmctl stats` show, from the database alone (pmm.procview chooses between
the module and them).

Pure library: the caller (pmd) chooses the thread and the database writer.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pmm import sitestack
from pmm.analysis import leaks
from pmm.kernel.model import (
    FREE_OP_NAMES,
    OP_NR,
    STATE_EXITED,
    Block,
    ObjectFile,
    PidInfo,
    Site,
    StatsInfo,
    op_name,
)
from pmm.kernel.sampler import boottime_ns
from pmm.kernel.uapi import MAX_FRAMES
from pmm.procview import SOURCE_DB, InModule, ModuleReader
from pmm.store import ExitRecord, ExitSiteRow, Store, start_key
from pmm.symbolize import Frame, Symbolizer, Target, site_frame

SOURCE = SOURCE_DB  # what `pmctl leaks --json` says it read from


@dataclass
class ModuleSnapshot:
    """One process's entry as read from the module at one time: a
    ModuleReader that no longer holds the device, so that symbolizing (which
    may take seconds) does not keep /dev/pmm open and the module unloadable.
    Its blocks are not kept: a harvest folds them per site as they are read
    (`groups`, pmm.kernel.blockstream), so a process with millions of live blocks
    costs pmd memory per site, not per block."""

    pid: int
    info: PidInfo | None
    site_list: list[Site] = field(default_factory=list)
    object_list: list[ObjectFile] = field(default_factory=list)
    stats_info: StatsInfo | None = None
    # the live blocks by site as of the exit (harvest only); None: not read
    groups: list[leaks.LeakGroup] | None = None

    def pid_info(self, pid: int) -> PidInfo | None:
        """The entry as read (None for another pid)."""
        return self.info if pid == self.pid else None

    def sites(self, pid: int) -> list[Site]:
        """The sites as read."""
        return self.site_list if pid == self.pid else []

    def objects(self, pid: int) -> list[ObjectFile]:
        """The objects as read."""
        return self.object_list if pid == self.pid else []

    def blocks(self, pid: int) -> list[Block]:
        """No blocks: a snapshot keeps them only folded per site (`groups`)."""
        return []

    def stats(self, pid: int) -> StatsInfo:
        """The statistics as read."""
        if self.stats_info is None or pid != self.pid:
            raise LookupError(f"no statistics of pid {pid} were read")
        return self.stats_info


def snapshot(dev: ModuleReader, pid: int, start_time_key: int,
             harvest: bool) -> ModuleSnapshot:
    """Reads what `collect` (harvest) or `describe` needs of the process from
    the module, and nothing when the pid is now another process (or, for a
    harvest, still runs)."""
    info = dev.pid_info(pid)
    snap = ModuleSnapshot(pid, info)
    if info is None or start_key(info.start_time_ns) != start_time_key:  # another process
        return snap
    if harvest and (info is None or info.state != STATE_EXITED):
        return snap
    if harvest:
        assert info is not None
        snap.groups = _exit_groups(dev, info)
    snap.site_list = dev.sites(pid)
    snap.object_list = dev.objects(pid)
    if harvest:
        snap.stats_info = dev.stats(pid)
    return snap


def _exit_groups(dev: ModuleReader, info: PidInfo) -> list[leaks.LeakGroup]:
    """The exited process's live blocks by site, with their ages as of its
    exit, read page by page (pmm.kernel.blockstream): never a list of them all."""
    from pmm.kernel.blockstream import read_pages

    now_boot = boottime_ns()
    now_mono = time.monotonic_ns()
    # the blocks' clock (monotonic) at the exit: now less the time since it
    since_exit = now_boot - info.exit_time_ns if 0 < info.exit_time_ns <= now_boot else 0
    return leaks.group_pages(read_pages(dev, info.pid), {}, now_mono - since_exit)


def _frames(sites: Iterable[Site], objects: list[ObjectFile],
            symbolizer: Symbolizer | None, info: PidInfo) -> dict[int, list[Frame]]:
    # addresses=False: a frame the module could not place becomes Frame(0);
    # the process's files inside its root while it runs
    return sitestack.site_frames(sites, objects, MAX_FRAMES, maps=None, addresses=False,
                                 symbolizer=symbolizer,
                                 target=Target.of(info.pid, info.start_time_ns))


def collect(dev: ModuleReader, pid: int, start_time_key: int,
            symbolizer: Symbolizer | None = None) -> ExitRecord | None:
    """Reads the module's entry of the exited process (pid, start_time_key:
    the stored key, pmm.store.start_key) and symbolizes its sites: the
    record `Store.write_exit` stores. None when the module holds no exited
    entry of that process (never monitored, expired, still running, or
    another process under that pid). Device errors (pmm.errors) propagate."""
    entry = InModule.find(dev, pid, start_time_key)
    if entry is None or not entry.exited:
        return None
    info = entry.info
    snapped = dev.groups if isinstance(dev, ModuleSnapshot) else None
    # the blocks first: a site a block names is then among the sites read
    grouped = snapped if snapped is not None else _exit_groups(dev, info)
    sites = dev.sites(pid)
    objects = dev.objects(pid)
    stats = dev.stats(pid)
    now_boot = boottime_ns()
    by_id = {s.site: s for s in sites}
    groups = {g.site: g for g in grouped}
    frames = _frames(sites, objects, symbolizer, info)
    rows: list[ExitSiteRow] = []
    for sid in sorted(set(by_id) | set(groups)):
        s = by_id.get(sid)
        g = groups.get(sid)
        fr = frames.get(sid, [])
        source = s is not None and s.has_source
        rows.append(ExitSiteRow(
            site=sid,
            registered=s is not None,
            flags=s.flags if s is not None else 0,
            func=s.func if s is not None and source else "",
            file=s.file if s is not None and source else "",
            line=s.line if s is not None and source else 0,
            # the blocks' figures when it has some, as `pmctl leaks` counts them
            live_bytes=g.bytes if g is not None else s.live_bytes if s is not None else 0,
            live_blocks=g.blocks if g is not None else s.live_blocks if s is not None else 0,
            alloc_bytes=s.alloc_bytes if s is not None else 0,
            free_bytes=s.free_bytes if s is not None else 0,
            alloc_count={op_name(op): n for op, n in enumerate(s.alloc_count) if n}
            if s is not None else {},
            oldest_age_s=round(g.oldest_age_s, 3) if g is not None else None,
            newest_age_s=round(g.newest_age_s, 3) if g is not None else None,
            histogram=g.histogram if g is not None else (0,) * len(leaks.AGE_LABELS),
            frames=tuple(f.as_dict() for f in fr),
            where=sitestack.describe_site(s, fr) if s is not None else "",
        ))
    return ExitRecord(
        pid=pid,
        start_time=start_time_key,
        comm=info.comm,
        exit_time=info.exit_time_ns,
        harvested=now_boot,
        info=info.to_dict(now_boot),
        objects=tuple(o.to_dict() for o in objects),
        sites=tuple(rows),
        stats=stats.to_dict(),
    )


def harvest(dev: ModuleReader, store: Store, pid: int, start_time_key: int,
            symbolizer: Symbolizer | None = None) -> bool:
    """Stores what is kept of the exited process (pid, start_time_key) in one
    transaction (`collect`, then `Store.write_exit`; harvesting again
    replaces the record with the same one). False when the module holds no
    exited entry of it. Device and store errors propagate."""
    record = collect(dev, pid, start_time_key, symbolizer)
    if record is None:
        return False
    store.write_exit(record)
    return True


def describe(dev: ModuleReader, pid: int, start_time_key: int, site_ids: Iterable[int],
             symbolizer: Symbolizer | None = None) -> dict[int, Frame]:
    """The frame that describes each of these sites of the process (running
    or exited; pmm.symbolize.site_frame), from the module's objects and
    offsets: never an absolute address. Sites with nothing to show are left
    out, and all are when the pid is now another process."""
    wanted = set(site_ids)
    entry = InModule.find(dev, pid, start_time_key)
    if entry is None:
        return {}
    info = entry.info
    sites = [s for s in dev.sites(pid) if s.site in wanted]
    if not sites:
        return {}
    frames = _frames(sites, dev.objects(pid), symbolizer, info)
    out = {s.site: site_frame(s.func, s.file, s.line, frames.get(s.site, [])) for s in sites}
    return {k: v for k, v in out.items() if v is not None}


# -- reading back -------------------------------------------------------------


def _site_of(row: ExitSiteRow) -> Site | None:
    if not row.registered:
        return None
    counts = [0] * OP_NR
    for op in range(OP_NR):
        counts[op] = row.alloc_count.get(op_name(op), 0)
    return Site(site=row.site, flags=row.flags, file=row.file, func=row.func, line=row.line,
                live_bytes=row.live_bytes, live_blocks=row.live_blocks,
                alloc_bytes=row.alloc_bytes, free_bytes=row.free_bytes,
                alloc_count=tuple(counts))


def leaks_from_db(store: Store, pid: int,
                  depth: int = MAX_FRAMES) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """What `pmctl leaks --json` shows of the pid's latest exited process,
    from pmd's database: (its entry: Store.exit_info's dict with "source":
    "pmd database" and "start_time", the stored key; its sites with live
    blocks at the exit, each as pmm.analysis.leaks.LeakGroup.to_dict gives it, with
    "frames" (at most `depth`) and "where", and the site's allocations
    ("alloc_blocks": calls that allocated, "alloc_bytes"), largest live
    bytes first).
    None when the database holds no record of the pid."""
    found = store.exit_info(pid)
    if found is None:
        return None
    start, info = found
    entries = []
    groups = []
    for row in store.exit_sites(pid, start):
        if not sum(row.histogram):
            continue  # no live block at the exit: not a leak
        groups.append((leaks.LeakGroup(
            site=row.site,
            blocks=row.live_blocks,
            bytes=row.live_bytes,
            oldest_age_s=row.oldest_age_s or 0.0,
            newest_age_s=row.newest_age_s or 0.0,
            histogram=tuple(row.histogram),
            desc=_site_of(row),
        ), row))
    groups.sort(key=lambda x: (-x[0].bytes, -x[0].blocks, x[0].site))
    for g, row in groups:
        e = g.to_dict([Frame.from_dict(f) for f in row.frames[:depth]], depth)
        e["alloc_blocks"] = sum(n for op, n in row.alloc_count.items() if op not in FREE_OP_NAMES)
        e["alloc_bytes"] = row.alloc_bytes
        entries.append(e)
    return {**info, "start_time": start, "source": SOURCE}, entries


def stats_from_db(store: Store, pid: int) -> StatsInfo | None:
    """The pid's latest exited process's statistics per allocation size as
    the module gave them at its exit, from pmd's database; None when the
    database holds none."""
    found = store.exit_info(pid)
    if found is None:
        return None
    d = store.exit_stats(pid, found[0])
    if d is None:
        return None
    return StatsInfo.from_dict(d)


__all__ = ["SOURCE", "ModuleSnapshot", "collect", "describe", "harvest", "leaks_from_db",
           "snapshot", "stats_from_db"]
