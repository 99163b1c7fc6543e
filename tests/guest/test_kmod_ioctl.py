"""/dev/pmm ioctls: happy paths and refusals, with exact values."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import spawn_sleeper
from ioctl_opt import IO, IOWR
from kmod_dev import Dev, as_nobody_fn, cfg_lines, rec, wait_for

from pmm.kernel import uapi

pytestmark = pytest.mark.usefixtures("pmm")
Op = uapi.Op
CFG_SIZE = ctypes.sizeof(uapi.Config)


@pytest.fixture()
def dev() -> Iterator[Dev]:
    d = Dev()
    yield d
    d.close()


def test_device_node() -> None:
    st = os.stat("/dev/pmm")
    assert oct(st.st_mode & 0o777) == "0o600"
    assert st.st_uid == 0


def test_get_config_defaults(dev: Dev) -> None:
    c = dev.config()
    assert (c.size, c.set, c.interval_ms, c.scan) == (CFG_SIZE, 0, 10000, 1)
    assert (c.start_pid, c.stop_pid, c.abi_version) == (0, 0, uapi.ABI_VERSION)
    assert (c.max_pids, c.max_blocks_per_pid) == (64, 16 << 20)
    assert (c.max_sites_per_pid, c.max_samples_per_pid) == (1 << 16, 4096)
    assert (c.monitored_pids, c.records_accepted, c.records_dropped, c.unmatched_frees) == (
        0,
        0,
        0,
        0,
    )
    assert c.kmem_bytes == 0


def test_get_config_refusals(dev: Dev) -> None:
    for size in (0, CFG_SIZE - 8, CFG_SIZE + 8):
        assert dev.err(uapi.GET_CONFIG, uapi.Config(size=size)) == errno.EINVAL
    assert dev.err(uapi.GET_CONFIG, 8) == errno.EFAULT


def test_set_config_values(dev: Dev) -> None:
    dev.set_config(
        interval_ms=500,
        scan=0,
        max_pids=3,
        max_blocks_per_pid=1000,
        max_sites_per_pid=20,
        max_samples_per_pid=7,
    )
    c = dev.config()
    assert (c.interval_ms, c.scan, c.max_pids) == (500, 0, 3)
    assert (c.max_blocks_per_pid, c.max_sites_per_pid, c.max_samples_per_pid) == (1000, 20, 7)
    assert cfg_lines()[0] == '["INTERVAL" (Scan Interval) :=500]'
    # bounds are inclusive
    dev.set_config(interval_ms=uapi.INTERVAL_MIN_MS, max_pids=uapi.MAX_PIDS_LIMIT)
    dev.set_config(interval_ms=uapi.INTERVAL_MAX_MS, max_blocks_per_pid=uapi.MAX_BLOCKS_LIMIT)
    c = dev.config()
    assert (c.interval_ms, c.max_pids, c.max_blocks_per_pid) == (3600000, 1024, 16 << 20)


def _snapshot(dev: Dev) -> bytes:
    return bytes(dev.config())


OUT_OF_RANGE: list[dict[str, int]] = [
    {"interval_ms": 9},
    {"interval_ms": 3600001},
    {"scan": 2},
    {"max_pids": 0},
    {"max_pids": 1025},
    {"max_blocks_per_pid": 0},
    {"max_blocks_per_pid": (16 << 20) + 1},
    {"max_sites_per_pid": 0},
    {"max_sites_per_pid": (1 << 20) + 1},
    {"max_samples_per_pid": 0},
    {"max_samples_per_pid": (1 << 20) + 1},
    {"start_pid": -1},
    {"stop_pid": -5},
    {"interval_ms": 100, "scan": 7},  # one bad field: the good one is not applied either
]


def test_set_config_out_of_range(dev: Dev) -> None:
    before = _snapshot(dev)
    for fields in OUT_OF_RANGE:
        assert dev.err(uapi.SET_CONFIG, Dev.config_arg(**fields)) == errno.EINVAL, fields
        assert _snapshot(dev) == before, fields


def test_set_config_malformed(dev: Dev) -> None:
    before = _snapshot(dev)
    bad = []
    c = Dev.config_arg(interval_ms=100)
    c.size = CFG_SIZE - 1
    bad.append(c)
    c = Dev.config_arg(interval_ms=100)
    c.set |= 1 << 10  # unknown flag
    bad.append(c)
    c = Dev.config_arg(interval_ms=100)
    c.reserved = 1
    bad.append(c)
    c = Dev.config_arg(interval_ms=100)
    c.reserved2[0] = 1
    bad.append(c)
    c = Dev.config_arg(interval_ms=100)
    c.older_frees = 1  # GET-only too
    bad.append(c)
    c = Dev.config_arg(interval_ms=100)
    c.records_accepted = 1  # counters are GET-only
    bad.append(c)
    c = Dev.config_arg(interval_ms=100)
    c.records_queued = 1
    bad.append(c)
    c = Dev.config_arg(interval_ms=100)
    c.abi_version = uapi.ABI_VERSION + 1
    bad.append(c)
    for c in bad:
        assert dev.err(uapi.SET_CONFIG, c) == errno.EINVAL
    assert dev.err(uapi.SET_CONFIG, 8) == errno.EFAULT
    assert _snapshot(dev) == before
    assert cfg_lines()[0] == '["INTERVAL" (Scan Interval) :=10000]'


def test_start_stop(dev: Dev) -> None:
    me = os.getpid()
    assert dev.ioctl(uapi.QUERY_SELF, 0) == 0
    dev.start()
    assert dev.ioctl(uapi.QUERY_SELF, 0) == 1
    (info,) = dev.pids()
    assert (info.pid, info.ppid, info.state) == (me, os.getppid(), uapi.STATE_RUNNING)
    with open("/proc/self/comm") as f:
        assert info.comm.decode() == f.read().strip()
    # task start time: /proc/self/stat field 22, in clock ticks since boot
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    hz = os.sysconf("SC_CLK_TCK")
    assert abs(info.start_time_ns - ticks * 10**9 // hz) < 2 * 10**9 // hz
    boot_now = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    assert 0 < boot_now - info.monitor_start_ns < 60 * 10**9
    assert (info.exit_time_ns, info.live_blocks, info.live_bytes, info.records) == (0, 0, 0, 0)
    c = dev.config()
    assert (c.start_pid, c.stop_pid, c.monitored_pids) == (me, 0, 1)
    assert c.kmem_bytes > 0
    assert dev.err(uapi.SET_CONFIG, Dev.config_arg(start_pid=0)) == errno.EEXIST
    assert dev.err(uapi.SET_CONFIG, Dev.config_arg(start_pid=me)) == errno.EEXIST
    dev.stop(me)
    assert dev.ioctl(uapi.QUERY_SELF, 0) == 0
    assert dev.pids() == []
    c = dev.config()
    assert (c.start_pid, c.stop_pid, c.monitored_pids, c.kmem_bytes) == (me, me, 0, 0)
    # not monitored: ENOENT; no such process: ESRCH
    assert dev.err(uapi.SET_CONFIG, Dev.config_arg(stop_pid=0)) == errno.ENOENT
    assert dev.err(uapi.SET_CONFIG, Dev.config_arg(stop_pid=4194000)) == errno.ESRCH
    assert dev.err(uapi.SET_CONFIG, Dev.config_arg(start_pid=4194000)) == errno.ESRCH
    # a kernel thread (kthreadd) cannot be monitored
    assert dev.err(uapi.SET_CONFIG, Dev.config_arg(start_pid=2)) == errno.EINVAL


def test_start_other_and_max_pids(dev: Dev) -> None:
    dev.set_config(max_pids=2)
    kids = [spawn_sleeper() for _ in range(3)]
    try:
        dev.start(kids[0].pid)
        dev.start(kids[1].pid)
        err = dev.err(uapi.SET_CONFIG, Dev.config_arg(start_pid=kids[2].pid))
        assert err == errno.ENOSPC
        assert sorted(p.pid for p in dev.pids()) == sorted([kids[0].pid, kids[1].pid])
        info = dev.info(kids[0].pid)
        assert (info.comm, info.ppid, info.state) == (b"sleep", os.getpid(), 1)
        # a thread id maps to its process
        dev.stop(kids[1].pid)
        dev.start(kids[2].pid)
        assert dev.config().monitored_pids == 2
    finally:
        for k in kids:
            k.kill()
            k.wait()


def test_record_log_not_monitored(dev: Dev) -> None:
    b, _arr = dev.batch([rec(Op.MALLOC, 0x1000, 10)])
    assert dev.err(uapi.RECORD_LOG, b) == errno.ENOLINK
    assert uapi.ENOTMONITORED == errno.ENOLINK


def test_record_log_refusals(dev: Dev) -> None:
    dev.start()
    good = [rec(Op.MALLOC, 0x1000 + i * 16, 8) for i in range(4)]
    for field, value in (("count", 0), ("count", uapi.MAX_BATCH + 1), ("flags", 1),
                         ("reserved", 1)):
        b, _arr = dev.batch(good)
        setattr(b, field, value)
        assert dev.err(uapi.RECORD_LOG, b) == errno.EINVAL, field
    b, _arr = dev.batch(good)
    b.records = 16  # unmapped
    assert dev.err(uapi.RECORD_LOG, b) == errno.EFAULT
    assert b.accepted == 0
    assert dev.err(uapi.RECORD_LOG, 8) == errno.EFAULT
    assert dev.info().records == 0
    bad_records = [
        rec(Op.NONE, 0x9000, 1),
        rec(uapi.OP_NR, 0x9000, 1),
        rec(Op.MALLOC, 0x9000, 1, flags=4),
        rec(Op.FREE, 0x9000, flags=uapi.REC_F_FREED),
        rec(Op.MUNMAP, 0x9000, 4096, flags=uapi.REC_F_FREED),
        rec(Op.MMAP, 0x9000, 4096, flags=uapi.REC_F_FREED),
        rec(Op.MREMAP, 0x9000, 4096, prev=0x8000, flags=uapi.REC_F_FREED),
        rec(Op.MALLOC, 0, 1, flags=uapi.REC_F_FREED),
        rec(Op.MALLOC, 0x9000, 1, flags=uapi.REC_F_FREED | uapi.REC_F_FAILED),
        rec(Op.MALLOC, 0x9000, 1, alloc_tag=1),
        rec(Op.FREE, 0x9000, alloc_tag=1),
        rec(Op.MALLOC, 0x9000, 1, flags=uapi.REC_F_TAGGED),
        rec(Op.REALLOC, 0x9000, 1, flags=uapi.REC_F_TAGGED),
        rec(Op.MUNMAP, 0x9000, 4096, flags=uapi.REC_F_TAGGED),
        rec(Op.FREE, 0x9000, flags=uapi.REC_F_TAGGED, alloc_tag=1 << uapi.ALLOC_TAG_BITS),
        rec(Op.MALLOC, 0x9000, 1, weight=0),
        rec(Op.FREE, 0x9000, flags=uapi.REC_F_FAILED),
        rec(Op.MALLOC, 0x9000, 1, prev=0x8000),
        rec(Op.MUNMAP, 0x9000, 0),
        rec(Op.MALLOC, 0x9000, 1, flags=1 << 5),
        rec(Op.MALLOC, 0x9000, 1, flags=uapi.REC_F_OLDER),
        rec(Op.MUNMAP, 0x9000, 4096, flags=uapi.REC_F_OLDER),
        rec(Op.FREE, 0, flags=uapi.REC_F_OLDER),
        rec(Op.FREE, 0x9000, flags=uapi.REC_F_OLDER | uapi.REC_F_TAGGED, alloc_tag=1),
        rec(Op.REALLOC, 0x9000, 1, flags=uapi.REC_F_OLDER),
        rec(Op.REALLOC, 0x9000, 1, prev=0x8000, flags=uapi.REC_F_OLDER | uapi.REC_F_PREV_FREED),
        rec(Op.REALLOC, 0, 1, prev=0x8000, flags=uapi.REC_F_OLDER | uapi.REC_F_FAILED),
        rec(Op.MALLOC, 0x9000, 1, flags=uapi.REC_F_PREV_FREED),
        rec(Op.FREE, 0x9000, flags=uapi.REC_F_PREV_FREED),
        rec(Op.REALLOC, 0x9000, 1, flags=uapi.REC_F_PREV_FREED),
        rec(Op.REALLOC, 0, 1, prev=0x8000, flags=uapi.REC_F_PREV_FREED),
        rec(Op.REALLOC, 0x9000, 1, prev=0x8000, flags=uapi.REC_F_PREV_FREED | uapi.REC_F_TAGGED,
            alloc_tag=1),
        rec(Op.MREMAP, 0x9000, 4096, prev=0x8000, flags=uapi.REC_F_PREV_FREED),
    ]
    for i, bad in enumerate(bad_records):
        recs = [rec(Op.MALLOC, 0x10000 * (i + 1), 5), rec(Op.MALLOC, 0x10000 * (i + 1) + 64, 6),
                bad, rec(Op.MALLOC, 0x10000 * (i + 1) + 128, 7)]
        b, _arr = dev.batch(recs)
        assert dev.err(uapi.RECORD_LOG, b) == errno.EINVAL, i
        assert b.accepted == 2, i
    info = dev.info()
    # the two records before each bad one were applied, nothing after
    k = len(bad_records)
    assert (info.records, info.live_blocks, info.live_bytes) == (2 * k, 2 * k, k * 11)
    assert dev.config().records_accepted == 2 * k


def test_record_log_chunks_and_accepted(dev: Dev) -> None:
    dev.start()
    recs = [rec(Op.MALLOC, 0x100000 + i * 32, 1 + i % 7) for i in range(uapi.MAX_BATCH)]
    b, _arr = dev.batch(recs)
    dev.ioctl(uapi.RECORD_LOG, b)
    assert b.accepted == uapi.MAX_BATCH
    info = dev.info()
    assert info.live_blocks == uapi.MAX_BATCH
    assert info.live_bytes == sum(1 + i % 7 for i in range(uapi.MAX_BATCH))


def test_register_site(dev: Dev) -> None:
    s = uapi.Site(site=7, depth=1, line=1)
    assert dev.err(uapi.REGISTER_SITE, s) == errno.ENOLINK
    dev.start()
    dev.register(7, [0x401000, 0x402000], "pmd.c", "main", 207)
    dev.register(8, [0x403000])
    dev.send([rec(Op.MALLOC, 0x5000, 10, site=9)])  # never registered
    sites = dev.sites()
    assert sorted(sites) == [7, 8, 9]
    d = sites[7].desc
    assert (d.site, d.flags, d.depth, d.line) == (7, uapi.SITE_F_SOURCE, 2, 207)
    assert list(d.frames[:3]) == [0x401000, 0x402000, 0]
    assert (d.file, d.func) == (b"pmd.c", b"main")
    d = sites[8].desc
    assert (d.flags, d.depth, d.line, d.file, d.func) == (0, 1, 0, b"", b"")
    d = sites[9].desc
    assert (d.flags, d.depth) == (0, 0)
    assert (sites[9].live_bytes, sites[9].live_blocks) == (10, 1)
    # re-registering describes the site again and keeps its counters
    dev.register(9, [0x404000], "x.c", "f", 3)
    s9 = dev.sites()[9]
    assert (s9.desc.depth, s9.desc.file, s9.live_bytes) == (1, b"x.c", 10)


def text_mapping(path_matches: Callable[[str], bool]) -> tuple[int, int, str]:
    """(start, file offset, path) of this process's first executable mapping
    of a file path_matches accepts."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and "x" in parts[1] and path_matches(parts[5]):
                return int(parts[0].split("-")[0], 16), int(parts[2], 16), parts[5]
    raise LookupError("no such mapping")


def build_id_of(path: str) -> str:
    out = subprocess.run(["readelf", "-n", path], check=True, capture_output=True,
                         text=True).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", out)
    assert m, out
    return m.group(1)


def test_register_site_locations(dev: Dev, tmp_path: Path) -> None:
    """Each frame becomes (object, file offset); objects carry path, identity
    and build-id as the files have them; a frame in no file mapping has none."""
    exe_start, exe_off, exe = text_mapping(lambda p: p == os.path.realpath("/proc/self/exe"))
    libc_start, libc_off, libc = text_mapping(lambda p: os.path.basename(p).startswith("libc."))
    # a library unlinked after it was loaded: the module reads it all the same
    copy = tmp_path / "libm-copy.so"
    copy.write_bytes(Path(text_mapping(lambda p: "/libm.so" in p)[2]).read_bytes())
    libm = ctypes.CDLL(str(copy))
    cos = ctypes.cast(libm.cos, ctypes.c_void_p).value
    assert cos
    copy_stat = copy.stat()
    copy.unlink()
    dev.start()
    frames = [exe_start + 0x40, libc_start + 0x80, 0x1234, exe_start + 0x48, cos]
    dev.register(5, frames)
    dev.register(6, [libc_start + 0x90])
    sites = dev.sites()
    loc = list(sites[5].loc[:6])
    assert (loc[2], loc[5]) == (0, 0)
    objs = {o.obj: o for o in dev.objects()}
    assert sorted(objs) == [1, 2, 3]  # numbered in order of first sight
    obj = [uapi.loc_obj(x) for x in loc[:5]]
    assert obj == [1, 2, 0, 1, 3]
    assert [uapi.loc_offset(x) for x in (loc[0], loc[1], loc[3])] == [
        exe_off + 0x40, libc_off + 0x80, exe_off + 0x48]
    assert uapi.loc_obj(sites[6].loc[0]) == 2  # the same file, the same object
    for o, path in ((objs[1], exe), (objs[2], libc)):
        st = os.stat(path)
        assert o.path.decode() == path
        assert (o.dev, o.ino, o.size) == (st.st_dev, st.st_ino, st.st_size)
        assert o.flags == uapi.OBJ_F_BUILD_ID
        assert bytes(o.build_id[:o.build_id_len]).hex() == build_id_of(path)
    o = objs[3]
    assert o.path.decode() == str(copy)  # without " (deleted)"
    assert o.flags == uapi.OBJ_F_BUILD_ID | uapi.OBJ_F_DELETED
    assert (o.ino, o.size) == (copy_stat.st_ino, copy_stat.st_size)
    assert bytes(o.build_id[:o.build_id_len]).hex() == build_id_of(
        text_mapping(lambda p: "/libm.so" in p)[2])
    assert uapi.loc_offset(loc[4]) > 0
    # no load address anywhere in what the objects say
    raw = b"".join(bytes(x) for x in objs.values())
    for a in (exe_start, libc_start, cos):
        assert a.to_bytes(8, "little") not in raw


def test_objects_of_an_exited_process(dev: Dev) -> None:
    """A child's sites keep their objects after it exited (its mm is gone)."""
    dev.set_config(interval_ms=100)  # the sampler notices the exit
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        with Dev() as d:
            d.start()
            start, _, _ = text_mapping(lambda p: os.path.basename(p).startswith("libc."))
            d.register(1, [start + 0x100])
        os.write(wr, b"x")
        os._exit(0)
    os.close(wr)
    assert os.read(rd, 1) == b"x"
    os.close(rd)
    os.waitpid(pid, 0)
    assert wait_for(lambda: dev.info(pid).state == uapi.STATE_EXITED)
    s = dev.sites(pid)[1]
    (o,) = dev.objects(pid)
    assert uapi.loc_obj(s.loc[0]) == o.obj == 1
    assert os.path.basename(o.path.decode()).startswith("libc.")
    assert dev.err(uapi.READ_OBJECTS, uapi.Read(pid=4194000, capacity=1, buf=0)) == errno.ESRCH
    # the entry expires: its objects go with it
    dev.set_config(exited_ttl_s=1)
    assert len(dev.objects(pid)) == 1  # a read: the new TTL runs from here
    assert wait_for(lambda: all(p.pid != pid for p in dev.pids()))
    buf = (uapi.Object * 1)()
    r = uapi.Read(pid=pid, capacity=1, buf=ctypes.addressof(buf))
    assert dev.err(uapi.READ_OBJECTS, r) == errno.ESRCH


def test_register_site_refusals(dev: Dev) -> None:
    dev.start()
    bad = [uapi.Site(site=0), uapi.Site(site=1, flags=2),
           uapi.Site(site=1, depth=uapi.MAX_FRAMES + 1)]
    s = uapi.Site(site=1, flags=uapi.SITE_F_SOURCE)
    ctypes.memmove(ctypes.addressof(s) + uapi.Site.file.offset, b"x" * uapi.SITE_FILE_LEN,
                   uapi.SITE_FILE_LEN)
    bad.append(s)
    s = uapi.Site(site=1, flags=uapi.SITE_F_SOURCE)
    ctypes.memmove(ctypes.addressof(s) + uapi.Site.func.offset, b"y" * uapi.SITE_FUNC_LEN,
                   uapi.SITE_FUNC_LEN)
    bad.append(s)
    for i, s in enumerate(bad):
        assert dev.err(uapi.REGISTER_SITE, s) == errno.EINVAL, i
    assert dev.err(uapi.REGISTER_SITE, 8) == errno.EFAULT
    assert dev.sites() == {}
    dev.set_config(max_sites_per_pid=2)
    dev.register(1)
    dev.register(2)
    assert dev.err(uapi.REGISTER_SITE, uapi.Site(site=3)) == errno.ENOSPC
    dev.register(2, [0x1234])  # an existing site is still updated
    assert sorted(dev.sites()) == [1, 2]


def test_read_refusals(dev: Dev, sleeper: subprocess.Popen[bytes]) -> None:
    dev.start()
    buf = (uapi.Block * 8)()
    for req in (uapi.READ_BLOCKS, uapi.READ_SITES, uapi.READ_SAMPLES, uapi.READ_OBJECTS,
                uapi.MONITORED_PIDS):
        for field, value in (("capacity", 0), ("capacity", uapi.MAX_READ + 1), ("flags", 1),
                             ("reserved", 1)):
            r = uapi.Read(capacity=8, buf=ctypes.addressof(buf))
            setattr(r, field, value)
            assert dev.err(req, r) == errno.EINVAL, (req, field)
        assert dev.err(req, 8) == errno.EFAULT
    r = uapi.Read(pid=os.getpid(), capacity=8, buf=ctypes.addressof(buf))
    assert dev.err(uapi.MONITORED_PIDS, r) == errno.EINVAL
    for req in (uapi.READ_BLOCKS, uapi.READ_SITES, uapi.READ_SAMPLES, uapi.READ_OBJECTS):
        r = uapi.Read(pid=sleeper.pid, capacity=8, buf=ctypes.addressof(buf))
        assert dev.err(req, r) == errno.ENOENT
        r.pid = 4194000
        assert dev.err(req, r) == errno.ESRCH
        r.pid = -1
        assert dev.err(req, r) == errno.EINVAL
    dev.send([rec(Op.MALLOC, 0x7000, 5)])
    r = uapi.Read(capacity=8, buf=16)
    assert dev.err(uapi.READ_BLOCKS, r) == errno.EFAULT
    assert dev.err(uapi.GET_STATS, uapi.Stats(pid=sleeper.pid)) == errno.ENOENT
    assert dev.err(uapi.GET_STATS, uapi.Stats(pid=4194000)) == errno.ESRCH
    assert dev.err(uapi.GET_STATS, uapi.Stats(reserved=1)) == errno.EINVAL
    assert dev.err(uapi.GET_STATS, 8) == errno.EFAULT


def test_read_blocks_cursor(dev: Dev) -> None:
    dev.start()
    n = 1000
    dev.send([rec(Op.MALLOC, 0x200000 + i * 48, i + 1, site=i % 3) for i in range(n)])
    buf = (uapi.Block * 7)()
    r = uapi.Read(capacity=7, buf=ctypes.addressof(buf))
    seen: list[int] = []
    calls = 0
    while True:
        dev.ioctl(uapi.READ_BLOCKS, r)
        calls += 1
        assert r.total == n
        assert r.count <= 7
        for i in range(r.count):
            b = buf[i]
            assert b.size == (b.ptr - 0x200000) // 48 + 1
            assert (b.op, b.weight, b.site) == (Op.MALLOC, 1, (b.size - 1) % 3)
            seen.append(b.ptr)
        if r.done:
            break
    assert sorted(seen) == [0x200000 + i * 48 for i in range(n)]
    assert calls in ((n + 6) // 7, (n + 6) // 7 + 1)
    # sites and samples, the same cursor protocol
    sites = dev.sites()
    assert sorted(sites) == [0, 1, 2]
    assert sum(s.live_blocks for s in sites.values()) == n


def test_get_stats_buckets(dev: Dev) -> None:
    dev.start()
    sizes = [1, 16, 17, 256, 1000, 4096, 5000, 65536, 65537, 10**6]
    recs = [rec(Op.MALLOC, 0x1000 * (i + 1), s) for i, s in enumerate(sizes)]
    recs.append(rec(Op.CALLOC, 0x100000, 300))
    recs.append(rec(Op.POSIX_MEMALIGN, 0x200000, 20))
    recs.append(rec(Op.MALLOC, 0, 50, flags=uapi.REC_F_FAILED))
    recs.append(rec(Op.REALLOC, 0x300000, 2000, prev=0x1000))  # frees the 1-byte block
    recs.append(rec(Op.FREE, 0x2000))  # the 16-byte block
    recs.append(rec(Op.FREE, 0xdead000))  # unknown: pending
    dev.send(recs)
    st = dev.stats()
    assert (st.pid, st.failed_allocs, st.unmatched_frees) == (os.getpid(), 1, 0)
    b = [(x.malloc_count, x.calloc_count, x.realloc_count, x.free_count, x.alloc_bytes,
          x.free_bytes) for x in st.buckets]
    assert b == [
        (2, 0, 0, 2, 17, 17),  # <=16: 1, 16; both freed
        (3, 0, 0, 0, 17 + 256 + 20, 0),  # <=256: 17, 256, memalign 20
        (1, 1, 0, 0, 1000 + 300, 0),  # <=1024
        (1, 0, 1, 0, 4096 + 2000, 0),  # <=4096 (+ realloc 2000)
        (1, 0, 0, 0, 5000, 0),
        (1, 0, 0, 0, 65536, 0),
        (2, 0, 0, 0, 65537 + 10**6, 0),
    ]
    assert dev.info().pending_frees == 1


def test_unknown_commands(dev: Dev) -> None:
    # IOWR 7: ABI 2's READ_SITES, IOWR 8: ABI 3's READ_SAMPLES (smaller entries):
    # an old reader is refused, not overrun
    for req in (IO(0xB7, 0), IO(0xB7, 11), IO(0xB7, 200), IOWR(0xB7, 1, ctypes.c_uint64),
                IOWR(0xB7, 7, uapi.Read), IOWR(0xB7, 8, uapi.Read),
                IOWR(0xB7, 2, uapi.Config), IO(0x42, 1), 0):
        assert dev.err(req, 0) == errno.ENOTTY, hex(req)


def test_nobody(dev: Dev, sleeper: subprocess.Popen[bytes]) -> None:
    dev.start()  # root's pytest process
    dev.send([rec(Op.MALLOC, 0x1000, 10)])
    dev.start(sleeper.pid)
    cfg_fd = os.open("/proc/pmm/cfg", os.O_WRONLY)
    me = os.getpid()

    def unprivileged() -> dict[str, int]:
        d = Dev(dev.fd)
        buf = (uapi.Block * 4)()
        objbuf = (uapi.Object * 4)()
        out = {
            "interval": d.err(uapi.SET_CONFIG, Dev.config_arg(interval_ms=100)),
            "max_pids": d.err(uapi.SET_CONFIG, Dev.config_arg(max_pids=5)),
            "start_init": d.err(uapi.SET_CONFIG, Dev.config_arg(start_pid=1)),
            "stop_root": d.err(uapi.SET_CONFIG, Dev.config_arg(stop_pid=me)),
            "read_root": d.err(uapi.READ_BLOCKS, uapi.Read(pid=me, capacity=4,
                                                           buf=ctypes.addressof(buf))),
            "objects_root": d.err(uapi.READ_OBJECTS, uapi.Read(pid=me, capacity=4,
                                                               buf=ctypes.addressof(objbuf))),
            "stats_root": d.err(uapi.GET_STATS, uapi.Stats(pid=sleeper.pid)),
            "get_config": d.err(uapi.GET_CONFIG, uapi.Config(size=CFG_SIZE)),
            "visible": len(d.pids()),
            "start_self": d.err(uapi.SET_CONFIG, Dev.config_arg(start_pid=0)),
        }
        out["visible_after"] = len(d.pids())
        out["self_query"] = d.ioctl(uapi.QUERY_SELF, 0)
        try:
            os.write(cfg_fd, b"INTERVAL 100")
            out["cfg_write"] = 0
        except OSError as e:
            out["cfg_write"] = e.errno or -1
        try:
            os.open("/dev/pmm", os.O_RDWR)
            out["open"] = 0
        except OSError as e:
            out["open"] = e.errno or -1
        return out

    res = as_nobody_fn(unprivileged)
    os.close(cfg_fd)
    assert res == {
        "interval": errno.EPERM,
        "max_pids": errno.EPERM,
        "start_init": errno.EPERM,
        "stop_root": errno.EPERM,
        "read_root": errno.EPERM,
        "objects_root": errno.EPERM,
        "stats_root": errno.EPERM,
        "get_config": 0,
        "visible": 0,
        "start_self": 0,
        "visible_after": 1,
        "self_query": 1,
        "cfg_write": errno.EPERM,
        "open": errno.EACCES,
    }
    c = dev.config()
    assert (c.interval_ms, c.max_pids, c.monitored_pids) == (10000, 64, 3)
    assert dev.info().live_blocks == 1


LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.mmap.restype = ctypes.c_void_p
LIBC.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
LIBC.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FAILED = ctypes.c_void_p(-1).value
JIFFIES_NS = 50_000_000  # the page's lag behind CLOCK_MONOTONIC: a jiffy, plus TCG's timer slack


def clock_map(fd: int, prot: int = mmap.PROT_READ, flags: int = mmap.MAP_SHARED,
              size: int = uapi.CLOCK_SIZE, offset: int = uapi.CLOCK_OFFSET) -> int:
    """The clock page's address, or -errno."""
    addr = LIBC.mmap(None, size, prot, flags, fd, offset)
    return -ctypes.get_errno() if addr == MAP_FAILED else int(addr)


def clock_read(addr: int) -> int:
    return ctypes.c_uint64.from_address(addr + uapi.Clock.mono_ns.offset).value


def test_clock_page(dev: Dev) -> None:
    """The clock page holds CLOCK_MONOTONIC_COARSE and is refreshed while it
    is mapped, also once its file is closed and in a forked child after the
    parent unmapped it."""
    fd = os.open("/dev/pmm", os.O_RDONLY)
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    addr = clock_map(fd)
    assert addr > 0
    os.close(fd)
    first = clock_read(addr)
    assert before - JIFFIES_NS <= first <= time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    time.sleep(0.3)
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    assert now - JIFFIES_NS <= clock_read(addr) <= now
    assert clock_read(addr) - first >= 250_000_000
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        os.read(r, 1)  # the parent has unmapped it
        a = clock_read(addr)
        time.sleep(0.2)
        os._exit(0 if clock_read(addr) - a >= 150_000_000 else 1)
    assert LIBC.munmap(addr, uapi.CLOCK_SIZE) == 0
    os.write(w, b"x")
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    os.close(r)
    os.close(w)
    # mapped again after every mapping was gone: the timer starts again
    addr = clock_map(dev.fd)
    first = clock_read(addr)
    time.sleep(0.2)
    assert clock_read(addr) - first >= 150_000_000
    assert LIBC.munmap(addr, uapi.CLOCK_SIZE) == 0


def test_clock_page_refusals(dev: Dev) -> None:
    """Writable or executable mappings, other offsets and sizes are refused;
    a read-only mapping cannot be made writable or executable later."""
    rw = mmap.PROT_READ | mmap.PROT_WRITE
    rx = mmap.PROT_READ | mmap.PROT_EXEC
    assert clock_map(dev.fd, prot=rw) == -errno.EPERM
    assert clock_map(dev.fd, prot=rx) == -errno.EPERM
    assert clock_map(dev.fd, prot=rw, flags=mmap.MAP_PRIVATE) == -errno.EPERM
    assert clock_map(dev.fd, offset=4096) == -errno.EINVAL
    assert clock_map(dev.fd, size=2 * uapi.CLOCK_SIZE) == -errno.EINVAL
    for flags in (mmap.MAP_SHARED, mmap.MAP_PRIVATE):
        addr = clock_map(dev.fd, flags=flags)
        assert addr > 0
        for prot in (rw, rx):
            assert LIBC.mprotect(addr, uapi.CLOCK_SIZE, prot) == -1
            assert ctypes.get_errno() == errno.EACCES
        assert LIBC.mprotect(addr, uapi.CLOCK_SIZE, 0) == 0  # PROT_NONE
        assert LIBC.mprotect(addr, uapi.CLOCK_SIZE, mmap.PROT_READ) == 0
        assert clock_read(addr) > 0
        assert LIBC.munmap(addr, uapi.CLOCK_SIZE) == 0
    wo = os.open("/dev/pmm", os.O_WRONLY)
    try:
        assert clock_map(wo) == -errno.EACCES  # a read mapping needs a readable file
    finally:
        os.close(wo)


def test_ioctl_selftest_in_c(progs: Path) -> None:
    """tests/progs/ioctl_selftest.c, the kernel selftest way (ntsync's): every
    output struct filled with 0xcc before the call, then every field the
    module must write, and every byte it must leave alone, checked."""
    r = subprocess.run([str(progs / "ioctl_selftest")], capture_output=True, text=True,
                       timeout=120)
    failed = [line for line in r.stdout.splitlines() if line.startswith("not ok")]
    assert r.returncode == 0 and not failed, r.stdout + r.stderr
    assert re.search(r"^1\.\.(\d+)$", r.stdout, re.M), r.stdout
    assert len(re.findall(r"^ok \d+ ", r.stdout, re.M)) >= 40, r.stdout
