"""Symbolization: addresses of a process -> function, file:line.

Two steps:

1. Maps. An address means something only with the process's memory map
   (/proc/PID/maps). `capture_maps` saves the map while the process lives
   (`pmctl run` does so while it waits; `leaks` and `logs` opportunistically)
   to the maps cache, keyed by (pid, start time in clock ticks, as field 22
   of /proc/PID/stat and as pmm_pid_info.start_time_ns / 10 ms), so a reused
   pid never picks up another process's map and symbolization still works
   after the process exited. `Mapping.translate` turns an address into
   (object path, file offset); `elf_vaddr` turns the file offset into the
   object's ELF virtual address through its PT_LOAD program headers.

2. Object files. `Symbolizer` resolves ELF vaddrs of one object to function,
   file and line, with one of two backends, measured (see
   `bench/symbolize_bench.py`, figures in the report):
   - "addr2line": binutils `addr2line -f -C -e OBJ ADDR...`, one process per
     object per batch (default: measured much faster on large objects);
   - "pyelftools": DWARF .debug_aranges -> CU -> line program, in process.
   $PMM_SYMBOLIZER selects one. Results are cached per (object, vaddr), in
   memory and on disk (keyed by the object's path, inode, size and mtime).

Return addresses are looked up at address-1 (the call instruction), so a
frame names the line of the call, not the line after it.

Cache directory: $PMM_CACHE_DIR, else $XDG_CACHE_HOME/pmm, else
~/.cache/pmm; if that is not writable (a read-only HOME), /tmp/pmm-<uid>.
Another user can create /tmp/pmm-<uid> first (to feed us forged maps and
symbols, or to make us write through their symlinks), so that one is used
only if it is a real directory (not a symlink) owned by us that no one else
may write; pmctl creates it 0700. Cache files are 0600 (maps hold a
process's addresses), never opened through a symlink, and written to a
temporary file that os.replace() moves into place.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pmm.model import Site

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
NS_PER_TICK = 1_000_000_000 // CLK_TCK


# -- maps ------------------------------------------------------------------


@dataclass(frozen=True)
class Mapping:
    """One line of /proc/PID/maps."""

    start: int
    end: int
    perms: str
    offset: int
    inode: int
    path: str  # "" for anonymous mappings

    def contains(self, addr: int) -> bool:
        return self.start <= addr < self.end

    @property
    def is_file(self) -> bool:
        return self.inode != 0 and self.path.startswith("/")

    @property
    def object_path(self) -> str:
        p = self.path
        return p[: -len(" (deleted)")] if p.endswith(" (deleted)") else p

    def translate(self, addr: int) -> int:
        """File offset of `addr` in the mapped object."""
        return addr - self.start + self.offset

    def line(self) -> str:
        return (
            f"{self.start:x}-{self.end:x} {self.perms} {self.offset:08x} 00:00 {self.inode}"
            + (f" {self.path}" if self.path else "")
        )


def parse_maps(text: str) -> list[Mapping]:
    """Mappings of a /proc/PID/maps text, sorted by start address."""
    out: list[Mapping] = []
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 5 or "-" not in parts[0]:
            continue
        lo, hi = parts[0].split("-", 1)
        try:
            m = Mapping(
                start=int(lo, 16),
                end=int(hi, 16),
                perms=parts[1],
                offset=int(parts[2], 16),
                inode=int(parts[4]),
                path=parts[5].strip() if len(parts) > 5 else "",
            )
        except ValueError:
            continue
        out.append(m)
    out.sort(key=lambda m: m.start)
    return out


def merge_maps(old: Iterable[Mapping], new: Iterable[Mapping]) -> list[Mapping]:
    """The new map plus old file mappings that no new mapping overlaps
    (a library unloaded since the last capture keeps its addresses)."""
    new_l = sorted(new, key=lambda m: m.start)
    out = list(new_l)
    for m in old:
        if not m.is_file:
            continue
        if any(n.start < m.end and m.start < n.end for n in new_l):
            continue
        out.append(m)
    out.sort(key=lambda m: m.start)
    return out


def find_mapping(maps: Sequence[Mapping], addr: int) -> Mapping | None:
    starts = [m.start for m in maps]
    i = bisect.bisect_right(starts, addr) - 1
    if i >= 0 and maps[i].contains(addr):
        return maps[i]
    return None


def proc_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks since boot)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: split after the last ')'
    rest = stat[stat.rfind(")") + 2 :].split()
    try:
        return int(rest[19])  # fields 3.. -> index 0 is field 3; 22 - 3 = 19
    except (IndexError, ValueError):
        return None


def ticks_from_ns(start_time_ns: int) -> int:
    return start_time_ns // NS_PER_TICK


def _tmp_root() -> Path:
    return Path(f"/tmp/pmm-{os.geteuid()}")


def _private(d: Path) -> bool:
    """d is a real directory (lstat: not a symlink) of ours that only we may
    write: what the shared /tmp fallback must be before we trust it."""
    try:
        st = os.lstat(d)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
            and not st.st_mode & 0o022)


def _writable_dir(d: Path) -> bool:
    tmp = _tmp_root()
    if d == tmp or tmp in d.parents:
        # only our own 0700 directory, never one someone else made first
        for p in (tmp, *(q for q in reversed(d.parents) if tmp in q.parents), d):
            try:
                os.mkdir(p, 0o700)
            except FileExistsError:
                pass
            except OSError:
                return False
            if not _private(p):
                return False
        return os.access(d, os.W_OK | os.X_OK)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(d, os.W_OK | os.X_OK)


def _readable_dir(d: Path) -> bool:
    tmp = _tmp_root()
    if d == tmp or tmp in d.parents:
        return all(_private(p) for p in (tmp, *(q for q in d.parents if tmp in q.parents), d))
    return d.is_dir()


def cache_dirs() -> list[Path]:
    """Candidate cache roots, most preferred first."""
    out: list[Path] = []
    env = os.environ.get("PMM_CACHE_DIR")
    if env:
        out.append(Path(env))
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):  # the XDG spec ignores a relative one
        out.append(Path(xdg) / "pmm")
    home = os.environ.get("HOME")
    if not home:
        import pwd

        try:
            home = pwd.getpwuid(os.geteuid()).pw_dir
        except KeyError:
            home = None
    if home:
        out.append(Path(home) / ".cache" / "pmm")
    out.append(_tmp_root())
    return out


def maps_cache_dir(create: bool = True) -> Path | None:
    """The first writable cache root's maps/ directory (create=False: the
    first existing one)."""
    for root in cache_dirs():
        d = root / "maps"
        if not create:
            if _readable_dir(d):
                return d
            continue
        if _writable_dir(d):
            return d
    return None


def _read_text(path: Path) -> str:
    """A cache file's text; OSError if absent, or a symlink (O_NOFOLLOW)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with open(fd, encoding="utf-8", errors="replace") as f:
        return f.read()


def _write_text(path: Path, text: str) -> None:
    """Replaces a cache file: a new 0600 temporary file in the same
    directory (O_EXCL, so never someone's symlink), then os.replace (which
    replaces a symlink at `path` rather than writing through it)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _cache_name(pid: int, ticks: int) -> str:
    return f"{pid}-{ticks}"


def load_cached_maps(pid: int, start_ticks: int | None) -> list[Mapping] | None:
    """The cached map of (pid, start); start_ticks None: the newest for pid.
    A start time one tick off still matches (rounding)."""
    best: tuple[int, Path] | None = None
    for root in cache_dirs():
        d = root / "maps"
        if not _readable_dir(d):
            continue
        for f in d.glob(f"{pid}-*"):
            try:
                ticks = int(f.name.split("-", 1)[1])
            except ValueError:
                continue
            if start_ticks is None:
                if best is None or ticks > best[0]:
                    best = (ticks, f)
            elif abs(ticks - start_ticks) <= 1:
                best = (ticks, f)
                break
        if best is not None and start_ticks is not None:
            break
    if best is None:
        return None
    try:
        return parse_maps(_read_text(best[1]))
    except OSError:
        return None


def save_maps(pid: int, ticks: int, maps: Sequence[Mapping]) -> Path | None:
    """Writes the map (merged with what is cached) atomically; None: no cache dir."""
    d = maps_cache_dir()
    if d is None:
        return None
    path = d / _cache_name(pid, ticks)
    try:
        old = parse_maps(_read_text(path))
    except OSError:
        old = []
    merged = merge_maps(old, maps)
    try:
        _write_text(path, "".join(m.line() + "\n" for m in merged))
    except OSError:
        return None
    return path


def read_live_maps(pid: int) -> tuple[int, list[Mapping]] | None:
    """(start ticks, mappings) of a live process, None if gone/unreadable."""
    ticks = proc_start_ticks(pid)
    if ticks is None:
        return None
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None
    maps = parse_maps(text)
    if not maps or proc_start_ticks(pid) != ticks:
        return None  # exited (empty maps) or the pid was reused meanwhile
    return ticks, maps


def capture_maps(pid: int) -> Path | None:
    """Saves the live process's map to the cache; None if it is not alive."""
    live = read_live_maps(pid)
    if live is None:
        return None
    return save_maps(pid, live[0], live[1])


def maps_for(pid: int, start_time_ns: int | None = None) -> list[Mapping] | None:
    """The map of pid: live when it is the same process (and then cached
    too), else the cached one. start_time_ns: pmm_pid_info.start_time_ns."""
    want = ticks_from_ns(start_time_ns) if start_time_ns else None
    live = read_live_maps(pid)
    if live is not None and (want is None or abs(live[0] - want) <= 1):
        save_maps(pid, live[0], live[1])
        cached = load_cached_maps(pid, live[0])
        return cached if cached is not None else live[1]
    return load_cached_maps(pid, want)


# -- ELF -------------------------------------------------------------------


@dataclass(frozen=True)
class LoadSegment:
    offset: int
    filesz: int
    vaddr: int


_segments_cache: dict[tuple[str, int, int], list[LoadSegment] | None] = {}


def _file_key(path: str) -> tuple[str, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (path, st.st_ino, int(st.st_mtime_ns))


def load_segments(path: str) -> list[LoadSegment] | None:
    """PT_LOAD segments of an ELF object; None if unreadable or not ELF."""
    key = _file_key(path)
    if key is None:
        return None
    if key in _segments_cache:
        return _segments_cache[key]
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    segs: list[LoadSegment] | None
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            segs = [
                LoadSegment(s["p_offset"], s["p_filesz"], s["p_vaddr"])
                for s in elf.iter_segments()
                if s["p_type"] == "PT_LOAD"
            ]
    except (OSError, ELFError):
        segs = None
    _segments_cache[key] = segs
    return segs


def elf_vaddr(path: str, file_offset: int) -> int | None:
    """ELF virtual address of a file offset, through the PT_LOAD headers."""
    segs = load_segments(path)
    if not segs:
        return None
    for s in segs:
        if s.offset <= file_offset < s.offset + max(s.filesz, 1):
            return file_offset - s.offset + s.vaddr
    return None


# -- backends --------------------------------------------------------------


@dataclass(frozen=True)
class SourceLoc:
    func: str | None
    file: str | None
    line: int | None


def _parse_fileline(s: str) -> tuple[str | None, int | None]:
    s = s.split(" (discriminator", 1)[0].strip()
    if s.startswith("??"):
        return None, None
    file, _, line = s.rpartition(":")
    if not file:
        return None, None
    try:
        n = int(line)
    except ValueError:
        return file, None
    return file, (n if n > 0 else None)


# a huge object's debug info may take long: not longer than this (pmd waits)
ADDR2LINE_TIMEOUT_S = 120


class Addr2line:
    """binutils addr2line, batched: one process per object and batch."""

    name = "addr2line"

    def __init__(self, exe: str | None = None) -> None:
        self.exe = exe or shutil.which("addr2line") or "addr2line"

    def available(self) -> bool:
        return shutil.which(self.exe) is not None or Path(self.exe).exists()

    def resolve(self, path: str, vaddrs: Sequence[int]) -> list[SourceLoc]:
        if not vaddrs:
            return []
        try:
            r = subprocess.run(
                [self.exe, "-f", "-C", "-e", path, *(f"0x{a:x}" for a in vaddrs)],
                capture_output=True,
                text=True,
                check=False,
                timeout=ADDR2LINE_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired):
            return [SourceLoc(None, None, None)] * len(vaddrs)
        lines = r.stdout.splitlines()
        out: list[SourceLoc] = []
        for i in range(len(vaddrs)):
            func = lines[2 * i] if 2 * i < len(lines) else "??"
            fl = lines[2 * i + 1] if 2 * i + 1 < len(lines) else "??:0"
            file, line = _parse_fileline(fl)
            out.append(SourceLoc(None if func == "??" else func, file, line))
        return out


class PyElfTools:
    """pyelftools: .debug_aranges -> CU -> line program; .symtab for names."""

    name = "pyelftools"

    def __init__(self) -> None:
        self._objs: dict[str, Any] = {}

    def available(self) -> bool:
        return True

    def _open(self, path: str) -> Any:
        if path not in self._objs:
            from elftools.elf.elffile import ELFFile

            f = open(path, "rb")  # noqa: SIM115 - kept open for lazy DWARF parsing
            elf = ELFFile(f)
            dwarf = elf.get_dwarf_info() if elf.has_dwarf_info() else None
            syms: list[tuple[int, int, str]] = []
            for secname in (".symtab", ".dynsym"):
                sec = elf.get_section_by_name(secname)
                if sec is None:
                    continue
                for s in sec.iter_symbols():  # type: ignore[attr-defined]
                    if s["st_info"]["type"] == "STT_FUNC" and s["st_value"]:
                        syms.append((s["st_value"], s["st_size"], s.name))
                if syms:
                    break
            syms.sort()
            aranges = dwarf.get_aranges() if dwarf is not None else None
            self._objs[path] = (f, dwarf, aranges, syms, {})
        return self._objs[path]

    def _lines_for_cu(self, dwarf: Any, cu: Any, cache: dict[int, Any]) -> Any:
        if cu.cu_offset in cache:
            return cache[cu.cu_offset]
        lp = dwarf.line_program_for_CU(cu)
        rows: list[tuple[int, str, int]] = []
        if lp is not None:
            version = lp.header["version"]
            files = lp.header["file_entry"]
            dirs = lp.header["include_directory"]
            for entry in lp.get_entries():
                st = entry.state
                if st is None or st.end_sequence:
                    if st is not None:
                        rows.append((st.address, "", 0))
                    continue
                idx = st.file if version >= 5 else st.file - 1
                fname = "??"
                if 0 <= idx < len(files):
                    fe = files[idx]
                    fname = fe.name.decode() if isinstance(fe.name, bytes) else str(fe.name)
                    di = fe.dir_index if version >= 5 else fe.dir_index - 1
                    if not fname.startswith("/") and 0 <= di < len(dirs):
                        d = dirs[di]
                        d = d.decode() if isinstance(d, bytes) else str(d)
                        fname = f"{d}/{fname}"
                rows.append((st.address, fname, st.line))
        rows.sort(key=lambda r: r[0])
        # function ranges from the CU's DIEs
        funcs: list[tuple[int, int, str]] = []
        for die in cu.iter_DIEs():
            if die.tag != "DW_TAG_subprogram":
                continue
            lo = die.attributes.get("DW_AT_low_pc")
            hi = die.attributes.get("DW_AT_high_pc")
            nm = die.attributes.get("DW_AT_name")
            if lo is None or hi is None or nm is None:
                continue
            low = lo.value
            high = hi.value if hi.form == "DW_FORM_addr" else low + hi.value
            funcs.append((low, high, nm.value.decode()))
        cache[cu.cu_offset] = (rows, funcs)
        return cache[cu.cu_offset]

    def resolve(self, path: str, vaddrs: Sequence[int]) -> list[SourceLoc]:
        try:
            _f, dwarf, aranges, syms, cache = self._open(path)
        except Exception:  # noqa: BLE001 - any parse failure: unknown
            return [SourceLoc(None, None, None)] * len(vaddrs)
        out: list[SourceLoc] = []
        sym_addrs = [s[0] for s in syms]
        for a in vaddrs:
            func: str | None = None
            file: str | None = None
            line: int | None = None
            if dwarf is not None:
                cu_off = aranges.cu_offset_at_addr(a) if aranges is not None else None
                if cu_off is not None:
                    cu = dwarf.get_CU_at(cu_off)
                    rows, funcs = self._lines_for_cu(dwarf, cu, cache)
                    addrs = [r[0] for r in rows]
                    i = bisect.bisect_right(addrs, a) - 1
                    if i >= 0 and rows[i][2]:
                        file, line = rows[i][1], rows[i][2]
                    for lo, hi, nm in funcs:
                        if lo <= a < hi:
                            func = nm
                            break
            if func is None and syms:
                i = bisect.bisect_right(sym_addrs, a) - 1
                if i >= 0 and syms[i][0] <= a < syms[i][0] + max(syms[i][1], 1):
                    func = syms[i][2]
            out.append(SourceLoc(func, file, line))
        return out


def make_backend(name: str | None = None) -> Addr2line | PyElfTools:
    """$PMM_SYMBOLIZER ("addr2line" or "pyelftools"); addr2line by default,
    pyelftools when binutils is not installed."""
    name = name or os.environ.get("PMM_SYMBOLIZER") or "addr2line"
    if name == "pyelftools":
        return PyElfTools()
    a = Addr2line()
    return a if a.available() else PyElfTools()


# -- frames ----------------------------------------------------------------


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
        return {
            "addr": self.addr,
            "object": self.object,
            "offset": self.offset,
            "func": self.func,
            "file": self.file,
            "line": self.line,
        }


def sym_cache_file(path: str, backend: str) -> Path | None:
    """The on-disk cache of one object's lookups: keyed by path, inode, size
    and mtime, so a rebuilt object never reuses stale answers."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    d = None
    for root in cache_dirs():
        if _writable_dir(root / "sym"):
            d = root / "sym"
            break
    if d is None:
        return None
    key = f"{path}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{backend}"
    return d / (hashlib.sha1(key.encode()).hexdigest() + ".json")


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
        backend: Addr2line | PyElfTools | None = None,
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
            raw = json.loads(_read_text(f))
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
            _write_text(f, json.dumps(data))

    def symbolize(self, addrs: Iterable[int]) -> dict[int, Frame]:
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
            if missing:
                for v, loc in zip(missing, self.backend.resolve(path, missing), strict=True):
                    self._cache[(path, v)] = loc
                self._save_disk(path)
            for a, off, v in items:
                loc = self._cache[(path, v)]
                frames[a] = Frame(a, path, off, loc.func, loc.file, loc.line)
        return frames


def describe_sites(sites: Iterable[Site], maps: Sequence[Mapping] | None) -> dict[int, str]:
    """Each site's one-line description: where the shim said it is
    ('leak() leak.c:30'), else its first frame symbolized with the process's
    map (a hook preloaded or attached without the shim: the same form), else
    'caller 0x...'."""
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
        out[s.site] = f.describe() if f and f.object else f"caller 0x{s.frames[0]:x}"
    return out
