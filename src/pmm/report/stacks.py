"""The call chains the report shows: per site, its frames.

`site_stacks` is the report's one place that symbolizes: whatever names a
frame (the process's memory map today; an object and file offset that
outlive the process later) changes here only. The rest of the report sees
`StackFrame`s: each a `pmm.symbolize.Frame` (its fields) and its text, made
once by `Frame.describe`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from pmm.kernel.model import ObjectFile, Site
from pmm.kernel.uapi import MAX_FRAMES
from pmm.store import start_key
from pmm.symbolize import Frame, Target, maps_for, user_frames

if TYPE_CHECKING:
    from pmm.store import Store


class ObjectSource(Protocol):
    """What site_stacks reads of the module (pmm.procview.ModuleReader
    is one): the files a process's frames are in."""

    def objects(self, pid: int) -> list[ObjectFile]:
        """The object files of the process's frames."""
        ...


@dataclass(frozen=True)
class StackFrame:
    """One frame as the report shows it: 'leak() leak.c:30', or without
    debug info 'libfoo.so+0x1139 (leak_in_lib+0x19)'; the object it is in
    when shown, the calls it was inlined into (innermost first), and the
    frame's fields (None: only its text is known)."""

    text: str
    object: str | None = None
    inlined: tuple[str, ...] = ()
    frame: Frame | None = field(default=None, compare=False)

    @classmethod
    def from_frame(cls, f: Frame) -> StackFrame:
        """The frame of a symbolized `pmm.symbolize.Frame`."""
        return cls(f.describe(), f.object, f.inlined_calls(), f)

    @classmethod
    def from_description(cls, where: str | Frame) -> StackFrame:
        """The one frame pmd's description of a site gives: its frame (shown
        as its text alone, the object and inlined calls left out), or text."""
        if isinstance(where, str):
            return cls(where)
        return cls(where.describe(), frame=where)

    @property
    def location(self) -> str | None:
        """'leak.c:30' when the frame names a source line, else None."""
        return self.frame.location() if self.frame is not None else None


def _shim_frame(s: Site) -> StackFrame:
    """Where the program said the site is (pmm_hooks.h's function, file, line)."""
    return StackFrame.from_frame(Frame.registered_at(s.func, s.file, s.line))


def _stack(frames: Sequence[Frame], shim: Site | None) -> list[StackFrame]:
    """A site's frames as shown: the allocator's own left out, and where the
    program said the site is (pmm_hooks.h) first."""
    stack = [StackFrame.from_frame(f) for f in user_frames(frames)]
    if shim is not None and shim.has_source:
        stack = [_shim_frame(shim), *stack[1:]]
    return stack


def site_stacks(
    pid: int,
    start_time_ns: int | None,
    sites: Sequence[Site],
    described: Mapping[int, str],
    device: ObjectSource | None = None,
    store: Store | None = None,
) -> dict[int, list[StackFrame]]:
    """Per site id, its call chain as the report shows it, the allocating
    call first (the allocator's own frames left out).

    sites: the module's sites of the process, their frames named through
    the objects and file offsets the module found for them (device), which
    works after the process exited; a frame it could not place, with the
    process's memory map (live, or saved while it ran). A site the module
    no longer holds: its frames as pmd stored them at the process's exit
    (store), else pmd's description, one frame: its fields as stored
    (store), else its text (described). A site the program described
    itself (pmm_hooks.h) shows that first."""
    from pmm.sitestack import needs_map, site_frames

    stored: dict[int, Frame] = {}
    if store is not None and start_time_ns is not None:
        stored = store.site_frames(pid, start_key(start_time_ns))
    # pmd's description of each site: its fields when stored, else its text
    desc: dict[int, str | Frame] = {k: stored.get(k) or v for k, v in described.items()}
    out: dict[int, list[StackFrame]] = {}
    framed = [s for s in sites if s.frames]
    by_site: dict[int, list[Frame]] = {}
    if framed:
        objects = device.objects(pid) if device is not None else []
        maps = maps_for(pid, start_time_ns) if needs_map(framed) else None
        try:
            by_site = site_frames(framed, objects, MAX_FRAMES, maps=maps,
                                  target=Target.of(pid, start_time_ns))
        except (OSError, ValueError, subprocess.SubprocessError):
            by_site = {}
    for s in sites:
        frames = by_site.get(s.site) or [Frame(a) for a in s.frames]
        if not s.has_source and desc.get(s.site) and not any(f.object for f in frames):
            # no map to name the addresses with: pmd named it while it could
            out[s.site] = [StackFrame.from_description(desc[s.site])]
        elif stack := _stack(frames, s):
            out[s.site] = stack
    if store is not None and start_time_ns is not None:
        for row in store.exit_sites(pid, start_key(start_time_ns)):
            if row.site in out:
                continue
            shim = Site(row.site, flags=row.flags, file=row.file, func=row.func, line=row.line)
            if stack := _stack([Frame.from_dict(f) for f in row.frames], shim):
                out[row.site] = stack
    for site, where in desc.items():
        if site not in out and where:
            out[site] = [StackFrame.from_description(where)]
    return out
