"""ELF objects: a file offset to the object's virtual address, through its
PT_LOAD program headers."""

from __future__ import annotations

import os
from dataclasses import dataclass


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
