"""`pmctl attach`: per-site tracking for a process that is already running.

pmm-inject (built next to the hook library) loads libpmmhook.so into the
process with ptrace, one thread stopped for a few milliseconds, and the hook
then redirects the process's calls of malloc and the rest to itself and asks
the module to monitor it (PMM_START=1). `pmctl stop PID` ends the tracking;
the hook stays in the process, passing every call to libc, and a later
`pmctl attach PID` starts it again.

pmm-inject's refusals become PmmErrors with exit codes of their own
(ExitCode.ATTACH_*), its message kept.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from pmm.errors import ExitCode, NoSuchPid, PermissionDenied, PmmError

INJECT_NAME = "pmm-inject"

# pmm-inject's exit codes (hooklib/inject/inject.c) -> pmctl's
_EXIT = {
    3: ExitCode.NO_SUCH_PID,
    4: ExitCode.PERMISSION,
    5: ExitCode.ATTACH_TRACED,
    6: ExitCode.ATTACH_NOT_DYNAMIC,
    7: ExitCode.ATTACH_NO_LIBRARY,
    8: ExitCode.ATTACH_SECCOMP,
    9: ExitCode.ATTACH_NO_SAFE_POINT,
    10: ExitCode.ATTACH_LOAD_FAILED,
    11: ExitCode.ATTACH_REFUSED,
    12: ExitCode.NO_SUCH_PID,
}


def inject_error(returncode: int, msg: str) -> PmmError:
    """pmm-inject's refusal (its exit code, its line) as pmctl's error."""
    code = _EXIT.get(returncode, ExitCode.GENERIC)
    if code == ExitCode.NO_SUCH_PID:
        return NoSuchPid(msg)
    if code == ExitCode.PERMISSION:
        return PermissionDenied(msg)
    return AttachError(msg, code)


class AttachError(PmmError):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.exit_code = code


def find_inject(hooklib: Path) -> Path:
    """pmm-inject beside the hook library (the source tree's hooklib/), or in
    libexec/pmm/ beside its lib/ (make install)."""
    here = hooklib.parent / INJECT_NAME
    for p in (here, hooklib.parent.parent / "libexec" / "pmm" / INJECT_NAME):
        if p.is_file():
            return p
    raise PmmError(f"{here} is not found: build it with `make` (hooklib/)")


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
