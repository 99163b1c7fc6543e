"""The hook never changes the program (DESIGN decision 9), on the host:
errno, the environment before libc sets environ, the program's file
descriptors, vfork children. The real library finds no /dev/pmm here; the
fake-device build (hooklib/libpmmhook-fake.so) models the module:
its calls are ioctls on its fd (/dev/null), attributed to the calling pid,
and logged to PMM_FAKE_LOG."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hook_env import (
    NR_QUERY_SELF,
    NR_RECORD_LOG,
    NR_SET_CONFIG,
    clean_env,
    fake_log_batches,
    fake_log_calls,
)

from pmm.kernel import uapi

TOP = Path(__file__).resolve().parents[2]
HOOK = TOP / "hooklib" / "libpmmhook.so"
FAKE = TOP / "hooklib" / "libpmmhook-fake.so"
HBIN = TOP / "tests" / "progs" / "bin"
LIBS = {"real": HOOK, "fake": FAKE}
NO_DEVICE_LINE = ("pmm: cannot open /dev/pmm: no such file (is pmm.ko loaded?) (errno 2); "
                  "allocations pass through to libc\n")


def no_device() -> None:
    if Path("/dev/pmm").exists():
        pytest.skip("/dev/pmm exists here")


@pytest.mark.parametrize("lib", LIBS)
def test_errno_kept_when_the_hook_starts_in_preinit(lib: str) -> None:
    """preinit's .preinit_array function sets errno to EBADF and calls
    malloc, calloc, realloc and free, the first of which starts the hook
    (before libc's own initialisation: environ is still NULL there, which
    the program reports). errno stays EBADF after each, with no /dev/pmm
    (the real library's open fails with ENOENT) and with the fake device;
    the hook used to set errno to 0 when the open failed. PMM_QUIET=1,
    which the hook has to find without environ, keeps stderr empty."""
    no_device()
    env = clean_env(LD_PRELOAD=str(LIBS[lib]), PMM_QUIET="1")
    r = subprocess.run([str(HBIN / "preinit")], env=env, capture_output=True, text=True,
                       timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (
        0, "preinit: environ NULL, errno kept\n", "")


def test_one_line_without_quiet_from_preinit() -> None:
    """Without PMM_QUIET the missing device is still said once."""
    no_device()
    env = clean_env(LD_PRELOAD=str(HOOK))
    r = subprocess.run([str(HBIN / "preinit")], env=env, capture_output=True, text=True,
                       timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (
        0, "preinit: environ NULL, errno kept\n", NO_DEVICE_LINE)


def test_settings_taken_when_the_hook_starts_in_preinit(tmp_path: Path) -> None:
    """The PMM_* variables are read from the initial environment when the
    hook starts before environ is set: PMM_START=1 asks START_PID 0 first
    thing, PMM_DEPTH=4 describes sites by up to 4 frames (the preinit
    function's sites have 3 below them: the loader's), PMM_BUFFER=512 sends
    main's 2000 live blocks in batches of 512. When getenv was asked, none
    of them took effect."""
    log = tmp_path / "calls.bin"
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_START="1", PMM_DEPTH="4", PMM_BUFFER="512",
                    PMM_FAKE_LOG=str(log))
    r = subprocess.run([str(HBIN / "preinit"), "2000"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (
        0, "preinit: environ NULL, errno kept\n", "")
    calls = fake_log_calls(log)
    first = calls[0]
    assert first.config is not None
    assert (first.nr, first.result, first.config.set, first.config.start_pid) == (
        NR_SET_CONFIG, 0, uapi.CFG_START_PID, 0)
    assert (calls[1].nr, calls[1].result) == (NR_QUERY_SELF, 1)
    depths = sorted(c.site.depth for c in calls if c.site is not None)
    assert depths and depths[0] >= 3 and depths[-1] == 4, depths
    sizes = [len(recs) for _, recs in fake_log_batches(log)]
    assert sizes[:3] == [512, 512, 512], sizes
    kept = sum(r.weight for _, recs in fake_log_batches(log) for r in recs
               if r.op == uapi.Op.MALLOC and r.size == 48)
    assert kept == 2000


@pytest.mark.parametrize("lib", LIBS)
def test_cleared_environment_stays_cleared(tmp_path: Path, lib: str) -> None:
    """clearenv is linked with a library whose constructor, which runs
    after libc's initialisation and before the preloaded hook's own,
    empties the environment (clearenv: environ is NULL) and allocates, so
    the hook starts there. environ NULL must not be taken for "libc not
    initialised", whose initial environment (after argv on the stack)
    still holds PMM_QUIET=1, PMM_START=1 and PMM_FAKE_LOG: none of them is
    taken. The real library says that the device is missing (PMM_QUIET is
    gone), the fake one writes no log. The hook used to read them back."""
    if lib == "real":
        no_device()
    log = tmp_path / "calls.bin"
    env = clean_env(LD_PRELOAD=str(LIBS[lib]), PMM_QUIET="1", PMM_START="1",
                    PMM_FAKE_LOG=str(log))
    r = subprocess.run([str(HBIN / "clearenv")], env=env, capture_output=True, text=True,
                       timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (
        0, "environ NULL\n", NO_DEVICE_LINE if lib == "real" else "")
    assert not log.exists()


def setuid_copy(program: Path, directory: Path) -> Path:
    """A copy of program, set-user-ID to nobody."""
    copy = directory / program.name
    shutil.copy(program, copy)
    os.chown(copy, 65534, 65534)
    copy.chmod(0o4755)
    return copy


@pytest.mark.skipif(os.geteuid() != 0, reason="a set-user-ID copy for another user needs root")
def test_setuid_program_ignores_pmm_variables() -> None:
    """secure-real and secure-fake have the hook linked in (the loader
    ignores LD_PRELOAD for a set-user-ID program). Not set-user-ID, they
    take PMM_START=1 and PMM_FAKE_LOG (a START_PID first in the log), and
    the real one says that the device is missing. Their copies set-user-ID
    to nobody, run by root, run in secure-execution mode (AT_SECURE 1), as
    glibc's MALLOC_* are ignored there, the hook ignores every PMM_*: no
    log is written, and nothing is said on the invoking user's stderr. The
    hook used to obey the invoking user's environment there too."""
    no_device()
    with tempfile.TemporaryDirectory() as name:
        where = Path(name)
        where.chmod(0o1777)  # nobody may write the log, should the hook try
        if os.statvfs(where).f_flag & os.ST_NOSUID:
            pytest.skip(f"{where} is mounted nosuid")
        log = where / "calls.bin"
        env = clean_env(PMM_START="1", PMM_FAKE_LOG=str(log))
        for prog, said in (("secure-fake", ""), ("secure-real", NO_DEVICE_LINE)):
            r = subprocess.run([str(HBIN / prog)], env=env, capture_output=True, text=True,
                               timeout=60)
            assert (r.returncode, r.stdout, r.stderr) == (0, "AT_SECURE 0\n", said)
        config = fake_log_calls(log)[0].config
        assert config is not None and config.set == uapi.CFG_START_PID
        log.unlink()
        for prog in ("secure-fake", "secure-real"):
            r = subprocess.run([str(setuid_copy(HBIN / prog, where))], env=env,
                               capture_output=True, text=True, timeout=60)
            assert (r.returncode, r.stdout, r.stderr) == (0, "AT_SECURE 1\n", "")
        assert not log.exists()


def close_std_fds() -> None:
    for fd in range(3):
        os.close(fd)


def test_device_fd_above_stdio(tmp_path: Path) -> None:
    """A program started with fds 0-2 closed: the hook's device (the fake's
    /dev/null) is opened at 3 or above, and the program's own three open()s
    get 0, 1 and 2, as POSIX promises. The hook used to take fd 0, and the
    program's files became 1, 2 and 3."""
    out = tmp_path / "fds.txt"
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_QUIET="1")
    r = subprocess.run([str(HBIN / "fds"), "std", str(out)], env=env,
                       preexec_fn=close_std_fds, timeout=60)
    assert r.returncode == 0
    assert out.read_text() == "opened 0 1 2, device 3\n"


def test_real_library_without_device_keeps_stdio(tmp_path: Path) -> None:
    """The same with the real library and no /dev/pmm: no fd is taken."""
    no_device()
    out = tmp_path / "fds.txt"
    env = clean_env(LD_PRELOAD=str(HOOK), PMM_QUIET="1")
    r = subprocess.run([str(HBIN / "fds"), "std", str(out)], env=env,
                       preexec_fn=close_std_fds, timeout=60)
    assert r.returncode == 0
    assert out.read_text() == "opened 0 1 2, device -1\n"


@pytest.mark.skipif(shutil.which("strace") is None, reason="no strace")
@pytest.mark.parametrize("how", ["close", "close_range"])
def test_device_fd_closed_by_the_program(tmp_path: Path, how: str) -> None:
    """fds: 3000 blocks of 55 bytes (sent in batches of 512 records), then
    the program closes the hook's fd (close, or close_range(3, ~0U, 0) as a
    daemon or a spawn helper does) and opens a file, which gets the same
    number; then 3000 blocks of 77 bytes. The hook finds its fd is another
    file before its next ioctl (fstat) and passes through from then on,
    quietly: that file sees no ioctl (strace), no record of the 77-byte
    blocks is sent, nothing is printed on stderr (PMM_QUIET unset), errno
    is kept. The hook used to send its batches to whatever file held the
    number."""
    file, log, trace = tmp_path / "file", tmp_path / "calls.bin", tmp_path / "strace.txt"
    env = clean_env(PMM_BUFFER="512", PMM_FAKE_LOG=str(log))
    r = subprocess.run(["strace", "-f", "-qq", "-e", "trace=ioctl,openat", "-o", str(trace),
                        "env", f"LD_PRELOAD={FAKE}", str(HBIN / "fds"), how, str(file)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stdout, r.stderr) == (0, "FILE at 3, errno kept\n", "")
    lines = trace.read_text().splitlines()
    opened = [i for i, line in enumerate(lines) if f'"{file}"' in line]
    assert len(opened) == 1 and lines[opened[0]].endswith("= 3")
    before = [line for line in lines[:opened[0]] if re.search(r"ioctl\(3, _IOC\(.*0xb7", line)]
    after = [line for line in lines[opened[0]:] if "ioctl(3," in line]
    assert before and after == []
    sizes = {rec.size for _, recs in fake_log_batches(log) for rec in recs}
    assert 55 in sizes and 77 not in sizes
    assert all(c.nr != NR_RECORD_LOG or 77 not in {x.size for x in c.records}
               for c in fake_log_calls(log))


@pytest.mark.parametrize("fastpath", ["1", "0"])
@pytest.mark.parametrize("mode", ["full", "over", "late"])
def test_vfork_child_leaves_the_parent_monitored(tmp_path: Path, mode: str,
                                                  fastpath: str) -> None:
    """vfork: the parent buffers 300 blocks of 48 bytes, its vfork child
    allocates blocks of 88 bytes (full: 300, which fill the parent's buffer
    of 512 records; over: 3000; late: 50 after 150 ms, past the buffer's deadline,
    with PMM_CLOCK=mono so that the fake device's time moves), and the
    parent then 1000 blocks of 56 bytes. The child shares the parent's
    memory and thread, and the fake module, as the real one, refuses a
    batch from its pid: the child must not send (no call of any kind from
    its pid), nor stop or disable the hook for the parent. Every record
    arrives from the parent: its own, and the child's, which stay in the
    parent's buffer (the child's blocks are in the parent's heap) until
    the buffer is full: full and over leave room for 212 of them. The hook used to
    send the buffer from the child, which the module refused, and stopped:
    the parent's 56-byte blocks went unrecorded."""
    log = tmp_path / "calls.bin"
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_QUIET="1", PMM_BUFFER="512",
                    PMM_CLOCK="mono", PMM_FASTPATH=fastpath, PMM_FAKE_LOG=str(log))
    r = subprocess.run([str(HBIN / "vfork"), mode], env=env, capture_output=True, text=True,
                       timeout=60)
    assert (r.returncode, r.stderr) == (0, "")
    child = int(r.stdout.split()[1])
    calls = fake_log_calls(log)
    assert {c.pid for c in calls} == {calls[0].pid} != {child}
    assert all(c.result >= 0 for c in calls)
    blocks: dict[int, int] = {}
    frees = 0  # cancelled in the buffer (FREED) or sent (FREE)
    for c in calls:
        for rec in c.records:
            if rec.op == uapi.Op.MALLOC:
                blocks[rec.size] = blocks.get(rec.size, 0) + rec.weight
                frees += rec.weight if rec.flags & uapi.REC_F_FREED else 0
            elif rec.op == uapi.Op.FREE and rec.ptr:
                frees += 1
    want = {48: 300, 88: 50 if mode == "late" else 212, 56: 1000}
    assert {s: blocks.get(s) for s in want} == want
    assert frees == sum(want.values())


@pytest.mark.skipif(shutil.which("strace") is None, reason="no strace")
@pytest.mark.parametrize("fastpath", ["1", "0"])
def test_vfork_child_with_a_full_buffer_asks_no_more(tmp_path: Path, fastpath: str) -> None:
    """vfork over: the child fills the parent's buffer of 512 records and
    makes 2788 blocks more, whose records are dropped. Once it finds the
    buffer full and itself a child (getpid), it registers a robust futex
    list whose one word the kernel marks when it exits or execs, and asks
    nothing more: at most 2 getpid from the child (strace), where every
    record after the buffer filled used to ask again (5577 for its 2788
    blocks). The
    parent, finding the word marked, sends its buffer (the test above)."""
    trace = tmp_path / "strace.txt"
    env = clean_env(PMM_QUIET="1", PMM_BUFFER="512", PMM_FASTPATH=fastpath)
    r = subprocess.run(["strace", "-f", "-qq", "-e", "trace=getpid", "-o", str(trace),
                        "env", f"LD_PRELOAD={FAKE}", str(HBIN / "vfork"), "over"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stderr) == (0, "")
    child = int(r.stdout.split()[1])
    asked = [line for line in trace.read_text().splitlines()
             if line.startswith(f"{child} ") and "getpid()" in line]
    assert 1 <= len(asked) <= 2, len(asked)


@pytest.mark.parametrize("how", ["fork", "_Fork", "clone"])
def test_child_made_without_fork_handlers(tmp_path: Path, how: str) -> None:
    """forkraw, PMM_FOLLOW_FORK=1: the parent buffers 300 blocks of 48
    bytes and makes a child with fork(), glibc's _Fork() or a raw clone
    system call; the last two run no atfork handler, but the child has a
    copy of the memory: the hook's page mapped with MADV_WIPEONFORK is
    zeroed in it, where a vfork child would find it set. When the child
    first sends (its inherited buffer fills) it finds another pid and a
    zeroed page, and becomes a forked child: empty buffer, START_PID 0
    asked (PMM_FOLLOW_FORK), and from then on its records go out under its
    pid: its 1000 blocks of 104 bytes, and of its 600 blocks of 88 bytes
    those after the 212 that filled the buffer (fork: all of them). The
    parent's blocks all arrive from the parent. The hook used to take such
    a child for a vfork child for good: it never sent, never polled, and
    asked getpid on every record once the buffer was full."""
    log = tmp_path / "calls.bin"
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_QUIET="1", PMM_BUFFER="512",
                    PMM_FOLLOW_FORK="1", PMM_FAKE_LOG=str(log))
    r = subprocess.run([str(HBIN / "forkraw"), how], env=env, capture_output=True,
                       text=True, timeout=60)
    assert (r.returncode, r.stderr) == (0, "")
    child = int(r.stdout.split()[1])
    calls = fake_log_calls(log)
    parent = calls[0].pid
    assert {c.pid for c in calls} == {parent, child}
    assert all(c.result >= 0 for c in calls)
    first = next(c for c in calls if c.pid == child)
    assert first.config is not None
    assert (first.nr, first.config.set, first.config.start_pid) == (
        NR_SET_CONFIG, uapi.CFG_START_PID, 0)
    blocks: dict[tuple[int, int], int] = {}
    for c in calls:
        for rec in c.records:
            if rec.op == uapi.Op.MALLOC and rec.size in (48, 56, 88, 104):
                key = (c.pid, rec.size)
                blocks[key] = blocks.get(key, 0) + rec.weight
    assert blocks == {(parent, 48): 300, (parent, 56): 1000,
                      (child, 88): 600 if how == "fork" else 388, (child, 104): 1000}
