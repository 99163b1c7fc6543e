"""Symbolized frames: `Symbolizer` batches a process's addresses per object,
caches the answers in memory and on disk, and `describe_sites` names sites."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from collections.abc import Iterable, Sequence
from collections.abc import Mapping as AbcMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pmm.model import Site
from pmm.symbolize.backends import (
    Backend,
    InliningBackend,
    SourceLoc,
    demangle,
    make_backend,
    warn_no_backend,
)
from pmm.symbolize.cache import object_cache_file, read_text, sym_cache_file, write_text
from pmm.symbolize.debuginfo import DebugFinder, ObjectRef
from pmm.symbolize.elf import (
    ElfFile,
    debug_file_load_segments,
    elf_vaddr,
    read_build_id,
    vaddr_in,
)
from pmm.symbolize.maps import Mapping, find_mapping


@dataclass(frozen=True)
class Frame:
    """A symbolized frame: an address of a live process (with its map), or an
    (object, file offset) pair of `Symbolizer.symbolize_objects` (addr 0).

    lines: the source locations at the frame, innermost inlined call first,
    the last being the function the code was compiled into; func, file and
    line are the first of them. Without debug info, lines holds only the
    nearest symbol's function, and `symbol` says where in it ('leak_in_lib+0x19').
    """

    addr: int
    object: str | None = None  # path of the mapped object
    offset: int | None = None  # file offset in it
    func: str | None = None
    file: str | None = None
    line: int | None = None
    build_id: str | None = None  # the object's GNU build-id, hex
    lines: tuple[SourceLoc, ...] = ()
    symbol: str | None = None  # nearest ELF symbol and offset, when no line is known

    @property
    def object_name(self) -> str | None:
        """The mapped object's file name without its directory, or None."""
        return os.path.basename(self.object) if self.object else None

    def where(self) -> str:
        """'file.c:12' when known, else 'libc.so.6+0x2a1ca', else '0x...' (an
        address of a live process), else '?'."""
        if self.file and self.line:
            return f"{os.path.basename(self.file)}:{self.line}"
        if self.object and self.offset is not None:
            return f"{self.object_name}+0x{self.offset:x}"
        if self.addr:
            return f"0x{self.addr:x}"
        return "?"

    def describe(self, inlined: bool = False) -> str:
        """'main() leak.c:12'; without debug info 'libfoo.so+0x1139
        (leak_in_lib+0x19)' or 'malloc() (libc.so.6+0x9a1ca)'; else where().
        inlined: also the calls the first location was inlined into,
        'grow() a.c:5 (inlined into main() a.c:9)'."""
        if self.func and self.file and self.line:
            text = f"{_call(self.func)} {self.where()}"
            if inlined and len(self.lines) > 1:
                outer = ", ".join(f"inlined into {_describe_loc(loc)}" for loc in self.lines[1:])
                text += f" ({outer})"
            return text
        if self.symbol:
            return f"{self.where()} ({self.symbol})"
        if self.func:
            obj = f" ({self.where()})" if self.object else ""
            return f"{_call(self.func)}{obj}"
        return self.where()

    def as_dict(self) -> dict[str, Any]:
        """The JSON form: address (0 for an object and offset), object, file
        offset, function, file, line, the object's build-id, the nearest
        symbol and the inlined locations (None where unknown)."""
        return {
            "addr": self.addr,
            "object": self.object,
            "offset": self.offset,
            "func": self.func,
            "file": self.file,
            "line": self.line,
            "build_id": self.build_id,
            "symbol": self.symbol,
            "lines": [{"func": loc.func, "file": loc.file, "line": loc.line}
                      for loc in self.lines],
        }

    @classmethod
    def from_dict(cls, d: AbcMapping[str, Any]) -> Frame:
        """The Frame of its JSON form (`as_dict`; fields it lacks: unknown)."""
        return cls(
            addr=int(d.get("addr") or 0),
            object=d.get("object"),
            offset=d.get("offset"),
            func=d.get("func"),
            file=d.get("file"),
            line=d.get("line"),
            build_id=d.get("build_id"),
            lines=tuple(SourceLoc(x.get("func"), x.get("file"), x.get("line"))
                        for x in d.get("lines") or ()),
            symbol=d.get("symbol"),
        )


def _call(func: str) -> str:
    """'main()' for 'main'; a demangled C++ name keeps its own parameters:
    'level8(long)'."""
    return func if func.endswith(")") else f"{func}()"


def _describe_loc(loc: SourceLoc) -> str:
    where = f" {os.path.basename(loc.file)}:{loc.line}" if loc.file and loc.line else ""
    return f"{_call(loc.func or '?')}{where}"


class Symbolizer:
    """Symbolizes frames: addresses of a process given its mappings, or
    (object, file offset) pairs that need no process.

    `symbolize(addrs)` batches a live (or cached) map's addresses per object
    (one addr2line process per object); results are cached per (object,
    vaddr) in memory and on disk (`sym/` in the cache directory), so repeated
    `pmctl leaks` runs do not pay for large objects again.

    `symbolize_objects(items)` names (ObjectRef, file offset) pairs long after
    the process exited: debug info is looked for as `DebugFinder` says
    (the object, $PMM_DEBUG_DIRS by build-id, .gnu_debuglink, debuginfod),
    inlined calls are listed, and without debug info the nearest symbol is
    given. Its answers are cached by the object's build-id.

    `disk_cache=False` turns the disk off; return_addresses: frames are
    return addresses, looked up one byte back (in their call). A Symbolizer
    remembers where it found debug files, and where it found none: a debug
    package installed meanwhile is seen by a new one.
    """

    def __init__(
        self,
        maps: Sequence[Mapping] | None = None,
        backend: Backend | None = None,
        return_addresses: bool = True,
        disk_cache: bool = True,
        finder: DebugFinder | None = None,
    ) -> None:
        self.maps = list(maps or [])
        self.backend = backend or make_backend()
        self.return_addresses = return_addresses
        self.disk_cache = disk_cache
        self.finder = finder or DebugFinder()
        self._cache: dict[tuple[str, int], SourceLoc] = {}
        # (object cache key, looked-up file offset) -> inlined chain
        self._chains: dict[tuple[str, int], tuple[SourceLoc, ...]] = {}

    def _load_disk(self, path: str) -> dict[int, SourceLoc]:
        f = sym_cache_file(path, self.backend.name) if self.disk_cache else None
        if f is None:
            return {}
        try:
            raw = json.loads(read_text(f))
            return {int(k): SourceLoc(v[0], v[1], v[2]) for k, v in raw.items()}
        except (OSError, ValueError, TypeError, IndexError, AttributeError):
            return {}

    def _save_disk(self, path: str) -> None:
        f = sym_cache_file(path, self.backend.name) if self.disk_cache else None
        if f is None:
            return
        data = {str(v): [loc.func, loc.file, loc.line]
                for (p, v), loc in self._cache.items() if p == path}
        with contextlib.suppress(OSError):
            write_text(f, json.dumps(data))

    def symbolize(self, addrs: Iterable[int]) -> dict[int, Frame]:
        """A Frame for each distinct address: its object and file offset from
        the map, and the function, file and line the back-end finds (with
        return_addresses, each is looked up one byte back: in its call)."""
        addr_list = list(dict.fromkeys(addrs))
        frames: dict[int, Frame] = {}
        todo: dict[str, list[tuple[int, int, int]]] = {}  # obj -> (addr, off, vaddr)
        for a in addr_list:
            m = find_mapping(self.maps, a) if a else None
            if m is None or not m.is_file:
                frames[a] = Frame(addr=a)
                continue
            path = m.object_path
            off = m.translate(a)
            look = off - 1 if self.return_addresses and off > 0 else off
            vaddr = elf_vaddr(path, look)
            if vaddr is None:
                frames[a] = Frame(addr=a, object=path, offset=off)
                continue
            todo.setdefault(path, []).append((a, off, vaddr))
        for path, items in todo.items():
            missing = sorted({v for _, _, v in items if (path, v) not in self._cache})
            if missing:
                disk = self._load_disk(path)
                for v, loc in disk.items():
                    self._cache[(path, v)] = loc
                missing = [v for v in missing if v not in disk]
            if missing and self.backend.available():
                for v, loc in zip(missing, self.backend.resolve(path, missing), strict=True):
                    self._cache[(path, v)] = loc
                self._save_disk(path)
            elif missing:
                # nothing cached for them: a back-end installed later answers
                warn_no_backend()
            for a, off, v in items:
                known = self._cache.get((path, v))
                frames[a] = (Frame(a, path, off, known.func, known.file, known.line,
                                   lines=(known,) if known.func or known.file else ())
                             if known else Frame(a, path, off))
        return frames

    def symbolize_objects(
        self, items: Iterable[tuple[ObjectRef, int]], return_addresses: bool | None = None
    ) -> dict[tuple[ObjectRef, int], Frame]:
        """A Frame (addr 0) for each distinct (object, file offset): function,
        file and line with the inlined calls from the debug info found for the
        object, else its nearest symbol, else only object+offset. Needs no
        process: the object may have been replaced or deleted since (then it
        is named by its build-id only). return_addresses (default: the
        Symbolizer's): offsets of return addresses, looked up one byte back."""
        ret = self.return_addresses if return_addresses is None else return_addresses
        wanted: dict[ObjectRef, dict[int, None]] = {}
        for ref, off in items:
            wanted.setdefault(ref, {})[off] = None
        out: dict[tuple[ObjectRef, int], Frame] = {}
        for ref, offs in wanted.items():
            for off, frame in self._symbolize_object(ref, list(offs), ret).items():
                out[(ref, off)] = frame
        return out

    def _object_cache(self, ref: ObjectRef) -> tuple[str | None, str | None, Path | None]:
        """An object's build-id (the reference's, else the file's at its
        path), the in-memory key of its answers and their disk file."""
        build_id = ref.build_id or (read_build_id(ref.path) if ref.path else None)
        f = (object_cache_file(build_id, ref.path, self.backend.name)
             if self.disk_cache else None)
        if build_id:
            return build_id, f"build-id:{build_id}", f
        if ref.path:
            try:
                st = os.stat(ref.path)
            except OSError:
                return None, None, None
            return None, f"{ref.path}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}", f
        return None, None, None

    def _symbolize_object(self, ref: ObjectRef, offsets: list[int],
                          return_addresses: bool) -> dict[int, Frame]:
        look = {off: off - 1 if return_addresses and off > 0 else off for off in offsets}
        build_id, key, disk = self._object_cache(ref)
        if key is not None and disk is not None \
                and any((key, v) not in self._chains for v in look.values()):
            for v, chain in _load_chains(disk).items():
                self._chains.setdefault((key, v), chain)
        chains: dict[int, tuple[SourceLoc, ...]] = {}
        if key is not None:
            chains = {v: self._chains[(key, v)] for v in look.values() if (key, v) in self._chains}
        if all(v in chains for v in look.values()):
            # all known: no need to look for the files (nor to ask debuginfod)
            return {off: _frame(ref, off, build_id, chains[v], None) for off, v in look.items()}
        files = self.finder.find(ref)
        elf = ElfFile.open(files.object) if files.object else None
        debug = ElfFile.open(files.debug) if files.debug else None
        if elf is not None:
            segments = elf.load_segments
        elif debug is not None:
            segments = debug_file_load_segments(debug)
        else:
            segments = []
        vaddrs = {v: vaddr_in(segments, v) for v in set(look.values())}
        missing = sorted({v for v in look.values() if v not in chains and vaddrs[v] is not None})
        if missing and files.debug:
            if self.backend.available():
                todo = [vaddrs[v] or 0 for v in missing]
                if isinstance(self.backend, InliningBackend):
                    got = self.backend.resolve_inlined(files.debug, todo)
                else:
                    got = [(loc,) for loc in self.backend.resolve(files.debug, todo)]
                fresh = {v: tuple(loc for loc in chain if loc.func or loc.file)
                         for v, chain in zip(missing, got, strict=True)}
                chains.update(fresh)
                # only what the debug info located: a debug file found later may name the rest
                located = {v: c for v, c in fresh.items() if c and c[0].line}
                if key is not None and located:
                    for v, chain in located.items():
                        self._chains[(key, v)] = chain
                    if disk is not None:
                        _save_chains(disk, located)
            else:
                warn_no_backend()
        # no line: the nearest symbol, from the debug file's full table, else the object's
        symbols: dict[int, tuple[str, int]] = {}
        for v in set(look.values()):
            vaddr = vaddrs[v]
            chain = chains.get(v, ())
            if vaddr is None or (chain and chain[0].line):
                continue
            for table in (debug, elf):
                near = table.nearest_symbol(vaddr) if table is not None else None
                if near is not None:
                    symbols[v] = near
                    break
        names = demangle(n for n, _ in symbols.values())
        frames: dict[int, Frame] = {}
        for off, v in look.items():
            sym = symbols.get(v)
            # the symbol's offset from the frame's own offset, not from the looked-up one
            near = (names[sym[0]], sym[1] + off - v) if sym is not None else None
            frames[off] = _frame(ref, off, files.build_id, chains.get(v, ()), near)
        return frames


def _frame(ref: ObjectRef, offset: int, build_id: str | None, chain: tuple[SourceLoc, ...],
           symbol: tuple[str, int] | None) -> Frame:
    """The Frame of an object's offset: its inlined chain, else its nearest
    symbol (name, offset from it) as its only location."""
    text = None
    if symbol is not None:
        name, delta = symbol
        text = f"{name}+0x{delta:x}" if delta else name
        chain = chain or (SourceLoc(name, None, None),)
    top = chain[0] if chain else SourceLoc(None, None, None)
    return Frame(0, ref.path, offset, top.func, top.file, top.line, build_id=build_id,
                 lines=chain, symbol=text)


# Objects whose frames at the top of a site are the allocator's, not the
# program's: libc's malloc family (and its callers in libc: strdup, fopen...),
# libstdc++'s and libc++'s operator new (the hook does not interpose it: a C++
# site's first frame is there), the hook itself, and common malloc replacements.
_ALLOCATOR_OBJECT = re.compile(
    r"(libc|libstdc\+\+|libc\+\+|libc\+\+abi|libpmmhook[-\w]*|libjemalloc|libtcmalloc\w*"
    r"|libmimalloc|ld-linux[-\w.]*)\.so(\.[\d.]+)?")
# the same functions linked statically into a program
_ALLOCATOR_FUNC = re.compile(
    r"(operator new(\[\])?|malloc|calloc|realloc|reallocarray|aligned_alloc|memalign"
    r"|posix_memalign|valloc|pvalloc|__libc_\w+|strdup|strndup)(\(.*\))?")


def is_allocator_frame(frame: Frame) -> bool:
    """Whether the frame is in the allocator's own code: in libc, libstdc++
    or libc++, the hook library or a malloc replacement, or in a malloc-family
    function or operator new linked into the program."""
    if frame.object_name and _ALLOCATOR_OBJECT.fullmatch(frame.object_name):
        return True
    names = [loc.func for loc in frame.lines] or [frame.func]
    return any(n is not None and _ALLOCATOR_FUNC.fullmatch(n) for n in names)


def _first_user_index(frames: Sequence[Frame]) -> int:
    return next((i for i, f in enumerate(frames) if not is_allocator_frame(f)), 0)


def first_user_frame(frames: Sequence[Frame]) -> Frame | None:
    """The first frame of a site that is the program's own, past the
    allocator's (`is_allocator_frame`): for a C++ `new`, the line that called
    it rather than libstdc++'s operator new. The first frame if all are the
    allocator's; None if there are none."""
    return frames[_first_user_index(frames)] if frames else None


def user_frames(frames: Sequence[Frame]) -> list[Frame]:
    """The frames from the first user frame on (`first_user_frame`): a
    site's stack as a person reads it, the allocator's frames left out."""
    return list(frames[_first_user_index(frames):])


def _load_chains(path: Path) -> dict[int, tuple[SourceLoc, ...]]:
    """An object's cached answers: looked-up file offset -> inlined chain."""
    try:
        raw = json.loads(read_text(path))
        return {int(k): tuple(SourceLoc(f, file, line) for f, file, line in v)
                for k, v in raw["offsets"].items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def _save_chains(path: Path, new: dict[int, tuple[SourceLoc, ...]]) -> None:
    """Adds answers to an object's cache file (another process may have added
    its own since we read it: merged, not overwritten)."""
    chains = _load_chains(path)
    chains.update(new)
    data = {"offsets": {str(v): [[loc.func, loc.file, loc.line] for loc in chain]
                        for v, chain in chains.items()}}
    with contextlib.suppress(OSError):
        write_text(path, json.dumps(data))


def describe_sites(sites: Iterable[Site], maps: Sequence[Mapping] | None,
                   addresses: bool = True) -> dict[int, str]:
    """Each site's one-line description: where the shim said it is
    ('leak() leak.c:30'), else its first frame symbolized with the process's
    map (a hook preloaded or attached without the shim: the same form), else
    'caller 0x...' — unless `addresses` is False: a description that goes
    where readers of the process's memory layout are not checked (pmd's
    database and log) never carries an absolute address, which would tell
    them where the process's code is loaded; such a site is left out."""
    out: dict[int, str] = {}
    frames_only: list[Site] = []
    for s in sites:
        if s.file or s.func:
            out[s.site] = f"{s.func or '?'}() {s.file}:{s.line}"
        elif s.frames:
            frames_only.append(s)
    frames: dict[int, Frame] = {}
    if frames_only and maps:
        try:
            frames = Symbolizer(maps).symbolize(s.frames[0] for s in frames_only)
        except (OSError, ValueError, subprocess.SubprocessError):
            frames = {}
    for s in frames_only:
        f = frames.get(s.frames[0])
        if f and f.object:
            out[s.site] = f.describe()
        elif addresses:
            out[s.site] = f"caller 0x{s.frames[0]:x}"
    return out
