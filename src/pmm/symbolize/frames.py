"""Symbolized frames: `Symbolizer` batches a process's addresses per object,
caches the answers in memory and on disk, and `describe_sites` names sites."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pmm.model import Site
from pmm.symbolize.backends import Backend, SourceLoc, make_backend, warn_no_backend
from pmm.symbolize.cache import read_text, sym_cache_file, write_text
from pmm.symbolize.elf import elf_vaddr
from pmm.symbolize.maps import Mapping, find_mapping


@dataclass(frozen=True)
class Frame:
    """A symbolized address."""

    addr: int
    object: str | None = None  # path of the mapped object
    offset: int | None = None  # file offset in it
    func: str | None = None
    file: str | None = None
    line: int | None = None

    @property
    def object_name(self) -> str | None:
        """The mapped object's file name without its directory, or None."""
        return os.path.basename(self.object) if self.object else None

    def where(self) -> str:
        """'file.c:12' when known, else 'libc.so.6+0x2a1ca', else '0x...'."""
        if self.file and self.line:
            return f"{os.path.basename(self.file)}:{self.line}"
        if self.object and self.offset is not None:
            return f"{self.object_name}+0x{self.offset:x}"
        return f"0x{self.addr:x}"

    def describe(self) -> str:
        """'main() leak.c:12', 'malloc (libc.so.6+0x9a1ca)', '0x7f...'."""
        if self.func and self.file and self.line:
            return f"{self.func}() {self.where()}"
        if self.func:
            obj = f" ({self.where()})" if self.object else ""
            return f"{self.func}(){obj}"
        return self.where()

    def as_dict(self) -> dict[str, Any]:
        """The JSON form: address, object, file offset, function, file and line
        (None where unknown)."""
        return {
            "addr": self.addr,
            "object": self.object,
            "offset": self.offset,
            "func": self.func,
            "file": self.file,
            "line": self.line,
        }


class Symbolizer:
    """Symbolizes addresses of one process, given its mappings.

    `symbolize(addrs)` batches the lookups per object (one addr2line process
    per object); results are cached per (object, vaddr) in memory and on
    disk (`sym/` in the cache directory), so repeated `pmctl leaks` runs do
    not pay for large objects again. `disk_cache=False` turns the disk off.
    """

    def __init__(
        self,
        maps: Sequence[Mapping] | None,
        backend: Backend | None = None,
        return_addresses: bool = True,
        disk_cache: bool = True,
    ) -> None:
        self.maps = list(maps or [])
        self.backend = backend or make_backend()
        self.return_addresses = return_addresses
        self.disk_cache = disk_cache
        self._cache: dict[tuple[str, int], SourceLoc] = {}

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
                frames[a] = (Frame(a, path, off, known.func, known.file, known.line) if known
                             else Frame(a, path, off))
        return frames


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
