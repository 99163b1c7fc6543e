"""Samples carry the live heap, the allocator's report and the memory
cgroup's usage (kmod/sampler.c, PMM_HEAP_REPORT, hooklib/heap.c): checked
against what a program under the real hook says of itself (its blocks, its
own mallinfo2 or jemalloc's stats) and what the cgroup's memory.current
says; bad reports are refused and change nothing."""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import PROGS, TOP
from ioctl_opt import IOWR
from kmod_dev import Dev, wait_for

from pmm.kernel import uapi
from pmm.kernel.device import Device, sample_from_c
from pmm.kernel.model import Sample

pytestmark = pytest.mark.usefixtures("pmm")
HOOK = TOP / "hooklib" / "libpmmhook.so"
JEMALLOC = Path("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
N, SIZE = 20000, 1000  # heapreport keeps the even blocks: 10 MB live, 10 MB of holes


@pytest.fixture()
def dev() -> Iterator[Dev]:
    d = Dev()
    d.set_config(interval_ms=100)
    yield d
    d.close()


class HeapProg:
    """heapreport under the hook, started as the hook's own monitored
    process (PMM_START=1), in the cgroup given."""

    def __init__(self, preload: str, env: dict[str, str] | None = None,
                 cgroup: Path | None = None) -> None:
        e = {k: v for k, v in os.environ.items() if not k.startswith("PMM_")}
        e.update(LD_PRELOAD=preload, PMM_START="1", PMM_QUIET="1", **(env or {}))

        def join() -> None:
            if cgroup is not None:
                (cgroup / "cgroup.procs").write_text(str(os.getpid()))

        # waits 3 s before its report: longer than the interval and than 100
        # times a report's cost (hooklib/heap.c) under TCG
        self.p = subprocess.Popen([str(PROGS / "heapreport"), str(N), str(SIZE), "3000"], env=e,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, preexec_fn=join)
        self.said: dict[str, list[int]] = {}
        assert self.p.stdout is not None
        for line in self.p.stdout:
            word, *nums = line.split()
            if word == "ready":
                break
            self.said[word] = [int(x) for x in nums]
        assert "live" in self.said, self.p.stderr.read() if self.p.stderr else ""

    def close(self) -> None:
        assert self.p.stdin is not None and self.p.stderr is not None
        self.p.stdin.close()
        assert self.p.wait(timeout=60) == 0
        assert self.p.stderr.read() == ""


def later_samples(dev: Dev, pid: int, n: int = 2) -> list[uapi.Sample]:
    """The samples taken from now on, once there are n of them."""
    have = dev.info(pid).samples
    assert wait_for(lambda: dev.info(pid).samples >= have + n, timeout=30)
    return dev.samples(pid)[-n:]


def check_live(dev: Dev, pid: int, s: Sample, live: int, blocks: int) -> None:
    """Exact mode: the sample's live heap is the program's blocks and what
    its libraries allocated before main (libjemalloc's libstdc++: its
    exception pool), block by block."""
    table = dev.blocks(pid)
    mine = [b for b in table if b.size == SIZE]
    others = sum(b.size for b in table if b.size != SIZE)
    assert (len(mine), sum(b.size for b in mine)) == (blocks, live)
    assert (s.live_bytes, s.live_blocks) == (live + others, len(table))


def in_root_cgroup(pid: int) -> bool:
    return Path(f"/proc/{pid}/cgroup").read_text().strip() in ("0::/", "")


@pytest.mark.parametrize("mode", [{}, {"PMM_SAMPLE": "16384"}], ids=["exact", "sampled"])
def test_glibc_heap_figures(dev: Dev, mode: dict[str, str]) -> None:
    prog = HeapProg(str(HOOK), mode)
    try:
        live, blocks = prog.said["live"]
        arena, hblkhd, uordblks, fordblks, keepcost = prog.said["glibc"]
        raw = later_samples(dev, prog.p.pid)
        for s in raw:
            assert s.heap.allocator == uapi.ALLOC_GLIBC
            assert (s.heap.mapped, s.heap.in_use, s.heap.free, s.heap.top, s.heap.retained) \
                == (arena + hblkhd, uordblks + hblkhd, fordblks, keepcost, 0)
            assert 0 < s.heap.time_ns <= s.time_ns
        info = dev.info(prog.p.pid)
        last = sample_from_c(raw[-1])
        assert (last.heap_free, last.heap_trimmable, last.allocator) == \
            (fordblks, keepcost, "glibc")
        assert fordblks >= 9_000_000  # the holes
        assert last.live_bytes is not None and last.live_blocks is not None
        assert (last.live_bytes, last.live_blocks) == (info.live_bytes, info.live_blocks)
        if not mode:  # exact: every block the program keeps
            check_live(dev, prog.p.pid, last, live, blocks)
        else:  # weighted estimate (16 KiB mean gap: ~600 sample points)
            assert abs(last.live_bytes - live) <= 0.15 * live, (last.live_bytes, live)
        if in_root_cgroup(prog.p.pid):
            assert last.cgroup_usage is None and not raw[-1].flags & uapi.SAMPLE_F_MEMCG
    finally:
        prog.close()


@pytest.mark.skipif(not JEMALLOC.exists(), reason="Debian's libjemalloc2 is not installed "
                    "on the host whose root the guest shares (scripts/setup.sh installs it)")
def test_jemalloc_heap_figures(dev: Dev) -> None:
    prog = HeapProg(f"{HOOK} {JEMALLOC}")
    try:
        live, blocks = prog.said["live"]
        allocated, active, resident, mapped, retained = prog.said["jemalloc"]
        (s,) = later_samples(dev, prog.p.pid, 1)
        assert (s.heap.allocator, s.heap.in_use, s.heap.mapped, s.heap.free, s.heap.top,
                s.heap.retained) == (uapi.ALLOC_JEMALLOC, allocated, mapped,
                                     max(resident - allocated, 0), 0, retained)
        m = sample_from_c(s)
        assert (m.allocator, m.heap_free, m.heap_trimmable) == \
            ("jemalloc", max(resident - allocated, 0), None)
        check_live(dev, prog.p.pid, m, live, blocks)
        assert allocated >= live
    finally:
        prog.close()


@pytest.fixture()
def memcg() -> Iterator[Path]:
    """A cgroup v2 group with the memory controller (cgroup2 mounted on a
    directory of our own if the guest has it nowhere)."""
    root, mounted = None, None
    for line in Path("/proc/mounts").read_text().splitlines():
        _, where, fstype, *_ = line.split()
        if fstype == "cgroup2":
            root = Path(where)
            break
    if root is None:
        mounted = Path(tempfile.mkdtemp(prefix="pmm-cg2-"))
        r = subprocess.run(["mount", "-t", "cgroup2", "none", str(mounted)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount cgroup2: {r.stderr.strip()}")
        root = mounted
    if "memory" not in (root / "cgroup.controllers").read_text().split():
        pytest.skip("the memory controller is not available in cgroup v2")
    (root / "cgroup.subtree_control").write_text("+memory")
    group = root / f"pmm-test-{os.getpid()}"
    group.mkdir()
    try:
        yield group
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            (root / "cgroup.procs").write_text(pid)
        group.rmdir()
        if mounted is not None:
            subprocess.run(["umount", str(mounted)], check=False)
            mounted.rmdir()


def test_cgroup_usage_is_memory_current(dev: Dev, memcg: Path) -> None:
    prog = HeapProg(str(HOOK), cgroup=memcg)
    try:
        assert Path(f"/proc/{prog.p.pid}/cgroup").read_text().strip() == \
            f"0::/{memcg.name}"
        s = sample_from_c(later_samples(dev, prog.p.pid, 1)[0])
        current = int((memcg / "memory.current").read_text())
        assert s.cgroup_usage is not None
        # the process is idle: what moves is the module's own accounted memory
        # and the per-cpu charge caches, a few pages
        assert abs(s.cgroup_usage - current) <= 1 << 20, (s.cgroup_usage, current)
        # the 20 MB it wrote (its holes included) are charged to its group
        assert s.cgroup_usage >= 20_000_000
    finally:
        prog.close()


def heap(**fields: int) -> uapi.Heap:
    h = uapi.Heap(size=ctypes.sizeof(uapi.Heap), allocator=uapi.ALLOC_GLIBC, mapped=3000,
                  in_use=2000, free=1000, top=500)
    for k, v in fields.items():
        setattr(h, k, v)
    return h


def test_bad_heap_reports_are_refused_and_change_nothing(dev: Dev) -> None:
    """Every report's form is checked; a bad one is EINVAL and the samples
    keep the last good one. Not monitored: ENOLINK. A good one returns the
    interval."""
    assert dev.err(uapi.HEAP_REPORT, heap()) == errno.ENOLINK
    dev.start(0)
    assert dev.ioctl(uapi.HEAP_REPORT, heap()) == 100
    bad = {
        "size": heap(size=ctypes.sizeof(uapi.Heap) - 8),
        "unknown allocator": heap(allocator=uapi.ALLOC_NR),
        "no allocator": heap(allocator=uapi.ALLOC_NONE),
        "time set": heap(time_ns=1),
        "reserved": heap(reserved=1),
        "glibc sum": heap(free=1001),
        "glibc top above free": heap(top=1001),
        "glibc retained": heap(retained=1),
        "beyond the bound": heap(mapped=uapi.HEAP_MAX_BYTES + 3000,
                                 in_use=uapi.HEAP_MAX_BYTES + 2000),
        "jemalloc in use above mapped": heap(allocator=uapi.ALLOC_JEMALLOC, top=0,
                                             in_use=4000),
        "jemalloc top": heap(allocator=uapi.ALLOC_JEMALLOC),
    }
    for what, h in bad.items():
        assert dev.err(uapi.HEAP_REPORT, h) == errno.EINVAL, what
    (s,) = later_samples(dev, os.getpid(), 1)
    assert (s.heap.allocator, s.heap.mapped, s.heap.in_use, s.heap.free, s.heap.top) == \
        (uapi.ALLOC_GLIBC, 3000, 2000, 1000, 500)
    assert dev.ioctl(uapi.HEAP_REPORT, heap(allocator=uapi.ALLOC_JEMALLOC, top=0, free=7,
                                            retained=9)) == 100
    (s,) = later_samples(dev, os.getpid(), 1)
    m: Sample = sample_from_c(s)
    assert (m.allocator, m.heap_free, m.heap_trimmable, s.heap.retained) == \
        ("jemalloc", 7, None, 9)
    # a fault on the argument, and the old READ_SAMPLES number of ABI 3
    assert dev.err(uapi.HEAP_REPORT, 8) == errno.EFAULT
    r = uapi.Read(pid=0, capacity=1, buf=ctypes.addressof(uapi.Sample()))
    assert dev.err(IOWR(uapi.IOC_MAGIC, 8, uapi.Read), r) == errno.ENOTTY
    dev.stop(0)


def test_device_samples_have_the_figures(dev: Dev) -> None:
    """pmm.kernel.device's samples (what pmctl and trend read) carry them too."""
    prog = HeapProg(str(HOOK))
    try:
        later_samples(dev, prog.p.pid, 1)
        with Device.open() as d:
            s = d.samples(prog.p.pid)[-1]
        assert s.allocator == "glibc" and s.heap_free == prog.said["glibc"][3]
        assert s.live_bytes == prog.said["live"][0]
    finally:
        prog.close()
