"""ELF objects, read with struct (no pyelftools, which only the pyelftools
back-end needs): `ElfFile`: program and section headers, GNU build-id,
.gnu_debuglink and .gnu_debugaltlink, whether DWARF is there, function
symbols and the nearest one to an address; a file offset to the object's
virtual address through its PT_LOAD program headers (`elf_vaddr`); and a
separate debug file's program headers with the object's file offsets
rebuilt (`debug_file_load_segments`).

The files are a monitored process's, written by its owner: every offset,
size, count and index is checked against the file and against fixed bounds
before it is used, and anything out of bounds raises `MalformedElf` (a
ValueError) saying what, never another exception, and never a read or loop
whose size the file chooses beyond those bounds. Files are read through
descriptors opened by `pmm.symbolize.opening`.
"""

from __future__ import annotations

import bisect
import collections
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from pmm.symbolize.opening import OpenFile, open_path


class MalformedElf(ValueError):
    """The file is not ELF, or its headers or tables are out of bounds: one
    line saying which."""


@dataclass(frozen=True)
class LoadSegment:
    """One PT_LOAD program header: file offset, size in the file, virtual address."""

    offset: int
    filesz: int
    vaddr: int


PT_LOAD = 1
PT_NOTE = 4
_PN_XNUM = 0xFFFF  # e_phnum's "see section header 0's sh_info"
_SHN_XINDEX = 0xFFFF  # e_shstrndx's "see section header 0's sh_link"
SHT_SYMTAB = 2
SHT_NOTE = 7
SHT_NOBITS = 8
SHT_DYNSYM = 11
SHF_ALLOC = 0x2
NT_GNU_BUILD_ID = 3
STT_FUNC = 2
STT_GNU_IFUNC = 10
_SHN_LORESERVE = 0xFF00
# per ELF class (1: 32-bit, 2: 64-bit): the ELF header after e_ident (e_type ..
# e_shstrndx), a program header, a section header (sh_name, sh_type, sh_flags,
# sh_addr, sh_offset, sh_size, sh_link, sh_info, sh_addralign, sh_entsize)
_EHDR = {1: "HHIIIIIHHHHHH", 2: "HHIQQQIHHHHHH"}
_PHDR = {1: "IIIIIIII", 2: "IIQQQQQQ"}
_SHDR = {1: "IIIIIIIIII", 2: "IIQQQQIIQQ"}
# a symbol, per class: (name, info, shndx, value, size) at these positions
_SYM = {1: "IIIBBH", 2: "IBBHQQ"}
# DWARF lives in these (.zdebug_*: the old GNU compressed form)
_DEBUG_INFO = (".debug_info", ".zdebug_info")
_DEBUG_LINE = (".debug_line", ".zdebug_line")
# bounds no real object comes near: a table, the headers, a name, a build-id
_MAX_TABLE = 64 << 20
_MAX_PHDRS = _PN_XNUM
_MAX_SECTIONS = 1 << 18
_MAX_NAME = 64 << 10
_MAX_LINK = 4096  # a debug link's file name (PATH_MAX)
_MAX_BUILD_ID = 64


@dataclass(frozen=True)
class ProgramHeader:
    """One program header: type, file offset and size, vaddr, memory size, alignment."""

    type: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int
    align: int


@dataclass(frozen=True)
class Section:
    """One section header, with its name."""

    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    entsize: int

    @property
    def has_data(self) -> bool:
        """Whether the file holds its bytes (a separate debug file keeps the
        stripped sections' headers as SHT_NOBITS, without their bytes)."""
        return self.type != SHT_NOBITS and self.size > 0


@dataclass(frozen=True)
class FuncSymbol:
    """A function symbol: its address, size, section index, binding and name."""

    value: int
    size: int
    shndx: int
    bind: int
    name: str


def _cstring(data: bytes, at: int, limit: int, what: str) -> bytes:
    """The NUL-terminated string at `at` in data, at most limit bytes long."""
    if not 0 <= at < len(data):
        raise MalformedElf(f"{what} at {at:#x} is outside its table of {len(data)} bytes")
    end = data.find(b"\0", at, at + limit + 1)
    if end < 0:
        raise MalformedElf(f"{what} at {at:#x} has no end within {limit} bytes")
    return data[at:end]


class ElfFile:
    """The headers of an ELF file, read once; sections and symbols on demand.

    `ElfFile.load(f)` reads an open file (MalformedElf if it is not ELF or
    out of bounds); `ElfFile.of(f)` the same, remembered by the file's
    identity; `ElfFile.open(path)` a path of the caller's own, None for what
    is not a readable ELF file."""

    def __init__(self, file: OpenFile, cls: int, order: str, phdrs: list[ProgramHeader],
                 sections: list[Section]) -> None:
        self.file = file
        self.path = file.path
        self.cls = cls
        self.order = order
        self.phdrs = phdrs
        self.sections = sections
        self._symbols: list[FuncSymbol] | MalformedElf | None = None
        self._addrs: list[int] | None = None

    @classmethod
    def load(cls, file: OpenFile) -> ElfFile:
        """The file's headers, checked (see the module's docstring)."""
        return _read_elf(file)

    @classmethod
    def of(cls, file: OpenFile) -> ElfFile:
        """`load`, remembered by the file's identity (device, inode, size,
        mtime, ctime, owner): the same bytes are parsed once."""
        key = file.identity
        with _elf_lock:  # pmd symbolizes in its worker and its HTTP threads
            known = _elf_cache.get(key)
            if known is not None:
                _elf_cache.move_to_end(key)
        if known is None:
            try:
                known = cls.load(file)
            except MalformedElf as e:
                known = e
            with _elf_lock:
                if len(_elf_cache) >= _ELF_CACHE_MAX:  # a long-lived pmd sees objects come and go
                    _elf_cache.popitem(last=False)
                _elf_cache[key] = known
        if isinstance(known, MalformedElf):
            raise known
        return known

    @classmethod
    def open(cls, path: str) -> ElfFile | None:
        """The headers of the file at a path of the caller's own
        (`open_path`); None if it is unreadable, not a regular file, not ELF
        or malformed."""
        try:
            return cls.of(open_path(path))
        except (OSError, MalformedElf):
            return None

    def section(self, name: str) -> Section | None:
        """The first section of that name, or None."""
        return next((s for s in self.sections if s.name == name), None)

    def read(self, offset: int, size: int, what: str = "data") -> bytes:
        """size bytes at offset in the file; MalformedElf if they are not
        all in it (or more than a table may be)."""
        return _read(self.file, offset, size, what)

    @property
    def load_segments(self) -> list[LoadSegment]:
        """Its PT_LOAD headers as they are in this file."""
        return [LoadSegment(p.offset, p.filesz, p.vaddr) for p in self.phdrs if p.type == PT_LOAD]

    @property
    def build_id(self) -> str | None:
        """The GNU build-id (NT_GNU_BUILD_ID note) in lowercase hex, or None.
        A PT_NOTE outside the file is skipped (a separate debug file keeps
        the object's program headers, not their bytes)."""
        for s in self.sections:
            if s.type == SHT_NOTE and s.has_data:
                found = _build_id_in_notes(self.read(s.offset, s.size, "a note"), self.order)
                if found:
                    return found
        for p in self.phdrs:
            if p.type != PT_NOTE or not p.filesz:
                continue
            try:
                found = _build_id_in_notes(self.read(p.offset, p.filesz, "a note"), self.order)
            except MalformedElf:
                continue
            if found:
                return found
        return None

    @property
    def has_debug_info(self) -> bool:
        """Whether it carries DWARF with line tables (.debug_info and .debug_line)."""
        names = {s.name for s in self.sections if s.has_data}
        return any(n in names for n in _DEBUG_INFO) and any(n in names for n in _DEBUG_LINE)

    def _link_section(self, name: str) -> bytes | None:
        s = self.section(name)
        if s is None or not s.has_data:
            return None
        return self.read(s.offset, min(s.size, _MAX_LINK + 1 + 4 + _MAX_BUILD_ID), name)

    @property
    def debuglink(self) -> tuple[str, int] | None:
        """Its .gnu_debuglink: the debug file's name (a file name, no
        directory) and the CRC-32 of its bytes."""
        raw = self._link_section(".gnu_debuglink")
        if raw is None:
            return None
        name = _cstring(raw, 0, _MAX_LINK, "the .gnu_debuglink name")
        crc_at = (len(name) + 1 + 3) & ~3  # the CRC follows the name, 4-aligned
        if not name or len(raw) < crc_at + 4:
            raise MalformedElf(".gnu_debuglink is cut short")
        if b"/" in name:
            raise MalformedElf(f".gnu_debuglink names a path ({name!r}), not a file name")
        (crc,) = struct.unpack_from(self.order + "I", raw, crc_at)
        return name.decode(errors="surrogateescape"), crc

    @property
    def debugaltlink(self) -> tuple[str, str] | None:
        """Its .gnu_debugaltlink (dwz's common debug file): the path it
        names, as written, and that file's build-id in hex."""
        raw = self._link_section(".gnu_debugaltlink")
        if raw is None:
            return None
        name = _cstring(raw, 0, _MAX_LINK, "the .gnu_debugaltlink name")
        if not name:
            raise MalformedElf(".gnu_debugaltlink names nothing")
        return name.decode(errors="surrogateescape"), raw[len(name) + 1:].hex()

    def function_symbols(self) -> list[FuncSymbol]:
        """Its defined function symbols, by address: .symtab's, else .dynsym's
        (a stripped object keeps only the dynamic ones). MalformedElf if the
        table is out of bounds (every time it is asked)."""
        if isinstance(self._symbols, MalformedElf):
            raise self._symbols
        if self._symbols is None:
            found: list[FuncSymbol] = []
            try:
                for kind in (SHT_SYMTAB, SHT_DYNSYM):
                    table = next((s for s in self.sections if s.type == kind and s.has_data),
                                 None)
                    if table is not None:
                        found = self._read_symbols(table)
                    if found:
                        break
            except MalformedElf as e:
                self._symbols = e
                raise
            found.sort(key=lambda s: (s.value, s.name))
            self._symbols = found
        return self._symbols

    def _read_symbols(self, table: Section) -> list[FuncSymbol]:
        if not 0 < table.link < len(self.sections):
            raise MalformedElf(f"symbol table {table.name!r} links to section {table.link} "
                               f"of {len(self.sections)}")
        strtab = self.sections[table.link]
        strings = self.read(strtab.offset, strtab.size, "a string table") \
            if strtab.has_data else b""
        raw = self.read(table.offset, table.size, "a symbol table")
        sym = struct.Struct(self.order + _SYM[self.cls])
        # names may share bytes (suffixes), but never more than this in all:
        # overlapping names pointed at one long run would cost its length each
        budget = 2 * len(strings) + (1 << 20)
        names: dict[int, str] = {}
        out: list[FuncSymbol] = []
        for n, fields in enumerate(sym.iter_unpack(raw[: len(raw) - len(raw) % sym.size])):
            if self.cls == 2:
                name_at, info, _, shndx, value, size = fields
            else:
                name_at, value, size, info, _, shndx = fields
            if info & 0xF not in (STT_FUNC, STT_GNU_IFUNC) or not value \
                    or shndx == 0 or shndx >= _SHN_LORESERVE:
                continue
            name = names.get(name_at)
            if name is None:
                text = _cstring(strings, name_at, _MAX_NAME, f"symbol {n}'s name")
                budget -= len(text) + 1
                if budget < 0:
                    raise MalformedElf(f"symbol table {table.name!r}: its names overlap "
                                       "beyond the size of their string table")
                name = names[name_at] = text.decode(errors="replace")
            if name:
                out.append(FuncSymbol(value, size, shndx, info >> 4, name))
        return out

    def nearest_symbol(self, vaddr: int) -> tuple[str, int] | None:
        """(name, vaddr - its address) of the function symbol holding vaddr,
        else of the nearest one before it in the same section; None if none.
        MalformedElf if the symbol table is out of bounds."""
        syms = self.function_symbols()
        if self._addrs is None:
            self._addrs = [s.value for s in syms]
        i = bisect.bisect_right(self._addrs, vaddr)
        # symbols do not nest: one that holds vaddr is among the last before it
        near = syms[max(0, i - 64):i]
        holding = [s for s in near if vaddr < s.value + s.size]
        if holding:
            best = max(holding, key=lambda s: (s.value, _symbol_rank(s)))
            return best.name, vaddr - best.value
        sec = next((n for n, s in enumerate(self.sections)
                    if s.flags & SHF_ALLOC and s.addr <= vaddr < s.addr + s.size), None)
        same = [s for s in near if sec is None or s.shndx == sec]
        if not same:
            return None
        top = max(s.value for s in same)
        best = max((s for s in same if s.value == top), key=_symbol_rank)
        return best.name, vaddr - best.value


def _symbol_rank(s: FuncSymbol) -> tuple[int, int, int]:
    """Among aliases at one address, the one to show: a public name (no
    leading '_') over an internal one, global over weak over local, then the
    shortest ('strdup', not its global alias '__strdup')."""
    bind = {1: 2, 2: 1}.get(s.bind, 0)
    return int(not s.name.startswith("_")), bind, -len(s.name)


_elf_cache: collections.OrderedDict[tuple[int, ...], ElfFile | MalformedElf] = \
    collections.OrderedDict()
_ELF_CACHE_MAX = 64  # each holds its file open
_elf_lock = threading.Lock()


def _read(file: OpenFile, offset: int, size: int, what: str) -> bytes:
    """size bytes at offset of file, all of them in it, or MalformedElf."""
    if size > _MAX_TABLE:
        raise MalformedElf(f"{what} of {size} bytes (more than {_MAX_TABLE})")
    if offset < 0 or size < 0 or offset + size > file.st.st_size:
        raise MalformedElf(f"{what} at {offset:#x}+{size:#x} is outside the file "
                           f"({file.st.st_size} bytes)")
    data = file.pread(size, offset)
    if len(data) < size:
        raise MalformedElf(f"{what} at {offset:#x}: the file is shorter than it said")
    return data


def _read_elf(file: OpenFile) -> ElfFile:
    ident = file.pread(16, 0)
    if len(ident) < 16 or ident[:4] != b"\x7fELF":
        raise MalformedElf("not an ELF file")
    if ident[4] not in (1, 2) or ident[5] not in (1, 2):
        raise MalformedElf(f"unknown ELF class {ident[4]} or byte order {ident[5]}")
    cls = ident[4]
    order = "<" if ident[5] == 1 else ">"
    ehdr = struct.Struct(order + _EHDR[cls])
    fields = ehdr.unpack(_read(file, 16, ehdr.size, "the ELF header"))
    _, _, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, shstrndx = fields
    phdr = struct.Struct(order + _PHDR[cls])
    shdr = struct.Struct(order + _SHDR[cls])

    def table(what: str, off: int, entsize: int, count: int, size: int, most: int
              ) -> list[bytes]:
        if count == 0 or off == 0:
            return []
        if count > most:
            raise MalformedElf(f"{count} {what} (at most {most})")
        if entsize < size:
            raise MalformedElf(f"{what} of {entsize} bytes each (less than {size})")
        data = _read(file, off, count * entsize, what)
        return [data[i * entsize:i * entsize + size] for i in range(count)]

    # extended numbering: the real counts in section header 0
    if shoff and (shnum == 0 or phnum == _PN_XNUM or shstrndx == _SHN_XINDEX):
        (sh0,) = table("section headers", shoff, shentsize, 1, shdr.size, 1)
        _, _, _, _, _, size0, link0, info0, _, _ = shdr.unpack(sh0)
        shnum = shnum or size0
        shstrndx = link0 if shstrndx == _SHN_XINDEX else shstrndx
        phnum = info0 if phnum == _PN_XNUM else phnum
    praw = table("program headers", phoff, phentsize, phnum, phdr.size, _MAX_PHDRS)
    sraw = table("section headers", shoff, shentsize, shnum, shdr.size, _MAX_SECTIONS)
    phdrs: list[ProgramHeader] = []
    for raw in praw:
        pf = phdr.unpack(raw)
        if cls == 2:
            p_type, _, offset, vaddr, _, filesz, memsz, align = pf
        else:
            p_type, offset, vaddr, _, filesz, memsz, _, align = pf
        phdrs.append(ProgramHeader(p_type, offset, vaddr, filesz, memsz, align))
    heads = [shdr.unpack(raw) for raw in sraw]
    names = b""
    if heads and shstrndx:
        if shstrndx >= len(heads):
            raise MalformedElf(f"section names in section {shstrndx} of {len(heads)}")
        _, typ, _, _, off, size, _, _, _, _ = heads[shstrndx]
        if typ != SHT_NOBITS:
            names = _read(file, off, size, "the section names")
    sections: list[Section] = []
    for n, (name_at, typ, flags, addr, off, size, link, _, _, entsize) in enumerate(heads):
        name = _cstring(names, name_at, _MAX_NAME, f"section {n}'s name").decode(
            errors="replace") if names else ""
        if typ != SHT_NOBITS and size and off + size > file.st.st_size:
            raise MalformedElf(f"section {n} ({name!r}) at {off:#x}+{size:#x} is outside "
                               f"the file ({file.st.st_size} bytes)")
        sections.append(Section(name, typ, flags, addr, off, size, link, entsize))
    return ElfFile(file, cls, order, phdrs, sections)


def _build_id_in_notes(data: bytes, order: str) -> str | None:
    """The NT_GNU_BUILD_ID descriptor of a run of ELF notes, in hex."""
    at = 0
    while at + 12 <= len(data):
        namesz, descsz, ntype = struct.unpack_from(order + "III", data, at)
        name_at = at + 12
        desc_at = name_at + ((namesz + 3) & ~3)
        end = desc_at + ((descsz + 3) & ~3)
        if end > len(data):
            raise MalformedElf(f"a note at {at:#x} of {namesz}+{descsz} bytes runs past its "
                               f"section ({len(data)} bytes)")
        if ntype == NT_GNU_BUILD_ID and data[name_at:name_at + namesz] == b"GNU\0" and descsz:
            if descsz > _MAX_BUILD_ID:
                raise MalformedElf(f"a build-id of {descsz} bytes (at most {_MAX_BUILD_ID})")
            return data[desc_at:desc_at + descsz].hex()
        at = end
    return None


def same_layout(obj: ElfFile, debug: ElfFile) -> bool:
    """Whether the object's PT_LOAD file offsets and vaddrs are the ones its
    separate debug file's program headers give (`debug_file_load_segments`):
    then an answer by file offset from the debug file does not depend on the
    object's own headers."""
    mine = obj.load_segments
    rebuilt = debug_file_load_segments(debug)
    return bool(mine) and len(mine) == len(rebuilt) and all(
        (a.offset, a.vaddr) == (b.offset, b.vaddr) for a, b in zip(mine, rebuilt, strict=True)
    ) and all(a.filesz == b.filesz for a, b in zip(mine[:-1], rebuilt[:-1], strict=True))


def load_segments(path: str) -> list[LoadSegment] | None:
    """PT_LOAD segments of the ELF object at path (a path of the caller's);
    None if unreadable, not ELF or malformed."""
    elf = ElfFile.open(path)
    return elf.load_segments if elf is not None else None


def elf_vaddr(path: str, file_offset: int) -> int | None:
    """ELF virtual address of a file offset of the object at path, through
    its PT_LOAD headers."""
    segs = load_segments(path)
    return vaddr_in(segs, file_offset) if segs else None


def read_build_id(path: str) -> str | None:
    """The GNU build-id of the ELF file at path, lowercase hex; None if it has
    none or is not a readable, well-formed ELF file."""
    elf = ElfFile.open(path)
    try:
        return elf.build_id if elf is not None else None
    except MalformedElf:
        return None


def debug_file_load_segments(elf: ElfFile) -> list[LoadSegment]:
    """The object's PT_LOAD file offsets, rebuilt from a separate debug file
    (objcopy --only-keep-debug) when the object itself is gone.

    Such a file keeps each PT_LOAD's vaddr, memory size and alignment but not
    its file offset or size. Linkers (GNU ld, gold, lld) place each segment at
    the first offset past the previous one that is congruent to its vaddr
    modulo its alignment, the first at 0 (it holds the ELF header); a segment
    before the last has no .bss, so its file size is its memory size. Checked
    against every libc6-dbg file of Debian 12 and its object."""
    out: list[LoadSegment] = []
    off = 0
    for p in elf.phdrs:
        if p.type != PT_LOAD:
            continue
        align = p.align if p.align > 1 else 1
        off += (p.vaddr - off) % align
        out.append(LoadSegment(off, p.memsz, p.vaddr))
        off += p.memsz
    return out


def vaddr_in(segments: Sequence[LoadSegment], file_offset: int) -> int | None:
    """The vaddr of a file offset through these PT_LOAD segments, or None."""
    for s in segments:
        if s.offset <= file_offset < s.offset + max(s.filesz, 1):
            return file_offset - s.offset + s.vaddr
    return None
