"""Errors of pmctl and their exit codes.

Every error pmctl reports is one line on stderr that says what happened and
what to do, and ends the command with a documented exit code:

====  =====================  ===============================================
code  name                   meaning
====  =====================  ===============================================
0     OK                     success
1     GENERIC                any other failure (I/O error, unexpected errno)
2     USAGE                  bad command line (typer/click's own code)
3     NO_MODULE              /dev/pmm is missing: the module is not loaded
4     PERMISSION             not permitted (/dev/pmm mode, ptrace, CAP_SYS_ADMIN)
5     NO_SUCH_PID            the pid names no process (and none pmm remembers)
6     NOT_MONITORED          the pid exists but pmm does not monitor it
7     INVALID                the module refused a value (EINVAL, out of range)
8     NOT_PMM_DEVICE         the device does not answer pmm ioctls (ENOTTY)
9     LIMIT                  a module limit is reached (ENOSPC, EDQUOT, ENOMEM)
10+   reserved for `pmctl trend` (10: LEAK)
20    ATTACH_TRACED          attach: the process is traced (a debugger)
21    ATTACH_NOT_DYNAMIC     attach: static, or no glibc 2.34+ dlopen
22    ATTACH_NO_LIBRARY      attach: no copy of the hook could be put there (memfd)
23    ATTACH_SECCOMP         attach: a seccomp filter (--allow-seccomp)
24    ATTACH_NO_SAFE_POINT   attach: no thread outside the allocator/loader
25    ATTACH_LOAD_FAILED     attach: dlopen of the hook failed in the process
26    ATTACH_REFUSED         attach: the hook refused (preloaded, monitored)
====  =====================  ===============================================

The classes are reused by `pmctl trend` and by pmd: raise them from library
code, and let the CLI turn them into a message and an exit code
(`PmmError.exit_code`, `str(err)`).
"""

from __future__ import annotations

import errno
import os
from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes of pmctl (see the module docstring)."""

    OK = 0
    GENERIC = 1
    USAGE = 2
    NO_MODULE = 3
    PERMISSION = 4
    NO_SUCH_PID = 5
    NOT_MONITORED = 6
    INVALID = 7
    NOT_PMM_DEVICE = 8
    LIMIT = 9
    ATTACH_TRACED = 20
    ATTACH_NOT_DYNAMIC = 21
    ATTACH_NO_LIBRARY = 22
    ATTACH_SECCOMP = 23
    ATTACH_NO_SAFE_POINT = 24
    ATTACH_LOAD_FAILED = 25
    ATTACH_REFUSED = 26


class PmmError(Exception):
    """Base of pmctl's errors: a one-line message and an exit code."""

    exit_code: int = ExitCode.GENERIC

    def __init__(self, message: str, errno_: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errno = errno_

    def __str__(self) -> str:
        return self.message


class ModuleNotLoaded(PmmError):
    exit_code = ExitCode.NO_MODULE


class PermissionDenied(PmmError):
    exit_code = ExitCode.PERMISSION


class NoSuchPid(PmmError):
    exit_code = ExitCode.NO_SUCH_PID


class NotMonitored(PmmError):
    exit_code = ExitCode.NOT_MONITORED


class InvalidValue(PmmError):
    exit_code = ExitCode.INVALID


class NotPmmDevice(PmmError):
    exit_code = ExitCode.NOT_PMM_DEVICE


class LimitReached(PmmError):
    exit_code = ExitCode.LIMIT


def module_not_loaded(path: str) -> ModuleNotLoaded:
    return ModuleNotLoaded(
        f"{path} does not exist: the pmm module is not loaded "
        "(load it with `insmod kmod/pmm.ko`, or set PMM_DEVICE)",
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
