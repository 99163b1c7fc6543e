"""A process's heap as a pprof profile: gzipped profile.proto, as `go tool pprof`
and google's pprof read it.

The profile has Go's heap sample types, in Go's order: alloc_objects/count,
alloc_space/bytes, inuse_objects/count and inuse_space/bytes (the default).
Its values are estimates already weighted, as Go writes them: a record kept
with weight w (pmm's sampled mode) stands for w blocks of w x size bytes, and
`period` (space/bytes) says how many bytes lay between samples, 1 when every
allocation was counted.

Addresses: pmm never exports where a process's code was loaded, only (object,
file offset). Each object gets a Mapping at a synthetic start, `id << 40`,
with file_offset 0, and a location's address is that start plus its file
offset: address - memory_start + file_offset is the file offset, as pprof
computes it, and no real address of the process is in the file.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pmm.files import replace_file

if TYPE_CHECKING:
    from pmm.pprof import profile_pb2

SAMPLE_TYPES: tuple[tuple[str, str], ...] = (
    ("alloc_objects", "count"),
    ("alloc_space", "bytes"),
    ("inuse_objects", "count"),
    ("inuse_space", "bytes"),
)
DEFAULT_SAMPLE_TYPE = "inuse_space"
# `pmctl unreachable --pprof`: blocks definitely and indirectly lost
LOST_SAMPLE_TYPES: tuple[tuple[str, str], ...] = (
    ("lost_objects", "count"),
    ("lost_space", "bytes"),
    ("indirect_objects", "count"),
    ("indirect_space", "bytes"),
)
LOST_DEFAULT_SAMPLE_TYPE = "lost_space"
PERIOD_TYPE = ("space", "bytes")

# Mapping n (from 1) starts at n << 40. Every mapping has the same size, so
# that pprof's merge (-base, -diff_base) matches one object's mappings in two
# profiles (its key includes the size), and ends a page before the next
# mapping's start, so that pprof never joins two mappings as one split region.
MAPPING_SHIFT = 40
MAPPING_SIZE = (1 << MAPPING_SHIFT) - 0x1000

# The function of a sample given no frames: pprof drops a sample with no
# location from every view (its filter keeps samples with a kept frame), so
# such a site would vanish from the totals.
UNKNOWN_STACK = "[unknown]"


@dataclass(frozen=True, slots=True)
class PprofLine:
    """One function of a frame: a source line, or an inlined call in it."""

    func: str | None
    file: str | None
    line: int | None


@dataclass(frozen=True, slots=True)
class PprofFrame:
    """One frame of a stack: where it is (object and file offset) and what
    is known of it.

    `lines` lists the innermost inlined function first and the function
    the code belongs to last (profile.proto's order). `label` is what is
    shown when nothing else is known, e.g. 'libfoo.so+0x1139' or
    'leak_in_lib+0x19'. A frame with no object or offset (a site's file
    and line given by its registrant, an anonymous or JIT mapping) has no
    Mapping in the profile."""

    object: str | None
    build_id: str | None
    offset: int | None
    lines: tuple[PprofLine, ...]
    label: str


@dataclass(frozen=True, slots=True)
class PprofSample:
    """One allocation site: its stack, leaf first, and its weighted totals."""

    frames: tuple[PprofFrame, ...]
    alloc_objects: int
    alloc_space: int
    inuse_objects: int
    inuse_space: int

    def values(self) -> tuple[int, ...]:
        """Its values in SAMPLE_TYPES' order."""
        return (self.alloc_objects, self.alloc_space, self.inuse_objects, self.inuse_space)


@dataclass(frozen=True, slots=True)
class LostSample:
    """One site of `pmctl unreachable`: its stack, leaf first, and its lost blocks."""

    frames: tuple[PprofFrame, ...]
    lost_objects: int
    lost_space: int
    indirect_objects: int
    indirect_space: int

    def values(self) -> tuple[int, ...]:
        """Its values in LOST_SAMPLE_TYPES' order."""
        return (self.lost_objects, self.lost_space, self.indirect_objects, self.indirect_space)


class _Mapping:
    """A mapping being built, and whether all its locations are symbolized."""

    def __init__(self, message: profile_pb2.Mapping) -> None:
        self.message = message
        self.functions = True
        self.filenames = True
        self.line_numbers = True
        self.symbolized = True


class _ProfileBuilder:
    """Interns strings, functions, mappings and locations as samples arrive."""

    def __init__(self) -> None:
        # protobuf costs ~50 ms to import: only the command that writes a
        # profile pays it, not every pmctl command that imports this module.
        from pmm.pprof import profile_pb2

        self.pb = profile_pb2
        self.profile = profile_pb2.Profile()
        self.strings: dict[str, int] = {}
        self.string("")  # string_table[0] must be ""
        self.functions: dict[tuple[str, str], int] = {}
        self.mappings: dict[tuple[str, str | None], _Mapping] = {}
        self.locations: dict[tuple[object, ...], int] = {}

    def string(self, text: str) -> int:
        index = self.strings.get(text)
        if index is None:
            index = len(self.profile.string_table)
            self.strings[text] = index
            self.profile.string_table.append(text)
        return index

    def value_type(self, type_: str, unit: str) -> profile_pb2.ValueType:
        return self.pb.ValueType(type=self.string(type_), unit=self.string(unit))

    def function(self, name: str, file: str) -> int:
        key = (name, file)
        fid = self.functions.get(key)
        if fid is None:
            fid = len(self.profile.function) + 1
            self.functions[key] = fid
            name_index = self.string(name)
            # pmm's names are already demangled: the system name is the same
            self.profile.function.add(
                id=fid, name=name_index, system_name=name_index, filename=self.string(file)
            )
        return fid

    def mapping(self, obj: str, build_id: str | None) -> _Mapping:
        key = (obj, build_id)
        mapping = self.mappings.get(key)
        if mapping is None:
            mid = len(self.profile.mapping) + 1
            start = mid << MAPPING_SHIFT
            message = self.profile.mapping.add(
                id=mid,
                memory_start=start,
                memory_limit=start + MAPPING_SIZE,
                file_offset=0,
                filename=self.string(obj),
                build_id=self.string(build_id or ""),
            )
            mapping = self.mappings[key] = _Mapping(message)
        return mapping

    def lines(self, frame: PprofFrame) -> list[profile_pb2.Line]:
        label = _label(frame)
        if not frame.lines:
            return [self.pb.Line(function_id=self.function(label, ""))]
        return [
            self.pb.Line(
                function_id=self.function(ln.func or label, ln.file or ""), line=ln.line or 0
            )
            for ln in frame.lines
        ]

    def location(self, frame: PprofFrame) -> int:
        if frame.object is None or frame.offset is None:
            key: tuple[object, ...] = ("no mapping", _label(frame), frame.lines)
        else:
            if not 0 <= frame.offset < MAPPING_SIZE:
                raise ValueError(
                    f"{frame.object}: file offset {frame.offset:#x} out of range "
                    f"(0 to {MAPPING_SIZE:#x})"
                )
            key = ("mapping", frame.object, frame.build_id, frame.offset)
        lid = self.locations.get(key)
        if lid is not None:
            return lid
        lid = len(self.profile.location) + 1
        self.locations[key] = lid
        location = self.profile.location.add(id=lid)
        location.line.extend(self.lines(frame))
        if frame.object is not None and frame.offset is not None:
            mapping = self.mapping(frame.object, frame.build_id)
            location.mapping_id = mapping.message.id
            location.address = mapping.message.memory_start + frame.offset
            known = frame.lines
            mapping.symbolized &= bool(known)
            mapping.functions &= bool(known) and all(ln.func for ln in known)
            mapping.filenames &= bool(known) and all(ln.file for ln in known)
            mapping.line_numbers &= bool(known) and all(ln.line for ln in known)
        return lid

    def finish_mappings(self) -> None:
        for mapping in self.mappings.values():
            mapping.message.has_functions = mapping.functions
            mapping.message.has_filenames = mapping.filenames
            mapping.message.has_line_numbers = mapping.line_numbers
            # every location was symbolized with its inlined frames listed
            mapping.message.has_inline_frames = mapping.symbolized


_UNKNOWN_FRAME = PprofFrame(None, None, None, (), UNKNOWN_STACK)


def _label(frame: PprofFrame) -> str:
    """The name shown for a frame with no function: its label, else where it is."""
    if frame.label:
        return frame.label
    if frame.object is not None and frame.offset is not None:
        return f"{os.path.basename(frame.object)}+{frame.offset:#x}"
    return "??"


def build_profile(
    samples: Iterable[PprofSample | LostSample],
    *,
    period: int,
    time_ns: int,
    duration_ns: int = 0,
    comments: Sequence[str] = (),
    sample_types: Sequence[tuple[str, str]] = SAMPLE_TYPES,
    default_sample_type: str = DEFAULT_SAMPLE_TYPE,
) -> bytes:
    """The samples as a pprof heap profile: profile.proto, gzipped.

    One Sample per PprofSample, its locations leaf first (a sample with no
    frames gets one location, function UNKNOWN_STACK, so that pprof counts
    it), one Location
    per distinct (object, build-id, offset) with its lines innermost-inlined
    first, one Function per (name, file), one Mapping per (object, build-id)
    with its path and build-id (see the module's docstring for its
    synthetic addresses). A mapping says it has functions, file names, line
    numbers and inlined frames when every one of its locations has lines
    with them. A frame with no lines shows its label as its function.

    `period` is the sampling period in bytes (1: every allocation counted),
    `time_ns` the time of collection (nanoseconds since the epoch),
    `duration_ns` how long the profile covers, `comments` free text that
    pprof shows; `sample_types` the samples' values' (type, unit), in the
    order of their `values()` (LOST_SAMPLE_TYPES for LostSample). The output
    is the same for the same arguments (gzip's
    time stamp is 0). Raises ValueError on a period below 1 or a file
    offset beyond a mapping's synthetic size."""
    if period < 1:
        raise ValueError(f"period {period}: the sampling period is at least 1 byte")
    builder = _ProfileBuilder()
    profile = builder.profile
    profile.sample_type.extend(builder.value_type(t, u) for t, u in sample_types)
    profile.default_sample_type = builder.string(default_sample_type)
    profile.period_type.CopyFrom(builder.value_type(*PERIOD_TYPE))
    profile.period = period
    profile.time_nanos = time_ns
    profile.duration_nanos = duration_ns
    profile.comment.extend(builder.string(c) for c in comments)
    for sample in samples:
        frames = sample.frames or (_UNKNOWN_FRAME,)
        values = sample.values()
        if len(values) != len(sample_types):
            raise ValueError(f"a sample of {len(values)} values for {len(sample_types)} types")
        profile.sample.add(
            location_id=[builder.location(frame) for frame in frames], value=list(values)
        )
    builder.finish_mappings()
    encoded: bytes = profile.SerializeToString()
    return gzip.compress(encoded, mtime=0)


def write_profile(
    path: str | os.PathLike[str],
    samples: Iterable[PprofSample | LostSample],
    *,
    period: int,
    time_ns: int,
    duration_ns: int = 0,
    comments: Sequence[str] = (),
    sample_types: Sequence[tuple[str, str]] = SAMPLE_TYPES,
    default_sample_type: str = DEFAULT_SAMPLE_TYPE,
) -> None:
    """Writes build_profile(...) to `path` atomically: a temporary file in
    the same directory, flushed to disk, then renamed over `path`, so a
    reader sees the old profile or the whole new one, never part of it. The
    file's mode is 0666 less the umask, as for any file the user creates
    (pmm.files.replace_file).
    Raises OSError when the directory cannot be written, ValueError as
    build_profile does (nothing is written then)."""
    data = build_profile(
        samples, period=period, time_ns=time_ns, duration_ns=duration_ns, comments=comments,
        sample_types=sample_types, default_sample_type=default_sample_type,
    )
    replace_file(path, data, sync=True)
