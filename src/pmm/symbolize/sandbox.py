"""Running binutils (addr2line, c++filt) on what a process's owner wrote.

binutils' parsers are not written for hostile input (its own security notes
say never to run it privileged on untrusted files), and addr2line follows
the .gnu_debuglink and .gnu_debugaltlink paths inside the file. A file the
caller does not trust (`OpenFile.owner_trusted`: not root's or ours alone)
is therefore parsed by a child that

- runs as the file's owner (nobody if that is root or us: a file someone
  else may write), with no supplementary groups, when we may change users
  (root); always with no capabilities (permitted, inheritable, ambient and,
  when we may, the bounding set emptied) and PR_SET_NO_NEW_PRIVS, through
  util-linux's setpriv;
- gets the file as a descriptor it inherits (/proc/self/fd/N), not a path
  to resolve, an empty environment (LC_ALL=C alone), no stdin, / as its
  directory, and a time budget, after which it is killed with its process
  group; its output is bounded too.

`run` does this; `ToolFailed` (an OSError) says why a run gave nothing.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence

# a child's stdout beyond this is not an answer (a file's owner chose it)
MAX_OUTPUT = 16 << 20
NOBODY = "nobody"


class ToolFailed(OSError):
    """A tool that gave no answer: not run, killed at its time budget, or
    failed; the message says which, in one line."""


class TimedOut(ToolFailed):
    """A tool killed at its time budget."""


def nobody() -> tuple[int, int]:
    """The uid and gid of the unprivileged user nobody (65534 without one)."""
    try:
        pw = pwd.getpwnam(NOBODY)
        return pw.pw_uid, pw.pw_gid
    except KeyError:
        return 65534, 65534


def run_as_for(uid: int, gid: int) -> tuple[int, int]:
    """Whom a child parsing a file of uid:gid runs as: that owner, unless
    it is root or us (the file is then writable by others, or it would
    be trusted), then nobody."""
    if uid in (0, os.geteuid()):
        return nobody()
    return uid, gid


def _drop_prefix(run_as: tuple[int, int] | None) -> list[str]:
    """setpriv's arguments that leave the child unprivileged (as run_as when
    we may change users)."""
    setpriv = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if setpriv is None:
        raise ToolFailed("setpriv (util-linux) is not installed: a file someone else wrote "
                         "is not parsed without it")
    args = [setpriv, "--no-new-privs", "--inh-caps=-all"]
    if os.geteuid() == 0 and run_as is not None:
        uid, gid = run_as
        args += [f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--bounding-set=-all"]
    return [*args, "--"]


def run(argv: Sequence[str], *, timeout: float, pass_fds: Sequence[int] = (),
        untrusted: bool = False, run_as: tuple[int, int] | None = None,
        input_text: str | None = None) -> str:
    """argv's stdout (text), run with pass_fds inherited, stdin closed (or
    input_text on it), an empty environment and / as its directory; when
    untrusted, unprivileged as the module's docstring says (as run_as where
    we may change users). ToolFailed when it cannot run, or gives no answer
    within timeout seconds or MAX_OUTPUT bytes (it is killed then)."""
    cmd = [*(_drop_prefix(run_as) if untrusted else []), *argv]
    try:
        p = subprocess.Popen(
            cmd, stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={"LC_ALL": "C"}, cwd="/",
            pass_fds=tuple(pass_fds), close_fds=True, start_new_session=True)
    except OSError as e:
        raise ToolFailed(f"{os.path.basename(argv[0])} cannot run: {e.strerror}") from None
    name = os.path.basename(argv[0])
    try:
        out = _collect(p, name, timeout, input_text)
    except BaseException:
        _kill(p)
        raise
    if p.returncode != 0 and not out:
        raise ToolFailed(f"{name} failed (exit status {p.returncode})")
    return out.decode(errors="replace")


def _collect(p: subprocess.Popen[bytes], name: str, timeout: float,
             input_text: str | None) -> bytes:
    """p's stdout until it ends, within timeout seconds and MAX_OUTPUT bytes
    (name: the program's, for messages)."""
    assert p.stdout is not None
    deadline = time.monotonic() + timeout
    pending = (input_text or "").encode()
    chunks: list[bytes] = []
    size = 0
    with selectors.DefaultSelector() as sel:
        sel.register(p.stdout, selectors.EVENT_READ)
        if p.stdin is not None:
            os.set_blocking(p.stdin.fileno(), False)
            if pending:
                sel.register(p.stdin, selectors.EVENT_WRITE)
            else:
                p.stdin.close()
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimedOut(f"{name}: no answer within {timeout:g} s (killed)")
            for key, _ in sel.select(left):
                if key.fileobj is p.stdin:
                    assert p.stdin is not None
                    try:
                        sent = os.write(p.stdin.fileno(), pending[:65536])
                    except BrokenPipeError:
                        sent = len(pending)
                    pending = pending[sent:]
                    if not pending:
                        sel.unregister(p.stdin)
                        p.stdin.close()
                    continue
                data = os.read(p.stdout.fileno(), 65536)
                if not data:
                    sel.unregister(p.stdout)
                    continue
                size += len(data)
                if size > MAX_OUTPUT:
                    raise ToolFailed(f"{name}: more than {MAX_OUTPUT} bytes of output (killed)")
                chunks.append(data)
    p.stdout.close()
    left = deadline - time.monotonic()
    try:
        p.wait(max(left, 0.0))
    except subprocess.TimeoutExpired:
        raise TimedOut(f"{name}: no answer within {timeout:g} s (killed)") from None
    return b"".join(chunks)


def _kill(p: subprocess.Popen[bytes]) -> None:
    """p and what it started (its own session) killed, and reaped."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        p.kill()
    for f in (p.stdout, p.stdin):
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()
    p.wait()
