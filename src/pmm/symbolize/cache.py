"""The cache directory of maps and symbols, and its files.

Under it: maps/ (processes' maps), sym/ (answers per object, by the
identity of the files they came from, or by build-id for those from a
trusted debug file) and debuginfod/ (debuginfod-find's downloads, unless
$DEBUGINFOD_CACHE_PATH says otherwise).

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

import hashlib
import os
import stat
from pathlib import Path

from pmm.files import replace_file


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


def writable_dir(d: Path) -> bool:
    """Whether cache files can be written in d, made first if missing (under
    the /tmp fallback, only as a private directory of ours)."""
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


def readable_dir(d: Path) -> bool:
    """Whether d is a directory to read the cache from (under the /tmp
    fallback, only a private directory of ours, as its parents there)."""
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
            if readable_dir(d):
                return d
            continue
        if writable_dir(d):
            return d
    return None


def read_text(path: Path) -> str:
    """A cache file's text; OSError if absent, or a symlink (O_NOFOLLOW)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with open(fd, encoding="utf-8", errors="replace") as f:
        return f.read()


def write_text(path: Path, text: str) -> None:
    """Replaces a cache file, private to its user (0600; pmm.files.replace_file:
    never written through someone's symlink)."""
    replace_file(path, text, mode=0o600)


def sym_cache_file(key: str, backend: str) -> Path | None:
    """The on-disk cache of one object's lookups by vaddr (a live process's
    addresses), under its answers' key (`pmm.symbolize.frames`: the file's
    identity, so a rebuilt object never reuses stale answers, and another
    user's file never shares them)."""
    d = _sym_dir()
    if d is None:
        return None
    digest = hashlib.sha1(f"{key}\0{backend}".encode()).hexdigest()
    return d / (digest + ".json")


def _sym_dir() -> Path | None:
    for root in cache_dirs():
        if writable_dir(root / "sym"):
            return root / "sym"
    return None


def object_cache_file(key: str, backend: str) -> Path | None:
    """The on-disk cache of one object's lookups by file offset, under its
    answers' key (`pmm.symbolize.frames`): its build-id when they came from
    a trusted debug file (its answers then still serve after the object is
    gone, and never for another build), else the identity of the files they
    came from."""
    d = _sym_dir()
    if d is None:
        return None
    digest = hashlib.sha1(f"objects\0{key}\0{backend}".encode()).hexdigest()
    return d / (digest + ".json")


def debuginfod_cache_dir() -> str | None:
    """Where debuginfod-find keeps what it downloads: $DEBUGINFOD_CACHE_PATH,
    else debuginfod/ in the cache directory; None if neither can be written."""
    env = os.environ.get("DEBUGINFOD_CACHE_PATH")
    if env:
        return env
    for root in cache_dirs():
        if writable_dir(root / "debuginfod"):
            return str(root / "debuginfod")
    return None
