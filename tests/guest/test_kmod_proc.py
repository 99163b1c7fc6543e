"""/proc/pmm/cfg and /proc/pmm/pid: exact lines, strict writes, visibility."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Iterator

import numpy as np
import pytest
from helpers import FULL, as_nobody, spawn_sleeper
from kmod_dev import (
    DEFAULT_CFG,
    RECORD_DTYPE,
    Dev,
    as_nobody_fn,
    cfg_lines,
    cfg_write,
    proc_pid_lines,
    rec,
)

from pmm.kernel import uapi

pytestmark = pytest.mark.usefixtures("pmm")
Op = uapi.Op


@pytest.fixture()
def dev() -> Iterator[Dev]:
    d = Dev()
    yield d
    d.close()


def test_cfg_defaults() -> None:
    assert cfg_lines() == DEFAULT_CFG
    st = os.stat("/proc/pmm/cfg")
    assert oct(st.st_mode & 0o777) == "0o644"
    assert oct(os.stat("/proc/pmm/pid").st_mode & 0o777) == "0o444"


def test_cfg_writes(dev: Dev) -> None:
    kid = subprocess.Popen(["sleep", "60"])
    try:
        for line in ("INTERVAL 5000", "SCAN 0\n", "MAX_PIDS 5", "MAX_BLOCKS 1000",
                     "MAX_SITES 77", "MAX_SAMPLES 9", f"START_PID {kid.pid}\n"):
            assert cfg_write(line) == 0, line
        assert cfg_lines() == [
            '["INTERVAL" (Scan Interval) :=5000]',
            '["SCAN" (Scan on:1/off:0) := 0]',
            f'["START_PID" (Start a monitor):={kid.pid}]',
            '["STOP_PID" (Stop a monitor) := 0]',
            '["MAX_PIDS" (Monitored pids limit) := 5]',
            '["MAX_BLOCKS" (Live blocks per pid limit) := 1000]',
            '["MAX_SITES" (Sites per pid limit) := 77]',
            '["MAX_SAMPLES" (Samples per pid limit) := 9]',
            '["MAX_PIDS_PER_UID" (Monitored pids per user limit) := 16]',
            '["EXITED_TTL" (Exited pid kept, seconds) := 3600]',
        ]
        assert [p.pid for p in dev.pids()] == [kid.pid]
        c = dev.config()
        assert (c.interval_ms, c.scan, c.max_pids, c.max_blocks_per_pid) == (5000, 0, 5, 1000)
        assert cfg_write(f"START_PID {kid.pid}") == errno.EEXIST
        assert cfg_write(f"STOP_PID {kid.pid}") == 0
        assert cfg_lines()[3] == f'["STOP_PID" (Stop a monitor) := {kid.pid}]'
        assert dev.pids() == []
        assert cfg_write(f"STOP_PID {kid.pid}") == errno.ENOENT
        assert cfg_write("START_PID 4194000") == errno.ESRCH
        # the limits' inclusive bounds
        for line in ("INTERVAL 10", "INTERVAL 3600000", "MAX_PIDS 1024", "MAX_BLOCKS 16777216",
                     "MAX_SITES 1048576", "MAX_SAMPLES 1048576", "MAX_SAMPLES 1", "SCAN 1"):
            assert cfg_write(line) == 0, line
    finally:
        kid.kill()
        kid.wait()


BAD_LINES = [
    "\n", "INTERVAL", "INTERVAL ", "INTERVAL 9", "INTERVAL 3600001", "INTERVAL -1",
    "INTERVAL abc", "INTERVAL 10 20", "INTERVAL  100", " INTERVAL 100", "INTERVAL 100 ",
    "INTERVAL 100\n\n", "INTERVAL 0x64", "INTERVAL 4294967396", "interval 100",
    "INTERVAL=100", "INTERVAL\t100", "SCAN 2", "SCAN -0", "SCAN on", "START_PID 0",
    "START_PID -1", "START_PID x", "STOP_PID 0", "STOP_PID", "MAX_PIDS 0", "MAX_PIDS 1025",
    "MAX_BLOCKS 0", "MAX_BLOCKS 16777217", "MAX_SITES 0", "MAX_SITES 1048577", "MAX_SAMPLES 0",
    "MAX_SAMPLES 1048577", "MAX_SAMPLE 10", "FOO 1", "INTERVAL 100\0", "X" * 100,
    "INTERVAL " + "1" * 60, "MAX_PIDS_PER_UID 0", "MAX_PIDS_PER_UID 1025", "EXITED_TTL 0",
    "EXITED_TTL 604801", "EXITED_TTL -1",
]


def test_cfg_bad_lines_change_nothing() -> None:
    for line in BAD_LINES:
        assert cfg_write(line) == errno.EINVAL, repr(line)
        assert cfg_lines() == DEFAULT_CFG, repr(line)


def test_cfg_write_needs_admin() -> None:
    fd = os.open("/proc/pmm/cfg", os.O_WRONLY)

    def write() -> int:
        try:
            os.write(fd, b"INTERVAL 100")
        except OSError as e:
            return e.errno or -1
        return 0

    assert as_nobody_fn(write) == errno.EPERM
    os.close(fd)
    r = as_nobody(["sh", "-c", "echo 'INTERVAL 100' > /proc/pmm/cfg"])
    assert r.returncode != 0 and "Permission denied" in r.stderr
    assert as_nobody(["cat", "/proc/pmm/cfg"]).stdout.splitlines() == DEFAULT_CFG
    assert cfg_lines() == DEFAULT_CFG


def hms(mono_ns: int) -> str:
    wall = mono_ns + time.time_ns() - time.monotonic_ns()
    return time.strftime("%H:%M:%S", time.gmtime(wall // 10**9))


def mid_second() -> int:
    """A CLOCK_MONOTONIC time whose wall-clock second is half a second away
    from either edge, so HH:MM:SS cannot round differently."""
    off = time.time_ns() - time.monotonic_ns()
    now = time.monotonic_ns()
    return now - ((now + off) % 10**9) + 5 * 10**8 - 10**9


def test_pid_lines(dev: Dev) -> None:
    dev.start()
    me = os.getpid()
    with open("/proc/self/comm") as f:
        comm = f.read().strip()
    t = mid_second()
    dev.register(1, [0x10000E60, 0x10000F00], "pmd.c", "main", 207)
    dev.register(2, [0x10000E84], "pmd.c", "main", 209)
    dev.register(3, [0x10000EA0])  # frames only
    dev.send([
        rec(Op.MALLOC, 0x10012008, 100, t, site=1),
        rec(Op.MALLOC, 0x10013000, 50, t, site=1),
        rec(Op.REALLOC, 0x10014000, 200, t + 10**9, site=2, prev=0x10013000),
        rec(Op.CALLOC, 0x10015000, 64, t, site=3),
        rec(Op.MMAP, 0x7F0000000000, 8192, t, site=99),  # never registered
        rec(Op.POSIX_MEMALIGN, 0x10016000, 32, t, site=1),
    ])
    lines = proc_pid_lines()
    assert lines[0] == f"[1] PID: {me}, Comp: {comm}, PPID: {os.getppid()}, State: 1, Log count: 5"
    a, b = hms(t), hms(t + 10**9)
    assert sorted(lines[1:]) == sorted([
        f"{{MALLOC @{a}}} Sz: 100B Pointer: 0x10012008 Caller: 0x10000e60 main() 207 pmd.c",
        f"{{REALLOC @{b}}} Sz: 200B Prev Pointer: 0x10013000 Pointer: 0x10014000 "
        "Caller: 0x10000e84 main() 209 pmd.c",
        f"{{CALLOC @{a}}} Sz: 64B Pointer: 0x10015000 Caller: 0x10000ea0",
        f"{{MMAP @{a}}} Sz: 8192B Pointer: 0x7f0000000000 Caller: 0x0",
        f"{{POSIX_MEMALIGN @{a}}} Sz: 32B Pointer: 0x10016000 Caller: 0x10000e60 main() 207 pmd.c",
    ])


def test_pid_summary_and_several(dev: Dev) -> None:
    kid = spawn_sleeper()
    try:
        dev.start(kid.pid)
        dev.start()
        me = os.getpid()
        dev.send([rec(Op.FREE, 0x1234), rec(Op.MALLOC, 0x5000, 1)])
        lines = proc_pid_lines()
        assert lines[0] == f"[1] PID: {kid.pid}, Comp: sleep, PPID: {me}, State: 1, Log count: 0"
        assert lines[1].startswith(f"[2] PID: {me}, ")
        assert lines[1].endswith(", State: 1, Log count: 1")
        assert lines[2] == "Dropped: 0, Unmatched frees: 0, Pending frees: 1, Older frees: 0"
        assert lines[3].startswith("{MALLOC @")
        assert lines[3].endswith("} Sz: 1B Pointer: 0x5000 Caller: 0x0")
        assert len(lines) == 4
        # what a reader may not ptrace is not shown
        assert as_nobody(["cat", "/proc/pmm/pid"]).stdout == ""
    finally:
        kid.kill()
        kid.wait()


def test_pid_many_blocks(dev: Dev) -> None:
    """Many blocks print completely, in small and large reads alike, each once."""
    n = 1_000_000 if FULL else 20_000
    dev.start()
    t = mid_second()
    arr = np.zeros(n, dtype=RECORD_DTYPE)
    arr["ptr"] = 0x100000000 + np.arange(n, dtype=np.uint64) * 16
    arr["size"] = 1 + np.arange(n, dtype=np.uint64) % 1000
    arr["time_ns"] = t
    arr["site"] = 1
    arr["weight"] = 1
    arr["op"] = Op.MALLOC
    dev.send_raw(arr.ctypes.data, n)
    del arr
    assert dev.info().live_blocks == n
    for chunk in (4096, 1 << 20):
        seen = 0
        ptrs = set()
        parts = []
        with open("/proc/pmm/pid", "rb", buffering=0) as f:
            while buf := f.read(chunk):
                parts.append(buf)
        for line in b"".join(parts).decode().splitlines()[1:]:
            ptr = int(line.split(" Pointer: ")[1].split()[0], 16)
            size = int(line.split(" Sz: ")[1].split("B")[0])
            assert size == 1 + (ptr - 0x100000000) // 16 % 1000
            ptrs.add(ptr)
            seen += 1
        assert seen == n == len(ptrs)
