"""A site's call chain, symbolized in terms that outlive the process.

The module gives each frame of a site as (object, file offset) with the
object's path and GNU build-id (`Site.locs`, `Device.objects`): enough to
name function, file and line after the process exited, and after the object
file itself was replaced, through its build-id. A frame the module could not
place (no file mapping, or a module older than ABI 3) is resolved through
the process's saved memory map when the caller has one, else left as its
address, or unnamed when `addresses` is False: a description bound for
readers who were not checked for access to the process (pmd's database and
log) never carries an absolute address.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from pmm.kernel.model import ObjectFile, Site
from pmm.kernel.uapi import MAX_FRAMES
from pmm.symbolize import Frame, ObjectRef, Symbolizer, Target, site_frame
from pmm.symbolize import Mapping as MapLine

if TYPE_CHECKING:
    from pmm.kernel.device import Device

def object_ref(o: ObjectFile) -> ObjectRef:
    """The symbolizer's key for a module object: its path, build-id, and the
    inode and size the process had (a file swapped in at the path since is
    not taken for it)."""
    return ObjectRef(path=o.path or None, build_id=o.build_id, ino=o.ino or None,
                     size=o.size if o.ino else None)


def needs_map(sites: Iterable[Site]) -> bool:
    """Whether a frame of these sites was not placed in a file by the module
    (or the module is older than ABI 3): only then is the process's saved
    map worth reading."""
    return any(s.frames and (not s.locs or None in s.locs) for s in sites)


def site_frames(
    sites: Iterable[Site],
    objects: Sequence[ObjectFile] | Mapping[int, ObjectFile],
    depth: int,
    maps: Sequence[MapLine] | None = None,
    addresses: bool = True,
    symbolizer: Symbolizer | None = None,
    target: Target | None = None,
) -> dict[int, list[Frame]]:
    """Per site id, its first `depth` frames symbolized (see the module's
    docstring for which way each frame goes); target: the process, while it
    is known (its files are opened inside its root)."""
    objs = objects if isinstance(objects, Mapping) else {o.obj: o for o in objects}
    sym = symbolizer or Symbolizer(maps)
    # per site, each frame as (object, offset) when the module placed it, else its address
    keyed: dict[int, list[tuple[ObjectRef, int] | int]] = {}
    for s in sites:
        keyed[s.site] = [
            (object_ref(objs[loc[0]]), loc[1]) if loc is not None and loc[0] in objs else addr
            for addr, loc in zip(s.frames[:depth], _padded(s.locs, depth), strict=False)
        ]
    by_object = [k for ks in keyed.values() for k in ks if isinstance(k, tuple)]
    by_address = [k for ks in keyed.values() for k in ks if isinstance(k, int) and k and maps]
    try:
        resolved = sym.symbolize_objects(by_object, target=target) if by_object else {}
        mapped = sym.symbolize(by_address, target=target) if by_address else {}
    except (OSError, ValueError, subprocess.SubprocessError):
        resolved, mapped = {}, {}
    out: dict[int, list[Frame]] = {}
    for site, ks in keyed.items():
        frames: list[Frame] = []
        for k in ks:
            if isinstance(k, tuple):
                ref, off = k
                frames.append(resolved.get(k) or Frame(0, ref.path, off, build_id=ref.build_id))
            elif k in mapped:
                f = mapped[k]
                frames.append(f if addresses or f.object else Frame(0))
            else:
                frames.append(Frame(k if addresses else 0))
        out[site] = frames
    return out


def _padded(locs: Sequence[tuple[int, int] | None], n: int) -> list[tuple[int, int] | None]:
    """locs to n entries (a module older than ABI 3 gives none)."""
    return [*locs[:n], *([None] * (n - len(locs)))]


def describe_site(site: Site, frames: Sequence[Frame]) -> str:
    """One line for a site: its `site_frame` (where the program said it is,
    else its first frame outside the allocator) as text, else '' (nothing
    known that may be shown)."""
    f = site_frame(site.func, site.file, site.line, frames)
    return f.describe() if f is not None else ""


def describe_module_sites(dev: Device, pid: int, wanted: Iterable[int] | None = None,
                          addresses: bool = True) -> dict[int, str]:
    """One line per site of pid the module holds (only the `wanted` ids when
    given), from the sites' objects, else the process's saved map (only with
    `addresses`: a map is a layout); sites with nothing to show are left out.
    Raises what the device raises."""
    from pmm.symbolize import maps_for

    want = set(wanted) if wanted is not None else None
    info = dev.require_monitored(pid)
    sites = [s for s in dev.sites(pid) if want is None or s.site in want]
    objects = dev.objects(pid)
    maps = maps_for(pid, info.start_time_ns) if addresses and needs_map(sites) else None
    frames = site_frames(sites, objects, depth=MAX_FRAMES, maps=maps, addresses=addresses,
                         target=Target.of(pid, info.start_time_ns))
    out = {}
    for s in sites:
        where = describe_site(s, frames.get(s.site, []))
        if where:
            out[s.site] = where
    return out
