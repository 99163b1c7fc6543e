"""`pmctl leaks`, `logs` and `report` on a process of N live blocks, natively,
with a fake /dev/pmm (bench/host_bigheap.sh runs it; the module cannot load on
the host). PMM_READ_BLOCKS is answered from a synthetic table made a page at a
time (N blocks of 32 bytes from 4 sites in turn, ages spread over 2000 s), the
other reads from small fixed answers; then pmctl runs as the command line
does. Run it under /usr/bin/time for the wall time and peak RSS.

    python bench/host_bigheap.py N leaks|logs|report|read [ARGS...]

`read` only takes the pages (the fake's own cost). With PYTHONPATH naming an
older tree, the same figures for that tree's pmctl (it must read through
PMM_READ_BLOCKS's cursor as this one does).
"""

from __future__ import annotations

import ctypes
import struct
import sys
import time
from typing import Any

from pmm.kernel import uapi
from pmm.kernel.device import Device
from pmm.kernel.model import Bucket, PidInfo, Site, StatsInfo

PID = 4242
SITES = 4
S = 1_000_000_000


def main() -> None:
    n = int(sys.argv[1])
    what = sys.argv[2]
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    esize = ctypes.sizeof(uapi.Block)
    rec = struct.Struct("=QQQQIIH6x")
    assert rec.size == esize
    # one page's worth of records, built once per call from the cursor
    cache: dict[tuple[int, int], bytes] = {}

    def page(start: int, count: int) -> bytes:
        key = (start, count)
        if key not in cache:
            cache.clear()
            cache[key] = b"".join(
                rec.pack(0x5500_0000_0000 + 48 * i, 0, 32, now - (i * 7919 % 2000) * S,
                         1 + i % SITES, 1, 1) for i in range(start, start + count))
        return cache[key]

    def ioctl(fd: int, request: int, arg: Any = None, mutate: bool = False) -> int:
        if request != uapi.READ_BLOCKS:
            raise OSError(25, "not faked")
        start = arg.cursor
        count = min(arg.capacity, n - start)
        ctypes.memmove(arg.buf, page(start, count), count * esize)
        arg.count, arg.cursor, arg.total = count, start + count, n
        arg.done = int(start + count >= n)
        return 0

    import fcntl

    fcntl.ioctl = ioctl  # type: ignore[assignment]  # pmm.kernel.device calls fcntl.ioctl
    info = PidInfo(pid=PID, ppid=1, state=1, comm="bigheap", start_time_ns=S,
                   monitor_start_ns=S, exit_time_ns=0, live_blocks=n, live_bytes=32 * n,
                   records=n, dropped_records=0, unmatched_frees=0, pending_frees=0,
                   samples=0, vm_bytes=0, rss_bytes=0)
    sites = [Site(s, flags=1, frames=(0x401000 + s,), file="bigheap.c", func=f"alloc{s}",
                  line=10 + s, live_bytes=32 * n // SITES, live_blocks=n // SITES)
             for s in range(1, SITES + 1)]
    Device.open = classmethod(lambda cls, path=None: cls(-1, "fake"))  # type: ignore[assignment,method-assign]
    Device.close = lambda self: None  # type: ignore[method-assign]
    Device.monitored_pids = lambda self: [info]  # type: ignore[method-assign]
    Device.sites = lambda self, pid: list(sites)  # type: ignore[method-assign]
    Device.objects = lambda self, pid: []  # type: ignore[method-assign]
    Device.samples = lambda self, pid, cursor=0: []  # type: ignore[method-assign]
    Device.stats = lambda self, pid: StatsInfo(  # type: ignore[method-assign]
        pid=pid, buckets=(Bucket(),) * 7, failed_allocs=0, unmatched_frees=0)
    import pmm.symbolize

    pmm.symbolize.capture_maps = lambda pid: None
    if what == "read":
        with Device.open() as dev:
            if hasattr(dev, "block_pages"):
                got = sum(len(p) for p in dev.block_pages(PID))
            else:
                got = len(dev.blocks(PID))
        assert got == n, got
        return
    from pmctl import cli

    sys.argv = ["pmctl", what, str(PID), *sys.argv[3:]]
    cli.main()


if __name__ == "__main__":
    main()
