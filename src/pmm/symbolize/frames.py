"""Symbolized frames: `Symbolizer` batches a process's addresses per object
and caches the answers in memory and on disk."""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Mapping as AbcMapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

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
from pmm.symbolize.elf import ElfFile, MalformedElf, debug_file_load_segments, vaddr_in
from pmm.symbolize.maps import Mapping, find_mapping
from pmm.symbolize.opening import OpenFile, Refused, Replaced, Target, open_named
from pmm.symbolize.sandbox import TimedOut

log = logging.getLogger("pmm.symbolize")

_T = TypeVar("_T")
# a user's files that made binutils time out this often are not parsed again
# by the same Symbolizer: one user's objects cannot hold pmd's worker for
# longer than this many time budgets a Symbolizer
TIMEOUTS_PER_OWNER = 2


@dataclass(frozen=True)
class Frame:
    """A symbolized frame: an address of a live process (with its map), or an
    (object, file offset) pair of `Symbolizer.symbolize_objects` (addr 0).

    lines: the source locations at the frame, innermost inlined call first,
    the last being the function the code was compiled into; func, file and
    line are the first of them. Without debug info, lines holds only the
    nearest symbol's function, and `symbol` says where in it ('leak_in_lib+0x19').

    A site's description is one Frame (`site_frame`): this one type carries
    it from the symbolizer to pmd's database, the report and the commands,
    and `describe` is the one place that makes it text. `registered`: the
    frame is where the program said the site is (pmm_hooks.h's function,
    file and line, the file as it gave it).
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
    registered: bool = False

    @classmethod
    def registered_at(cls, func: str | None, file: str, line: int) -> Frame:
        """Where the program said a site is (pmm_hooks.h's function, file, line)."""
        return cls(0, func=func or None, file=file, line=line, registered=True)

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
        'grow() a.c:5 (inlined into main() a.c:9)'. A registered frame:
        'leak() src/leak.c:30', as the program gave it."""
        if self.registered:
            return f"{self.func or '?'}() {self.file or ''}:{self.line or 0}"
        if self.func and self.file and self.line:
            text = f"{_call(self.func)} {self.where()}"
            if inlined and len(self.lines) > 1:
                outer = ", ".join(f"inlined into {call}" for call in self.inlined_calls())
                text += f" ({outer})"
            return text
        if self.symbol and not self.object and not self.addr:
            return self.symbol  # a description an older pmd stored, of no known shape
        if self.symbol:
            return f"{self.where()} ({self.symbol})"
        if self.func:
            obj = f" ({self.where()})" if self.object else ""
            return f"{_call(self.func)}{obj}"
        return self.where()

    def inlined_calls(self) -> tuple[str, ...]:
        """The calls the first location was inlined into, innermost first,
        each as 'main() a.c:9'."""
        return tuple(_describe_loc(loc) for loc in self.lines[1:])

    def location(self) -> str | None:
        """The source line `describe` names, 'leak.c:30'; None when it names none."""
        if self.registered:
            return f"{self.file}:{self.line}" if self.file else None
        if self.func and self.file and self.line:
            return self.where()
        return None

    def as_dict(self) -> dict[str, Any]:
        """The JSON form: address (0 for an object and offset), object, file
        offset, function, file, line, the object's build-id, the nearest
        symbol and the inlined locations (None where unknown); "registered":
        true for a registered frame only."""
        d: dict[str, Any] = {
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
        if self.registered:
            d["registered"] = True
        return d

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
            registered=bool(d.get("registered")),
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
    given.

    target (`pmm.symbolize.opening.Target`, per call or for all): the
    process whose paths these are; its files are opened inside its root, a
    mapped one through /proc/PID/map_files where we may, else only if it has
    the inode the map names. Answers are kept under the identity of the
    files they came from (device, inode, size, times, owner), never shared
    between two files or two owners; only those from a trusted debug file
    (`DebugFiles.by_build_id`) are kept by build-id, and serve after the
    object is gone. Files that are refused (not regular, swapped, malformed,
    or a parser that gave no answer in time) leave their frames as object
    and offset; `refusals` says why, by path, and each is logged once.

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
        target: Target | None = None,
    ) -> None:
        self.maps = list(maps or [])
        self.backend = backend or make_backend()
        self.return_addresses = return_addresses
        self.disk_cache = disk_cache
        self.finder = finder or DebugFinder()
        self.target = target
        # (answers key, vaddr) -> location: a live process's addresses
        self._cache: dict[tuple[str, int], SourceLoc] = {}
        # (answers key, looked-up file offset) -> inlined chain
        self._chains: dict[tuple[str, int], tuple[SourceLoc, ...]] = {}
        self.refusals: dict[str, str] = {}
        self._timeouts: collections.Counter[int] = collections.Counter()

    def _refuse(self, path: str | None, why: str) -> None:
        """Notes (and logs, once) why an object's frames stay unnamed."""
        where = path or "?"
        if self.refusals.get(where) != why:
            self.refusals[where] = why
            log.warning("frames in %s stay unnamed: %s", where, why)

    def _parse(self, path: str | None, file: OpenFile, run: Callable[[], _T]) -> _T | None:
        """run() (the back-end on file), or None with the reason noted when it
        fails, or when the file's owner has had TIMEOUTS_PER_OWNER time-outs
        from this Symbolizer already (a file of someone else's)."""
        owner = file.st.st_uid
        if not file.owner_trusted and self._timeouts[owner] >= TIMEOUTS_PER_OWNER:
            self._refuse(path, f"{file.path}: not parsed: files of uid {owner} gave no answer "
                               f"in time {TIMEOUTS_PER_OWNER} times")
            return None
        try:
            return run()
        except TimedOut as e:
            self._timeouts[owner] += 1
            self._refuse(path, str(e))
        except OSError as e:
            self._refuse(path, str(e))
        return None

    def _load_disk(self, key: str) -> dict[int, SourceLoc]:
        f = sym_cache_file(key, self.backend.name) if self.disk_cache else None
        if f is None:
            return {}
        try:
            raw = json.loads(read_text(f))
            return {int(k): SourceLoc(v[0], v[1], v[2]) for k, v in raw.items()}
        except (OSError, ValueError, TypeError, IndexError, AttributeError):
            return {}

    def _save_disk(self, key: str) -> None:
        f = sym_cache_file(key, self.backend.name) if self.disk_cache else None
        if f is None:
            return
        data = {str(v): [loc.func, loc.file, loc.line]
                for (k, v), loc in self._cache.items() if k == key}
        with contextlib.suppress(OSError):
            write_text(f, json.dumps(data))

    def _open_mapped(self, m: Mapping, target: Target | None) -> ElfFile | None:
        """The ELF file a mapping is of: through map_files while the process
        lives (where we may), else its path inside the process's root (ours
        without a process), taken only with the inode the map names; None
        (the reason noted) when it cannot be read."""
        path = m.object_path
        expect = (m.inode, None)
        tries: list[Callable[[], OpenFile]] = [partial(open_named, path, target, expect)]
        if target is not None and target.alive():
            tries.insert(0, partial(target.open_mapped, m.start, m.end, path, expect))
        why = ""
        for attempt in tries:
            try:
                return ElfFile.of(attempt())
            except MalformedElf as e:
                why = f"{path}: malformed ELF: {e}"
                break
            except Replaced:
                continue
            except Refused as e:
                why = str(e)
            except OSError as e:
                if not isinstance(e, (FileNotFoundError, NotADirectoryError, PermissionError)):
                    why = why or f"{path}: {e.strerror}"
        if why:
            self._refuse(path, why)
        return None

    def symbolize(self, addrs: Iterable[int], target: Target | None = None) -> dict[int, Frame]:
        """A Frame for each distinct address: its object and file offset from
        the map, and the function, file and line the back-end finds (with
        return_addresses, each is looked up one byte back: in its call);
        target: the process of the map (default: the Symbolizer's)."""
        target = target or self.target
        addr_list = list(dict.fromkeys(addrs))
        frames: dict[int, Frame] = {}
        opened: dict[tuple[str, int], ElfFile | None] = {}
        # per object: its file and (addr, off, vaddr) of its addresses
        todo: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        for a in addr_list:
            m = find_mapping(self.maps, a) if a else None
            if m is None or not m.is_file:
                frames[a] = Frame(addr=a)
                continue
            path = m.object_path
            ident = (path, m.inode)
            if ident not in opened:
                opened[ident] = self._open_mapped(m, target)
            elf = opened[ident]
            off = m.translate(a)
            look = off - 1 if self.return_addresses and off > 0 else off
            vaddr = vaddr_in(elf.load_segments, look) if elf is not None else None
            if vaddr is None:
                frames[a] = Frame(addr=a, object=path, offset=off)
                continue
            todo.setdefault(ident, []).append((a, off, vaddr))
        for ident, items in todo.items():
            path = ident[0]
            elf = opened[ident]
            assert elf is not None
            locs = self._mapped_locations(elf, path, {v for _, _, v in items}, target)
            for a, off, v in items:
                known = locs.get(v)
                frames[a] = (Frame(a, path, off, known.func, known.file, known.line,
                                   lines=(known,) if known.func or known.file else ())
                             if known else Frame(a, path, off))
        return frames

    def _mapped_locations(self, elf: ElfFile, path: str, vaddrs: set[int],
                          target: Target | None) -> dict[int, SourceLoc]:
        """The locations of vaddrs of a mapped object: from its debug info
        (its own, or a debug file `DebugFinder` finds) by the back-end,
        cached under the files' identity; without debug info, the function
        of its symbol table that holds each (what addr2line gives for it)."""
        files = self.finder.find_object(elf, path, target)
        if files.refused:
            self._refuse(path, files.refused)
        debug = files.debug_elf
        if not self.backend.available():
            # nothing cached for them: a back-end installed later answers
            warn_no_backend()
            return {}
        if debug is None:
            near = {v: sym[0] for v in vaddrs if (sym := self._nearest(elf, v, path))}
            names = demangle(near.values())
            return {v: SourceLoc(names[n], None, None) for v, n in near.items()}
        key = "maps:" + _identity_key(elf, debug)
        missing = sorted(v for v in vaddrs if (key, v) not in self._cache)
        if missing:
            for v, loc in self._load_disk(key).items():
                self._cache[(key, v)] = loc
            missing = [v for v in missing if (key, v) not in self._cache]
        if missing:
            got = self._parse(path, debug.file, partial(self.backend.resolve, debug.file, missing))
            if got is not None:
                for v, loc in zip(missing, got, strict=True):
                    self._cache[(key, v)] = loc
                self._save_disk(key)
        return {v: self._cache[(key, v)] for v in vaddrs if (key, v) in self._cache}

    def _nearest(self, elf: ElfFile, vaddr: int, path: str | None) -> tuple[str, int] | None:
        try:
            return elf.nearest_symbol(vaddr)
        except MalformedElf as e:
            self._refuse(path, f"{elf.path}: malformed ELF: {e}")
            return None

    def symbolize_objects(
        self, items: Iterable[tuple[ObjectRef, int]], return_addresses: bool | None = None,
        target: Target | None = None,
    ) -> dict[tuple[ObjectRef, int], Frame]:
        """A Frame (addr 0) for each distinct (object, file offset): function,
        file and line with the inlined calls from the debug info found for the
        object, else its nearest symbol, else only object+offset. Needs no
        process: the object may have been replaced or deleted since (then it
        is named by its build-id only). return_addresses (default: the
        Symbolizer's): offsets of return addresses, looked up one byte back;
        target: the process that named the objects, while it is known
        (default: the Symbolizer's)."""
        ret = self.return_addresses if return_addresses is None else return_addresses
        target = target or self.target
        wanted: dict[ObjectRef, dict[int, None]] = {}
        for ref, off in items:
            wanted.setdefault(ref, {})[off] = None
        out: dict[tuple[ObjectRef, int], Frame] = {}
        for ref, offs in wanted.items():
            for off, frame in self._symbolize_object(ref, list(offs), ret, target).items():
                out[(ref, off)] = frame
        return out

    def _known_chains(self, key: str, wanted: Iterable[int]) -> dict[int, tuple[SourceLoc, ...]]:
        """The answers kept under key (in memory, else on disk) for wanted offsets."""
        wanted = list(wanted)
        disk = object_cache_file(key, self.backend.name) if self.disk_cache else None
        if disk is not None and any((key, v) not in self._chains for v in wanted):
            for v, chain in _load_chains(disk).items():
                self._chains.setdefault((key, v), chain)
        return {v: self._chains[(key, v)] for v in wanted if (key, v) in self._chains}

    def _symbolize_object(self, ref: ObjectRef, offsets: list[int], return_addresses: bool,
                          target: Target | None) -> dict[int, Frame]:
        look = {off: off - 1 if return_addresses and off > 0 else off for off in offsets}
        if ref.build_id:
            # answers from a trusted debug file hold for every object of this build-id
            chains = self._known_chains(f"build-id:{ref.build_id}", look.values())
            if all(v in chains for v in look.values()):
                # all known: no need to look for the files (nor to ask debuginfod)
                return {off: _frame(ref, off, ref.build_id, chains[v], None)
                        for off, v in look.items()}
        files = self.finder.find(ref, target)
        if files.refused:
            self._refuse(ref.path, files.refused)
        elf, debug = files.object_elf, files.debug_elf
        key: str | None = None
        chains = {}
        if debug is not None:
            key = (f"build-id:{files.build_id}" if files.by_build_id
                   else "file:" + _identity_key(elf, debug))
            chains = self._known_chains(key, look.values())
        if elf is not None:
            segments = elf.load_segments
        elif debug is not None:
            segments = debug_file_load_segments(debug)
        else:
            segments = []
        vaddrs = {v: vaddr_in(segments, v) for v in set(look.values())}
        missing = sorted({v for v in look.values() if v not in chains and vaddrs[v] is not None})
        if missing and debug is not None and key is not None:
            if self.backend.available():
                todo = [vaddrs[v] or 0 for v in missing]
                backend = self.backend
                if isinstance(backend, InliningBackend):
                    got = self._parse(ref.path, debug.file,
                                      partial(backend.resolve_inlined, debug.file, todo))
                else:
                    flat = self._parse(ref.path, debug.file,
                                       partial(backend.resolve, debug.file, todo))
                    got = [(loc,) for loc in flat] if flat is not None else None
                fresh = {v: tuple(loc for loc in chain if loc.func or loc.file)
                         for v, chain in zip(missing, got or [], strict=False)}
                chains.update(fresh)
                # only what the debug info located: a debug file found later may name the rest
                located = {v: c for v, c in fresh.items() if c and c[0].line}
                if located:
                    for v, chain in located.items():
                        self._chains[(key, v)] = chain
                    disk = object_cache_file(key, self.backend.name) if self.disk_cache \
                        else None
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
                near = self._nearest(table, vaddr, ref.path) if table is not None else None
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


def _identity_key(obj: ElfFile | None, debug: ElfFile) -> str:
    """The key of answers that hold for these files alone: the object's
    identity (device, inode, size, mtime, ctime, owner), and the debug
    file's when it is another."""
    parts = [debug.file.identity]
    if obj is not None and obj.file.identity != debug.file.identity:
        parts.insert(0, obj.file.identity)
    return "+".join(":".join(str(x) for x in ident) for ident in parts)


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


def site_frame(func: str | None, file: str | None, line: int | None,
               frames: Sequence[Frame]) -> Frame | None:
    """The one frame that describes a site: where the program said it is
    (func, file and line it registered), else its first frame outside the
    allocator (`first_user_frame`); None when nothing known may be shown."""
    if file or func:
        return Frame.registered_at(func, file or "", line or 0)
    f = first_user_frame(frames)
    if f is None or (not f.object and not f.addr):
        return None
    return f


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
