"""The records libpmmhook.so sends, checked on the host: the fake-device
build appends every batch to PMM_FAKE_LOG, and the records, put in stamp
order, must describe exactly what the program did."""

from __future__ import annotations

import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from hook_env import clean_env, fake_log_batches

from pmm.kernel import uapi
from pmm.kernel.uapi import Op

TOP = Path(__file__).resolve().parents[2]
FAKE = TOP / "hooklib" / "libpmmhook-fake.so"
PROGS = TOP / "tests" / "progs" / "bin"
THREADS = PROGS / "threads"
TAG_MASK = (1 << uapi.ALLOC_TAG_BITS) - 1
NOT_HEAP = (Op.MMAP, Op.MUNMAP, Op.MREMAP)


@dataclass
class Sent:
    tid: int
    rec: uapi.Record


def sent_records(log: Path) -> list[Sent]:
    return [Sent(tid, r) for tid, recs in fake_log_batches(log) for r in recs]


@pytest.mark.parametrize("clock", ["logical", "mono"])
def test_race_frees_carry_their_allocations_tags(tmp_path: Path, clock: str) -> None:
    """threads race: two threads, one on each cpu, pass the same few
    addresses back and forth through a shared slot, 2500 blocks each. In
    stamp order (the address clock orders the events at each address) every
    free must carry the tag of the last allocation at its address, and every
    one must be tagged: glibc's per-thread arenas are
    64 MiB-aligned, and when the hook's tag table was indexed by the low
    address bits alone, the two arenas' blocks shared slots and about half
    of these frees went untagged (the module then paired 1-3% wrongly)."""
    n = 2500
    log = tmp_path / "records.bin"
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_START="1", PMM_QUIET="1", PMM_CLOCK=clock,
                    PMM_FAKE_LOG=str(log))
    done = subprocess.run([str(THREADS), "race", str(n // 10), "56"], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "threads: ready\n", "")
    # stamps of different addresses may tie (the address clock's, and
    # CLOCK_MONOTONIC's between threads), never two at one address
    sent = sorted((s for s in sent_records(log) if s.rec.op not in NOT_HEAP),
                  key=lambda s: s.rec.time_ns)
    assert len({(s.rec.ptr, s.rec.time_ns) for s in sent}) == len(sent)
    last: dict[int, Sent] = {}  # address -> its last allocation
    crossed = 0
    for s in sent:
        r = s.rec
        if r.op == Op.FREE:
            if not r.ptr:
                continue
            alloc = last.pop(r.ptr)
            assert r.flags == uapi.REC_F_TAGGED, (hex(r.ptr), r.flags)
            assert r.alloc_tag == alloc.rec.time_ns & TAG_MASK
            assert not alloc.rec.flags & uapi.REC_F_FREED
            crossed += s.tid != alloc.tid
        elif r.ptr:
            assert r.op != Op.REALLOC or not r.prev_ptr
            assert r.ptr not in last or last[r.ptr].rec.flags & uapi.REC_F_FREED, hex(r.ptr)
            last[r.ptr] = s
    # a FREED record stands for weight allocations (merged at the flush)
    race: Counter[int] = Counter()
    for s in sent:
        if s.rec.op == Op.MALLOC and s.rec.size == 56:
            race[s.rec.flags] += s.rec.weight
    assert sum(race.values()) == 2 * n
    assert all(s.rec.weight == 1 for s in sent if s.rec.flags != uapi.REC_F_FREED)
    # the race's blocks are all gone: cancelled in their thread's buffer
    # (FREED) or freed by a sent record
    assert not [s for s in last.values() if s.rec.size == 56 and not s.rec.flags]
    # the threads did race: a tenth of the frees at least crossed
    assert crossed >= n // 5, crossed


def test_frees_of_other_threads_blocks_bound_a_batch(tmp_path: Path) -> None:
    """threads cross: thread A allocates 5000 blocks and holds their records;
    thread B frees them all. A buffer holds 8 batches of records, but one
    that holds MAX_BATCH / 2 frees of other threads' blocks is sent at once:
    the module keeps such frees pending until their allocations arrive (and
    ping-pong piles allocations up at one address), both bounded at
    MAX_BATCH. So B sends 2048, 2048 and 904 frees, each tagged with its
    block's allocation, and A its 5000 allocations."""
    n, half = 5000, uapi.MAX_BATCH // 2
    log = tmp_path / "records.bin"
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_START="1", PMM_QUIET="1",
                    PMM_FAKE_LOG=str(log))
    done = subprocess.run([str(THREADS), "cross", str(n), "24"], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    batches = fake_log_batches(log)
    allocs = {r.ptr: r for _, recs in batches for r in recs
              if r.op == Op.MALLOC and r.size == 24}
    assert len(allocs) == n
    frees = [[r for r in recs if r.op == Op.FREE and r.ptr in allocs] for _, recs in batches]
    assert [len(f) for f in frees if f] == [half, half, n - 2 * half]
    for r in (r for f in frees for r in f):
        assert (r.flags, r.alloc_tag) == (uapi.REC_F_TAGGED,
                                          allocs[r.ptr].time_ns & TAG_MASK)


BUDGET = PROGS / "budget"
HUGE = [2**64 - 1, 2**63, 2**63 + 4096, 2**64 - 4096]


@pytest.mark.parametrize("mode", ["exact", "exact, general path", "unmonitored", "sampled"])
def test_malloc_budget_after_huge_and_zero_sizes(tmp_path: Path, mode: str) -> None:
    """malloc's entry point takes each size from a per-thread budget that
    exact mode keeps spent. budget mallocs, in each of 32 rounds, one size
    of 2^63 or more (they fail), ten blocks of 40 bytes and one of 0, and
    frees them: exact mode must record every one, the failures as FAILED.
    A signed budget, or one that a size of 0 leaves as it is, lets blocks
    after such a size pass unrecorded."""
    log = tmp_path / "records.bin"
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_START="1", PMM_QUIET="1",
                    PMM_FAKE_LOG=str(log))
    if mode == "unmonitored":
        env["PMM_FAKE_UNMONITORED"] = "1"
    elif mode == "sampled":
        env["PMM_SAMPLE"] = "64"
    elif mode == "exact, general path":
        env["PMM_FASTPATH"] = "0"
    done = subprocess.run([str(BUDGET), "32"], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    sent = [s.rec for s in sent_records(log)] if log.exists() else []
    if mode == "unmonitored":
        assert sent == []
        return
    mallocs: Counter[tuple[int, int]] = Counter()
    for r in sent:
        if r.op == Op.MALLOC:
            mallocs[r.size, r.flags & uapi.REC_F_FAILED] += r.weight
    if mode == "sampled":
        # one sample per 64 bytes on average: the 40-byte blocks are
        # sampled (weights are 1/p, rounded at random: 320 in all on
        # average, standard deviation 20), the failures and the empty
        # blocks never: a failure that took its size from the sample gap
        # left sampling stopped for 2^63 bytes
        assert set(mallocs) == {(40, 0)}
        assert 200 <= mallocs[40, 0] <= 440, mallocs
        return
    failed = Counter({(size, uapi.REC_F_FAILED): 8 for size in HUGE})
    assert mallocs == failed + Counter({(40, 0): 320, (0, 0): 32})
    # every block freed: by a FREE record, or cancelled in the buffer
    assert sum(r.weight for r in sent if r.op == Op.FREE) + sum(
        r.weight for r in sent if r.op == Op.MALLOC and r.flags & uapi.REC_F_FREED) == 352


MALLOC_BENCH = TOP / "bench" / "bin" / "malloc_bench"


def malloc_bench_sizes(rounds: int) -> Counter[int]:
    """The sizes malloc_bench's first thread allocates in rounds rounds
    (its xorshift, seeded as the program seeds it)."""
    x, m, sizes = 88172645463325252 ^ 1, (1 << 64) - 1, Counter[int]()
    for _ in range(rounds):
        x ^= (x << 13) & m
        x ^= x >> 7
        x ^= (x << 17) & m
        sizes[16 + (x >> 32) % 512] += 1
    return sizes


@pytest.mark.parametrize("fastpath", ["1", "0"])
def test_exact_fast_path_records_what_the_general_path_does(tmp_path: Path,
                                                             fastpath: str) -> None:
    """malloc_bench, 1 thread, 30000 rounds over a window of 300 blocks, in
    buffers of 1024 records: its malloc site must show exactly the sizes
    the program allocated (weights summed over plain and FREED records),
    and every block freed, whether exact mode's fast paths ran (the
    default) or PMM_FASTPATH=0 kept every call on the general path; most
    blocks die in the buffer (FREED), and the frees that leave it are all
    tagged with their allocation's stamp."""
    rounds, window = 30000, 300
    log = tmp_path / "records.bin"
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_START="1", PMM_QUIET="1", PMM_BUFFER="1024",
                    PMM_FASTPATH=fastpath, PMM_FAKE_LOG=str(log))
    done = subprocess.run([str(MALLOC_BENCH), "-t", "1", "-n", str(rounds), "-w", str(window)],
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    sent = [s.rec for s in sent_records(log)]
    by_site: dict[int, Counter[int]] = {}
    for r in sent:
        if r.op == Op.MALLOC and r.ptr:
            by_site.setdefault(r.site, Counter())[r.size] += r.weight
    site = max(by_site, key=lambda k: by_site[k].total())
    assert by_site[site] == malloc_bench_sizes(rounds)
    allocs = {(r.ptr, r.time_ns & TAG_MASK) for r in sent
              if r.op == Op.MALLOC and r.site == site and not r.flags & uapi.REC_F_FREED}
    freed = sum(r.weight for r in sent
                if r.op == Op.MALLOC and r.site == site and r.flags & uapi.REC_F_FREED)
    frees = [r for r in sent if r.op == Op.FREE and (r.ptr, r.alloc_tag) in allocs]
    assert all(r.flags == uapi.REC_F_TAGGED for r in frees)
    assert freed + len(frees) == rounds
    assert freed > rounds // 2, freed


GROW = PROGS / "grow"


@pytest.mark.parametrize("fastpath", ["1", "0"])
def test_blocks_grown_by_realloc_cancel_step_by_step(tmp_path: Path, fastpath: str) -> None:
    """grow: 200 blocks malloc'd (777 bytes), realloc'd to 1555 and 2333 and
    freed, then one grown to 1555 and kept. Each step's old block is still
    in the thread's buffer when the realloc comes: its allocation is
    cancelled (FREED) and the REALLOC says so (PREV_FREED), keeping prev_ptr
    for /proc's Prev Pointer, so none of these frees reaches the module's
    tables. Merged, the whole run is a handful of records: all counts
    exact, the kept block a REALLOC of 1555 bytes whose prev_ptr is the
    malloc'd block, and no FREE or TAGGED record of any of them."""
    rounds = 200
    log = tmp_path / "records.bin"
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_START="1", PMM_QUIET="1",
                    PMM_FASTPATH=fastpath, PMM_FAKE_LOG=str(log))
    done = subprocess.run([str(GROW), str(rounds)], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    first, kept = (int(x, 16) for x in done.stdout.split())
    sent = [s.rec for s in sent_records(log) if s.rec.size in (777, 1555, 2333)]
    freed, prev_freed = uapi.REC_F_FREED, uapi.REC_F_PREV_FREED
    weights: Counter[tuple[int, int, int]] = Counter()
    for r in sent:
        weights[r.op, r.size, r.flags] += r.weight
        assert r.op in (Op.MALLOC, Op.REALLOC)
        assert not r.flags & uapi.REC_F_TAGGED
        assert (r.prev_ptr != 0) == (r.op == Op.REALLOC and r.flags & prev_freed != 0)
    assert weights == Counter({
        (Op.MALLOC, 777, freed): rounds + 1,
        (Op.REALLOC, 1555, freed | prev_freed): rounds,
        (Op.REALLOC, 2333, freed | prev_freed): rounds,
        (Op.REALLOC, 1555, prev_freed): 1,
    })
    live = [r for r in sent if not r.flags & freed]
    assert [(r.ptr, r.prev_ptr) for r in live] == [(kept, first)]
    # merged: one record per site, op, size and flags (the loop's malloc and
    # realloc to 1555 are other call sites than the kept block's)
    assert len(sent) == 5


REALLOCS = PROGS / "reallocs"


def kernel_accepts(r: uapi.Record) -> bool:
    """The module's rules for one record (kmod/pairing.c,
    pmm_check_record_rules), which every record the hook sends must keep."""
    moves = r.op in (Op.REALLOC, Op.MREMAP)
    frees = r.op in (Op.FREE, Op.MUNMAP)
    f = r.flags
    if r.op == Op.NONE or r.op >= len(Op) or f & ~uapi.REC_F_ALL or not r.weight:
        return False
    frees_prev = r.op == Op.FREE or (r.op == Op.REALLOC and r.prev_ptr != 0)
    if f & uapi.REC_F_TAGGED:
        if not frees_prev or r.alloc_tag >> uapi.ALLOC_TAG_BITS:
            return False
    elif r.alloc_tag:
        return False
    if frees and f & uapi.REC_F_FAILED:
        return False
    if f & uapi.REC_F_FREED and (frees or r.op in NOT_HEAP or not r.ptr
                                 or f & uapi.REC_F_FAILED):
        return False
    if not moves and r.prev_ptr:
        return False
    if f & uapi.REC_F_PREV_FREED and (
            r.op != Op.REALLOC or not r.ptr or not r.prev_ptr
            or f & (uapi.REC_F_TAGGED | uapi.REC_F_FAILED)):
        return False
    return not (f & uapi.REC_F_OLDER and (
        not frees_prev or (r.op == Op.FREE and not r.ptr)
        or f & (uapi.REC_F_TAGGED | uapi.REC_F_PREV_FREED | uapi.REC_F_FAILED)))


def replay(sent: list[uapi.Record], sizes: set[int]) -> dict[int, uapi.Record]:
    """One thread's heap records in order, applied as the module pairs
    them: the live blocks of these sizes left at the end. Each record keeps
    the module's rules; a free of such a block, or a realloc's of its old
    one, finds it (the tag, if it carries one, that of its allocation);
    PREV_FREED names a block that is not live (its allocation was sent
    FREED), OLDER one that no record allocated."""
    live: dict[int, uapi.Record] = {}
    for r in sent:
        assert kernel_accepts(r), r
        if r.op in NOT_HEAP:
            continue
        freed = r.ptr if r.op == Op.FREE else r.prev_ptr if r.op == Op.REALLOC else 0
        if not freed:
            pass
        elif r.flags & (uapi.REC_F_PREV_FREED | uapi.REC_F_OLDER):
            assert freed not in live, hex(freed)
        elif freed in live:
            block = live.pop(freed)
            assert not r.flags & uapi.REC_F_TAGGED or \
                r.alloc_tag == block.time_ns & TAG_MASK, hex(freed)
        else:
            assert r.op == Op.FREE, (hex(freed), r.flags)  # not one of these blocks
        if r.op != Op.FREE and r.ptr and r.size in sizes and not r.flags & uapi.REC_F_FREED:
            assert r.ptr not in live, hex(r.ptr)
            live[r.ptr] = r
    return live


@pytest.mark.parametrize("fastpath", ["1", "0"])
def test_reallocs_cases_records(tmp_path: Path, fastpath: str) -> None:
    """reallocs cases: realloc grown in place, moved, of NULL, to 0 bytes
    and failing, each with its old block's allocation still in the thread's
    buffer and sent before (a flush), from call sites new and then known
    (exact's fast path runs for those). Whether it ran (the default) or
    PMM_FASTPATH=0 kept every realloc on the general path, the records are
    the same: one REALLOC a call, prev_ptr its old block, whose free it
    carries as PREV_FREED (its allocation, still in the buffer, flagged
    FREED) or TAGGED with that allocation's stamp; realloc(NULL, n) a
    REALLOC without prev_ptr; realloc(p, 0) a free (cancelled in the
    buffer, or a tagged FREE); a failure a REALLOC FAILED that leaves p
    live. Every record keeps the module's rules, every free finds its block
    and at the end none is left."""
    log = tmp_path / "records.bin"
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_START="1", PMM_QUIET="1",
                    PMM_FASTPATH=fastpath, PMM_FAKE_LOG=str(log))
    done = subprocess.run([str(REALLOCS), "cases"], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.endswith("\nreallocs: ready\n")
    case = {name: (int(old, 16), int(new, 16))
            for name, old, new in (line.split() for line in done.stdout.splitlines()[:-1])}
    sent = [s.rec for s in sent_records(log)]
    sizes = {size + k for size in (8000, 6000, 4000, 500, 300, 100) for k in range(4)}
    assert replay(sent, sizes) == {}
    recs = [r for r in sent if r.size in sizes or r.op == Op.REALLOC]
    weights: Counter[tuple[int, int, int]] = Counter()
    for r in recs:
        weights[r.op, r.size, r.flags] += r.weight
    freed, prev_freed, tagged = uapi.REC_F_FREED, uapi.REC_F_PREV_FREED, uapi.REC_F_TAGGED
    want: Counter[tuple[int, int, int]] = Counter()
    for k in range(4):
        buffered = not k & 1
        want.update([
            # inplace: malloc(8000) shrunk to 4000 (which cancels it), grown
            # to 6000; the shrink's REALLOC cancelled by the growth, or sent
            (Op.MALLOC, 8000 + k, freed),
            (Op.REALLOC, 4000 + k, freed | prev_freed if buffered else prev_freed),
            (Op.REALLOC, 6000 + k, prev_freed if buffered else tagged),
            # move: the moved block (buffered: cancelled), the live one after it
            (Op.MALLOC, 4000 + k, freed if buffered else 0),
            (Op.MALLOC, 4000 + k, 0),
            (Op.REALLOC, 8000 + k, prev_freed if buffered else tagged),
            (Op.REALLOC, 300 + k, 0),                 # realloc(NULL, 300)
            (Op.MALLOC, 500 + k, freed if buffered else 0),  # realloc(p, 0)
            (Op.MALLOC, 100 + k, 0),                  # fail: p stays live
            (Op.REALLOC, 1 << 62, uapi.REC_F_FAILED),
        ])
    assert weights == want

    def one(op: int, size: int, ptr: int) -> uapi.Record:
        (r,) = [r for r in recs if r.op == op and r.size == size and r.ptr == ptr]
        return r

    for k in range(4):
        how = f"{'sent' if k & 1 else 'buffered'}-{k}"
        old, new = case[f"inplace-{how}"]
        grown = one(Op.REALLOC, 6000 + k, new)
        assert old == new == grown.prev_ptr
        if k & 1:  # the growth frees the block of the shrink's REALLOC, sent
            assert grown.alloc_tag == one(Op.REALLOC, 4000 + k, old).time_ns & TAG_MASK
        old, new = case[f"move-{how}"]
        moved = one(Op.REALLOC, 8000 + k, new)
        assert old != new and moved.prev_ptr == old
        if k & 1:
            assert moved.alloc_tag == one(Op.MALLOC, 4000 + k, old).time_ns & TAG_MASK
        assert one(Op.REALLOC, 300 + k, case[f"null-{how}"][1]).prev_ptr == 0
        # realloc(p, 0): sent, a FREE tagged with p's allocation
        old, _ = case[f"zero-{how}"]
        alloc = one(Op.MALLOC, 500 + k, old)
        frees = [r for r in sent if r.op == Op.FREE and r.ptr == old
                 and r.time_ns > alloc.time_ns]
        if k & 1:
            assert (frees[0].flags, frees[0].alloc_tag) == (tagged, alloc.time_ns & TAG_MASK)
        # the failure: after p's allocation, and p's free comes at the end
        alloc = one(Op.MALLOC, 100 + k, case[f"fail-{how}"][0])
        assert [r.time_ns > alloc.time_ns for r in recs if r.flags & uapi.REC_F_FAILED] \
            == [j >= k for j in range(4)]


@pytest.mark.parametrize("fastpath", ["1", "0"])
def test_moved_realloc_whose_old_address_is_taken_before_its_record(
        tmp_path: Path, fastpath: str) -> None:
    """reallocs cases under libreuse.so (the realloc the hook calls): when a
    realloc moved its block, the old block's size is allocated again before
    the hook's record is written, as another thread could, and glibc hands
    back the old address; that allocation is recorded alone and writes the
    address's tag slot. Each moved realloc's record must still free the old
    block itself: PREV_FREED (its allocation still in the buffer, flagged
    FREED) or TAGGED with that allocation's stamp, never the newer block's.
    The general path read the old block's slot after libc's call and carried
    the reuse's tag (the module would then free the new block and keep the
    old one); exact's fast path read it before."""
    log = tmp_path / "records.bin"
    preload = f"{FAKE} {PROGS / 'libreuse.so'}"
    env = clean_env(LD_PRELOAD=preload, PMM_START="1", PMM_QUIET="1",
                    PMM_FASTPATH=fastpath, PMM_FAKE_LOG=str(log))
    done = subprocess.run([str(REALLOCS), "cases"], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    case = {name: (int(old, 16), int(new, 16))
            for name, old, new in (line.split() for line in done.stdout.splitlines()[:-1])}
    sent = [s.rec for s in sent_records(log)]
    for k in range(4):
        old, new = case[f"move-{'sent' if k & 1 else 'buffered'}-{k}"]
        (alloc,) = [r for r in sent if r.op == Op.MALLOC and r.size == 4000 + k
                    and r.ptr == old]
        (moved,) = [r for r in sent if r.op == Op.REALLOC and r.size == 8000 + k
                    and r.ptr == new]
        # the precondition: libreuse.so allocated the old address again
        # (4000 + k bytes' chunk: 4008 usable), a record alone
        reuse = [r for r in sent if r.op == Op.MALLOC and r.ptr == old and r.size == 4008]
        assert len(reuse) == 1 and reuse[0].time_ns > alloc.time_ns, (k, reuse)
        assert moved.prev_ptr == old
        if k & 1:
            assert (moved.flags, moved.alloc_tag) == (uapi.REC_F_TAGGED,
                                                      alloc.time_ns & TAG_MASK), k
        else:
            assert moved.flags == uapi.REC_F_PREV_FREED and alloc.flags == uapi.REC_F_FREED, k


@pytest.mark.parametrize("fastpath", ["1", "0"])
def test_realloc_of_blocks_older_than_monitoring(tmp_path: Path, fastpath: str) -> None:
    """reallocs older: the fake module refuses the first batch (monitoring
    stops), 200 blocks are allocated unmonitored, and once the hook has
    seen the start again each is grown and freed. Each growth is one
    REALLOC flagged OLDER (its old block is no block of the module's: no
    lookup, no pending free), prev_ptr the old block; its new block dies
    in the buffer (FREED)."""
    n = 200
    log = tmp_path / "records.bin"
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_START="1", PMM_QUIET="1", PMM_FAKE_STOP_AT="1",
                    PMM_FASTPATH=fastpath, PMM_FAKE_LOG=str(log))
    done = subprocess.run([str(REALLOCS), "older", str(n)], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    moved = [(int(old, 16), int(new, 16))
             for _, old, new in (line.split() for line in done.stdout.splitlines()[:-1])]
    assert len(moved) == n
    sent = [s.rec for s in sent_records(log)]
    assert replay(sent, {64, 5000}) == {}
    grown = [r for r in sent if r.op == Op.REALLOC and r.size == 5000]
    assert [(r.prev_ptr, r.ptr) for r in grown] == moved
    assert {r.flags for r in grown} == {uapi.REC_F_OLDER | uapi.REC_F_FREED}
    assert not [r for r in sent if r.size == 64]


CHAIN_SIZES = set(range(100, 4001, 100))


@pytest.mark.parametrize("mode", ["exact", "exact-general", "sampled"])
def test_strings_grown_by_realloc(tmp_path: Path, mode: str) -> None:
    """reallocs chain: 300 strings grown from NULL by 40 reallocs of 100
    bytes more each, the last 16 kept. Exact (fast path or PMM_FASTPATH=0):
    each size's REALLOC weights sum to 300, and the kept strings are the
    blocks left. Sampled (PMM_SAMPLE=4096: most reallocs take the sampled
    fast path, which records nothing): a realloc of a sampled block frees
    it (a REALLOC with prev_ptr, or a FREE), the weighted bytes estimate
    what the program asked within 10%, and the blocks left are kept
    strings. Every record keeps the module's rules and every free finds its
    block."""
    n = 300
    log = tmp_path / "records.bin"
    extra = {"exact": {}, "exact-general": {"PMM_FASTPATH": "0"},
             "sampled": {"PMM_SAMPLE": "4096"}}[mode]
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_START="1", PMM_QUIET="1",
                    PMM_FAKE_LOG=str(log), **extra)
    done = subprocess.run([str(REALLOCS), "chain", str(n)], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    lines = [line.split() for line in done.stdout.splitlines()[:-1]]
    kept = {int(x, 16) for what, x in lines if what == "kept"}
    (asked,) = [int(x) for what, x in lines if what == "bytes"]
    assert len(kept) == 16 and asked == n * 100 * 40 * 41 // 2
    sent = [s.rec for s in sent_records(log)]
    live = replay(sent, CHAIN_SIZES)
    grown = [r for r in sent if r.op == Op.REALLOC and r.size in CHAIN_SIZES]
    if mode != "sampled":
        assert set(live) == kept
        by_size: Counter[int] = Counter()
        for r in grown:
            by_size[r.size] += r.weight
        assert by_size == Counter({size: n for size in CHAIN_SIZES})
        return
    assert set(live) <= kept
    estimate = sum(r.weight * r.size for r in grown)
    assert abs(estimate - asked) < asked / 10, (estimate, asked)
    # sampled blocks grown again: their frees go with the REALLOC, or alone
    assert [r for r in grown if r.prev_ptr]
    assert len(grown) < n * 40 / 2
