"""Helpers of the test_kmod_* in-guest tests: /dev/pmm through src/pmm/kernel/uapi.py."""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pmm.kernel import uapi
from pmm.kernel.device import CFG_BITS

T = TypeVar("T", bound=ctypes.Structure)
NOBODY = 65534

DEFAULT_CFG = [
    '["INTERVAL" (Scan Interval) :=10000]',
    '["SCAN" (Scan on:1/off:0) := 1]',
    '["START_PID" (Start a monitor):=0]',
    '["STOP_PID" (Stop a monitor) := 0]',
    '["MAX_PIDS" (Monitored pids limit) := 64]',
    '["MAX_BLOCKS" (Live blocks per pid limit) := 16777216]',
    '["MAX_SITES" (Sites per pid limit) := 65536]',
    '["MAX_SAMPLES" (Samples per pid limit) := 4096]',
    '["MAX_PIDS_PER_UID" (Monitored pids per user limit) := 16]',
    '["EXITED_TTL" (Exited pid kept, seconds) := 3600]',
]


# struct pmm_record as a numpy dtype, to build large batches fast
RECORD_DTYPE = [
    ("ptr", "<u8"), ("prev_ptr", "<u8"), ("size", "<u8"), ("time_ns", "<u8"), ("site", "<u4"),
    ("weight", "<u4"), ("op", "<u2"), ("flags", "<u2"), ("alloc_tag", "<u4"),
]


def rec(
    op: int,
    ptr: int = 0,
    size: int = 0,
    t: int | None = None,
    site: int = 0,
    prev: int = 0,
    weight: int = 1,
    flags: int = 0,
    alloc_tag: int = 0,
) -> uapi.Record:
    return uapi.Record(
        ptr=ptr,
        prev_ptr=prev,
        size=size,
        time_ns=time.monotonic_ns() if t is None else t,
        site=site,
        weight=weight,
        op=op,
        flags=flags,
        alloc_tag=alloc_tag,
    )


class Dev:
    """An open /dev/pmm."""

    def __init__(self, fd: int | None = None) -> None:
        self.fd = os.open("/dev/pmm", os.O_RDWR) if fd is None else fd

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> Dev:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ioctl(self, req: int, arg: Any) -> int:
        if isinstance(arg, int):
            return int(fcntl.ioctl(self.fd, req, arg))
        return int(fcntl.ioctl(self.fd, req, arg, True))

    def err(self, req: int, arg: Any) -> int:
        """The errno of the call, 0 on success."""
        try:
            self.ioctl(req, arg)
        except OSError as e:
            return e.errno or -1
        return 0

    def config(self) -> uapi.Config:
        c = uapi.Config(size=ctypes.sizeof(uapi.Config))
        self.ioctl(uapi.GET_CONFIG, c)
        return c

    def set_config(self, **fields: int) -> None:
        self.ioctl(uapi.SET_CONFIG, self.config_arg(**fields))

    @staticmethod
    def config_arg(**fields: int) -> uapi.Config:
        c = uapi.Config(size=ctypes.sizeof(uapi.Config))
        for k, v in fields.items():
            setattr(c, k, v)
            c.set |= CFG_BITS.get(k, 0)
        return c

    def start(self, pid: int = 0) -> None:
        self.set_config(start_pid=pid)

    def stop(self, pid: int = 0) -> None:
        self.set_config(stop_pid=pid)

    def batch(self, records: Sequence[uapi.Record]) -> tuple[uapi.RecordBatch, Any]:
        arr = (uapi.Record * len(records))(*records)
        b = uapi.RecordBatch(records=ctypes.addressof(arr), count=len(records))
        return b, arr

    def send(self, records: Sequence[uapi.Record]) -> int:
        """Sends records in batches of MAX_BATCH; returns the records accepted."""
        accepted = 0
        for i in range(0, len(records), uapi.MAX_BATCH):
            b, _arr = self.batch(records[i : i + uapi.MAX_BATCH])
            self.ioctl(uapi.RECORD_LOG, b)
            accepted += b.accepted
        return accepted

    def send_raw(self, addr: int, n: int) -> None:
        """Sends n records that lie at addr (e.g. a numpy array of RECORD_DTYPE)."""
        size = ctypes.sizeof(uapi.Record)
        for i in range(0, n, uapi.MAX_BATCH):
            b = uapi.RecordBatch(records=addr + i * size, count=min(uapi.MAX_BATCH, n - i))
            self.ioctl(uapi.RECORD_LOG, b)
            assert b.accepted == b.count

    def register(
        self,
        site: int,
        frames: Sequence[int] = (),
        file: str = "",
        func: str = "",
        line: int = 0,
    ) -> None:
        s = uapi.Site(site=site, depth=len(frames), line=line)
        for i, f in enumerate(frames):
            s.frames[i] = f
        if file or func:
            s.flags = uapi.SITE_F_SOURCE
            s.file = file.encode()
            s.func = func.encode()
        self.ioctl(uapi.REGISTER_SITE, s)

    def read_all(self, req: int, cls: type[T], pid: int = 0, capacity: int = 64) -> list[T]:
        out: list[T] = []
        buf = (cls * capacity)()
        r = uapi.Read(pid=pid, capacity=capacity, buf=ctypes.addressof(buf))
        while True:
            self.ioctl(req, r)
            out.extend(cls.from_buffer_copy(buf[i]) for i in range(r.count))
            if r.done:
                return out

    def pids(self) -> list[uapi.PidInfo]:
        return self.read_all(uapi.MONITORED_PIDS, uapi.PidInfo)

    def info(self, pid: int = 0) -> uapi.PidInfo:
        want = pid or os.getpid()
        for p in self.pids():
            if p.pid == want:
                return p
        raise LookupError(f"pid {want} not monitored")

    def blocks(self, pid: int = 0) -> list[uapi.Block]:
        return self.read_all(uapi.READ_BLOCKS, uapi.Block, pid)

    def sites(self, pid: int = 0) -> dict[int, uapi.SiteStats]:
        return {s.desc.site: s for s in self.read_all(uapi.READ_SITES, uapi.SiteStats, pid)}

    def objects(self, pid: int = 0) -> list[uapi.Object]:
        return self.read_all(uapi.READ_OBJECTS, uapi.Object, pid)

    def samples(self, pid: int = 0) -> list[uapi.Sample]:
        return self.read_all(uapi.READ_SAMPLES, uapi.Sample, pid)

    def stats(self, pid: int = 0) -> uapi.Stats:
        s = uapi.Stats(pid=pid)
        self.ioctl(uapi.GET_STATS, s)
        return s


def as_user_fn(uid: int, fn: Callable[[], Any],
               before_drop: Callable[[], None] | None = None,
               groups: Sequence[int] = ()) -> Any:
    """Runs fn in a forked child that dropped to uid (and gid uid, only the
    supplementary `groups`, no capabilities; fds inherited, so a /dev/pmm
    opened by root stays usable); returns fn's JSON-able result. The child cannot import what
    the parent has not: the interpreter's files are under /root."""
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(rd)
            if before_drop is not None:
                before_drop()
            os.setgroups(list(groups))
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            res = fn()
            os.write(wr, json.dumps(res).encode())
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            os.write(wr, json.dumps({"exception": repr(e)}).encode())
            code = 1
        finally:
            os._exit(code)
    os.close(wr)
    data = b""
    while chunk := os.read(rd, 65536):
        data += chunk
    os.close(rd)
    _, status = os.waitpid(pid, 0)
    result = json.loads(data)
    assert os.waitstatus_to_exitcode(status) == 0, result
    return result


def as_nobody_fn(fn: Callable[[], Any]) -> Any:
    """as_user_fn as nobody."""
    return as_user_fn(NOBODY, fn)


def cfg_lines() -> list[str]:
    with open("/proc/pmm/cfg") as f:
        return f.read().splitlines()


def cfg_write(line: str) -> int:
    """Writes one line to /proc/pmm/cfg; returns the errno, 0 on success."""
    fd = os.open("/proc/pmm/cfg", os.O_WRONLY)
    try:
        os.write(fd, line.encode())
    except OSError as e:
        return e.errno or -1
    finally:
        os.close(fd)
    return 0


def proc_pid_lines() -> list[str]:
    with open("/proc/pmm/pid") as f:
        return f.read().splitlines()


def wait_for(cond: Callable[[], bool], timeout: float = 10.0, step: float = 0.02) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()
