"""ELF objects: a file offset to the object's virtual address, through its
PT_LOAD program headers, read with struct (the headers are all it takes:
no pyelftools, which only the pyelftools back-end needs)."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import BinaryIO


@dataclass(frozen=True)
class LoadSegment:
    """One PT_LOAD program header: file offset, size in the file, virtual address."""

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


PT_LOAD = 1
_PN_XNUM = 0xFFFF  # e_phnum's "see section header 0's sh_info"
# per ELF class (1: 32-bit, 2: 64-bit): the ELF header after e_ident (e_type ..
# e_shstrndx), a program header, and section header 0 up to its sh_info
_EHDR = {1: "HHIIIIIHHHHHH", 2: "HHIQQQIHHHHHH"}
_PHDR = {1: "IIIIIIII", 2: "IIQQQQQQ"}
_SH_INFO_AT = {1: 28, 2: 44}


def _read_load_segments(f: BinaryIO) -> list[LoadSegment] | None:
    """The PT_LOAD entries of an ELF file's program headers; None if not ELF
    or truncated."""
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
    _, _, _, _, phoff, shoff, _, _, phentsize, phnum, _, _, _ = ehdr.unpack(raw)
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
        with open(path, "rb") as f:
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
