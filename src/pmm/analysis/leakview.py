"""What `pmctl leaks` shows of a process, from the module or from pmd's database.

The module is asked first: it holds a process's live blocks while it runs and
for exited_ttl_s after it exited. After that (or after a reboot) pmd's
database holds what pmd harvested at the exit (pmm.store.postmortem); pmm.procview
makes the choice. Either way the result is one `LeakReport`: the process,
its sites largest first as `pmctl leaks --json` prints them (with all their
frames, symbolized), and where it came from. `pprof_samples` turns it into pprof's samples.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pmm.analysis import leaks as leaks_mod
from pmm.kernel.uapi import MAX_FRAMES
from pmm.output import format_table, human_age
from pmm.pprof import UNKNOWN_STACK, PprofFrame, PprofLine, PprofSample
from pmm.procview import SOURCE_DB, SOURCE_MODULE, InModule
from pmm.symbolize import Frame
from pmm.units import human_bytes

if TYPE_CHECKING:
    from pmm.kernel.device import Device
    from pmm.store import Store

__all__ = ["SOURCE_DB", "SOURCE_MODULE", "LeakReport", "frames_as_text", "from_db",
           "from_module", "gather", "pprof_frame", "pprof_samples", "render"]


@dataclass
class LeakReport:
    """A process's live blocks by site (see the module's docstring)."""

    pid: int
    comm: str
    state: str
    live_blocks: int
    live_bytes: int
    nsites: int
    sites: list[dict[str, Any]]  # largest first; "frames": all of them
    source: str = SOURCE_MODULE
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, depth: int) -> dict[str, Any]:
        """`pmctl leaks --json`: each site with its first `depth` frames."""
        d: dict[str, Any] = {
            "pid": self.pid,
            "comm": self.comm,
            "state": self.state,
            "live_blocks": self.live_blocks,
            "live_bytes": self.live_bytes,
            "age_buckets": list(leaks_mod.AGE_LABELS),
            "sites": [{**s, "frames": s["frames"][:depth]} for s in self.sites],
        }
        if self.source != SOURCE_MODULE:
            d["source"] = self.source
        return d


def from_module(dev: Device, pid: int, now_mono_ns: int, limit: int,
                disk_cache: bool = True) -> LeakReport:
    """pid's report from the module (NotMonitored/NoSuchPid when it has no
    entry): `of_module` of its entry."""
    return of_module(InModule.require(dev, pid), now_mono_ns, limit, disk_cache)


def of_module(entry: InModule, now_mono_ns: int, limit: int,
              disk_cache: bool = True) -> LeakReport:
    """The report of the module's entry of a process: its blocks grouped by
    site, the first `limit` sites (0: all) symbolized with all their frames,
    through their objects (which works after the process exited) or, for
    frames the module could not place, the process's saved map.
    disk_cache=False: the symbolizer keeps its answers in memory only (pmd:
    root's home is not its to fill)."""
    from pmm.sitestack import needs_map, site_frames
    from pmm.symbolize import Symbolizer, Target, maps_for

    info, pid = entry.info, entry.pid
    groups = entry.leak_groups(now_mono_ns)
    objects = entry.objects()
    shown = groups[:limit] if limit else groups
    described = [g.desc for g in shown if g.desc is not None]
    maps = maps_for(pid, info.start_time_ns) if needs_map(described) else None
    frames = site_frames(described, objects, depth=MAX_FRAMES, maps=maps,
                         symbolizer=Symbolizer(maps, disk_cache=disk_cache),
                         target=Target.of(pid, info.start_time_ns))
    entries = []
    for g in shown:
        fr = frames.get(g.site, [])
        e = g.to_dict(fr, len(fr))
        e["alloc_blocks"] = g.desc.alloc_calls if g.desc else 0
        e["alloc_bytes"] = g.desc.alloc_bytes if g.desc else 0
        entries.append(e)
    return LeakReport(
        pid=pid, comm=info.comm, state=info.state_name,
        live_blocks=sum(g.blocks for g in groups), live_bytes=leaks_mod.total_bytes(groups),
        nsites=len(groups), sites=entries,
    )


def from_db(store: Store, pid: int, limit: int) -> LeakReport | None:
    """pid's report from what pmd harvested when it exited (its latest run of
    that number), or None when the database has nothing of it."""
    from pmm.store import postmortem

    found = postmortem.leaks_from_db(store, pid)
    if found is None:
        return None
    info, entries = found
    return LeakReport(
        pid=pid, comm=info.get("comm") or "", state=info.get("state") or "exited",
        live_blocks=sum(e["blocks"] for e in entries),
        live_bytes=sum(e["bytes"] for e in entries),
        nsites=len(entries), sites=entries[:limit] if limit else entries,
        source=SOURCE_DB, extra=info,
    )


def gather(dev_open: Callable[[], Device], store_open: Callable[[], Store], pid: int,
           now_mono_ns: int, limit: int, db_named: bool = False) -> LeakReport:
    """The module's report of pid if it has one, else pmd's database's
    (pmm.procview.read: the one choice, and which error tells of neither)."""
    from pmm import procview

    return procview.read(pid, dev_open, store_open,
                         lambda entry: of_module(entry, now_mono_ns, limit),
                         lambda store: from_db(store, pid, limit), db_named)


# -- pprof ---------------------------------------------------------------------


def pprof_frame(d: Mapping[str, Any]) -> PprofFrame:
    """A frame's dict (Frame.to_dict) as pprof's location."""
    f = Frame.from_dict(d)
    lines = tuple(PprofLine(loc.func, loc.file, loc.line) for loc in f.lines)
    if not lines and (f.func or f.file):
        lines = (PprofLine(f.func, f.file, f.line),)
    where = f.where()
    return PprofFrame(object=f.object, build_id=f.build_id, offset=f.offset, lines=lines,
                      label=f.symbol or (where if where != "?" else UNKNOWN_STACK))


def site_pprof_frames(site: Mapping[str, Any]) -> tuple[PprofFrame, ...]:
    """A site's dict (`pmctl leaks --json`'s, `pmctl unreachable`'s) as pprof's
    frames, leaf first: a site the program described itself has its
    function, file and line as its leaf."""
    frames = [pprof_frame(f) for f in site.get("frames") or ()]
    if site.get("source") == "shim":
        shim = PprofFrame(None, None, None,
                          (PprofLine(site.get("func"), site.get("file"), site.get("line")),),
                          site.get("where") or "?")
        frames = [shim, *frames[1:]] if frames else [shim]
    return tuple(frames)


def pprof_samples(report: LeakReport) -> list[PprofSample]:
    """One pprof sample per site: its frames (leaf first; a site the program
    described itself, without frames, gets its function, file and line),
    live blocks and bytes as inuse_*, and the site's allocations so far as
    alloc_* (never less than what is live)."""
    out = []
    for e in report.sites:
        out.append(PprofSample(
            frames=site_pprof_frames(e),
            alloc_objects=max(int(e.get("alloc_blocks") or 0), e["blocks"]),
            alloc_space=max(int(e.get("alloc_bytes") or 0), e["bytes"]),
            inuse_objects=e["blocks"],
            inuse_space=e["bytes"],
        ))
    return out


def frames_as_text(frames: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each frame on one line, the calls inlined into it first ('#0 leak()
    leak.c:30'): for `pmctl leaks --depth N`."""
    out = []
    for i, d in enumerate(frames):
        f = Frame.from_dict(d)
        out += [f"#{i} {Frame(0, func=loc.func, file=loc.file, line=loc.line).describe()} "
                "(inlined)" for loc in f.lines[:-1]]
        out.append(f"#{i} {f.describe()}")
    return out


def render(report: LeakReport, depth: int) -> str:
    """`pmctl leaks`'s table (the report's sites, each with depth frames);
    the empty string when it has none."""
    if not report.sites:
        return ""
    headers = ["BYTES", "BLOCKS", "OLDEST", *leaks_mod.AGE_LABELS, "SITE"]
    rows: list[list[str]] = []
    for e in report.sites:
        rows.append(
            [
                human_bytes(e["bytes"]),
                str(e["blocks"]),
                human_age(e["oldest_age_s"]),
                *(str(v) for v in e["histogram"].values()),
                e["where"],
            ]
        )
        if depth > 1:
            for line in frames_as_text(e["frames"][:depth]):
                rows.append([""] * 8 + [f"  {line}"])
    return format_table(headers, rows, right=set(range(8)))
