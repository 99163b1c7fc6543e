"""What `pmctl leaks` shows of a process, from the module or from pmd's database.

The module is asked first: it holds a process's live blocks while it runs and
for exited_ttl_s after it exited. After that (or after a reboot) pmd's
database holds what pmd harvested at the exit (pmm.postmortem). Either way the
result is one `LeakReport`: the process, its sites largest first as
`pmctl leaks --json` prints them (with all their frames, symbolized), and
where it came from. `pprof_samples` turns it into pprof's samples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pmm import leaks as leaks_mod
from pmm.errors import PmmError
from pmm.model import OP_NAMES, Site
from pmm.pprof import PprofFrame, PprofLine, PprofSample

if TYPE_CHECKING:
    from pmm.device import Device
    from pmm.store import Store

SOURCE_MODULE = "module"
SOURCE_DB = "pmd database"
# ops whose count is a free, not an allocation (pmm_site_stats.alloc_count)
FREE_OPS = frozenset({"FREE", "MUNMAP"})


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


def _alloc_figures(site: Site | None) -> dict[str, int]:
    if site is None:
        return {"alloc_blocks": 0, "alloc_bytes": 0}
    n = sum(c for op, c in enumerate(site.alloc_count)
            if c and OP_NAMES.get(op, "") not in FREE_OPS)
    return {"alloc_blocks": n, "alloc_bytes": site.alloc_bytes}


def from_module(dev: Device, pid: int, now_mono_ns: int, limit: int) -> LeakReport:
    """pid's report from the module (NotMonitored/NoSuchPid when it has no
    entry): its blocks grouped by site, the first `limit` sites (0: all)
    symbolized with all their frames, through their objects (which works
    after the process exited) or, for frames the module could not place,
    the process's saved map."""
    from pmm.sitestack import site_frames
    from pmm.symbolize import maps_for

    info = dev.require_monitored(pid)
    blocks = dev.blocks(pid)
    sites = {s.site: s for s in dev.sites(pid)}
    objects = dev.objects(pid)
    groups = leaks_mod.group_blocks(blocks, sites, now_mono_ns)
    shown = groups[:limit] if limit else groups
    described = [g.desc for g in shown if g.desc is not None]
    needs_map = any(loc is None for s in described for loc in s.locs) or any(
        not s.locs and s.frames for s in described)
    maps = maps_for(pid, info.start_time_ns) if needs_map else None
    frames = site_frames(described, objects, depth=32, maps=maps)
    entries = []
    for g in shown:
        fr = frames.get(g.site, [])
        e = g.to_dict(fr, len(fr))
        e.update(_alloc_figures(g.desc))
        entries.append(e)
    return LeakReport(
        pid=pid, comm=info.comm, state=info.state_name,
        live_blocks=sum(g.blocks for g in groups), live_bytes=leaks_mod.total_bytes(groups),
        nsites=len(groups), sites=entries,
    )


def from_db(store: Store, pid: int, limit: int) -> LeakReport | None:
    """pid's report from what pmd harvested when it exited (its latest run of
    that number), or None when the database has nothing of it."""
    from pmm import postmortem

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


def gather(dev_open: Any, store_open: Any, pid: int, now_mono_ns: int,
           limit: int, db_named: bool = False) -> LeakReport:
    """The module's report of pid if it has one, else pmd's database's.
    `dev_open()` opens the device, `store_open()` the database (either may
    raise PmmError); when neither has pid, the module's error is raised, or
    the database's when the user named the database (`db_named`) and it
    cannot be read."""
    try:
        with dev_open() as dev:
            return from_module(dev, pid, now_mono_ns, limit)
    except PmmError as module_error:
        try:
            store = store_open()
        except PmmError:
            if db_named:
                raise
            raise module_error from None
        try:
            report = from_db(store, pid, limit)
        finally:
            store.close()
        if report is None:
            raise module_error from None
        return report


# -- pprof ---------------------------------------------------------------------


def _pprof_frame(f: Mapping[str, Any]) -> PprofFrame:
    lines = tuple(PprofLine(x.get("func"), x.get("file"), x.get("line"))
                  for x in (f.get("lines") or ()))
    if not lines and (f.get("func") or f.get("file")):
        lines = (PprofLine(f.get("func"), f.get("file"), f.get("line")),)
    obj = f.get("object")
    off = f.get("offset")
    if f.get("symbol") and not lines:
        label = str(f["symbol"])
    elif obj and off is not None:
        label = f"{obj.rsplit('/', 1)[-1]}+0x{off:x}"
    elif f.get("addr"):
        label = f"0x{f['addr']:x}"
    else:
        label = "[unknown]"
    return PprofFrame(object=obj, build_id=f.get("build_id"), offset=off, lines=lines,
                      label=label)


def pprof_samples(report: LeakReport) -> list[PprofSample]:
    """One pprof sample per site: its frames (leaf first; a site the program
    described itself, without frames, gets its function, file and line),
    live blocks and bytes as inuse_*, and the site's allocations so far as
    alloc_* (never less than what is live)."""
    out = []
    for e in report.sites:
        frames = [_pprof_frame(f) for f in e.get("frames") or ()]
        if e.get("source") == "shim":
            shim = PprofFrame(None, None, None,
                              (PprofLine(e.get("func"), e.get("file"), e.get("line")),),
                              e.get("where") or "?")
            frames = [shim, *frames[1:]] if frames else [shim]
        out.append(PprofSample(
            frames=tuple(frames),
            alloc_objects=max(int(e.get("alloc_blocks") or 0), e["blocks"]),
            alloc_space=max(int(e.get("alloc_bytes") or 0), e["bytes"]),
            inuse_objects=e["blocks"],
            inuse_space=e["bytes"],
        ))
    return out


def frames_as_text(frames: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each frame on one line, inlined calls first ('#0 leak() leak.c:30'):
    for `pmctl leaks --depth N`."""
    out = []
    for i, f in enumerate(frames):
        lines = f.get("lines") or []
        for inl in lines[:-1]:
            out.append(f"#{i} {_call(inl.get('func'))} "
                       f"{(inl.get('file') or '?').rsplit('/', 1)[-1]}:{inl.get('line')} (inlined)")
        out.append(f"#{i} {f.get('where') or _where(f)}")
    return out


def _where(f: Mapping[str, Any]) -> str:
    func, file, line = f.get("func"), f.get("file"), f.get("line")
    obj, off = f.get("object"), f.get("offset")
    objname = obj.rsplit("/", 1)[-1] if obj else None
    if func and file and line:
        return f"{_call(func)} {file.rsplit('/', 1)[-1]}:{line}"
    if objname and off is not None:
        sym = f" ({f['symbol']})" if f.get("symbol") else (f" ({_call(func)})" if func else "")
        return f"{objname}+0x{off:x}{sym}"
    if f.get("addr"):
        return f"0x{f['addr']:x}"
    return "?"


def _call(func: str | None) -> str:
    """'leak()' for a C function, 'level8(long)' as C++ demangles it."""
    if not func:
        return "?()"
    return func if func.endswith(")") else f"{func}()"
