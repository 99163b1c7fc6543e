"""Where an object's debug info is, without the process that ran it.

A frame that outlives its process is an object (the path the process saw,
its GNU build-id and, from the module, the inode and size it had) and a file
offset in it. `DebugFinder.find` looks for the files that name it, in this
order:

1. the object at its path (inside the process's root while it is known,
   `pmm.symbolize.opening`), if it is still the one the process ran (same
   build-id, inode and size where known) and carries DWARF (.debug_info and
   .debug_line);
2. a separate debug file by build-id, DIR/.build-id/xx/rest.debug, under each
   DIR of $PMM_DEBUG_DIRS (colon-separated; default /usr/lib/debug, where
   Debian's -dbgsym packages install them);
3. the object's .gnu_debuglink under each DIR at the object's own directory,
   and, only when the object is root's or ours alone, beside it and in
   .debug/ beside it (a link in someone else's file never names a file in
   their directories for us to open);
4. only when $DEBUGINFOD_URLS names https servers (http ones too with
   PMM_DEBUGINFOD_INSECURE=1), the debuginfod servers through elfutils'
   `debuginfod-find debuginfo BUILDID` (and `executable BUILDID`, for its
   program headers and symbols, when the object is gone and no debug file
   was found), killed after DEBUGINFOD_FIND_TIMEOUT_S, within a budget per
   run (`DebuginfodBudget`); what it fetches is kept in
   $DEBUGINFOD_CACHE_PATH, else debuginfod/ in pmm's cache directory, which
   is pruned to $PMM_DEBUGINFOD_CACHE_MAX bytes.

A file whose build-id differs from the reference's is never used: a library
upgraded since the process ran would name the wrong lines. Build-ids are
what the process's owner says (`ld --build-id=0x...` sets any), so only
answers from the trusted sources (2 and 4, root's and the servers') are
shared by build-id (`DebugFiles.by_build_id`); the others hold for the file
they came from alone.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from pmm.symbolize.cache import debuginfod_cache_dir
from pmm.symbolize.elf import ElfFile, MalformedElf, same_layout
from pmm.symbolize.opening import (
    Expect,
    OpenFile,
    Replaced,
    Target,
    open_beneath,
    open_named,
    open_path,
)

log = logging.getLogger("pmm.symbolize")

DEFAULT_DEBUG_DIRS = ("/usr/lib/debug",)
# one debuginfod-find run (a large debug file may take a while to download)
DEBUGINFOD_FIND_TIMEOUT_S = 90
# per run (and per day of a long run): debuginfod-find runs and bytes fetched
DEBUGINFOD_MAX_FETCHES = 64
DEBUGINFOD_MAX_BYTES = 2 << 30
DEBUGINFOD_CACHE_MAX = 4 << 30
DEBUGINFOD_BUDGET_PERIOD_S = 86400
TRUSTED_SOURCES = ("build-id", "debuginfod")
_BUILD_ID = re.compile(r"[0-9a-f]{2,128}")


@dataclass(frozen=True)
class ObjectRef:
    """An object a process had mapped: the path it saw (None if unknown), its
    GNU build-id in hex (None if it has none), and the inode and size it had
    (the module's record; None if unknown)."""

    path: str | None
    build_id: str | None
    ino: int | None = None
    size: int | None = None

    def __post_init__(self) -> None:
        if self.build_id is not None:
            object.__setattr__(self, "build_id", self.build_id.lower() or None)

    @property
    def name(self) -> str:
        """The object's file name, without its directory ('?' if unknown)."""
        return os.path.basename(self.path) if self.path else "?"

    @property
    def identity(self) -> Expect | None:
        """(inode, size) the file at the path must have, or None."""
        return (self.ino, self.size) if self.ino else None


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
    object_elf, debug_elf: the files, open.
    refused: why the object, or a file it names, was not read ('' none).
    """

    object: str | None
    debug: str | None
    build_id: str | None
    source: str = ""
    tried: tuple[str, ...] = field(default=(), compare=False)
    object_elf: ElfFile | None = field(default=None, compare=False, repr=False)
    debug_elf: ElfFile | None = field(default=None, compare=False, repr=False)
    refused: str = field(default="", compare=False)

    @property
    def by_build_id(self) -> bool:
        """Whether answers by file offset hold for every object of this
        build-id: the debug file is from a trusted source and the offsets go
        through its program headers (the object is gone, or has the same
        layout), not through headers the object's owner wrote."""
        if self.source not in TRUSTED_SOURCES or not self.build_id or self.debug_elf is None:
            return False
        return self.object_elf is None or same_layout(self.object_elf, self.debug_elf)


def debug_dirs() -> list[str]:
    """The directories of separate debug files: $PMM_DEBUG_DIRS
    (colon-separated; set but empty: none), else /usr/lib/debug."""
    env = os.environ.get("PMM_DEBUG_DIRS")
    if env is None:
        return list(DEFAULT_DEBUG_DIRS)
    return [d for d in env.split(":") if d]


def _crc32(f: OpenFile) -> int:
    crc = 0
    at = 0
    while chunk := f.pread(1 << 20, at):
        crc = zlib.crc32(chunk, crc)
        at += len(chunk)
    return crc


_said: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        log.warning(message)


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, ""), 0)
    except ValueError:
        return default


class DebuginfodBudget:
    """What debuginfod may cost in a run: at most $PMM_DEBUGINFOD_MAX_FETCHES
    runs of debuginfod-find (each build-id a process names is one, found or
    not) and $PMM_DEBUGINFOD_MAX_BYTES fetched; a run longer than a day
    (pmd) starts a new budget each day."""

    def __init__(self) -> None:
        self.fetches = 0
        self.bytes = 0
        self.since = time.monotonic()
        self.lock = threading.Lock()  # pmd's worker and HTTP threads share it

    def _roll(self) -> None:
        if time.monotonic() - self.since >= DEBUGINFOD_BUDGET_PERIOD_S:
            self.fetches, self.bytes, self.since = 0, 0, time.monotonic()

    def bytes_left(self) -> int:
        """Bytes that may still be fetched."""
        self._roll()
        return _env_int("PMM_DEBUGINFOD_MAX_BYTES", DEBUGINFOD_MAX_BYTES) - self.bytes

    def take(self) -> str | None:
        """Counts one run of debuginfod-find; why not, if the budget is spent."""
        with self.lock:
            self._roll()
            most = _env_int("PMM_DEBUGINFOD_MAX_FETCHES", DEBUGINFOD_MAX_FETCHES)
            if self.fetches >= most:
                return (f"debuginfod: {most} requests made in this run "
                        "(PMM_DEBUGINFOD_MAX_FETCHES): no more")
            if self.bytes_left() <= 0:
                return ("debuginfod: the bytes this run may fetch (PMM_DEBUGINFOD_MAX_BYTES) "
                        "are fetched: no more")
            self.fetches += 1
            return None

    def spent(self, size: int) -> None:
        """Counts size bytes fetched."""
        with self.lock:
            self.bytes += size


budget = DebuginfodBudget()


def debuginfod_urls() -> str:
    """$DEBUGINFOD_URLS with only the servers pmm may ask: https, and http
    with PMM_DEBUGINFOD_INSECURE=1 (a build-id's answer over plain http can
    be replaced on the way); each server left out is said once."""
    insecure = os.environ.get("PMM_DEBUGINFOD_INSECURE") == "1"
    kept = []
    for url in os.environ.get("DEBUGINFOD_URLS", "").split():
        if url.startswith("https://") or (insecure and url.startswith("http://")):
            kept.append(url)
        elif url.startswith("http://"):
            _warn_once(f"debuginfod: {url} is not asked: plain http (set "
                       "PMM_DEBUGINFOD_INSECURE=1 to allow it)")
        else:
            _warn_once(f"debuginfod: {url} is not asked: only https:// servers are")
    return " ".join(kept)


def prune_debuginfod_cache(cache: str, keep: str | None = None) -> None:
    """Removes the least recently used files of debuginfod's cache until it
    holds at most $PMM_DEBUGINFOD_CACHE_MAX bytes (never `keep`)."""
    most = _env_int("PMM_DEBUGINFOD_CACHE_MAX", DEBUGINFOD_CACHE_MAX)
    files: list[tuple[float, int, str]] = []
    for top, _, names in os.walk(cache):
        for n in names:
            p = os.path.join(top, n)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if top != cache:  # debuginfod's own settings files are at the top
                files.append((max(st.st_atime, st.st_mtime), st.st_size, p))
    total = sum(size for _, size, _ in files)
    for _, size, p in sorted(files):
        if total <= most:
            break
        if p == keep:
            continue
        try:
            os.unlink(p)
        except OSError:
            continue
        total -= size
        try:
            os.rmdir(os.path.dirname(p))  # its build-id's directory, once empty
        except OSError:
            pass


def debuginfod_find(kind: str, build_id: str) -> str | None:
    """The path of the file `debuginfod-find KIND BUILDID` fetched
    ("debuginfo" or "executable"), or None: not found, no server pmm may ask
    (`debuginfod_urls`), the client missing, the budget spent, or no answer
    within DEBUGINFOD_FIND_TIMEOUT_S."""
    if not os.environ.get("DEBUGINFOD_URLS"):
        return None
    exe = shutil.which("debuginfod-find")
    if exe is None:
        _warn_once("DEBUGINFOD_URLS is set but debuginfod-find is not installed (Debian: "
                   "apt install debuginfod): debug info is looked for on this machine only")
        return None
    urls = debuginfod_urls()
    if not urls or not _BUILD_ID.fullmatch(build_id):
        return None
    spent = budget.take()
    if spent is not None:
        _warn_once(spent)
        return None
    env = {k: v for k, v in os.environ.items()
           if k in ("HOME", "PATH", "DEBUGINFOD_TIMEOUT", "DEBUGINFOD_RETRY_LIMIT",
                    "SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_CA_BUNDLE", "https_proxy",
                    "HTTPS_PROXY", "http_proxy", "no_proxy", "NO_PROXY")}
    env["DEBUGINFOD_URLS"] = urls
    env["DEBUGINFOD_MAXSIZE"] = str(max(budget.bytes_left(), 1))
    env["DEBUGINFOD_MAXTIME"] = str(DEBUGINFOD_FIND_TIMEOUT_S)
    cache = debuginfod_cache_dir()
    if cache is not None:
        env["DEBUGINFOD_CACHE_PATH"] = cache
    try:
        r = subprocess.run([exe, kind, build_id], capture_output=True, text=True, env=env,
                           stdin=subprocess.DEVNULL, check=False,
                           timeout=DEBUGINFOD_FIND_TIMEOUT_S)
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
    try:
        budget.spent(os.stat(path).st_size)
    except OSError:
        return None
    if cache is not None:
        prune_debuginfod_cache(cache, keep=path)
    return path


def _is_gone(e: OSError) -> bool:
    """Whether the lookup failed because the file is not there, or is not the
    one the process had (not a refusal: an upgrade replaces libraries)."""
    return isinstance(e, (FileNotFoundError, NotADirectoryError, Replaced))


class DebugFinder:
    """Finds the debug files of objects, remembering each answer (per
    process: its root is where the paths are)."""

    MEMORY = 128  # answers kept (each holds its files open)

    def __init__(self) -> None:
        self._found: dict[tuple[object, ...], DebugFiles] = {}

    def _remember(self, key: tuple[object, ...], look: Callable[[], DebugFiles]) -> DebugFiles:
        if key not in self._found:
            if len(self._found) >= self.MEMORY:
                del self._found[next(iter(self._found))]
            self._found[key] = look()
        return self._found[key]

    def find(self, ref: ObjectRef, target: Target | None = None) -> DebugFiles:
        """The object and debug file of ref, looked for in the order of the
        module's docstring; the object's path inside target's root when
        given (the process that named it), else in ours."""
        return self._remember((target.key if target is not None else None, ref),
                              lambda: self._find(ref, target))

    def find_object(self, obj: ElfFile, path: str, target: Target | None = None
                    ) -> DebugFiles:
        """The debug file of an object already open (a process's mapping),
        which the process named path, looked for as `find` does."""
        return self._remember(("open", target.key if target is not None else None,
                               obj.file.identity, path),
                              lambda: self._find(ObjectRef(path, None), target, obj))

    def _find(self, ref: ObjectRef, target: Target | None,
              opened: ElfFile | None = None) -> DebugFiles:
        tried: list[str] = []
        refused: list[str] = []
        obj: ElfFile | None = opened
        try:
            if obj is not None:
                obj.build_id  # noqa: B018 - malformed notes refuse the object
            elif ref.path:
                elf = ElfFile.of(open_named(ref.path, target, ref.identity))
                if not ref.build_id or elf.build_id == ref.build_id:
                    obj = elf
        except MalformedElf as e:
            refused.append(f"{ref.path}: malformed ELF: {e}")
            obj = None
        except OSError as e:
            if not _is_gone(e):
                refused.append(str(e))
        build_id = ref.build_id or (obj.build_id if obj is not None else None)

        def found(debug: ElfFile, source: str, path: str) -> DebugFiles:
            return DebugFiles(obj.path if obj is not None else None, path, build_id, source,
                              tuple(tried), obj, debug, "; ".join(refused))

        if obj is not None and obj.has_debug_info:
            return found(obj, "object", obj.path)
        dirs = debug_dirs()
        debug: ElfFile | None
        if build_id and _BUILD_ID.fullmatch(build_id):
            by_id = os.path.join(".build-id", build_id[:2], build_id[2:] + ".debug")
            for d in dirs:
                tried.append(os.path.join(d, by_id))
                debug = _debug_file(partial(open_beneath, d, by_id), build_id, strict=True)
                if debug is not None:
                    return found(debug, "build-id", tried[-1])
        link = None
        if obj is not None:
            try:
                link = obj.debuglink
            except MalformedElf as e:
                refused.append(f"{obj.path}: malformed ELF: {e}")
        if obj is not None and ref.path and link is not None:
            name, crc = link
            here = os.path.dirname(os.path.normpath(ref.path))
            places: list[tuple[str, str | None, str]] = []
            if obj.file.owner_trusted:
                for cand in (os.path.join(here, name), os.path.join(here, ".debug", name)):
                    places.append((cand, None, cand))
            for d in dirs:
                rel = os.path.join(here.lstrip("/"), name)
                places.append((os.path.join(d, rel), d, rel))
            for shown, under, rel in places:
                tried.append(shown)
                debug = _debug_file(partial(open_named, rel, target) if under is None
                                    else partial(open_beneath, under, rel), build_id)
                if debug is None or debug.file.identity == obj.file.identity:
                    continue
                # no build-id to compare: the link's CRC says it is the one
                if (build_id and _build_id(debug)) or _crc32(debug.file) == crc:
                    return found(debug, "debuglink", shown)
        if build_id:
            fetched = debuginfod_find("debuginfo", build_id)
            if fetched is not None:
                debug = _debug_file(partial(open_path, fetched), build_id)
                if debug is not None:
                    return found(debug, "debuginfod", fetched)
            if obj is None:
                exe = debuginfod_find("executable", build_id)
                if exe is not None:
                    try:
                        fetched_obj = ElfFile.of(open_path(exe))
                        if _build_id(fetched_obj) == build_id:
                            obj = fetched_obj
                    except (OSError, MalformedElf):
                        pass
        return DebugFiles(obj.path if obj is not None else None, None, build_id, "",
                          tuple(tried), obj, None, "; ".join(refused))


def _build_id(elf: ElfFile) -> str | None:
    try:
        return elf.build_id
    except MalformedElf:
        return None


def _debug_file(opener: Callable[[], OpenFile], build_id: str | None,
                strict: bool = False) -> ElfFile | None:
    """The ELF file opener() opens if it carries DWARF and has this build-id
    (when both have one; strict: when build_id is given, the file must have
    it too); None for a file that is missing, refused or malformed."""
    try:
        elf = ElfFile.of(opener())
    except (OSError, MalformedElf):
        return None
    own = _build_id(elf)
    if build_id and (own or strict) and own != build_id:
        return None
    return elf if elf.has_debug_info else None
