"""ELF objects, read with struct (no pyelftools, which only the pyelftools
back-end needs): a file offset to the object's virtual address through its
PT_LOAD program headers (`elf_vaddr`); and `ElfFile`: section headers, GNU
build-id, .gnu_debuglink, whether DWARF is there, function symbols and the
nearest one to an address, and a separate debug file's program headers with
the object's file offsets rebuilt (`debug_file_load_segments`)."""

from __future__ import annotations

import bisect
import errno
import os
import stat
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO


@dataclass(frozen=True)
class LoadSegment:
    """One PT_LOAD program header: file offset, size in the file, virtual address."""

    offset: int
    filesz: int
    vaddr: int


_segments_cache: dict[tuple[str, int, int], list[LoadSegment] | None] = {}


def open_regular(path: str) -> BinaryIO:
    """path opened for reading if it is a regular file; OSError if not. pmd
    (root) opens paths that a monitored process's files had: one swapped for
    a FIFO must not block it (O_NONBLOCK), nor a device be read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _file_key(path: str) -> tuple[str, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (path, st.st_ino, int(st.st_mtime_ns))


PT_LOAD = 1
_PN_XNUM = 0xFFFF  # e_phnum's "see section header 0's sh_info"
# per ELF class (1: 32-bit, 2: 64-bit): the ELF header after e_ident (e_type ..
# e_shstrndx), a program header, and section header 0 up to its sh_info
_EHDR = {1: "HHIIIIIHHHHHH", 2: "HHIQQQIHHHHHH"}
_PHDR = {1: "IIIIIIII", 2: "IIQQQQQQ"}
_SH_INFO_AT = {1: 28, 2: 44}


def _elf_header(f: BinaryIO) -> tuple[int, str, tuple[int, ...]] | None:
    """An ELF file's class (1: 32-bit, 2: 64-bit), byte order ('<', '>') and
    header fields after e_ident (e_type .. e_shstrndx); None if not ELF."""
    ident = f.read(16)
    if len(ident) < 16 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) \
            or ident[5] not in (1, 2):
        return None
    cls = ident[4]
    order = "<" if ident[5] == 1 else ">"
    ehdr = struct.Struct(order + _EHDR[cls])
    raw = f.read(ehdr.size)
    if len(raw) < ehdr.size:
        return None
    return cls, order, ehdr.unpack(raw)


def _read_load_segments(f: BinaryIO) -> list[LoadSegment] | None:
    """The PT_LOAD entries of an ELF file's program headers; None if not ELF
    or truncated."""
    header = _elf_header(f)
    if header is None:
        return None
    cls, order, fields = header
    _, _, _, _, phoff, shoff, _, _, phentsize, phnum, _, _, _ = fields
    if phnum == _PN_XNUM:
        f.seek(shoff + _SH_INFO_AT[cls])
        raw = f.read(4)
        if len(raw) < 4:
            return None
        (phnum,) = struct.unpack(order + "I", raw)
    phdr = struct.Struct(order + _PHDR[cls])
    if phnum and phentsize < phdr.size:
        return None
    out: list[LoadSegment] = []
    for i in range(phnum):
        f.seek(phoff + i * phentsize)
        raw = f.read(phdr.size)
        if len(raw) < phdr.size:
            return None
        fields = phdr.unpack(raw)
        if cls == 2:
            p_type, _, offset, vaddr, _, filesz, _, _ = fields
        else:
            p_type, offset, vaddr, _, filesz, _, _, _ = fields
        if p_type == PT_LOAD:
            out.append(LoadSegment(offset, filesz, vaddr))
    return out


def load_segments(path: str) -> list[LoadSegment] | None:
    """PT_LOAD segments of an ELF object; None if unreadable or not ELF."""
    key = _file_key(path)
    if key is None:
        return None
    if key in _segments_cache:
        return _segments_cache[key]
    segs: list[LoadSegment] | None
    try:
        with open_regular(path) as f:
            segs = _read_load_segments(f)
    except OSError:
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


# -- more of an ELF file: sections, build-id, debug link, symbols -------------
#
# A process's frame is (object, file offset); naming it later takes the
# object's GNU build-id (to find its debug file and to tell a replaced file
# from the one the process ran), its .gnu_debuglink, whether it carries DWARF,
# and, without DWARF, its nearest function symbol. All read with struct.

SHT_SYMTAB = 2
SHT_NOTE = 7
SHT_NOBITS = 8
SHT_DYNSYM = 11
SHF_ALLOC = 0x2
PT_NOTE = 4
NT_GNU_BUILD_ID = 3
STT_FUNC = 2
STT_GNU_IFUNC = 10
_SHN_LORESERVE = 0xFF00
# a section header: sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size,
# sh_link, sh_info, sh_addralign, sh_entsize
_SHDR = {1: "IIIIIIIIII", 2: "IIQQQQIIQQ"}
# a symbol, per class: (name, info, shndx, value, size) at these positions
_SYM = {1: "IIIBBH", 2: "IBBHQQ"}
# DWARF lives in these (.zdebug_*: the old GNU compressed form)
_DEBUG_INFO = (".debug_info", ".zdebug_info")
_DEBUG_LINE = (".debug_line", ".zdebug_line")
# a header larger than this is not one (a corrupt or hostile file)
_MAX_TABLE = 64 << 20


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


class ElfFile:
    """The headers of an ELF file, read once; sections and symbols on demand.

    `ElfFile.open(path)` answers None for what is not a readable ELF file."""

    def __init__(self, path: str, cls: int, order: str, phdrs: list[ProgramHeader],
                 sections: list[Section]) -> None:
        self.path = path
        self.cls = cls
        self.order = order
        self.phdrs = phdrs
        self.sections = sections
        self._symbols: list[FuncSymbol] | None = None
        self._addrs: list[int] | None = None

    @classmethod
    def open(cls, path: str) -> ElfFile | None:
        """The file's headers; None if it is unreadable, not ELF or cut short."""
        key = _file_key(path)
        if key is None:
            return None
        if key in _elf_cache:
            return _elf_cache[key]
        try:
            with open_regular(path) as f:
                elf = _read_elf(path, f)
        except (OSError, struct.error, UnicodeDecodeError, ValueError):
            elf = None
        if len(_elf_cache) >= _ELF_CACHE_MAX:  # a long-lived pmd sees objects come and go
            del _elf_cache[next(iter(_elf_cache))]
        _elf_cache[key] = elf
        return elf

    def section(self, name: str) -> Section | None:
        """The first section of that name, or None."""
        return next((s for s in self.sections if s.name == name), None)

    def read(self, offset: int, size: int) -> bytes:
        """size bytes at offset in the file (fewer if it is shorter)."""
        if size > _MAX_TABLE:
            raise ValueError(f"{self.path}: a table of {size} bytes")
        with open_regular(self.path) as f:
            f.seek(offset)
            return f.read(size)

    @property
    def load_segments(self) -> list[LoadSegment]:
        """Its PT_LOAD headers as they are in this file."""
        return [LoadSegment(p.offset, p.filesz, p.vaddr) for p in self.phdrs if p.type == PT_LOAD]

    @property
    def build_id(self) -> str | None:
        """The GNU build-id (NT_GNU_BUILD_ID note) in lowercase hex, or None."""
        spans = [(s.offset, s.size) for s in self.sections if s.type == SHT_NOTE and s.has_data]
        spans += [(p.offset, p.filesz) for p in self.phdrs if p.type == PT_NOTE]
        for off, size in spans:
            try:
                found = _build_id_in_notes(self.read(off, size), self.order)
            except (OSError, ValueError):
                continue
            if found:
                return found
        return None

    @property
    def has_debug_info(self) -> bool:
        """Whether it carries DWARF with line tables (.debug_info and .debug_line)."""
        names = {s.name for s in self.sections if s.has_data}
        return any(n in names for n in _DEBUG_INFO) and any(n in names for n in _DEBUG_LINE)

    @property
    def debuglink(self) -> tuple[str, int] | None:
        """Its .gnu_debuglink: the debug file's name and the CRC-32 of its bytes."""
        s = self.section(".gnu_debuglink")
        if s is None or not s.has_data:
            return None
        try:
            raw = self.read(s.offset, s.size)
        except (OSError, ValueError):
            return None
        name, nul, _ = raw.partition(b"\0")
        crc_at = (len(name) + 1 + 3) & ~3  # the CRC follows the name, 4-aligned
        if not nul or not name or len(raw) < crc_at + 4 or b"/" in name:
            return None
        (crc,) = struct.unpack_from(self.order + "I", raw, crc_at)
        return os.fsdecode(name), crc

    def function_symbols(self) -> list[FuncSymbol]:
        """Its defined function symbols, by address: .symtab's, else .dynsym's
        (a stripped object keeps only the dynamic ones)."""
        if self._symbols is None:
            self._symbols = []
            for kind in (SHT_SYMTAB, SHT_DYNSYM):
                table = next((s for s in self.sections if s.type == kind and s.has_data), None)
                if table is None:
                    continue
                try:
                    self._symbols = self._read_symbols(table)
                except (OSError, ValueError, struct.error, IndexError):
                    self._symbols = []
                if self._symbols:
                    break
            self._symbols.sort(key=lambda s: (s.value, s.name))
        return self._symbols

    def _read_symbols(self, table: Section) -> list[FuncSymbol]:
        strtab = self.sections[table.link]
        strings = self.read(strtab.offset, strtab.size)
        raw = self.read(table.offset, table.size)
        sym = struct.Struct(self.order + _SYM[self.cls])
        out: list[FuncSymbol] = []
        for fields in sym.iter_unpack(raw[: len(raw) - len(raw) % sym.size]):
            if self.cls == 2:
                name_at, info, _, shndx, value, size = fields
            else:
                name_at, value, size, info, _, shndx = fields
            if info & 0xF not in (STT_FUNC, STT_GNU_IFUNC) or not value \
                    or shndx == 0 or shndx >= _SHN_LORESERVE:
                continue
            end = strings.find(b"\0", name_at)
            name = strings[name_at:end if end >= 0 else None].decode(errors="replace")
            if name:
                out.append(FuncSymbol(value, size, shndx, info >> 4, name))
        return out

    def nearest_symbol(self, vaddr: int) -> tuple[str, int] | None:
        """(name, vaddr - its address) of the function symbol holding vaddr,
        else of the nearest one before it in the same section; None if none."""
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


_elf_cache: dict[tuple[str, int, int], ElfFile | None] = {}
_ELF_CACHE_MAX = 256


def _read_elf(path: str, f: BinaryIO) -> ElfFile | None:
    header = _elf_header(f)
    if header is None:
        return None
    cls, order, fields = header
    _, _, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, shstrndx = fields
    shdr = struct.Struct(order + _SHDR[cls])

    def table(off: int, entsize: int, count: int, size: int) -> list[bytes] | None:
        if count == 0 or off == 0:
            return []
        if entsize < size or count * entsize > _MAX_TABLE:
            return None
        f.seek(off)
        data = f.read(count * entsize)
        if len(data) < count * entsize:
            return None
        return [data[i * entsize:i * entsize + size] for i in range(count)]

    # extended numbering: the real counts in section header 0
    sh0 = table(shoff, shentsize, 1, shdr.size) if shoff else []
    if sh0:
        _, _, _, _, _, size0, link0, info0, _, _ = shdr.unpack(sh0[0])
        shnum = shnum or size0
        shstrndx = link0 if shstrndx == 0xFFFF else shstrndx
        phnum = info0 if phnum == _PN_XNUM else phnum
    phdr = struct.Struct(order + _PHDR[cls])
    praw = table(phoff, phentsize, phnum, phdr.size)
    sraw = table(shoff, shentsize, shnum, shdr.size)
    if praw is None or sraw is None:
        return None
    phdrs: list[ProgramHeader] = []
    for raw in praw:
        fields = phdr.unpack(raw)
        if cls == 2:
            p_type, _, offset, vaddr, _, filesz, memsz, align = fields
        else:
            p_type, offset, vaddr, _, filesz, memsz, _, align = fields
        phdrs.append(ProgramHeader(p_type, offset, vaddr, filesz, memsz, align))
    heads = [shdr.unpack(raw) for raw in sraw]
    names = b""
    if 0 < shstrndx < len(heads):
        _, _, _, _, off, size, _, _, _, _ = heads[shstrndx]
        if size <= _MAX_TABLE:
            f.seek(off)
            names = f.read(size)
    sections: list[Section] = []
    for name_at, typ, flags, addr, off, size, link, _, _, entsize in heads:
        end = names.find(b"\0", name_at)
        name = names[name_at:end].decode(errors="replace") if end >= 0 else ""
        sections.append(Section(name, typ, flags, addr, off, size, link, entsize))
    return ElfFile(path, cls, order, phdrs, sections)


def _build_id_in_notes(data: bytes, order: str) -> str | None:
    """The NT_GNU_BUILD_ID descriptor of a run of ELF notes, in hex."""
    at = 0
    while at + 12 <= len(data):
        namesz, descsz, ntype = struct.unpack_from(order + "III", data, at)
        name_at = at + 12
        desc_at = name_at + ((namesz + 3) & ~3)
        end = desc_at + ((descsz + 3) & ~3)
        if end > len(data) or desc_at > len(data):
            return None
        if ntype == NT_GNU_BUILD_ID and data[name_at:name_at + namesz] == b"GNU\0" and descsz:
            return data[desc_at:desc_at + descsz].hex()
        at = end
    return None


def read_build_id(path: str) -> str | None:
    """The GNU build-id of the ELF file at path, lowercase hex; None if it has
    none or is not a readable ELF file."""
    elf = ElfFile.open(path)
    return elf.build_id if elf is not None else None


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
