"""pmctl's exit codes, and which error ends a command with which.

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
10+   `pmctl trend`'s verdicts (10 LEAK, 11 GROWING, 12 NOT ENOUGH DATA, 13 INCONCLUSIVE)
20    ATTACH_TRACED          attach: the process is traced (a debugger)
21    ATTACH_NOT_DYNAMIC     attach: static, or no glibc 2.34+ dlopen
22    ATTACH_NO_LIBRARY      attach: no copy of the hook could be put there (memfd)
23    ATTACH_SECCOMP         attach: a seccomp filter (--allow-seccomp)
24    ATTACH_NO_SAFE_POINT   attach: no thread outside the allocator/loader
25    ATTACH_LOAD_FAILED     attach: dlopen of the hook failed in the process
26    ATTACH_REFUSED         attach: the hook refused (preloaded, monitored)
30    SCAN_TRACED            unreachable: the process is traced (a debugger)
31    SCAN_STATIC            unreachable: statically linked (no hook in it)
32    SCAN_NOT_EXACT         unreachable: not monitored in exact mode by a hook that scans
33    SCAN_SECCOMP           unreachable: a seccomp filter (--allow-seccomp)
34    SCAN_NO_COPY           unreachable: the copy could not be made (no room to fork, pid 1)
35    SCAN_NOT_STOPPED       unreachable: a thread did not stop in time
36    SCAN_UNSUPPORTED       unreachable: the kernel or module lacks what the scan needs
126   `pmctl run`: the command cannot be executed (as a shell's)
127   `pmctl run`: the command is not found (as a shell's)
====  =====================  ===============================================
"""

from __future__ import annotations

import sys
from enum import IntEnum

import typer

from pmm import errors
from pmm.analysis.trend import Verdict
from pmm.attach import AttachError, AttachFailure
from pmm.errors import error_handler
from pmm.run import CommandNotRunnable
from pmm.text import printable
from pmm.unreachable import ScanError, ScanFailure


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
    SCAN_TRACED = 30
    SCAN_STATIC = 31
    SCAN_NOT_EXACT = 32
    SCAN_SECCOMP = 33
    SCAN_NO_COPY = 34
    SCAN_NOT_STOPPED = 35
    SCAN_UNSUPPORTED = 36


# `pmctl trend`'s exit status for each verdict
BY_VERDICT: dict[Verdict, int] = {
    Verdict.STABLE: 0,
    Verdict.LEAK: 10,
    Verdict.GROWING: 11,
    Verdict.NOT_ENOUGH_DATA: 12,
    Verdict.INCONCLUSIVE: 13,
}

_BY_CLASS: dict[type[errors.PmmError], ExitCode] = {
    errors.ModuleNotLoaded: ExitCode.NO_MODULE,
    errors.PermissionDenied: ExitCode.PERMISSION,
    errors.NoSuchPid: ExitCode.NO_SUCH_PID,
    errors.NotMonitored: ExitCode.NOT_MONITORED,
    errors.InvalidValue: ExitCode.INVALID,
    errors.NotPmmDevice: ExitCode.NOT_PMM_DEVICE,
    errors.LimitReached: ExitCode.LIMIT,
}

_BY_ATTACH_FAILURE = {
    AttachFailure.TRACED: ExitCode.ATTACH_TRACED,
    AttachFailure.NOT_DYNAMIC: ExitCode.ATTACH_NOT_DYNAMIC,
    AttachFailure.NO_LIBRARY: ExitCode.ATTACH_NO_LIBRARY,
    AttachFailure.SECCOMP: ExitCode.ATTACH_SECCOMP,
    AttachFailure.NO_SAFE_POINT: ExitCode.ATTACH_NO_SAFE_POINT,
    AttachFailure.LOAD_FAILED: ExitCode.ATTACH_LOAD_FAILED,
    AttachFailure.REFUSED: ExitCode.ATTACH_REFUSED,
    AttachFailure.OTHER: ExitCode.GENERIC,
}


_BY_SCAN_FAILURE = {
    ScanFailure.TRACED: ExitCode.SCAN_TRACED,
    ScanFailure.STATIC: ExitCode.SCAN_STATIC,
    ScanFailure.NOT_EXACT: ExitCode.SCAN_NOT_EXACT,
    ScanFailure.SECCOMP: ExitCode.SCAN_SECCOMP,
    ScanFailure.NO_FORK: ExitCode.SCAN_NO_COPY,
    ScanFailure.NOT_STOPPED: ExitCode.SCAN_NOT_STOPPED,
    ScanFailure.UNSUPPORTED: ExitCode.SCAN_UNSUPPORTED,
    ScanFailure.OTHER: ExitCode.GENERIC,
}


def exit_code_for(e: errors.PmmError) -> int:
    """The exit status a command ends with when it fails with `e`."""
    if isinstance(e, AttachError):
        return _BY_ATTACH_FAILURE[e.failure]
    if isinstance(e, ScanError):
        return _BY_SCAN_FAILURE[e.failure]
    if isinstance(e, CommandNotRunnable):
        return e.status
    for cls in type(e).__mro__:
        if cls in _BY_CLASS:
            return _BY_CLASS[cls]
    return ExitCode.GENERIC


def err(msg: str) -> None:
    """One line on stderr, `pmctl: MESSAGE`, escaped (messages can quote what
    a process supplied: an object path, a name)."""
    sys.stderr.write(f"pmctl: {printable(msg)}\n")
    sys.stderr.flush()


# Every command wears it: PmmError (and anything unexpected) as one line on
# stderr and its exit code, never a traceback.
handle_errors = error_handler(err, exit_code_for, typer.Exit,
                              (typer.Exit, typer.Abort, typer.TyperException))
