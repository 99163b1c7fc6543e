"""`pmctl attach`: per-site tracking for a process that is already running.

pmm-inject (built next to the hook library) loads libpmmhook.so into the
process with ptrace, one thread stopped for a few milliseconds, and the hook
then redirects the process's calls of malloc and the rest to itself and asks
the module to monitor it (PMM_START=1). `pmctl stop PID` ends the tracking;
the hook stays in the process, passing every call to libc, and a later
`pmctl attach PID` starts it again.

pmm-inject's refusals become AttachErrors whose `failure` says which it was,
its message kept (pmctl gives each failure an exit code of its own).
"""

from __future__ import annotations

import subprocess
from enum import Enum
from pathlib import Path

from pmm.errors import NoSuchPid, PermissionDenied, PmmError

INJECT_NAME = "pmm-inject"


class AttachFailure(Enum):
    """Why pmm-inject refused (its exit codes 5..11, hooklib/inject/inject.c)."""

    TRACED = 5  # the process is traced (a debugger)
    NOT_DYNAMIC = 6  # static, or no glibc 2.34+ dlopen
    NO_LIBRARY = 7  # no copy of the hook could be put there (memfd)
    SECCOMP = 8  # a seccomp filter (--allow-seccomp)
    NO_SAFE_POINT = 9  # no thread outside the allocator and the loader
    LOAD_FAILED = 10  # dlopen of the hook failed in the process
    REFUSED = 11  # the hook refused (preloaded, monitored)
    OTHER = 1


class AttachError(PmmError):
    """pmm-inject refused to attach; `failure` says why."""

    def __init__(self, message: str, failure: AttachFailure) -> None:
        super().__init__(message)
        self.failure = failure


def inject_error(returncode: int, msg: str) -> PmmError:
    """pmm-inject's refusal (its exit code, its line) as a typed error."""
    if returncode in (3, 12):
        return NoSuchPid(msg)
    if returncode == 4:
        return PermissionDenied(msg)
    try:
        return AttachError(msg, AttachFailure(returncode))
    except ValueError:
        return AttachError(msg, AttachFailure.OTHER)


def find_helper(hooklib: Path, name: str) -> Path:
    """A program of the hook's (pmm-inject, pmm-scan) beside the hook library
    (the source tree's hooklib/), or in libexec/pmm/ beside its lib/ (make
    install), or beside lib/pmm/ (the libpmmhook package's /usr/lib/pmm)."""
    lib = hooklib.parent
    cands = [lib / name, lib.parent / "libexec" / "pmm" / name]
    if lib.name == "pmm":
        cands.append(lib.parent.parent / "libexec" / "pmm" / name)
    for p in cands:
        if p.is_file():
            return p
    from pmm.installed import hook_hint

    raise PmmError(f"{name} is not found (tried {', '.join(map(str, cands))}): "
                   f"{hook_hint(helper=True)}")


def find_inject(hooklib: Path) -> Path:
    """pmm-inject (find_helper)."""
    return find_helper(hooklib, INJECT_NAME)


def settings(sample: int | None, depth: int | None, buffer: int | None) -> list[str]:
    """The hook's PMM_* settings for pmm_attach (pure)."""
    out = ["PMM_START=1"]
    if sample is not None:
        out.append(f"PMM_SAMPLE={sample}")
    if depth is not None:
        out.append(f"PMM_DEPTH={depth}")
    if buffer is not None:
        out.append(f"PMM_BUFFER={buffer}")
    return out


def attach(pid: int, hooklib: Path, sample: int | None = None, depth: int | None = None,
           buffer: int | None = None, timeout_ms: int = 2000,
           allow_seccomp: bool = False) -> str:
    """Runs pmm-inject; its line of success, or an AttachError."""
    argv = [str(find_inject(hooklib)), "--lib", str(hooklib), "--timeout", str(timeout_ms)]
    if allow_seccomp:
        argv.append("--allow-seccomp")
    argv += [str(pid), *settings(sample, depth, buffer)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_ms / 1000 + 60,
                       stdin=subprocess.DEVNULL)
    if r.returncode == 0:
        return r.stdout.strip()
    msg = r.stderr.strip().removeprefix(f"{INJECT_NAME}: ") or f"{INJECT_NAME} failed"
    raise inject_error(r.returncode, msg)
