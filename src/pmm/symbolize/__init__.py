"""Symbolization: addresses of a process -> function, file:line.

Two steps:

1. Maps. An address means something only with the process's memory map
   (/proc/PID/maps). `capture_maps` saves the map while the process lives
   (`pmctl run` does so while it waits; `leaks` and `logs` opportunistically)
   to the maps cache, keyed by (pid, start time in clock ticks, as field 22
   of /proc/PID/stat and as pmm_pid_info.start_time_ns / 10 ms), so a reused
   pid never picks up another process's map and symbolization still works
   after the process exited. `Mapping.translate` turns an address into
   (object path, file offset); the object's PT_LOAD program headers turn the
   file offset into its ELF virtual address.

2. Object files. `Symbolizer` resolves ELF vaddrs of one object to function,
   file and line, with one of two backends, measured (see
   `bench/symbolize_bench.py`, figures in docs/performance.md):
   - "addr2line": binutils `addr2line -f -C -e OBJ ADDR...`, one process per
     object per batch (default: measured much faster on large objects);
   - "pyelftools": DWARF .debug_aranges -> CU -> line program, in process;
     optional (pip install 'pmm[elf]'), used when binutils is not installed.
   $PMM_SYMBOLIZER selects one. With neither, frames are object+offset and
   one warning says what to install. Results are cached per (object, vaddr),
   in memory and on disk.

Frames that outlive the process: `Symbolizer().symbolize_objects(items)`
names (ObjectRef(path, build_id), file offset) pairs, as the kernel module
records a site's frames, with no process and no map: the debug info is the
object's own, a separate debug file found by build-id under $PMM_DEBUG_DIRS
(default /usr/lib/debug) or by .gnu_debuglink, or debuginfod's when
DEBUGINFOD_URLS names https servers (`debuginfo`: `DebugFinder`); inlined
calls are listed (`Frame.lines`); without debug info the nearest ELF symbol
is given (`Frame.symbol`). A file at the object's path with another build-id
is never used. `first_user_frame` skips the allocator's own frames at the
top of a site (libstdc++'s operator new, libc).

What a monitored process names is its owner's choice (pmctl runs as root,
pmd with CAP_SYS_PTRACE): its files are opened inside its root without
following links out of it or blocking (`opening`: `Target`, `Refused`),
parsed with every offset checked (`elf`: `MalformedElf`), read by binutils
in an unprivileged child with a time budget when someone else wrote them
(`sandbox`), and their answers kept under the identity of the files (device,
inode, size, times, owner); only answers from a trusted debug file (the
debug directories, debuginfod) are kept, and shared, by build-id.

Return addresses are looked up at address-1 (the call instruction), so a
frame names the line of the call, not the line after it.

The package's modules, along those steps: `maps` (the maps and their cache),
`opening` (how a process's files are opened), `elf` (ELF headers: file
offset to vaddr, build-id, debug links, symbols), `debuginfo` (where an
object's debug info is), `backends` (addr2line, optional pyelftools),
`sandbox` (running binutils unprivileged), `cache` (the cache directory:
where, and how it is kept private) and `frames` (`Symbolizer`, `Frame`,
`first_user_frame`). Every public name is importable from
`pmm.symbolize` itself.
"""

from pmm.symbolize.backends import (
    ADDR2LINE_TIMEOUT_S,
    NO_BACKEND,
    UNTRUSTED_TIMEOUT_S,
    Addr2line,
    Backend,
    InliningBackend,
    NoBackend,
    PyElfTools,
    SourceLoc,
    _parse_fileline,
    demangle,
    make_backend,
    unsafe_links,
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
    debuginfod_urls,
    prune_debuginfod_cache,
)
from pmm.symbolize.elf import (
    ElfFile,
    FuncSymbol,
    LoadSegment,
    MalformedElf,
    ProgramHeader,
    Section,
    debug_file_load_segments,
    elf_vaddr,
    load_segments,
    read_build_id,
    same_layout,
    vaddr_in,
)
from pmm.symbolize.frames import (
    Frame,
    Symbolizer,
    first_user_frame,
    is_allocator_frame,
    site_frame,
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
from pmm.symbolize.opening import OpenFile, Refused, Target, open_beneath, open_named
from pmm.symbolize.sandbox import TimedOut, ToolFailed

__all__ = [
    "ADDR2LINE_TIMEOUT_S",
    "CLK_TCK",
    "DEBUGINFOD_FIND_TIMEOUT_S",
    "DEFAULT_DEBUG_DIRS",
    "NS_PER_TICK",
    "NO_BACKEND",
    "UNTRUSTED_TIMEOUT_S",
    "Addr2line",
    "Backend",
    "DebugFiles",
    "DebugFinder",
    "ElfFile",
    "Frame",
    "FuncSymbol",
    "InliningBackend",
    "LoadSegment",
    "MalformedElf",
    "Mapping",
    "NoBackend",
    "ObjectRef",
    "OpenFile",
    "ProgramHeader",
    "PyElfTools",
    "Refused",
    "Section",
    "SourceLoc",
    "Symbolizer",
    "Target",
    "TimedOut",
    "ToolFailed",
    "_parse_fileline",
    "cache_dirs",
    "capture_maps",
    "debug_dirs",
    "debug_file_load_segments",
    "debuginfod_cache_dir",
    "debuginfod_find",
    "debuginfod_urls",
    "demangle",
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
    "open_beneath",
    "open_named",
    "parse_maps",
    "proc_start_ticks",
    "prune_debuginfod_cache",
    "read_build_id",
    "read_live_maps",
    "same_layout",
    "save_maps",
    "site_frame",
    "sym_cache_file",
    "ticks_from_ns",
    "unsafe_links",
    "user_frames",
    "vaddr_in",
]
