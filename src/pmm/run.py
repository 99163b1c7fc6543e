"""`pmctl run`: start a command with the hook preloaded and monitored.

The command gets LD_PRELOAD=<libpmmhook.so> (prepended to any LD_PRELOAD it
already has) and PMM_START=1, so the hook asks the module to monitor it from
its first allocation; --follow-fork sets PMM_FOLLOW_FORK=1, --depth N
PMM_DEPTH=N, --sample BYTES PMM_SAMPLE=BYTES.

With --no-preload its environment is left alone: pmm-inject --exec starts it
and attaches the hook at its entry point (the attach's GOT redirection, the
libraries loaded and initialised, none of its own code run yet), with those
settings and the PMM_* variables of pmctl's environment as pmm_attach's
settings. The programs it runs do not inherit the hook (a fork with
--follow-fork does: it is the same image). pmm-inject stays the command's
parent and ends as it ends; it tells pmctl the command's pid, or why it
refused, on a pipe (--status-fd).

While the command runs, pmctl captures its /proc/PID/maps (and its
descendants' with --follow-fork) into the maps cache (pmm.symbolize), often
at first and then every 250 ms, so `pmctl leaks` can symbolize its sites
after it exited. pmctl exits with the command's exit status (128+N when a
signal N killed it, 127 when it cannot be found, 126 when it cannot be
executed). SIGINT is left to the command (the terminal sends it to both);
SIGTERM and SIGHUP received by pmctl are passed on. A signal that comes
while the command is being started waits until it has a pid, and is passed
on then (SIGINT too).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from pmm.errors import PmmError
from pmm.installed import hook_hint
from pmm.kernel.model import PidInfo
from pmm.symbolize import read_live_maps, save_maps
from pmm.units import format_duration

HOOKLIB_NAME = "libpmmhook.so"
# the libpmmhook package's: a preloaded library needs no soname in a
# directory of its own (pmm-inject and pmm-scan are in /usr/libexec/pmm)
PACKAGED_HOOK_DIR = Path("/usr/lib/pmm")


def hooklib_candidates() -> list[Path]:
    """Where the hook library is looked for, in order: $PMM_HOOKLIB; the
    source tree's hooklib/ (this package is its src/pmm); PREFIX/lib of the
    `make install` this package came with (it puts the package in
    PREFIX/lib/pmm/python, DESTDIR's staging included); /usr/local/lib, the
    libpmmhook package's private directory /usr/lib/pmm, and /usr/lib
    (`make install`'s default PREFIX, the Debian package, PREFIX=/usr), for
    a pmctl installed with pip or pipx too."""
    out: list[Path] = []
    env = os.environ.get("PMM_HOOKLIB")
    if env:
        out.append(Path(env))
    package = Path(__file__).resolve().parent
    out.append(package.parents[1] / "hooklib" / HOOKLIB_NAME)
    python_dir = package.parent
    if python_dir.name == "python" and python_dir.parent.name == "pmm":
        out.append(python_dir.parent.parent / HOOKLIB_NAME)
    for lib in (Path("/usr/local/lib"), PACKAGED_HOOK_DIR, Path("/usr/lib")):
        if lib / HOOKLIB_NAME not in out:
            out.append(lib / HOOKLIB_NAME)
    return out


def find_hooklib() -> Path:
    """The first existing candidate; PmmError naming them all otherwise."""
    cands = hooklib_candidates()
    for p in cands:
        if p.is_file():
            return p.resolve()
    tried = ", ".join(str(p) for p in cands)
    raise PmmError(
        f"the hook library {HOOKLIB_NAME} is not found (tried {tried}): {hook_hint()}")


def hook_settings(
    follow_fork: bool = False,
    depth: int | None = None,
    sample: int | None = None,
    buffer: int | None = None,
) -> dict[str, str]:
    """The hook's PMM_* settings for run's options (pure)."""
    out = {"PMM_START": "1"}
    if follow_fork:
        out["PMM_FOLLOW_FORK"] = "1"
    if depth is not None:
        out["PMM_DEPTH"] = str(depth)
    if sample is not None:
        out["PMM_SAMPLE"] = str(sample)
    if buffer is not None:
        out["PMM_BUFFER"] = str(buffer)
    return out


def child_env(
    base: dict[str, str],
    hooklib: Path,
    follow_fork: bool = False,
    depth: int | None = None,
    sample: int | None = None,
    buffer: int | None = None,
) -> dict[str, str]:
    """The environment of the command (pure: returns a new dict)."""
    env = dict(base)
    pre = env.get("LD_PRELOAD", "").strip()
    env["LD_PRELOAD"] = f"{hooklib} {pre}".strip() if pre else str(hooklib)
    env.update(hook_settings(follow_fork, depth, sample, buffer))
    return env


def injector_argv(
    inject: Path,
    hooklib: Path,
    base: dict[str, str],
    follow_fork: bool = False,
    depth: int | None = None,
    sample: int | None = None,
    buffer: int | None = None,
) -> list[str]:
    """pmm-inject's command line for --no-preload, up to the command (pure).
    The hook reads what the preloaded one would read in its environment:
    base's PMM_* variables, then run's options."""
    settings = {k: v for k, v in base.items() if k.startswith("PMM_") and "\n" not in v}
    settings.update(hook_settings(follow_fork, depth, sample, buffer))
    return [str(inject), "--lib", str(hooklib), "--exec",
            *(f"{k}={v}" for k, v in settings.items())]


def children_of(pid: int) -> list[int]:
    """Direct children, from /proc/PID/task/*/children."""
    out: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for t in tasks:
        try:
            out.extend(int(x) for x in (t / "children").read_text().split())
        except (OSError, ValueError):
            continue
    return out


def descendants(pid: int) -> list[int]:
    """pid's children, their children and so on (not pid), each once, from /proc."""
    seen: list[int] = []
    todo = children_of(pid)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo.extend(children_of(p))
    return seen


@dataclass
class MapsCapturer:
    """Saves the maps of the watched pids whenever they change."""

    follow_fork: bool = False

    def __post_init__(self) -> None:
        self._last: dict[tuple[int, int], int] = {}
        self.captures = 0

    def capture(self, pid: int) -> None:
        """Saves to the maps cache the memory map of pid, and of its descendants
        with follow_fork, where it changed since the last capture. A process
        that is gone or cannot be read is skipped."""
        pids = [pid, *(descendants(pid) if self.follow_fork else [])]
        for p in pids:
            live = read_live_maps(p)
            if live is None:
                continue
            ticks, maps = live
            h = hash(tuple(maps))
            if self._last.get((p, ticks)) == h:
                continue
            if save_maps(p, ticks, maps) is not None:
                self._last[(p, ticks)] = h
                self.captures += 1


def exit_status(returncode: int) -> int:
    """A shell's view of a child's status: 128+N for signal N."""
    return 128 - returncode if returncode < 0 else returncode


def poll_delay(elapsed_s: float) -> float:
    """Often while the program is starting (loading libraries), then less."""
    if elapsed_s < 1.0:
        return 0.01
    if elapsed_s < 5.0:
        return 0.05
    return 0.25


def read_status(sock: socket.socket) -> str:
    """pmm-inject's status line: "pid PID" (the command then waits for our
    answer), or a refusal (it closes the socket after it)."""
    chunks: list[bytes] = []
    while not chunks or not chunks[-1].endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace").strip()


def injector_refusal(line: str, returncode: int, argv0: str) -> PmmError:
    """What pmm-inject said instead of "pid PID", as pmctl's error."""
    from pmm.attach import inject_error

    word, _, msg = line.partition(" ")
    if word == "exited":  # it ran, and ended before its entry point
        return CommandNotRunnable(msg, exit_status(returncode))
    if word == "error" and returncode in (126, 127):
        return CommandNotRunnable(msg, returncode)
    if word == "error":
        return inject_error(returncode, msg)
    return PmmError(f"pmm-inject ended with status {exit_status(returncode)} before "
                    f"starting {argv0}")


def _start(argv: Sequence[str], env: dict[str, str], injector: Sequence[str] | None,
           ) -> tuple[subprocess.Popen[bytes], socket.socket | None]:
    """The command started (by pmm-inject with injector), and the socket
    pmm-inject says its pid on; CommandNotRunnable when it cannot start."""
    try:
        if injector is None:
            return subprocess.Popen(list(argv), env=env), None
        # a socket: the command then waits at its entry point after "pid
        # PID" until we answer, so that even one that ends at once has its
        # maps captured
        status_sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            proc = subprocess.Popen([injector[0], "--status-fd", str(theirs.fileno()),
                                     *injector[1:], "--", *argv],
                                    env=env, pass_fds=(theirs.fileno(),))
        except OSError:
            status_sock.close()
            raise
        finally:
            theirs.close()
        return proc, status_sock
    except FileNotFoundError:
        raise CommandNotRunnable(f"{argv[0]}: command not found", 127) from None
    except PermissionError:
        raise CommandNotRunnable(f"{argv[0]}: permission denied", 126) from None
    except OSError as e:
        raise CommandNotRunnable(f"{argv[0]}: {e.strerror}", 126) from None


# what signal.signal takes and returns
SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def _restore(old: dict[signal.Signals, SignalHandler]) -> None:
    """Puts back the handlers run_command replaced."""
    for sig, handler in old.items():
        signal.signal(sig, handler)


def run_command(
    argv: Sequence[str],
    env: dict[str, str],
    on_start: Callable[[int], None],
    follow_fork: bool = False,
    injector: Sequence[str] | None = None,
) -> int:
    """Runs argv, captures its maps while it lives, returns its exit status.
    With injector (injector_argv's), pmm-inject starts it: the pid watched
    is the command's, the status pmm-inject's (the command's)."""
    capturer = MapsCapturer(follow_fork=follow_fork)
    # The handlers come before the command does: a SIGTERM or SIGHUP that
    # came between its start and their installation ended pmctl and left
    # the command running. A signal that comes before the command has a pid
    # waits in pending, and is passed on once it has one (a SIGINT too: the
    # terminal's may have come before there was a command to reach).
    # Python's handlers, not SIG_IGN: a program inherits an ignored SIGINT,
    # and handlers go back to the default at exec.
    started: list[subprocess.Popen[bytes]] = []
    pending: list[int] = []

    def forward(sig: int, _frame: FrameType | None) -> None:
        if not started:
            pending.append(sig)
        elif sig != signal.SIGINT:  # the terminal sends SIGINT to the command too
            started[0].send_signal(sig)

    old = {sig: signal.signal(sig, forward)
           for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        proc, status_sock = _start(argv, env, injector)
    except BaseException:
        _restore(old)
        for sig in pending:  # no command to pass it to: as if it came to pmctl now
            signal.raise_signal(sig)  # (SIGINT: KeyboardInterrupt)
        raise
    started.append(proc)
    for sig in pending:
        proc.send_signal(sig)
    try:
        pid = proc.pid
        if status_sock is not None:
            with status_sock:
                line = read_status(status_sock)
                if not line.startswith("pid "):
                    raise injector_refusal(line, proc.wait(), argv[0])
                pid = int(line.split()[1])
                capturer.capture(pid)  # held at its entry point until we answer
                status_sock.sendall(b"g")
        on_start(pid)  # the command may write to stderr before this line
        capturer.capture(pid)
        t0 = time.monotonic()
        while True:
            try:
                rc = proc.wait(timeout=poll_delay(time.monotonic() - t0))
                break
            except subprocess.TimeoutExpired:
                capturer.capture(pid)
    finally:
        _restore(old)
    return exit_status(rc)


class CommandNotRunnable(PmmError):
    """The command could not be started; `status` is 127 or 126 as a shell's."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def next_steps(info: PidInfo, exited_ttl_s: int, follow_fork: bool) -> list[str]:
    """What `pmctl run` says once the command ended: how long the module keeps
    its records and the commands that read them (each works on an exited
    process's entry)."""
    pid = info.pid
    cmds = [
        (f"pmctl leaks {pid}", "live blocks by allocation site, largest first"),
        (f"pmctl logs {pid}", "live blocks, oldest first"),
        (f"pmctl stats {pid}", "allocations by size"),
    ]
    if info.samples:  # the module's sampler took some: a verdict on them
        cmds.append((f"pmctl trend {pid} --source kmod",
                     f"whether its memory grew ({info.samples} "
                     f"sample{'s' if info.samples != 1 else ''})"))
    if follow_fork:
        cmds.append(("pmctl status", "its children monitored with it"))
    width = max(len(c) for c, _ in cmds)
    return [
        f"pmctl: pid {pid} was monitored; the module keeps its records for "
        f"{format_duration(exited_ttl_s)} after its exit or their last read, "
        f"or until `pmctl stop {pid}`. To see them:",
        *(f"  {c.ljust(width)}  {what}" for c, what in cmds),
    ]
