"""pmctl's pure logic: grouping and ages, the statistics table, /proc parsing, formats."""

from __future__ import annotations

import errno

import pytest

from pmctl import cli
from pmctl.exitcodes import exit_code_for
from pmm import blocklog, errors, units
from pmm.analysis import leaks, stats
from pmm.kernel import pmmfiles
from pmm.kernel.blockstream import BlockSorter, pages_of
from pmm.kernel.model import Block, Bucket, Site, StatsInfo
from pmm.output import format_table, human_age, human_bytes

S = 1_000_000_000


def blk(ptr: int, size: int, t_s: float, site: int, weight: int = 1, op: int = 1) -> Block:
    return Block(ptr=ptr, prev_ptr=0, size=size, time_ns=int(t_s * S), site=site,
                 weight=weight, op=op)


# -- leaks -----------------------------------------------------------------

def test_age_buckets() -> None:
    assert [leaks.age_bucket(a) for a in (0, 0.999, 1, 9.99, 10, 99, 100, 999.9, 1000, 1e9)] \
        == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert leaks.AGE_LABELS == ("<1s", "<10s", "<100s", "<1000s", "older")


def test_group_blocks_by_site_largest_first() -> None:
    now = 2000 * S
    blocks = [
        blk(0x1000, 100, 2000 - 0.5, site=1),
        blk(0x2000, 100, 2000 - 5, site=1),
        blk(0x3000, 100, 2000 - 1500, site=1),
        blk(0x4000, 4096, 2000 - 50, site=2),
        blk(0x5000, 10, 2000 - 200, site=3, weight=8),  # sampled: stands for 8 blocks
        blk(0x6000, 300, 2000 - 1, site=0),
    ]
    sites = {1: Site(site=1, frames=(0x401000,)), 2: Site(site=2, frames=(0x402000,))}
    g = leaks.group_blocks(blocks, sites, now)
    assert [x.site for x in g] == [2, 1, 0, 3]
    assert [(x.blocks, x.bytes) for x in g] == [(1, 4096), (3, 300), (1, 300), (8, 80)]
    assert g[1].oldest_age_s == pytest.approx(1500)
    assert g[1].newest_age_s == pytest.approx(0.5)
    assert g[1].histogram == (1, 1, 0, 0, 1)
    assert g[0].histogram == (0, 0, 1, 0, 0)
    assert g[3].histogram == (0, 0, 0, 8, 0)
    assert g[0].desc == sites[2] and g[2].desc is None
    assert leaks.total_bytes(g) == 4096 + 300 + 300 + 80


def test_group_ties_are_stable() -> None:
    b = [blk(1, 10, 0, site=7), blk(2, 10, 0, site=3), blk(3, 5, 0, site=9), blk(4, 5, 0, 9)]
    assert [x.site for x in leaks.group_blocks(b, {}, S)] == [9, 3, 7]
    assert leaks.group_blocks([], {}, S) == []


def test_future_block_time_counts_as_age_zero() -> None:
    g = leaks.group_blocks([blk(1, 1, 10, site=1)], {}, 5 * S)
    assert g[0].oldest_age_s == 0 and g[0].histogram == (1, 0, 0, 0, 0)


def test_site_dict_sources() -> None:
    from pmm.symbolize import Frame

    g = leaks.group_blocks([blk(1, 24, 0, site=5)], {5: Site(
        site=5, flags=1, frames=(0x401136,), file="demo.c", func="main", line=42)}, S)[0]
    d = g.to_dict([Frame(0x401136, "/bin/demo", 0x1136)], 1)
    assert (d["source"], d["func"], d["file"], d["line"], d["where"]) == \
        ("shim", "main", "demo.c", 42, "main() demo.c:42")
    assert d["histogram"] == {"<1s": 0, "<10s": 1, "<100s": 0, "<1000s": 0, "older": 0}
    g2 = leaks.group_blocks([blk(1, 24, 0, site=6)], {6: Site(site=6, frames=(0x7f00,))}, S)[0]
    d2 = g2.to_dict([Frame(0x7f00, "/lib/libc.so.6", 0x2a1ca, "malloc")], 1)
    assert (d2["source"], d2["where"]) == ("symbol", "malloc() (libc.so.6+0x2a1ca)")
    d3 = g2.to_dict([Frame(0x7f00, "/lib/x.so", 0x10)], 1)
    assert (d3["source"], d3["where"]) == ("object", "x.so+0x10")
    d4 = g2.to_dict([Frame(0x7f00)], 1)
    assert (d4["source"], d4["where"]) == ("address", "0x7f00")
    g0 = leaks.group_blocks([blk(1, 24, 0, site=0)], {}, S)[0]
    assert g0.to_dict([], 1)["where"] == "unknown site"
    assert g0.to_dict([], 1)["frames"] == []


# -- stats -----------------------------------------------------------------

def test_stats_table_and_totals() -> None:
    bs = [Bucket() for _ in range(7)]
    bs[0] = Bucket(malloc_count=5, calloc_count=1, realloc_count=0, free_count=4,
                   alloc_bytes=60, free_bytes=40)
    bs[2] = Bucket(malloc_count=2, calloc_count=0, realloc_count=3, free_count=1,
                   alloc_bytes=3000, free_bytes=1000)
    bs[6] = Bucket(malloc_count=1, alloc_bytes=1 << 20)
    t = stats.build_table(StatsInfo(pid=42, buckets=tuple(bs), failed_allocs=2,
                                    unmatched_frees=3))
    d = t.to_dict()
    assert d["pid"] == 42 and d["failed_allocs"] == 2 and d["unmatched_frees"] == 3
    assert [b["bucket"] for b in d["buckets"]] == list(stats.BUCKET_LABELS)
    assert d["buckets"][0] == {"bucket": "<= 16", "max_size": 16, "malloc": 5, "calloc": 1,
                               "realloc": 0, "free": 4, "alloc_bytes": 60,
                               "freed_bytes": 40, "inuse_bytes": 20}
    assert d["buckets"][6]["max_size"] is None
    assert d["totals"] == {"bucket": "Totals", "max_size": None, "malloc": 8, "calloc": 1,
                           "realloc": 3, "free": 5, "alloc_bytes": 3060 + (1 << 20),
                           "freed_bytes": 1040, "inuse_bytes": 2020 + (1 << 20)}
    text = stats.render(t).splitlines()
    assert text[0] == "pid 42"
    assert text[1].split() == ["Allocation", "size", "malloc", "calloc", "realloc", "free",
                               "Alloc.", "bytes", "Freed", "bytes", "InUse", "bytes"]
    assert text[2].split() == ["<=", "16", "bytes", "5", "1", "0", "4", "60", "40", "20"]
    assert text[8].split() == ["larger", "1", "0", "0", "0", "1048576", "0", "1048576"]
    assert text[9].split()[0] == "Totals"
    assert text[-3:] == ["Failed allocations: 2", "Unmatched frees: 3",
                         "Frees of blocks older than monitoring: 0"]
    with pytest.raises(ValueError):
        stats.build_table(StatsInfo(pid=1, buckets=(Bucket(),), failed_allocs=0,
                                    unmatched_frees=0))


# -- /proc/pmm -------------------------------------------------------------

CFG = """["INTERVAL" (Scan Interval) :=10000]
["SCAN" (Scan on:1/off:0) := 1]
["START_PID" (Start a monitor):=21113]
["STOP_PID" (Stop a monitor) := 0]
["MAX_PIDS" (Monitored pids limit) := 64]
["MAX_BLOCKS" (Live blocks per pid limit) := 1048576]
garbage
"""


def test_parse_cfg() -> None:
    c = pmmfiles.parse_cfg(CFG)
    assert {k: v.value for k, v in c.items()} == {
        "INTERVAL": 10000, "SCAN": 1, "START_PID": 21113, "STOP_PID": 0,
        "MAX_PIDS": 64, "MAX_BLOCKS": 1048576}
    assert c["SCAN"].desc == "Scan on:1/off:0"
    # typographic quotes too
    assert pmmfiles.parse_cfg("[\u201cINTERVAL\u201d (Scan Interval) :=5000]")["INTERVAL"].value \
        == 5000


PID = """[1] PID: 21113, Comp: pmd, PPID: 1, State: 1, Log count: 3
Dropped: 0, Unmatched frees: 2, Pending frees: 1
{MALLOC @06:57:11} Sz: 100B Pointer: 0x10012008 Caller: 0x10000e60 main() 207 pmd.c
{REALLOC @06:57:21} Sz: 200B Prev Pointer: 0x10012008 Pointer: 0x10012010 Caller: 0x10000e84
{CALLOC @23:59:59} Sz: 7B Pointer: 0x7f0000001000 Caller: 0x0
[2] PID: 7, Comp: a b, PPID: 3, State: 2, Log count: 0
Dropped: 5, Unmatched frees: 0, Pending frees: 0, Older frees: 12
"""


def test_parse_pid() -> None:
    p = pmmfiles.parse_pid(PID)
    assert list(p.pids) == [21113, 7] and p.other == []
    e = p.pids[21113]
    assert (e.index, e.comm, e.ppid, e.state, e.log_count) == (1, "pmd", 1, 1, 3)
    assert (e.dropped, e.unmatched_frees, e.pending_frees, e.older_frees) == (0, 2, 1, 0)
    b0, b1, b2 = e.blocks
    assert (b0.op, b0.time, b0.size, b0.ptr, b0.prev_ptr, b0.caller) == \
        ("MALLOC", "06:57:11", 100, 0x10012008, None, 0x10000E60)
    assert (b0.func, b0.line, b0.file) == ("main", 207, "pmd.c")
    assert (b1.op, b1.size, b1.prev_ptr, b1.ptr, b1.func) == \
        ("REALLOC", 200, 0x10012008, 0x10012010, None)
    assert b2.key() == ("CALLOC", 7, 0x7F0000001000, None) and b2.caller == 0
    q = p.pids[7]
    assert (q.comm, q.state, q.log_count, q.dropped, q.blocks) == ("a b", 2, 0, 5, [])
    assert q.older_frees == 12


def test_logs_line_is_proc_format() -> None:
    """pmctl logs prints blocks exactly as the module's pmm_show_block does."""
    now_mono, now_real = 1000 * S, (86400 * 10 + 6 * 3600 + 57 * 60 + 11) * S
    site = Site(site=1, flags=1, frames=(0x10000E60,), file="pmd.c", func="main", line=207)
    b = Block(ptr=0x10012008, prev_ptr=0, size=100, time_ns=1000 * S, site=1, weight=1, op=1)
    d = b.to_dict(site, now_mono)
    assert blocklog.proc_line(d, now_mono, now_real) == (
        "{MALLOC @06:57:11} Sz: 100B Pointer: 0x10012008 Caller: 0x10000e60 main() 207 pmd.c")
    r = Block(ptr=0x10012010, prev_ptr=0x10012008, size=200, time_ns=1010 * S, site=9,
              weight=1, op=3)
    d = r.to_dict(None, now_mono)
    line = blocklog.proc_line(d, now_mono, now_real)
    assert line == ("{REALLOC @06:57:21} Sz: 200B Prev Pointer: 0x10012008 "
                    "Pointer: 0x10012010 Caller: 0x0")
    parsed = pmmfiles.parse_block(line)
    assert parsed is not None and parsed.key() == ("REALLOC", 200, 0x10012010, 0x10012008)
    assert d["age_s"] == 0  # in the future of now_mono: clamped


def test_logs_selects_blocks() -> None:
    """--since and --limit as `pmctl logs` applies them: oldest first."""
    bl = [blk(3, 1, 30, 1), blk(1, 1, 10, 1), blk(2, 1, 20, 1), blk(4, 1, 20, 1)]
    now = 40 * S

    def ptrs(since_s: float | None, limit: int | None) -> list[int]:
        with BlockSorter(blocklog.since_cut(now, since_s), limit) as sorter:
            for page in pages_of(bl):
                sorter.add_page(page)
            return [row[1] for row in sorter]

    assert ptrs(None, None) == [1, 2, 4, 3]
    assert ptrs(20, None) == [2, 4, 3]
    assert ptrs(None, 2) == [1, 2]
    assert ptrs(15, 1) == [3]


# -- errors and output -----------------------------------------------------

def test_from_errno_table() -> None:
    cases = [
        (errno.ENOENT, None, errors.ModuleNotLoaded, 3),
        (errno.EACCES, None, errors.PermissionDenied, 4),
        (errno.EPERM, 5, errors.PermissionDenied, 4),
        (errno.ESRCH, 5, errors.NoSuchPid, 5),
        (errno.ENOENT, 5, errors.NotMonitored, 6),
        (errno.EINVAL, None, errors.InvalidValue, 7),
        (errno.ENOTTY, None, errors.NotPmmDevice, 8),
        (errno.ENOSPC, 5, errors.LimitReached, 9),
        (errno.EIO, None, errors.PmmError, 1),
    ]
    for err, pid, cls, code in cases:
        e = errors.from_errno(err, "doing", pid=pid)
        assert type(e) is cls and exit_code_for(e) == code and e.errno == err
        assert "\n" not in str(e)


def test_format_table_and_humans() -> None:
    assert format_table(["A", "BB"], [["x", "1"], ["yyy", "22"]], right={1}) == \
        "A    BB\nx     1\nyyy  22"
    # one rendering of sizes: pmm.units's
    assert human_bytes is units.human_bytes
    assert [human_bytes(n) for n in (0, 1023, 1024, 1536, 5 << 20, 3 << 40)] == \
        ["0 B", "1023 B", "1.0 KiB", "1.5 KiB", "5.0 MiB", "3.0 TiB"]
    assert [human_age(s) for s in (0.44, 12, 185, 7380, 3 * 86400 + 4 * 3600)] == \
        ["0.4s", "12s", "3m05s", "2h03m", "3d04h"]


# -- the models' JSON forms ----------------------------------------------------

def test_models_to_dict() -> None:
    """Each model's to_dict is what --json prints for it (keys in order)."""
    from pmm.kernel.model import ConfigInfo, PidInfo, Sample

    c = ConfigInfo(*range(1, 19))
    assert c.to_dict() == {
        "interval_ms": 1, "scan": 2, "start_pid": 3, "stop_pid": 4, "max_pids": 5,
        "max_blocks_per_pid": 6, "max_sites_per_pid": 7, "max_samples_per_pid": 8,
        "max_pids_per_uid": 9, "exited_ttl_s": 10, "abi_version": 11, "monitored_pids": 12,
        "records_accepted": 13, "records_dropped": 14, "unmatched_frees": 15,
        "kmem_bytes": 16, "records_queued": 17, "older_frees": 18}
    assert list(c.to_dict()) == cli.__doc__.split("config  {")[1].split("}")[0] \
        .replace('"', "").replace(",", " ").split()
    running = PidInfo(pid=5, ppid=1, state=1, comm="x", start_time_ns=1 * S,
                      monitor_start_ns=3 * S, exit_time_ns=0, live_blocks=0, live_bytes=0,
                      records=0, dropped_records=0, unmatched_frees=0, pending_frees=0,
                      samples=0, vm_bytes=0, rss_bytes=0)
    d = running.to_dict(10 * S + 123_456_789)
    assert (d["state"], d["uptime_s"], d["monitored_s"]) == ("running", 9.123, 7.123)
    site = Site(site=3, flags=1, frames=(0x401000, 0x402000), file="a.c", func="f", line=9,
                live_bytes=100, live_blocks=2, alloc_bytes=300, free_bytes=200,
                alloc_count=(0, 4, 1) + (0,) * 10, locs=((1, 0x1139), None))
    assert site.to_dict() == {
        "site": 3, "frames": [0x401000, 0x402000], "func": "f", "file": "a.c", "line": 9,
        "live_bytes": 100, "live_blocks": 2, "alloc_bytes": 300, "free_bytes": 200,
        "alloc_count": {"MALLOC": 4, "CALLOC": 1}, "locations": [[1, 0x1139], None]}
    bare = Site(site=4, flags=0, frames=(0x401000,), file="stale", func="stale", line=1)
    assert (bare.to_dict()["func"], bare.to_dict()["file"], bare.to_dict()["line"]) == \
        (None, None, None)
    assert Bucket(1, 2, 3, 4, 5, 6).to_dict() == {
        "malloc_count": 1, "calloc_count": 2, "realloc_count": 3, "free_count": 4,
        "alloc_bytes": 5, "free_bytes": 6}
    assert Sample(1, 2, 3, 4, 5, 6).to_dict() == {
        "time_ns": 1, "vm": 2, "rss": 3, "rss_anon": 4, "rss_file": 5, "rss_shmem": 6,
        "live_bytes": None, "live_blocks": None, "heap_free": None, "heap_trimmable": None,
        "allocator": None, "cgroup_usage": None}
    st = StatsInfo(pid=9, buckets=(Bucket(malloc_count=2, alloc_bytes=20),) + (Bucket(),) * 6,
                   failed_allocs=1, unmatched_frees=2, older_frees=3)
    assert st.to_dict() == stats.build_table(st).to_dict()
    assert st.to_dict()["totals"]["inuse_bytes"] == 20
    assert (st.to_dict()["failed_allocs"], st.to_dict()["older_frees"]) == (1, 3)
    b = blk(0x10, 24, 5, site=3)
    assert b.to_dict(site, 7 * S) == {
        "op": "MALLOC", "time_ns": 5 * S, "age_s": 2.0, "size": 24, "weight": 1, "ptr": 0x10,
        "prev_ptr": 0, "site": 3, "caller": 0x401000, "func": "f", "file": "a.c", "line": 9}
    assert b.to_dict(bare, 7 * S)["func"] is None and b.to_dict(None, 0)["caller"] is None


def test_commands_print_the_models_json() -> None:
    """pmctl's commands (and pmm.blocklog, which writes `logs`) build no JSON of
    their own for the models: they call to_dict."""
    import ast
    from pathlib import Path

    from pmm import blocklog
    from pmm.analysis import leakview

    src = "\n".join(f.read_text() for f in sorted(Path(cli.__file__).parent.glob("*.py")))
    src += Path(blocklog.__file__).read_text()
    names = {n.name for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef)}
    assert not names & {"config_dict", "pid_dict", "block_dict", "site_dict"}
    for call in ("cfg.to_dict()", "p.to_dict(now)", "b.to_dict(sites.get(b.site), now)",
                 "st.to_dict()", "report.to_dict(depth)"):
        assert call in src, call
    # leaks' sites: the groups' own JSON, gathered by the library
    assert "g.to_dict(fr, len(fr))" in Path(leakview.__file__).read_text()
