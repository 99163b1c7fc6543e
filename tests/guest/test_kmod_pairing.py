"""In-kernel pairing: exact live bytes and per-site counters for known
sequences, out-of-order arrival (one thread and across threads), address
reuse, realloc chains, mappings, weights, limits."""

from __future__ import annotations

import os
import random
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from kmod_dev import RECORD_DTYPE, Dev, rec

from pmm.kernel import uapi

pytestmark = pytest.mark.usefixtures("pmm")
Op = uapi.Op


@pytest.fixture()
def dev() -> Iterator[Dev]:
    d = Dev()
    d.start()
    yield d
    d.close()


def counts(s: uapi.SiteStats) -> dict[str, int]:
    out = {
        "live_bytes": s.live_bytes,
        "live_blocks": s.live_blocks,
        "alloc_bytes": s.alloc_bytes,
        "free_bytes": s.free_bytes,
    }
    for op in Op:
        if s.alloc_count[op]:
            out[op.name.lower()] = s.alloc_count[op]
    return out


def test_known_sequence(dev: Dev) -> None:
    dev.register(1, [0x10000E60], "pmd.c", "main", 207)
    dev.register(2, [0x10000E84], "pmd.c", "main", 209)
    t = 1_000_000_000
    dev.send([
        rec(Op.MALLOC, 0xA000, 100, t + 1, site=1),
        rec(Op.MALLOC, 0xB000, 300, t + 2, site=1),
        rec(Op.CALLOC, 0xC000, 40, t + 3, site=2),
        rec(Op.REALLOC, 0xD000, 200, t + 4, site=2, prev=0xA000),
        rec(Op.FREE, 0xB000, 0, t + 5, site=3),
        rec(Op.ALIGNED_ALLOC, 0xE000, 64, t + 6, site=1),
        rec(Op.FREE, 0xC000, 0, t + 7),
        rec(Op.FREE, 0, 0, t + 8),  # free(NULL): nothing
    ])
    sites = dev.sites()
    assert sorted(sites) == [1, 2]  # a free's own site is not created: frees count at the block's
    assert counts(sites[1]) == {
        "live_bytes": 64, "live_blocks": 1, "alloc_bytes": 464, "free_bytes": 400,
        "malloc": 2, "aligned_alloc": 1, "free": 2,
    }
    assert counts(sites[2]) == {
        "live_bytes": 200, "live_blocks": 1, "alloc_bytes": 240, "free_bytes": 40,
        "calloc": 1, "realloc": 1, "free": 1,
    }
    info = dev.info()
    assert (info.live_blocks, info.live_bytes, info.records) == (2, 264, 8)
    assert (info.pending_frees, info.unmatched_frees, info.dropped_records) == (0, 0, 0)
    blocks = sorted((b.ptr, b.prev_ptr, b.size, b.op, b.site, b.time_ns) for b in dev.blocks())
    assert blocks == [(0xD000, 0xA000, 200, Op.REALLOC, 2, t + 4),
                      (0xE000, 0, 64, Op.ALIGNED_ALLOC, 1, t + 6)]


def test_freed_in_batch(dev: Dev) -> None:
    """PMM_REC_F_FREED: an allocation its thread freed before sending counts
    as allocated and freed at its site and leaves no block; a REALLOC so
    flagged still frees its old block; a pending free at that address is not
    its pair."""
    t = 3_000_000_000
    dev.send([
        rec(Op.MALLOC, 0xA000, 100, t + 1, site=1, flags=uapi.REC_F_FREED),
        rec(Op.CALLOC, 0xA000, 30, t + 2, site=1, flags=uapi.REC_F_FREED),
        rec(Op.MALLOC, 0xB000, 50, t + 3, site=2),
        rec(Op.REALLOC, 0xC000, 70, t + 4, site=2, prev=0xB000, flags=uapi.REC_F_FREED),
        rec(Op.FREE, 0xD000, 0, t + 9),  # pending: it frees an older block
        rec(Op.MALLOC, 0xD000, 5, t + 5, site=3, weight=4, flags=uapi.REC_F_FREED),
    ])
    sites = dev.sites()
    assert counts(sites[1]) == {"live_bytes": 0, "live_blocks": 0, "alloc_bytes": 130,
                                "free_bytes": 130, "malloc": 1, "calloc": 1, "free": 2}
    assert counts(sites[2]) == {"live_bytes": 0, "live_blocks": 0, "alloc_bytes": 120,
                                "free_bytes": 120, "malloc": 1, "realloc": 1, "free": 2}
    assert counts(sites[3]) == {"live_bytes": 0, "live_blocks": 0, "alloc_bytes": 20,
                                "free_bytes": 20, "malloc": 4, "free": 4}
    info = dev.info()
    assert (info.live_blocks, info.live_bytes, info.records) == (0, 0, 6)
    assert (info.pending_frees, info.unmatched_frees) == (1, 0)
    st = dev.stats()
    assert [(b.malloc_count, b.calloc_count, b.realloc_count, b.free_count)
            for b in st.buckets][:3] == [(4, 0, 0, 4), (2, 1, 1, 4), (0, 0, 0, 0)]


def test_realloc_of_a_block_freed_in_batch(dev: Dev) -> None:
    """PMM_REC_F_PREV_FREED: the hook cancelled the old block's allocation
    (FREED) when the realloc came, so the REALLOC frees nothing: a block
    grown in three steps leaves one block, its Prev Pointer the step before,
    every step counted at its site, and no pending free; one grown and freed
    in the batch leaves nothing. Its prev_ptr is not a free: a block live at
    that address stays."""
    t = 4_000_000_000
    pf, freed = uapi.REC_F_PREV_FREED, uapi.REC_F_FREED
    dev.send([
        rec(Op.MALLOC, 0xE000, 8, t, site=4),  # lives at a later step's prev_ptr
        rec(Op.MALLOC, 0xA000, 100, t + 1, site=1, flags=freed),
        rec(Op.REALLOC, 0xB000, 200, t + 2, site=2, prev=0xA000, flags=freed | pf),
        rec(Op.REALLOC, 0xC000, 300, t + 3, site=2, prev=0xB000, flags=pf),
        rec(Op.MALLOC, 0xD000, 10, t + 4, site=3, weight=3, flags=freed),
        rec(Op.REALLOC, 0xD100, 20, t + 5, site=3, weight=3, prev=0xE000,
            flags=freed | pf),
    ])
    sites = dev.sites()
    assert counts(sites[1]) == {"live_bytes": 0, "live_blocks": 0, "alloc_bytes": 100,
                                "free_bytes": 100, "malloc": 1, "free": 1}
    assert counts(sites[2]) == {"live_bytes": 300, "live_blocks": 1, "alloc_bytes": 500,
                                "free_bytes": 200, "realloc": 2, "free": 1}
    assert counts(sites[3]) == {"live_bytes": 0, "live_blocks": 0, "alloc_bytes": 90,
                                "free_bytes": 90, "malloc": 3, "realloc": 3, "free": 6}
    assert counts(sites[4]) == {"live_bytes": 8, "live_blocks": 1, "alloc_bytes": 8,
                                "free_bytes": 0, "malloc": 1}
    info = dev.info()
    assert (info.live_blocks, info.live_bytes, info.records) == (2, 308, 6)
    assert (info.pending_frees, info.unmatched_frees) == (0, 0)
    blocks = sorted((b.ptr, b.prev_ptr, b.size, b.op, b.site) for b in dev.blocks())
    assert blocks == [(0xC000, 0xB000, 300, Op.REALLOC, 2), (0xE000, 0, 8, Op.MALLOC, 4)]


def test_frees_of_older_blocks(dev: Dev) -> None:
    """PMM_REC_F_OLDER: a free (or a realloc's free of its old block) of a
    block allocated before monitoring began is counted apart (older_frees,
    the summary line) and costs no table work: no lookup, so a live block at
    that address stays, and no pending free, so nothing becomes unmatched.
    A realloc of an older block makes its new block; realloc(older, 0) only
    counts."""
    t = 5_000_000_000
    old = uapi.REC_F_OLDER
    dev.send([
        rec(Op.MALLOC, 0xA000, 10, t, site=1),
        rec(Op.FREE, 0xA000, 0, t + 1, flags=old),  # not a free of this block
        rec(Op.FREE, 0xB000, 0, t + 2, flags=old),
        rec(Op.FREE, 0xB100, 0, t + 3, flags=old),
        rec(Op.REALLOC, 0xC000, 300, t + 4, site=2, prev=0xB200, flags=old),
        rec(Op.REALLOC, 0, 0, t + 5, site=2, prev=0xB300, flags=old),
        rec(Op.FREE, 0xD000, 0, t + 6),  # an ordinary unknown free: pending
    ])
    info = dev.info()
    assert (info.live_blocks, info.live_bytes, info.records) == (2, 310, 7)
    assert (info.older_frees, info.pending_frees, info.unmatched_frees) == (5, 1, 0)
    assert dev.stats().older_frees == 5
    assert counts(dev.sites()[2]) == {"live_bytes": 300, "live_blocks": 1, "alloc_bytes": 300,
                                      "free_bytes": 0, "realloc": 1}
    blocks = sorted((b.ptr, b.prev_ptr, b.size, b.op) for b in dev.blocks())
    assert blocks == [(0xA000, 0, 10, Op.MALLOC), (0xC000, 0xB200, 300, Op.REALLOC)]


def test_tagged_frees_pair_across_reuse(dev: Dev) -> None:
    """Thread A: malloc X @1 ... free X @4; thread B in between: free X @2,
    malloc X @3 (ping-pong). A's records arrive first. Untagged, A's free
    takes A's block and B's stays live with B's free pending; tagged (the
    low bits of the freed block's allocation time), every pair is right,
    whatever the order of arrival."""
    mask = (1 << uapi.ALLOC_TAG_BITS) - 1
    tagged = uapi.REC_F_TAGGED
    for base, x in ((11_000_000_000, 0x9100), (12_000_000_000 + mask + 5, 0x9200)):
        t1, t2, t3, t4 = base + 1, base + 2, base + 3, base + 4
        a = [rec(Op.MALLOC, x, 10, t1, site=1),
             rec(Op.FREE, x, 0, t4, flags=tagged, alloc_tag=t3 & mask)]
        b = [rec(Op.FREE, x, 0, t2, flags=tagged, alloc_tag=t1 & mask),
             rec(Op.MALLOC, x, 20, t3, site=2)]
        for batch in (a, b) if x == 0x9100 else (b, a):
            dev.send(batch)
    info = dev.info()
    assert (info.live_blocks, info.live_bytes, info.pending_frees) == (0, 0, 0)
    sites = dev.sites()
    assert (sites[1].free_bytes, sites[2].free_bytes) == (20, 40)
    # the same without tags, A first: the known mispairing
    t = 13_000_000_000
    dev.send([rec(Op.MALLOC, 0x9300, 10, t + 1, site=1), rec(Op.FREE, 0x9300, 0, t + 4)])
    dev.send([rec(Op.FREE, 0x9300, 0, t + 2), rec(Op.MALLOC, 0x9300, 20, t + 3, site=2)])
    info = dev.info()
    assert (info.live_blocks, info.live_bytes, info.pending_frees) == (1, 20, 1)
    # a REALLOC's free of its old block is tagged the same way
    t = 14_000_000_000
    dev.send([rec(Op.MALLOC, 0x9400, 8, t + 1, site=3),
              rec(Op.REALLOC, 0x9500, 16, t + 4, site=3, prev=0x9400, flags=tagged,
                  alloc_tag=(t + 3) & mask)])
    assert dev.info().pending_frees == 2
    dev.send([rec(Op.FREE, 0x9400, 0, t + 2, flags=tagged, alloc_tag=(t + 1) & mask),
              rec(Op.MALLOC, 0x9400, 4, t + 3, site=3)])
    info = dev.info()
    assert (info.live_blocks, info.live_bytes, info.pending_frees) == (2, 36, 1)
    assert dev.sites()[3].live_bytes == 16



def test_tagged_free_takes_newest_block_sharing_its_tag(dev: Dev) -> None:
    """Two live blocks at X allocated 2^ALLOC_TAG_BITS ns apart share a tag
    (the first one's free is in flight). A tagged free takes the newer one,
    its own; the older one's free, arriving last, finds it. The first match
    in table order would take the older block and leave the newer live with
    its free pending."""
    mask = (1 << uapi.ALLOC_TAG_BITS) - 1
    tagged = uapi.REC_F_TAGGED
    x, t1 = 0x9600, 15_000_000_000
    t2 = t1 + mask + 1
    dev.send([rec(Op.MALLOC, x, 10, t1, site=1), rec(Op.MALLOC, x, 30, t2, site=2),
              rec(Op.FREE, x, 0, t2 + 7, flags=tagged, alloc_tag=t2 & mask)])
    assert (dev.info().live_blocks, dev.info().live_bytes) == (1, 10)
    dev.send([rec(Op.FREE, x, 0, t1 + 5, flags=tagged, alloc_tag=t1 & mask)])
    info = dev.info()
    assert (info.live_blocks, info.live_bytes, info.pending_frees) == (0, 0, 0)
    sites = dev.sites()
    assert (sites[1].free_bytes, sites[2].free_bytes) == (10, 30)

def test_free_before_alloc_one_thread(dev: Dev) -> None:
    t = 5_000_000_000
    # the free (t+10) arrives before its allocation (t+5)
    dev.send([rec(Op.FREE, 0x4000, 0, t + 10)])
    assert dev.info().pending_frees == 1
    dev.send([rec(Op.MALLOC, 0x4000, 77, t + 5, site=4)])
    info = dev.info()
    assert (info.live_blocks, info.live_bytes, info.pending_frees, info.unmatched_frees) == (
        0, 0, 0, 0)
    assert counts(dev.sites()[4]) == {"live_bytes": 0, "live_blocks": 0, "alloc_bytes": 77,
                                      "free_bytes": 77, "malloc": 1, "free": 1}
    # an allocation newer than the pending free does not pair with it
    dev.send([rec(Op.FREE, 0x5000, 0, t + 20), rec(Op.MALLOC, 0x5000, 9, t + 30)])
    info = dev.info()
    assert (info.live_blocks, info.live_bytes, info.pending_frees) == (1, 9, 1)


def test_address_reuse(dev: Dev) -> None:
    t = 7_000_000_000
    p = 0x6000
    # thread 1: malloc@1 ... thread 2: free@2 ... thread 1: malloc@3 (reuse);
    # arrival: malloc@3, then malloc@1, then free@2
    dev.send([rec(Op.MALLOC, p, 30, t + 3, site=2)])
    dev.send([rec(Op.MALLOC, p, 10, t + 1, site=1)])
    assert dev.info().live_blocks == 2  # both kept while the free is in flight
    dev.send([rec(Op.FREE, p, 0, t + 2)])
    (b,) = dev.blocks()
    assert (b.ptr, b.size, b.site, b.time_ns) == (p, 30, 2, t + 3)
    sites = dev.sites()
    assert (sites[1].live_bytes, sites[1].free_bytes, sites[2].live_bytes) == (0, 10, 30)
    # a free that arrives before both: pairs with the older once it comes
    q = 0x7000
    dev.send([rec(Op.FREE, q, 0, t + 12)])
    dev.send([rec(Op.MALLOC, q, 50, t + 13, site=2)])  # newer than the free: stays
    dev.send([rec(Op.MALLOC, q, 40, t + 11, site=1)])  # pairs with the pending free
    info = dev.info()
    assert (info.live_blocks, info.live_bytes, info.pending_frees) == (2, 80, 0)
    dev.send([rec(Op.FREE, q, 0, t + 14), rec(Op.FREE, p, 0, t + 14)])
    info = dev.info()
    assert (info.live_blocks, info.live_bytes, info.pending_frees, info.unmatched_frees) == (
        0, 0, 0, 0)


def test_realloc_chain_out_of_order(dev: Dev) -> None:
    t = 9_000_000_000
    chain = [
        rec(Op.MALLOC, 0xA0, 10, t + 1, site=1),
        rec(Op.REALLOC, 0xB0, 20, t + 2, site=2, prev=0xA0),
        rec(Op.REALLOC, 0xB0, 30, t + 3, site=3, prev=0xB0),  # in place
        rec(Op.REALLOC, 0xC0, 40, t + 4, site=4, prev=0xB0),
    ]
    for r in reversed(chain):  # the worst order: newest first
        dev.send([r])
    (b,) = dev.blocks()
    assert (b.ptr, b.prev_ptr, b.size, b.op, b.site) == (0xC0, 0xB0, 40, Op.REALLOC, 4)
    info = dev.info()
    assert (info.live_blocks, info.live_bytes, info.pending_frees, info.unmatched_frees) == (
        1, 40, 0, 0)
    sites = dev.sites()
    assert [(sites[i].alloc_bytes, sites[i].free_bytes, sites[i].live_bytes) for i in
            (1, 2, 3, 4)] == [(10, 10, 0), (20, 20, 0), (30, 30, 0), (40, 0, 40)]
    st = dev.stats()
    # by requested size; frees by the freed block's size (10 | 20, 30)
    assert [(x.malloc_count, x.realloc_count, x.free_count) for x in st.buckets[:2]] == [
        (1, 0, 1), (0, 3, 2)]
    # realloc that fails moves nothing; realloc(p, 0) frees p
    dev.send([rec(Op.REALLOC, 0, 99, t + 5, prev=0xC0, flags=uapi.REC_F_FAILED)])
    assert dev.info().live_bytes == 40
    assert dev.stats().failed_allocs == 1
    dev.send([rec(Op.REALLOC, 0, 0, t + 6, prev=0xC0)])
    assert dev.info().live_blocks == 0
    # realloc(NULL, n) is a malloc
    dev.send([rec(Op.REALLOC, 0xD0, 5, t + 7)])
    (b,) = dev.blocks()
    assert (b.ptr, b.prev_ptr, b.size) == (0xD0, 0, 5)


def test_mappings(dev: Dev) -> None:
    t = 11_000_000_000
    m = 0x7F0000000000
    dev.send([rec(Op.MMAP, m, 8 * 4096, t + 1, site=1)])
    dev.send([rec(Op.FREE, m, 0, t + 2)])  # free() never pairs with a mapping
    dev.send([rec(Op.MUNMAP, m, 4096, t + 3)])  # trims the first page
    (b,) = dev.blocks()
    assert (b.ptr, b.size, b.op) == (m + 4096, 7 * 4096, Op.MMAP)
    dev.send([rec(Op.MREMAP, m + 0x100000, 16 * 4096, t + 4, site=2, prev=m + 4096)])
    (b,) = dev.blocks()
    assert (b.ptr, b.prev_ptr, b.size, b.op) == (m + 0x100000, m + 4096, 16 * 4096, Op.MREMAP)
    dev.send([rec(Op.MUNMAP, m + 0x100000, 16 * 4096, t + 5)])
    info = dev.info()
    assert (info.live_blocks, info.live_bytes, info.pending_frees) == (0, 0, 1)
    s1 = dev.sites()[1]
    # the trim and the move away both unmap site 1's mapping
    assert (s1.alloc_bytes, s1.free_bytes, s1.alloc_count[Op.MUNMAP]) == (
        8 * 4096, 8 * 4096, 2)
    # an unmap that arrives before its mmap pairs with it
    dev.send([rec(Op.MUNMAP, m, 4096, t + 21)])
    dev.send([rec(Op.MMAP, m, 4096, t + 20)])
    assert dev.info().pending_frees == 1  # only the stray free() remains
    assert dev.info().live_blocks == 0


def test_weights(dev: Dev) -> None:
    dev.send([rec(Op.MALLOC, 0x100, 100, site=1, weight=10),
              rec(Op.MALLOC, 0x200, 8, site=1, weight=3)])
    s = dev.sites()[1]
    assert (s.live_bytes, s.live_blocks, s.alloc_bytes, s.alloc_count[Op.MALLOC]) == (
        1024, 13, 1024, 13)
    info = dev.info()
    assert (info.live_blocks, info.live_bytes) == (2, 1024)
    dev.send([rec(Op.FREE, 0x100)])
    s = dev.sites()[1]
    assert (s.live_bytes, s.live_blocks, s.free_bytes, s.alloc_count[Op.FREE]) == (
        24, 3, 1000, 10)
    b = dev.stats().buckets
    assert (b[1].malloc_count, b[1].alloc_bytes, b[1].free_count, b[1].free_bytes) == (
        10, 1000, 10, 1000)


def test_pending_bounded(dev: Dev) -> None:
    n = 4097
    dev.send([rec(Op.FREE, 0x100000 + i * 16) for i in range(n)])
    info = dev.info()
    assert (info.pending_frees, info.unmatched_frees) == (4096, 1)
    assert dev.config().unmatched_frees == 1
    assert dev.stats().unmatched_frees == 1
    # the evicted one was the oldest: its allocation now stays live
    dev.send([rec(Op.MALLOC, 0x100000, 10, 1), rec(Op.MALLOC, 0x100010, 10, 1)])
    info = dev.info()
    assert (info.live_blocks, info.pending_frees) == (1, 4095)


def test_limits_drop(dev: Dev) -> None:
    dev.set_config(max_blocks_per_pid=10, max_sites_per_pid=3)
    dev.send([rec(Op.MALLOC, 0x1000 + i * 16, 1, site=1) for i in range(12)])
    dev.send([rec(Op.MALLOC, 0x9000 + i * 16, 1, site=10 + i) for i in range(3)])
    info = dev.info()
    assert (info.live_blocks, info.dropped_records, info.records) == (10, 5, 15)
    assert dev.config().records_dropped == 5
    assert sorted(dev.sites()) == [1]  # a refused record creates no site
    dev.send([rec(Op.FREE, 0x1000)])
    dev.send([rec(Op.MALLOC, 0x9000, 1, site=2), rec(Op.MALLOC, 0x9010, 1, site=3)])
    assert sorted(dev.sites()) == [1, 2]
    assert (dev.info().live_blocks, dev.info().dropped_records) == (10, 6)


def run(progs: Path, *argv: str) -> dict[str, dict[str, int]]:
    out = subprocess.run([str(progs / argv[0]), *argv[1:]], check=True, text=True,
                         capture_output=True, timeout=120).stdout
    res: dict[str, dict[str, int]] = {}
    for line in out.splitlines():
        words = line.split()
        key = "pid" if "=" in words[0] else words.pop(0)
        res[key] = {k: int(v) for k, v in (w.split("=") for w in words)}
    return res


def test_cross_thread_out_of_order(progs: Path) -> None:
    n = 3000
    res = run(progs, "recgen", "xthread", str(n))
    assert res["pid"] == {"records": 2 * n, "live_blocks": 0, "live_bytes": 0, "pending": 0,
                          "unmatched": 0, "dropped": 0}
    total = sum(32 + i % 100 for i in range(n))
    assert res["site1"] == {"live_blocks": 0, "live_bytes": 0, "alloc_bytes": total,
                            "free_bytes": total, "mallocs": n, "frees": n}


def test_cross_thread_reuse(progs: Path) -> None:
    n = 2000
    res = run(progs, "recgen", "reuse", str(n))
    total = sum(32 + i % 100 for i in range(n))
    assert res["pid"] == {"records": 3 * n, "live_blocks": n, "live_bytes": 2 * total,
                          "pending": 0, "unmatched": 0, "dropped": 0}
    assert res["site1"] == {"live_blocks": 0, "live_bytes": 0, "alloc_bytes": total,
                            "free_bytes": total, "mallocs": n, "frees": n}
    assert res["site2"] == {"live_blocks": n, "live_bytes": 2 * total,
                            "alloc_bytes": 2 * total, "free_bytes": 0, "callocs": n,
                            "frees": 0}


def test_stop_frees_everything(dev: Dev) -> None:
    dev.register(1, [0x1])
    dev.send([rec(Op.MALLOC, 0x1000 + i * 16, 10, site=i % 50) for i in range(20000)])
    dev.send([rec(Op.FREE, 0x900000 + i * 16) for i in range(100)])
    assert dev.config().kmem_bytes > 20000 * 24
    dev.stop()
    c = dev.config()
    assert (c.monitored_pids, c.kmem_bytes) == (0, 0)
    # monitoring again starts from empty tables
    dev.start()
    info = dev.info()
    assert (info.live_blocks, info.records, info.pending_frees) == (0, 0, 0)
    assert os.getpid() == info.pid


def test_same_address_cap(dev: Dev) -> None:
    """At most MAX_BATCH (4096: a hook's buffer, whose ping-pong holds 2048
    before it is sent) live blocks of a kind share an address; the next is dropped. A
    mapping at the same address is of the other kind and still fits."""
    cap = uapi.MAX_BATCH
    dev.send([rec(Op.MALLOC, 0x4000, 8, 100 + i) for i in range(cap + 1)])
    dev.send([rec(Op.MMAP, 0x4000, 4096, 5000)])
    info = dev.info()
    assert (info.live_blocks, info.live_bytes, info.dropped_records) == (
        cap + 1, cap * 8 + 4096, 1)
    dev.send([rec(Op.FREE, 0x4000, 0, 10000) for _ in range(cap)])
    (b,) = dev.blocks()
    assert (b.ptr, b.op, b.size) == (0x4000, Op.MMAP, 4096)
    assert dev.info().pending_frees == 0


def test_table_matches_model(dev: Dev) -> None:
    """The block table (Robin Hood open addressing, grown by a quarter with
    its entries moved a few clusters at a time, emptied by shifting entries
    back) against a model: 40000 random records in time order over addresses
    that collide, share an address (several live blocks), move (mappings
    trimmed from the start, reallocs to another address) and carry what a
    slot does not hold (weights, Prev Pointers). Every block, per-site
    figure and size bucket must match."""
    rng = random.Random(4)
    dev.register(1, [0x1])
    dev.register(2, [0x2])
    # ptr -> [(size, op, site, t, weight, prev)]
    live: dict[int, list[tuple[int, int, int, int, int, int]]] = {}
    site_live = {1: 0, 2: 0}
    buckets = [0] * uapi.SIZE_BUCKETS  # alloc_bytes per size bucket
    records: list[uapi.Record] = []
    t = 10_000_000_000

    def bucket(size: int) -> int:
        lims = uapi.SIZE_BUCKET_LIMITS
        return next(i for i, lim in enumerate(lims) if lim is None or size <= lim)

    def add(ptr: int, size: int, op: int, site: int, weight: int, prev: int) -> bool:
        same = [b for b in live.get(ptr, []) if (b[1] == Op.MMAP) == (op == Op.MMAP)]
        if len(same) >= uapi.MAX_BATCH:
            return False  # dropped
        live.setdefault(ptr, []).append((size, op, site, t, weight, prev))
        site_live[site] += size * weight
        return True

    for _ in range(40000):
        t += 1
        ptrs = [p for p, bs in live.items() if bs]
        roll = rng.random()
        if roll < 0.55 or not ptrs:
            # heap addresses from a small pool (collisions, reuse, several live)
            ptr = 0x10000 + 16 * rng.randrange(6000)
            op = rng.choice([Op.MALLOC, Op.CALLOC, Op.MMAP])
            if op == Op.MMAP:
                size = 4096 * rng.randrange(1, 5)
            else:
                size = rng.choice([1, 16, 17, 256, 257, 4096, 65537])
            site = rng.choice([1, 2])
            weight = rng.choice([1, 1, 1, 7])
            records.append(rec(op, ptr, size, t, site=site, weight=weight))
            if add(ptr, size, op, site, weight, 0):
                buckets[bucket(size)] += size * weight
            continue
        ptr = rng.choice(ptrs)
        newest = max(live[ptr], key=lambda b: b[3])
        size, block_op, site, bt, weight, prev = newest
        if block_op != Op.MMAP and roll < 0.62:
            # realloc to another address: the old block freed, a new one with its Prev Pointer
            to = 0x10000 + 16 * rng.randrange(6000)
            new_size = rng.choice([8, 300, 5000])
            records.append(rec(Op.REALLOC, to, new_size, t, site=site, prev=ptr))
            live[ptr].remove(newest)
            site_live[site] -= size * weight
            if add(to, new_size, Op.REALLOC, site, 1, ptr):
                buckets[bucket(new_size)] += new_size
            continue
        if block_op == Op.MMAP and size > 4096 and rng.random() < 0.5:
            records.append(rec(Op.MUNMAP, ptr, 4096, t))  # trim: moves to ptr + 4096
            live[ptr].remove(newest)
            live.setdefault(ptr + 4096, []).append((size - 4096, block_op, site, bt, weight, prev))
            site_live[site] -= 4096 * weight
            continue
        records.append(rec(Op.MUNMAP if block_op == Op.MMAP else Op.FREE, ptr,
                           size if block_op == Op.MMAP else 0, t))
        live[ptr].remove(newest)
        site_live[site] -= size * weight
    assert dev.send(records) == len(records)
    want = sorted((p, *b) for p, bs in live.items() for b in bs)
    got = sorted((b.ptr, b.size, b.op, b.site, b.time_ns, b.weight, b.prev_ptr)
                 for b in dev.blocks())
    assert got == want
    info = dev.info()
    assert (info.live_blocks, info.live_bytes) == (len(want), sum(b[1] * b[5] for b in want))
    assert (info.pending_frees, info.unmatched_frees, info.dropped_records) == (0, 0, 0)
    assert {s: v.live_bytes for s, v in dev.sites().items()} == site_live
    assert [b.alloc_bytes for b in dev.stats().buckets] == buckets


def test_block_table_costs_at_most_40_bytes_a_block(dev: Dev) -> None:
    """Exact mode's blocks (weight 1, no Prev Pointer) take one 24-byte slot
    each in a table kept 61-80% full past 8192 blocks: at most 40 bytes a live
    block, all of the process's tables in, at every size from 20,000 on the
    way to 300,000 blocks; after they are freed again the table is still
    whole (every free pairs)."""
    base = dev.config().kmem_bytes
    n, step = 300_000, 20_000
    a = np.zeros(n, dtype=RECORD_DTYPE)
    a["ptr"] = 0x5555_0000_0000 + np.arange(n, dtype=np.uint64) * 32
    a["size"] = 32
    a["time_ns"] = time.monotonic_ns()
    a["weight"] = 1
    a["op"] = Op.MALLOC
    a["site"] = 1 + np.arange(n, dtype=np.uint32) % 10
    worst = 0.0
    for i in range(0, n, step):
        dev.send_raw(a[i:].ctypes.data, step)
        worst = max(worst, (dev.config().kmem_bytes - base) / (i + step))
    assert dev.info().live_blocks == n
    assert 24 < worst <= 40, f"{worst:.1f} bytes a block"
    f = np.zeros(n, dtype=RECORD_DTYPE)
    f["ptr"] = a["ptr"][::-1]
    f["time_ns"] = a["time_ns"][0] + 1
    f["weight"] = 1
    f["op"] = Op.FREE
    dev.send_raw(f.ctypes.data, n)
    info = dev.info()
    left = (info.live_blocks, info.live_bytes, info.pending_frees, info.dropped_records)
    assert left == (0, 0, 0, 0)
