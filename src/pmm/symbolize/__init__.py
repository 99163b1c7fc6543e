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
   `bench/symbolize_bench.py`, figures in docs/performance.md):
   - "addr2line": binutils `addr2line -f -C -e OBJ ADDR...`, one process per
     object per batch (default: measured much faster on large objects);
   - "pyelftools": DWARF .debug_aranges -> CU -> line program, in process;
     optional (pip install 'pmm[elf]'), used when binutils is not installed.
   $PMM_SYMBOLIZER selects one. With neither, frames are object+offset and
   one warning says what to install. Results are cached per (object, vaddr),
   in memory and on disk (keyed by the object's path, inode, size and mtime).

Return addresses are looked up at address-1 (the call instruction), so a
frame names the line of the call, not the line after it.

The package's modules, along those steps: `maps` (the maps and their cache),
`elf` (file offset to ELF vaddr), `backends` (addr2line, optional pyelftools),
`cache` (the cache directory: where, and how it is kept private) and
`frames` (`Symbolizer`, `Frame`, `describe_sites`). Every public name is
importable from `pmm.symbolize` itself.
"""

from pmm.symbolize.backends import (
    ADDR2LINE_TIMEOUT_S,
    NO_BACKEND,
    Addr2line,
    Backend,
    NoBackend,
    PyElfTools,
    SourceLoc,
    _parse_fileline,
    make_backend,
)
from pmm.symbolize.cache import cache_dirs, maps_cache_dir, sym_cache_file
from pmm.symbolize.elf import LoadSegment, elf_vaddr, load_segments
from pmm.symbolize.frames import Frame, Symbolizer, describe_sites
from pmm.symbolize.maps import (
    CLK_TCK,
    NS_PER_TICK,
    Mapping,
    capture_maps,
    find_mapping,
    load_cached_maps,
    maps_for,
    merge_maps,
    parse_maps,
    proc_start_ticks,
    read_live_maps,
    save_maps,
    ticks_from_ns,
)

__all__ = [
    "ADDR2LINE_TIMEOUT_S",
    "CLK_TCK",
    "NS_PER_TICK",
    "NO_BACKEND",
    "Addr2line",
    "Backend",
    "Frame",
    "LoadSegment",
    "Mapping",
    "NoBackend",
    "PyElfTools",
    "SourceLoc",
    "Symbolizer",
    "_parse_fileline",
    "cache_dirs",
    "capture_maps",
    "describe_sites",
    "elf_vaddr",
    "find_mapping",
    "load_cached_maps",
    "load_segments",
    "make_backend",
    "maps_cache_dir",
    "maps_for",
    "merge_maps",
    "parse_maps",
    "proc_start_ticks",
    "read_live_maps",
    "save_maps",
    "sym_cache_file",
    "ticks_from_ns",
]
