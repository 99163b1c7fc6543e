"""malloc and free from a signal handler that interrupts the hook, on the
host with the fake-device build: no deadlock, and every block the handler
allocates or frees is recorded once, none lost, none twice. A handler that
finds the hook's guard held records its calls alone (one PMM_RECORD_LOG
each) without touching the thread's buffer, site cache, clock or sampling
state."""

from __future__ import annotations

import math
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from hook_env import NR_RECORD_LOG, FakeCall, clean_env, fake_log_calls

from pmm.kernel import uapi
from pmm.kernel.uapi import Op

TOP = Path(__file__).resolve().parents[2]
FAKE = TOP / "hooklib" / "libpmmhook-fake.so"
PROGS = TOP / "tests" / "progs" / "bin"
SIGSTORM = PROGS / "sigstorm"
INHOOK = PROGS / "inhook"
TAG_MASK = (1 << uapi.ALLOC_TAG_BITS) - 1
MAIN, HANDLER = 40, 200  # sigstorm's block sizes: the main loop's, the handler's

MODES: dict[str, dict[str, str]] = {
    "exact": {},
    "exact, general path": {"PMM_FASTPATH": "0"},
    # one sample per byte: every block sampled, with weight 1
    "sampled, every block": {"PMM_SAMPLE": "1"},
    "sampled, every block, general path": {"PMM_SAMPLE": "1", "PMM_FASTPATH": "0"},
}


def storm(log: Path, alloc: str, **env: str) -> tuple[int, int, list[uapi.Record], int]:
    """sigstorm for 300 ms of its cpu time, its main loop allocating with alloc (malloc or
    calloc): its main loop's blocks, its handler's, the records sent
    (accepted) and how many batches held one record from the main thread
    (sent alone, by a handler that interrupted the hook)."""
    e = clean_env(LD_PRELOAD=str(FAKE), PMM_QUIET="1", PMM_FAKE_LOG=str(log), **env)
    r = subprocess.run([str(SIGSTORM), "300", alloc], env=e, capture_output=True, text=True,
                       timeout=60)
    assert (r.returncode, r.stderr) == (0, "")
    _, rounds, _, handled = r.stdout.split()
    calls = [c for c in fake_log_calls(log) if c.nr == NR_RECORD_LOG]
    assert all(c.result == 0 for c in calls)
    alone = sum(1 for c in calls if len(c.records) == 1 and c.tid == c.pid)
    return int(rounds), int(handled), [r for c in calls for r in c.records], alone


def tally(records: list[uapi.Record]) -> tuple[dict[int, Counter[str]], Counter[int]]:
    """By block size: the weighted allocations, and their frees (cancelled in
    the buffer, FREED, or sent, each paired with its allocation: in stamp
    order, the last allocation at its address, whose tag it carries when
    tagged); and, by size, the weight of the blocks never freed."""
    counts: dict[int, Counter[str]] = {}
    live: dict[int, uapi.Record] = {}
    for r in sorted(records, key=lambda r: r.time_ns):
        if r.op in (Op.MALLOC, Op.CALLOC):
            c = counts.setdefault(r.size, Counter())
            c["allocs"] += r.weight
            if r.flags & uapi.REC_F_FREED:
                c["frees"] += r.weight
            else:
                assert r.ptr not in live, hex(r.ptr)  # a record twice, or a free lost
                live[r.ptr] = r
        elif r.op == Op.FREE and r.ptr:
            alloc = live.pop(r.ptr)  # KeyError: an allocation lost
            if r.flags & uapi.REC_F_TAGGED:
                assert r.alloc_tag == alloc.time_ns & TAG_MASK
            counts[alloc.size]["frees"] += alloc.weight
    left: Counter[int] = Counter()
    for r in live.values():
        left[r.size] += r.weight
    return counts, left


def sites_by_size(records: list[uapi.Record]) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for r in records:
        if r.op in (Op.MALLOC, Op.CALLOC):
            out.setdefault(r.size, set()).add(r.site)
    return out


@pytest.mark.parametrize("alloc", ["malloc", "calloc"])
@pytest.mark.parametrize("mode", MODES)
def test_handler_blocks_recorded_once(tmp_path: Path, mode: str, alloc: str) -> None:
    """sigstorm: 300 ms (cpu time) of malloc(40) (or calloc(1, 40))/free at one site
    under SIGALRM every 20 us, whose handler frees its previous block and
    allocates one of 200 bytes at another site. The handler's site has exactly as many
    allocations as the handler made (the program counts them) and one free
    fewer (its last block stays), the main loop's site exactly its rounds,
    allocated and freed; every free pairs with its allocation, every
    allocation is sent once. Many handler calls found the guard held and
    sent their records alone. The hook used to pass such calls straight to
    libc: their allocations were lost, and their frees unmatched."""
    rounds, handled, records, alone = storm(tmp_path / "calls.bin", alloc, **MODES[mode])
    counts, left = tally(records)
    sites = sites_by_size(records)
    assert len(sites[MAIN]) == len(sites[HANDLER]) == 1 and sites[MAIN] != sites[HANDLER]
    assert 0 not in sites[MAIN] | sites[HANDLER]
    assert counts[MAIN] == Counter(allocs=rounds, frees=rounds)
    assert counts[HANDLER] == Counter(allocs=handled, frees=handled - 1)
    assert left[HANDLER] == 1 and MAIN not in left
    assert rounds > 256 and handled > 1000
    assert alone > 100, alone


@pytest.mark.parametrize("unwind", ["eh", "auto"])
def test_handler_blocks_recorded_with_deep_sites(tmp_path: Path, unwind: str) -> None:
    """sigstorm with PMM_DEPTH=8: each record's site is walked by libgcc's
    unwinder (eh; auto: sigstorm has no frame pointers, so the frame-pointer
    walk stops at once and libgcc's takes over), most of the hook's time.
    Signals are blocked while the hook runs others' code, so no handler's
    call lands there, where it would be taken for the unwinder's own: it
    runs when they are unblocked, still in the hook, and is recorded alone.
    Every block of both sites is counted, every free paired (sites are not
    compared: a handler's record made alone walks frame pointers only).
    The hook used to pass the handler's calls that landed in the unwinder
    straight to libc: with eh, 797 of 7565 handler blocks were recorded."""
    rounds, handled, records, alone = storm(tmp_path / "calls.bin", "malloc",
                                            PMM_DEPTH="8", PMM_UNWIND=unwind)
    counts, left = tally(records)
    assert counts[MAIN] == Counter(allocs=rounds, frees=rounds)
    assert counts[HANDLER] == Counter(allocs=handled, frees=handled - 1)
    assert left[HANDLER] == 1 and MAIN not in left
    assert rounds > 256 and handled > 1000
    assert alone > 100, alone


def test_handler_blocks_sampled_without_bias(tmp_path: Path) -> None:
    """The same in sampled mode, one sample per 400 bytes on average, the
    main loop's blocks from calloc, which takes the hook's guard on every
    call: the handler's blocks, whether decided by the thread's sample gap
    or, when the handler interrupted the hook, by a draw of their own
    (chance p = 1 - exp(-200/400), weight 1/p), sum to the handler's count
    within five standard deviations (about 5%), as the main loop's do to
    its rounds; each sampled block's free is sent. When the budget stayed
    where malloc's entry point takes from it while the guard was held, most
    of the handler's calls in the hook passed on it unsampled and only the
    others drew: a quarter of its blocks went uncounted."""
    sample = 400
    rounds, handled, records, alone = storm(tmp_path / "calls.bin", "calloc",
                                            PMM_SAMPLE=str(sample))
    counts, left = tally(records)
    assert alone > 100, alone
    for size, n in ((MAIN, rounds), (HANDLER, handled)):
        p = -math.expm1(-size / sample)
        sd = math.sqrt(n * (1 - p) / p)
        assert abs(counts[size]["allocs"] - n) < 5 * sd, (size, counts[size], n, sd)
    assert counts[MAIN]["frees"] == counts[MAIN]["allocs"]
    assert counts[HANDLER]["frees"] == counts[HANDLER]["allocs"] - left[HANDLER]
    # at most the handler's last block is left (if it was sampled)
    assert left[HANDLER] <= math.ceil(1 / -math.expm1(-HANDLER / sample)) and MAIN not in left


def inhook(log: Path, mode: str, **env: str) -> tuple[str, list[FakeCall]]:
    """inhook MODE under the fake device, with buffers of 512 records: its
    output and the hook's calls."""
    e = clean_env(LD_PRELOAD=str(FAKE), PMM_QUIET="1", PMM_BUFFER="512",
                  PMM_FAKE_LOG=str(log), **env)
    r = subprocess.run([str(INHOOK), mode], env=e, capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr) == (0, "")
    return r.stdout, fake_log_calls(log)


@pytest.mark.parametrize("monitoring", MODES)
@pytest.mark.parametrize("mode", ["jump", "jump-alt", "jump-thread"])
def test_handler_that_longjmps_out_of_the_hook(tmp_path: Path, mode: str,
                                               monitoring: str) -> None:
    """inhook: the fake device raises SIGUSR1 while the hook sends the
    first batch (the guard held); the handler allocates a block of 200
    bytes, which is recorded alone, and leaves the hook with siglongjmp,
    which never drops the guard. The program then allocates and frees 5000
    blocks of 56 bytes from where it allocated before: its first call finds
    the guard held, called from above the stack pointer that the guard
    holds, not on the alternate stack (jump-alt: the handler ran on one
    below the thread's stack; jump-thread: above it), and takes the guard
    back; every
    block then goes through the thread's buffer, and no record but the
    handler's is sent alone. The hook used to keep the guard held for good:
    every later call was taken for a handler's, each record sent alone in
    an ioctl of its own (10000 of them here; 1M pairs took 300 times as
    long)."""
    out, calls = inhook(tmp_path / "calls.bin", mode, PMM_FAKE_RAISE="batch:1",
                        **MODES[monitoring])
    assert out == "jumped\n"
    logs = [c for c in calls if c.nr == NR_RECORD_LOG]
    assert all(c.result == 0 for c in logs)
    alone = [c.records for c in logs if len(c.records) == 1]
    assert [(r.op, r.size) for recs in alone for r in recs] == [(Op.MALLOC, HANDLER)]
    counts, left = tally([r for c in logs for r in c.records])
    assert counts[56] == Counter(allocs=5000, frees=5000)
    assert left[HANDLER] == 1 and 56 not in left
    assert len(logs) < 30, len(logs)


def test_allocators_own_mappings_pass(tmp_path: Path) -> None:
    """libnextmalloc.so, preloaded after the hook, is the malloc the hook
    calls; every 64th call it maps and unmaps a page of its own through the
    PLT, one frame below the hook, as jemalloc maps its memory: those calls
    find the guard held, from below the stack pointer it holds, and pass
    unrecorded; sites's three sites get 1, 2, 3 as ever. When a guard was
    taken for stale from the hook's own stack pointer, less a slack, those
    calls were taken for the program's after a longjmp (29390 mapping
    records in 100 ms)."""
    log = tmp_path / "calls.bin"
    preload = f"{FAKE} {PROGS / 'libnextmalloc.so'}"
    e = clean_env(LD_PRELOAD=preload, PMM_QUIET="1", PMM_FAKE_LOG=str(log))
    r = subprocess.run([str(PROGS / "sites"), "100"], env=e,
                       capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr) == (0, "")
    records = [rec for c in fake_log_calls(log) if c.nr == NR_RECORD_LOG
               for rec in c.records]
    assert not [rec for rec in records if rec.op in (Op.MMAP, Op.MUNMAP, Op.MREMAP)]
    sites = sites_by_size(records)
    assert {size: sites[size] for size in (40, 72, 136)} == {40: {1}, 72: {2}, 136: {3}}
    counts, _ = tally(records)
    assert counts[40]["allocs"] > 64 * 3


def test_handler_unmaps_a_recorded_mapping(tmp_path: Path) -> None:
    """inhook maps: main maps two anonymous regions of 64 KiB (recorded);
    the fake device raises SIGUSR1 while the hook sends the first batch,
    and the handler unmaps the first region and mremaps the second to 128
    KiB; main unmaps that at the end. Each of the handler's two calls finds
    the guard held and is recorded alone; in stamp order (the mappings'
    clock is process-wide) the five records describe the regions' lives.
    The hook used to pass a mapping call with the guard held: neither was
    recorded, the first region stayed live in the module for good, and
    main's unmapping of the moved one was not recorded either."""
    out, calls = inhook(tmp_path / "calls.bin", "maps", PMM_FAKE_RAISE="batch:1")
    first, second, moved = (int(x, 16) for x in out.split()[1:])
    maps = sorted((r.time_ns, r.op, r.ptr, r.prev_ptr, r.size, len(c.records))
                  for c in calls if c.nr == NR_RECORD_LOG and c.result == 0
                  for r in c.records if r.op in (Op.MMAP, Op.MUNMAP, Op.MREMAP))
    region = 64 * 1024
    assert [m[1:5] for m in maps] == [
        (Op.MMAP, first, 0, region),
        (Op.MMAP, second, 0, region),
        (Op.MUNMAP, first, 0, region),
        (Op.MREMAP, moved, second, 2 * region),
        (Op.MUNMAP, moved, 0, 2 * region),
    ]
    assert [m[5] == 1 for m in maps] == [False, False, True, True, False]
