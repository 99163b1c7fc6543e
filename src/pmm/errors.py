"""Errors of the pmm library.

Every error is one line that says what happened and what to do. The library
raises them; the front ends turn them into a message and an exit status
(pmctl/exitcodes.py maps each class to pmctl's documented code).
"""

from __future__ import annotations

import errno
import os


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
