"""Errors of the pmm library.

Every error is one line that says what happened and what to do. The library
raises them; the front ends turn them into a message and an exit status with
`error_handler` (pmctl/exitcodes.py maps each class to pmctl's documented
code, pmd exits 1).
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class PmmError(Exception):
    """Base of pmm's errors: a one-line message, and the errno behind it if any."""

    def __init__(self, message: str, errno_: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errno = errno_

    def __str__(self) -> str:
        return self.message


class ModuleNotLoaded(PmmError):
    """/dev/pmm (or PMM_DEVICE) does not exist: the module is not loaded."""


class PermissionDenied(PmmError):
    """Not permitted: the device's mode, ptrace access or CAP_SYS_ADMIN."""


class NoSuchPid(PmmError):
    """The pid names no process (and none pmm remembers)."""


class NotMonitored(PmmError):
    """The process exists but pmm does not monitor it."""


class InvalidValue(PmmError):
    """The module refused a value (EINVAL, out of range)."""


class NotPmmDevice(PmmError):
    """The device does not answer pmm's ioctls (ENOTTY)."""


class LimitReached(PmmError):
    """A limit of the module is reached (ENOSPC, EDQUOT, ENOMEM)."""


def module_not_loaded(path: str) -> ModuleNotLoaded:
    """The ModuleNotLoaded error for a device path that does not exist,
    saying how to load the module."""
    return ModuleNotLoaded(
        f"{path} does not exist: the pmm module is not loaded "
        "(load it: `sudo modprobe pmm` once installed, `sudo insmod kmod/pmm.ko` in the "
        "source tree; or set PMM_DEVICE)",
        errno.ENOENT,
    )


def from_errno(err: int, what: str, pid: int | None = None, path: str = "/dev/pmm") -> PmmError:
    """Turns an errno from /dev/pmm into a typed error.

    `what` says what pmctl was doing ("starting pid 42", "reading the
    configuration"); the message names it, the cause and what to do.
    """
    name = errno.errorcode.get(err, str(err))
    reason = os.strerror(err)
    if err in (errno.ENOENT, errno.ENODEV, errno.ENXIO) and pid is None:
        return module_not_loaded(path)
    if err in (errno.EACCES, errno.EPERM):
        if pid is not None:
            hint = f"run as root or as the owner of pid {pid} (ptrace access is needed)"
        else:
            hint = "run as root (changing the configuration needs CAP_SYS_ADMIN)"
        return PermissionDenied(f"{what}: permission denied ({name}): {hint}", err)
    if err == errno.ESRCH and pid is not None:
        return NoSuchPid(f"{what}: no such process: pid {pid} does not exist", err)
    if err == errno.ENOENT and pid is not None:
        return NotMonitored(
            f"{what}: pid {pid} is not monitored (start with `pmctl start {pid}`)", err
        )
    if err == errno.EEXIST and pid is not None:
        return PmmError(
            f"{what}: pid {pid} is already monitored (or exited and kept for post-mortem: "
            f"`pmctl stop {pid}` drops it)",
            err,
        )
    if err == errno.EINVAL:
        return InvalidValue(f"{what}: the module refused the value ({name}: {reason})", err)
    if err == errno.ENOTTY:
        return NotPmmDevice(
            f"{what}: {path} does not answer pmm ioctls ({name}): it is not the pmm "
            "device, or the module's ABI differs from pmctl's (rebuild both)",
            err,
        )
    if err == errno.EDQUOT:
        return LimitReached(
            f"{what}: this user already monitors as many processes as it may "
            "(`pmctl config`: max pids per user; root can raise --max-pids-per-uid, "
            "or `pmctl stop` one)",
            err,
        )
    if err in (errno.ENOSPC, errno.ENOMEM, errno.E2BIG):
        return LimitReached(
            f"{what}: a pmm limit is reached ({name}: {reason}); see `pmctl config` "
            "and raise --max-pids/--max-blocks/--max-sites",
            err,
        )
    return PmmError(f"{what}: {reason} ({name})", err)


def error_handler(say: Callable[[str], None], exit_code_for: Callable[[PmmError], int],
                  exit_with: Callable[[int], BaseException],
                  passthrough: tuple[type[BaseException], ...],
                  ) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """The decorator both front ends put on their commands: a PmmError (and
    anything unexpected) becomes one line through `say` and `exit_with` its
    exit status (`exit_code_for`; 1 for the unexpected), never a traceback.
    What the front end passes: its exit exception (typer.Exit) and the
    framework's own exceptions that pass through (exits, usage errors); the
    library imports no CLI framework. Ctrl-C exits 130, a closed stdout
    (`| head`) 1."""

    def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except PmmError as e:
                say(str(e))
                raise exit_with(exit_code_for(e)) from None
            except passthrough:
                raise
            except KeyboardInterrupt:
                raise exit_with(130) from None
            except BrokenPipeError:
                raise exit_with(1) from None
            except Exception as e:  # noqa: BLE001 - a front end's last resort
                say(f"internal error: {type(e).__name__}: {e} (please report this)")
                raise exit_with(1) from None

        return wrapper

    return handle_errors
