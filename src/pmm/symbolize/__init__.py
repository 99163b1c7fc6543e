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

Frames that outlive the process: `Symbolizer().symbolize_objects(items)`
names (ObjectRef(path, build_id), file offset) pairs, as the kernel module
records a site's frames, with no process and no map: the debug info is the
object's own, a separate debug file found by build-id under $PMM_DEBUG_DIRS
(default /usr/lib/debug) or by .gnu_debuglink, or debuginfod's when
DEBUGINFOD_URLS is set (`debuginfo`: `DebugFinder`); inlined calls are listed
(`Frame.lines`); without debug info the nearest ELF symbol is given
(`Frame.symbol`). A file at the object's path with another build-id is never
used. Answers are cached by build-id. `first_user_frame` skips the
allocator's own frames at the top of a site (libstdc++'s operator new, libc).

Return addresses are looked up at address-1 (the call instruction), so a
frame names the line of the call, not the line after it.

The package's modules, along those steps: `maps` (the maps and their cache),
`elf` (ELF headers: file offset to vaddr, build-id, debug link, symbols),
`debuginfo` (where an object's debug info is), `backends` (addr2line,
optional pyelftools), `cache` (the cache directory: where, and how it is
kept private) and `frames` (`Symbolizer`, `Frame`, `describe_sites`,
`first_user_frame`). Every public name is importable from `pmm.symbolize`
itself.
"""

from pmm.symbolize.backends import (
    ADDR2LINE_TIMEOUT_S,
    NO_BACKEND,
    Addr2line,
    Backend,
    InliningBackend,
    NoBackend,
    PyElfTools,
    SourceLoc,
    _parse_fileline,
    demangle,
    make_backend,
)
from pmm.symbolize.cache import (
    cache_dirs,
    debuginfod_cache_dir,
    maps_cache_dir,
    object_cache_file,
    sym_cache_file,
)
from pmm.symbolize.debuginfo import (
    DEBUGINFOD_FIND_TIMEOUT_S,
    DEFAULT_DEBUG_DIRS,
    DebugFiles,
    DebugFinder,
    ObjectRef,
    debug_dirs,
    debuginfod_find,
)
from pmm.symbolize.elf import (
    ElfFile,
    FuncSymbol,
    LoadSegment,
    ProgramHeader,
    Section,
    debug_file_load_segments,
    elf_vaddr,
    load_segments,
    read_build_id,
    vaddr_in,
)
from pmm.symbolize.frames import (
    Frame,
    Symbolizer,
    describe_sites,
    first_user_frame,
    is_allocator_frame,
    user_frames,
)
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
    "DEBUGINFOD_FIND_TIMEOUT_S",
    "DEFAULT_DEBUG_DIRS",
    "NS_PER_TICK",
    "NO_BACKEND",
    "Addr2line",
    "Backend",
    "DebugFiles",
    "DebugFinder",
    "ElfFile",
    "Frame",
    "FuncSymbol",
    "InliningBackend",
    "LoadSegment",
    "Mapping",
    "NoBackend",
    "ObjectRef",
    "ProgramHeader",
    "PyElfTools",
    "Section",
    "SourceLoc",
    "Symbolizer",
    "_parse_fileline",
    "cache_dirs",
    "capture_maps",
    "debug_dirs",
    "debug_file_load_segments",
    "debuginfod_cache_dir",
    "debuginfod_find",
    "demangle",
    "describe_sites",
    "elf_vaddr",
    "find_mapping",
    "first_user_frame",
    "is_allocator_frame",
    "load_cached_maps",
    "load_segments",
    "make_backend",
    "maps_cache_dir",
    "maps_for",
    "merge_maps",
    "object_cache_file",
    "parse_maps",
    "proc_start_ticks",
    "read_build_id",
    "read_live_maps",
    "save_maps",
    "sym_cache_file",
    "ticks_from_ns",
    "user_frames",
    "vaddr_in",
]
