"""Where an object's debug info is, without the process that ran it.

A frame that outlives its process is an object (the path the process saw and
its GNU build-id) and a file offset in it. `DebugFinder.find` looks for the
files that name it, in this order:

1. the object at its path, if it is still the one the process ran (same
   build-id, or the reference has none) and carries DWARF (.debug_info and
   .debug_line);
2. a separate debug file by build-id, DIR/.build-id/xx/rest.debug, under each
   DIR of $PMM_DEBUG_DIRS (colon-separated; default /usr/lib/debug, where
   Debian's -dbgsym packages install them);
3. the object's .gnu_debuglink: beside it, in .debug/ beside it, and under
   each DIR at the object's own directory;
4. only when $DEBUGINFOD_URLS is set, the debuginfod servers through
   elfutils' `debuginfod-find debuginfo BUILDID` (and `executable BUILDID`,
   for its program headers and symbols, when the object is gone and no debug
   file was found), killed after DEBUGINFOD_FIND_TIMEOUT_S; what it fetches
   is kept in $DEBUGINFOD_CACHE_PATH, else debuginfod/ in pmm's cache directory.

A file whose build-id differs from the reference's is never used: a library
upgraded since the process ran would name the wrong lines.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import zlib
from dataclasses import dataclass, field

from pmm.symbolize.cache import debuginfod_cache_dir
from pmm.symbolize.elf import ElfFile, open_regular

log = logging.getLogger("pmm.symbolize")

DEFAULT_DEBUG_DIRS = ("/usr/lib/debug",)
# one debuginfod-find run (a large debug file may take a while to download)
DEBUGINFOD_FIND_TIMEOUT_S = 90


@dataclass(frozen=True)
class ObjectRef:
    """An object a process had mapped: the path it saw (None if unknown) and
    its GNU build-id in hex (None if it has none)."""

    path: str | None
    build_id: str | None

    def __post_init__(self) -> None:
        if self.build_id is not None:
            object.__setattr__(self, "build_id", self.build_id.lower() or None)

    @property
    def name(self) -> str:
        """The object's file name, without its directory ('?' if unknown)."""
        return os.path.basename(self.path) if self.path else "?"


@dataclass(frozen=True)
class DebugFiles:
    """What names an object's addresses.

    object: the object itself (same build-id), for its program headers and
      symbols; None when it is gone (then `debug`'s program headers serve).
    debug: the file with its DWARF (the object itself, or a separate debug
      file); None when there is none anywhere.
    build_id: the reference's, else the object's own.
    source: where `debug` came from: "object", "build-id", "debuglink",
      "debuginfod", or "" when there is none.
    """

    object: str | None
    debug: str | None
    build_id: str | None
    source: str = ""
    tried: tuple[str, ...] = field(default=(), compare=False)


def debug_dirs() -> list[str]:
    """The directories of separate debug files: $PMM_DEBUG_DIRS
    (colon-separated; set but empty: none), else /usr/lib/debug."""
    env = os.environ.get("PMM_DEBUG_DIRS")
    if env is None:
        return list(DEFAULT_DEBUG_DIRS)
    return [d for d in env.split(":") if d]


def _elf_matching(path: str, build_id: str | None, strict: bool = False) -> ElfFile | None:
    """The ELF file at path if it is one and has this build-id (when both
    have one; strict: when build_id is given, the file must have it too)."""
    if not os.path.isfile(path):
        return None
    elf = ElfFile.open(path)
    if elf is None:
        return None
    own = elf.build_id
    if build_id and (own or strict) and own != build_id:
        return None
    return elf


def _crc32(path: str) -> int | None:
    crc = 0
    try:
        with open_regular(path) as f:
            while chunk := f.read(1 << 20):
                crc = zlib.crc32(chunk, crc)
    except OSError:
        return None
    return crc


_said: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        log.warning(message)


def debuginfod_find(kind: str, build_id: str) -> str | None:
    """The path of the file `debuginfod-find KIND BUILDID` fetched
    ("debuginfo" or "executable"), or None: not found, DEBUGINFOD_URLS unset,
    the client missing, or no answer within DEBUGINFOD_FIND_TIMEOUT_S."""
    if not os.environ.get("DEBUGINFOD_URLS"):
        return None
    exe = shutil.which("debuginfod-find")
    if exe is None:
        _warn_once("DEBUGINFOD_URLS is set but debuginfod-find is not installed (Debian: "
                   "apt install debuginfod): debug info is looked for on this machine only")
        return None
    env = dict(os.environ)
    cache = debuginfod_cache_dir()
    if cache is not None:
        env["DEBUGINFOD_CACHE_PATH"] = cache
    env.pop("DEBUGINFOD_PROGRESS", None)  # its progress lines would go to our stderr
    try:
        r = subprocess.run([exe, kind, build_id], capture_output=True, text=True, env=env,
                           check=False, timeout=DEBUGINFOD_FIND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _warn_once(f"debuginfod: no answer for {kind} of build-id {build_id} within "
                   f"{DEBUGINFOD_FIND_TIMEOUT_S} s")
        return None
    except OSError as e:
        log.debug("debuginfod-find: %s", e)
        return None
    path = r.stdout.strip()
    if r.returncode != 0 or not path or not os.path.isfile(path):
        log.debug("debuginfod-find %s %s: %s", kind, build_id, r.stderr.strip())
        return None
    return path


class DebugFinder:
    """Finds the debug files of objects, remembering each answer."""

    def __init__(self) -> None:
        self._found: dict[ObjectRef, DebugFiles] = {}

    def find(self, ref: ObjectRef) -> DebugFiles:
        """The object and debug file of ref, looked for in the order of the
        module's docstring."""
        if ref not in self._found:
            self._found[ref] = self._find(ref)
        return self._found[ref]

    def _find(self, ref: ObjectRef) -> DebugFiles:
        tried: list[str] = []
        obj = _elf_matching(ref.path, ref.build_id, strict=True) if ref.path else None
        build_id = ref.build_id or (obj.build_id if obj is not None else None)
        obj_path = obj.path if obj is not None else None

        def found(debug: str, source: str) -> DebugFiles:
            return DebugFiles(obj_path, debug, build_id, source, tuple(tried))

        if obj is not None and obj.has_debug_info:
            return found(obj.path, "object")
        dirs = debug_dirs()
        if build_id and len(build_id) > 2:
            for d in dirs:
                cand = os.path.join(d, ".build-id", build_id[:2], build_id[2:] + ".debug")
                tried.append(cand)
                elf = _elf_matching(cand, build_id)
                if elf is not None and elf.has_debug_info:
                    return found(cand, "build-id")
        link = obj.debuglink if obj is not None else None
        if obj is not None and link is not None:
            here = os.path.dirname(os.path.abspath(obj.path))
            places = [os.path.join(here, link[0]), os.path.join(here, ".debug", link[0])]
            places += [os.path.join(d, here.lstrip("/"), link[0]) for d in dirs]
            for cand in places:
                tried.append(cand)
                if os.path.abspath(cand) == os.path.abspath(obj.path):
                    continue
                elf = _elf_matching(cand, build_id)
                if elf is None or not elf.has_debug_info:
                    continue
                # no build-id to compare: the link's CRC says it is the one
                if (build_id and elf.build_id) or _crc32(cand) == link[1]:
                    return found(cand, "debuglink")
        if build_id:
            got = debuginfod_find("debuginfo", build_id)
            if got is not None:
                elf = _elf_matching(got, build_id)
                if elf is not None and elf.has_debug_info:
                    return found(got, "debuginfod")
            if obj is None:
                exe = debuginfod_find("executable", build_id)
                if exe is not None and _elf_matching(exe, build_id, strict=True) is not None:
                    obj_path = exe
        return DebugFiles(obj_path, None, build_id, "", tuple(tried))
