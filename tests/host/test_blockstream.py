"""pmm.kernel.blockstream: a process's live blocks taken page by page.

The per-site figures must be those the per-block code gave (a reference
copy of it is below), the sorted stream that of sorting them all, and
neither may hold memory per block: a synthetic stream of blocks
goes through each with its peak measured at two counts."""

from __future__ import annotations

import ctypes
import itertools
import json
import random
import tracemalloc
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import astuple
from typing import Any

import pytest
from typer.testing import CliRunner

from pmctl import cli, options
from pmm import blocklog
from pmm.analysis import leaks
from pmm.kernel import blockstream, uapi
from pmm.kernel.blockstream import BlockPage, BlockSorter, SiteGrouper, pages_of
from pmm.kernel.device import BLOCK_OFFSETS, Device, block_from_c
from pmm.kernel.model import SITE_F_SOURCE, Block, PidInfo, Site
from pmm.output import dump_json, dump_json_at

S = 1_000_000_000
NOW = 10**13


def reference_groups(blocks: Iterable[Block], sites: Mapping[int, Site],
                     now_ns: int) -> list[tuple[Any, ...]]:
    """group_blocks as it was, a Block at a time (the figures to keep)."""
    acc: dict[int, list[Block]] = {}
    for b in blocks:
        acc.setdefault(b.site, []).append(b)
    out = []
    for site, bl in acc.items():
        ages = [leaks.block_age_s(b, now_ns) for b in bl]
        weights = [max(1, b.weight) for b in bl]
        histogram = [0] * len(leaks.AGE_LABELS)
        for age, w in zip(ages, weights, strict=True):
            histogram[leaks.age_bucket(age)] += w
        out.append(leaks.LeakGroup(
            site=site, blocks=sum(weights),
            bytes=sum(b.size * w for b, w in zip(bl, weights, strict=True)),
            oldest_age_s=max(ages), newest_age_s=min(ages),
            histogram=tuple(histogram), desc=sites.get(site)))
    out.sort(key=lambda g: (-g.bytes, -g.blocks, g.site))
    return [astuple(g) for g in out]


# ages at and around the buckets' bounds, in the future, and anywhere
EDGES = [0, 1, S - 1, S, S + 1, 10 * S - 1, 10 * S, 100 * S, 1000 * S - 1, 1000 * S,
         1000 * S + 1, -1, -S]


def random_blocks(rnd: random.Random, n: int, nsites: int, sampled: bool,
                  wild: bool) -> list[Block]:
    out = []
    for i in range(n):
        age = rnd.choice(EDGES) if rnd.random() < 0.5 else rnd.randint(-S, 2000 * S)
        t = rnd.getrandbits(64) if wild and rnd.random() < 0.3 else max(0, NOW - age)
        size = rnd.getrandbits(rnd.choice([5, 20, 63 if wild else 40]))
        w = rnd.choice([0, 1, 1, 7, 1 << 20]) if sampled else 1
        out.append(Block(0x1000 + 16 * i, 0, size, t, rnd.randrange(nsites), w,
                         rnd.choice([1, 2, 3])))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_grouping_pages_gives_the_per_block_figures(seed: int) -> None:
    rnd = random.Random(seed)
    blocks = random_blocks(rnd, rnd.choice([0, 1, 4095, 4096, 4097, 9000]),
                           [1, 3, 300][seed % 3], sampled=seed % 2 == 1, wild=seed % 4 == 3)
    sites = {1: Site(1, func="f")}
    want = reference_groups(blocks, sites, NOW)
    assert [astuple(g) for g in leaks.group_blocks(blocks, sites, NOW)] == want
    # any page size: what a page holds does not change the figures
    for page in (1, 7, 1000):
        got = leaks.group_pages(pages_of(blocks, page), sites, NOW)
        assert [astuple(g) for g in got] == want


def test_age_cuts_are_where_the_float_ages_change_bucket() -> None:
    cuts = blockstream.age_cuts(leaks.AGE_BOUNDS_S)
    assert cuts == (S, 10 * S, 100 * S, 1000 * S)
    for cut, bound in zip(cuts, leaks.AGE_BOUNDS_S, strict=True):
        assert (cut - 1) / 1e9 < bound <= cut / 1e9
    assert blockstream.age_cuts([0.0, 0.5, 1e-9, 2.5e-9]) == (0, S // 2, 1, 3)


def raw_table(blocks: list[Block]) -> ctypes.Array[Any]:
    arr = (uapi.Block * len(blocks))()
    for c, b in zip(arr, blocks, strict=True):
        for name in ("ptr", "prev_ptr", "size", "time_ns", "site", "weight", "op"):
            setattr(c, name, getattr(b, name))
    return arr


def test_a_raw_page_reads_as_the_structs_do() -> None:
    blocks = random_blocks(random.Random(5), 300, 5, sampled=True, wild=True)
    blocks = [Block(b.ptr, b.ptr ^ 0xABCDEF, b.size, b.time_ns, b.site | 0xFFFF0000, b.weight,
                     b.op | 0xFF00) for b in blocks]
    arr = raw_table(blocks)
    page = BlockPage.from_raw(memoryview(arr).cast("B"), len(blocks), BLOCK_OFFSETS,
                              ctypes.sizeof(uapi.Block))
    assert list(page.blocks()) == [block_from_c(c) for c in arr] == blocks
    assert len(BlockPage.from_raw(bytes(arr), 7, BLOCK_OFFSETS,
                                  ctypes.sizeof(uapi.Block))) == 7


def test_device_pages_follow_the_cursor(monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Any) -> None:
    """Device.block_pages against a fake PMM_READ_BLOCKS: every block once,
    a page per call, the cursor carried from call to call."""
    blocks = random_blocks(random.Random(9), 10000, 3, sampled=False, wild=False)
    table = raw_table(blocks)
    esize = ctypes.sizeof(uapi.Block)
    calls = []

    def ioctl(fd: int, request: int, arg: Any, mutate: bool = False) -> int:
        assert request == uapi.READ_BLOCKS and arg.pid == 42
        start = arg.cursor
        n = min(arg.capacity, len(blocks) - start)
        ctypes.memmove(arg.buf, ctypes.addressof(table) + start * esize, n * esize)
        arg.count, arg.cursor, arg.total = n, start + n, len(blocks)
        arg.done = int(start + n == len(blocks))
        calls.append(n)
        return 0

    monkeypatch.setattr("pmm.kernel.device.fcntl.ioctl", ioctl)
    dev = Device(-1, "fake")
    pages = list(dev.block_pages(42))
    assert [len(p) for p in pages] == calls == [4096, 4096, 1808]
    assert [b for p in pages for b in p.blocks()] == blocks == dev.blocks(42)


def reference_sorted(blocks: list[Block], since_ns: int | None,
                     limit: int | None) -> list[Block]:
    out = sorted(blocks, key=lambda b: (b.time_ns, b.ptr))
    if since_ns is not None:
        out = [b for b in out if b.time_ns >= since_ns]
    return out[:limit] if limit else out


def as_blocks(rows: Iterable[blockstream.Row]) -> list[Block]:
    return [Block(p, pp, sz, t, s, w, op) for t, p, pp, sz, s, w, op in rows]


@pytest.mark.parametrize("run", [1, 5, 64, 100000])
def test_sorting_in_runs_gives_the_sorted_blocks(run: int) -> None:
    rnd = random.Random(run)
    blocks = random_blocks(rnd, 1000, 4, sampled=True, wild=False)
    blocks += [Block(0x1, 0, 1, NOW, 0, 1, 1), Block(0x0, 0, 1, NOW, 0, 1, 1)]  # a time tie
    for since, limit in itertools.product([None, NOW - 10 * S, NOW + 5 * S], [None, 1, 3, 700]):
        with BlockSorter(since, limit, run=run) as sorter:
            for page in pages_of(blocks, 37):
                sorter.add_page(page)
            assert as_blocks(sorter) == reference_sorted(blocks, since, limit)
            assert sorter.total == len(blocks)
            # a small limit never writes a run
            if limit is not None and limit <= run // 2:
                assert sorter.spilled == 0


# -- memory ------------------------------------------------------------------------


def synthetic_pages(n: int, nsites: int, page: int = 4096) -> Iterator[BlockPage]:
    """n blocks of 32 bytes, nsites sites in turn, a page at a time, made
    without a Python object per block that outlives its page."""
    for a in range(0, n, page):
        b = min(n, a + page)
        idx = range(a, b)
        yield BlockPage(ptr=[0x10000 + 48 * i for i in idx], prev_ptr=[0] * (b - a),
                        size=[32] * (b - a), time_ns=[NOW - (i * 7919 % 2000) * S for i in idx],
                        site=[i % nsites for i in idx], weight=[1] * (b - a),
                        op=[1] * (b - a))


def peak_of(fn: Any) -> tuple[int, Any]:
    tracemalloc.start()
    try:
        out = fn()
        return tracemalloc.get_traced_memory()[1], out
    finally:
        tracemalloc.stop()


def group_peak(n: int) -> int:
    peak, g = peak_of(lambda: blockstream.group_pages(synthetic_pages(n, 4), NOW,
                                                      leaks.AGE_BOUNDS_S))
    assert isinstance(g, SiteGrouper) and g.count == n
    got = {s: (nb, nbytes) for s, nb, nbytes, *_ in g.sites()}
    assert got == {s: (n // 4, n // 4 * 32) for s in range(4)}
    return peak


def test_grouping_keeps_memory_per_site_not_per_block() -> None:
    small, large = group_peak(40_000), group_peak(160_000)
    # a page or two of lists (4096 blocks), whatever the count: a list of
    # 160000 Blocks alone would take 30 MB
    assert large < 4 << 20 and large < small * 1.5, (small, large)


def sort_peak(n: int, run: int, tmpdir: str) -> tuple[int, int]:
    def sort() -> int:
        with BlockSorter(run=run, tmpdir=tmpdir) as sorter:
            for page in synthetic_pages(n, 3):
                sorter.add_page(page)
            last = count = 0
            for row in sorter:
                assert row[0] >= last
                last = row[0]
                count += 1
            assert count == n
            return sorter.spilled

    return peak_of(sort)


def test_sorting_keeps_memory_to_a_run(tmp_path: Any) -> None:
    run = 10_000
    small, spilled = sort_peak(40_000, run, str(tmp_path))
    assert 40_000 - run <= spilled < 40_000  # the last run stays in memory
    large, spilled = sort_peak(160_000, run, str(tmp_path))
    assert 160_000 - run <= spilled < 160_000
    # a run of columns and the merge's pages: not 160000 blocks (~30 MB)
    assert large < 12 << 20 and large < small * 1.5, (small, large)


# -- pmctl logs ------------------------------------------------------------------------


def test_dump_json_at_is_dump_jsons_item() -> None:
    items: list[Any] = [
        Block(1, 2, 3, NOW, 4, 5, 6).to_dict(Site(4, flags=SITE_F_SOURCE, frames=(7,),
                                                  file="a\u202e\"b.c\n", func="f\x1b", line=3),
                                             NOW + 123_456_789),
        Block(1, 0, 3, NOW, 4, 1, 1).to_dict(None, NOW - 5),
        {"t": True, "f": False, "x": 1.5e300, "n": float("nan"), "big": 1 << 70},
        {"nested": {"a": [1, 2]}, "b": 1}, {}, [1, {"a": None}], "s", 3,
    ]
    doc = json.dumps({"blocks": items}, indent=2, ensure_ascii=False)
    mine = '{\n  "blocks": [\n' + ",\n".join(dump_json_at(x, 2) for x in items) + "\n  ]\n}"
    assert mine == doc == dump_json({"blocks": items})


@pytest.fixture()
def logs_module(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> list[Block]:
    """A device with 3000 blocks of 3 sites (one registered with file and
    line); the sorter's runs are small, so that they are written and merged."""
    rnd = random.Random(11)
    blocks = random_blocks(rnd, 3000, 3, sampled=True, wild=False)
    blocks = [Block(b.ptr, b.ptr - 64 if b.op == 3 else 0, b.size, b.time_ns, b.site,
                    b.weight, b.op) for b in blocks]
    sites = [Site(1, flags=SITE_F_SOURCE, frames=(0x401000,), file="x\x1b.c", func="main",
                  line=9), Site(2, frames=(0x402000, 0x1))]
    info = PidInfo(pid=77, ppid=1, state=1, comm="big", start_time_ns=S, monitor_start_ns=S,
                   exit_time_ns=0, live_blocks=len(blocks), live_bytes=1, records=1,
                   dropped_records=0, unmatched_frees=3, pending_frees=0, samples=0,
                   vm_bytes=0, rss_bytes=0)
    dev = tmp_path / "pmm"
    dev.write_bytes(b"")
    monkeypatch.setenv("PMM_DEVICE", str(dev))
    monkeypatch.setattr(Device, "monitored_pids", lambda self: [info])
    monkeypatch.setattr(Device, "block_pages", lambda self, pid: pages_of(blocks, 500))
    monkeypatch.setattr(Device, "sites", lambda self, pid: sites)
    monkeypatch.setattr("pmm.symbolize.capture_maps", lambda pid: None)
    monkeypatch.setattr(options, "now_monotonic_ns", lambda: NOW)
    monkeypatch.setattr("time.time_ns", lambda: 1_700_000_000 * S)
    monkeypatch.setattr(blockstream, "SORT_RUN", 256)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    return blocks


@pytest.mark.parametrize("args", [[], ["--since", "100s"], ["--limit", "10"],
                                  ["--since", "1000s", "--limit", "2000"],
                                  ["--since", "0"]])
def test_logs_streams_what_it_printed_before(logs_module: list[Block],
                                            args: list[str]) -> None:
    """Text and JSON as the per-block code printed them (proc_line,
    Block.to_dict, dump_json), with the blocks sorted in written runs."""
    sites = {1: Site(1, flags=SITE_F_SOURCE, frames=(0x401000,), file="x\x1b.c", func="main",
                     line=9), 2: Site(2, frames=(0x402000, 0x1))}
    since_s = {"100s": 100.0, "1000s": 1000.0, "0": 0.0}.get(
        args[args.index("--since") + 1]) if "--since" in args else None
    limit = int(args[args.index("--limit") + 1]) if "--limit" in args else None
    cut = None if since_s is None else NOW - int(since_s * 1e9)
    sel = reference_sorted(logs_module, cut, limit)
    dicts = [b.to_dict(sites.get(b.site), NOW) for b in sel]

    r = CliRunner().invoke(cli.app, ["logs", "77", *args, "--json"])
    assert r.exit_code == 0, r.output
    want = dump_json({"pid": 77, "comm": "big", "state": "running",
                      "total": len(logs_module), "blocks": dicts}) + "\n"
    assert r.stdout == want

    r = CliRunner().invoke(cli.app, ["logs", "77", *args])
    assert r.exit_code == 0, r.output
    want = ("PID: 77, Comp: big, PPID: 1, State: 1, Log count: 3000\n"
            "Dropped: 0, Unmatched frees: 3, Pending frees: 0, Older frees: 0\n"
            + "".join(blocklog.proc_line(d, NOW, 1_700_000_000 * S) + "\n" for d in dicts))
    assert r.stdout == want
