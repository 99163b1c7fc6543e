"""The kind of growth (pmm.analysis.growthkind) on synthetic series: each kind from the
part that grows, its evidence, and the edges (nothing grows, the heap
unknown, too few samples); the mappings that grew (pmm.kernel.smaps) from real
smaps text; pmd's tracker (pmm.daemon.kindtrack) on SampleRows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pmm.analysis.growthkind import Kind, classify, split_point
from pmm.daemon.kindtrack import Tracker
from pmm.kernel import smaps
from pmm.store import SampleRow

MIB = 1 << 20
N = 120
T = [i * 0.5 for i in range(N)]  # 60 s at 500 ms


def noisy(seed: int, base: float, rate: float, sd: float = 20 * 1024) -> list[int]:
    """base + rate * t under Gaussian noise, as whole bytes."""
    r = np.random.default_rng(seed)
    return [int(base + rate * t + r.normal(0, sd)) for t in T]


FLAT_FILE = noisy(1, 8 * MIB, 0.0)
FLAT_SHMEM = [0] * N


def test_leak_is_the_live_heap_growing() -> None:
    live = noisy(2, 20 * MIB, 200 * 1024)
    anon = [v + 5 * MIB for v in live]  # a constant overhead on top
    c = classify(T, anon, FLAT_FILE, FLAT_SHMEM, live)
    assert c.kind is Kind.LEAK and c.heap_known
    assert "the live heap grows" in c.reason
    assert c.also == ()
    assert c.parts["live"].slope == pytest.approx(200 * 1024, rel=0.1)
    assert c.latest is not None and c.latest.live == live[-1]
    assert c.latest.anon_other == anon[-1] - live[-1]
    assert "pmctl leaks PID" in c.advice


def test_retention_from_the_allocators_free_bytes() -> None:
    live = noisy(3, 20 * MIB, 0.0)
    free = noisy(4, 1 * MIB, 150 * 1024)
    anon = [a + b + 2 * MIB for a, b in zip(live, free, strict=True)]
    c = classify(T, anon, FLAT_FILE, FLAT_SHMEM, live, free, heap_trimmable=7 * MIB,
                 allocator="glibc")
    assert c.kind is Kind.RETENTION
    assert "glibc's free bytes grow" in c.reason
    assert f"glibc holds {free[-1] / MIB:.1f} MiB free" in c.reason
    assert "malloc_trim would return 7.0 MiB" in c.reason
    assert c.heap_free == free[-1] and c.heap_trimmable == 7 * MIB
    assert c.latest is not None and c.latest.heap_free == free[-1]
    assert "malloc_trim" in c.advice and "MALLOC_ARENA_MAX" in c.advice
    assert "dirty_decay_ms" in c.advice


def test_bursts_live_for_a_moment_do_not_hide_retention() -> None:
    """kind_frag's pattern: the heap's top grows; two samples in three catch a
    burst of blocks that fills all of it but a MiB and is freed a moment later
    (the live heap's floor is flat); the allocator's free bytes are what the
    burst leaves. (anon - live)'s minimum is then flat: taken as at the live
    heap's floor, the rest of anon grows with the heap."""
    heap = [2 * MIB + 150 * 1024 * t for t in T]
    burst = [i % 3 != 0 for i in range(N)]
    live = [int(h - MIB) if b else 64 * 1024 for h, b in zip(heap, burst, strict=True)]
    free = [int(h) - v for h, v in zip(heap, live, strict=True)]
    anon = [int(h) + MIB for h in heap]
    c = classify(T, anon, FLAT_FILE, FLAT_SHMEM, live, free, allocator="glibc")
    assert c.kind is Kind.RETENTION, c.reason
    assert "glibc's free bytes grow" in c.reason
    assert c.parts["anon_other"].slope == pytest.approx(150 * 1024, rel=0.1)
    assert c.parts["live"].slope == 0.0
    assert c.also == ()


def test_a_leak_under_request_spikes_is_a_leak_alone() -> None:
    """Requests' blocks live for a moment on top of a leak; the allocator
    keeps the spikes' memory for the next ones: only the live heap grows."""
    r = np.random.default_rng(21)
    leak = noisy(22, 20 * MIB, 100 * 1024)
    spike = [int(r.random() * 5 * MIB) if r.random() < 0.4 else 0 for _ in T]
    live = [a + b for a, b in zip(leak, spike, strict=True)]
    free = [5 * MIB - b for b in spike]
    anon = [a + 5 * MIB + 2 * MIB for a in leak]
    c = classify(T, anon, FLAT_FILE, FLAT_SHMEM, live, free, allocator="glibc")
    assert c.kind is Kind.LEAK, c.reason
    assert c.also == (), c.reason
    assert c.parts["live"].slope == pytest.approx(100 * 1024, rel=0.15)


def test_the_allocators_figures_from_its_first_report_on() -> None:
    """The hook reports the allocator's figures a moment after it starts: the
    first samples lack them, and the rest decide."""
    live = noisy(23, 20 * MIB, 0.0)
    free = noisy(24, 1 * MIB, 150 * 1024)
    anon = [a + b + 2 * MIB for a, b in zip(live, free, strict=True)]
    early: list[int | None] = [None] * 6 + list(free[6:])
    c = classify(T, anon, FLAT_FILE, FLAT_SHMEM, live, early, allocator="glibc")
    assert c.kind is Kind.RETENTION and "glibc's free bytes grow" in c.reason
    half: list[int | None] = [None] * (N // 2) + list(free[N // 2:])
    c = classify(T, anon, FLAT_FILE, FLAT_SHMEM, live, half, allocator="glibc")
    assert "heap_free" not in c.parts and c.kind is Kind.NOT_IN_LIVE


def test_all_the_mappings_that_grew_weigh_and_the_largest_are_kept() -> None:
    """A thread per arena: 40 arenas grew 1 MiB each, 10 thread stacks 2 MiB
    each: the allocator's mappings hold most of it, though the largest few
    are stacks."""
    live = noisy(25, 20 * MIB, 0.0)
    other = noisy(26, 3 * MIB, 300 * 1024)
    anon = [a + b for a, b in zip(live, other, strict=True)]
    grew = sorted([smaps.MapGrowth(f"[thread stack] 0x{i:x}", i << 24, 0, 2 * MIB, False)
                   for i in range(10)] +
                  [smaps.MapGrowth(f"[arena] 0x{i:x}", i << 26, 0, MIB, True)
                   for i in range(10, 50)], key=lambda g: -g.growth)
    c = classify(T, anon, FLAT_FILE, FLAT_SHMEM, live, mappings=grew)
    assert c.kind is Kind.RETENTION, c.reason
    assert len(c.mappings) == 8 and len(c.to_dict()["mappings"]) == 8


def test_outside_the_heap_when_the_allocator_holds_nothing_more() -> None:
    live = noisy(5, 20 * MIB, 0.0)
    free = noisy(6, 1 * MIB, 0.0)
    other = noisy(7, 3 * MIB, 300 * 1024)
    anon = [a + b + c for a, b, c in zip(live, free, other, strict=True)]
    grew = [smaps.MapGrowth("[anon] 0x7f0000000000", 0x7F0000000000, 0, 18 * MIB, False)]
    c = classify(T, anon, FLAT_FILE, FLAT_SHMEM, live, free, mappings=grew)
    assert c.kind is Kind.OUTSIDE_HEAP
    assert "do not grow" in c.reason and "[anon] 0x7f0000000000 +18.0 MiB" in c.reason
    assert c.to_dict()["mappings"] == [{"mapping": "[anon] 0x7f0000000000",
                                        "start": 0x7F0000000000, "rss_before": 0,
                                        "rss_after": 18 * MIB, "growth": 18 * MIB,
                                        "allocator": False}]


@pytest.mark.parametrize(("label", "kind"), [
    ("[heap]", Kind.RETENTION), ("[arena] 0x7f0004000000", Kind.RETENTION),
    ("[anon] 0x7f0000000000", Kind.OUTSIDE_HEAP), ("[stack:77] 0x7f0000000000", Kind.OUTSIDE_HEAP),
])
def test_without_the_allocators_figures_the_mappings_decide(label: str, kind: Kind) -> None:
    live = noisy(8, 20 * MIB, 0.0)
    anon = [v + int(2 * MIB + 300 * 1024 * t) for v, t in zip(live, T, strict=True)]
    grew = [smaps.MapGrowth(label, 0x7F0000000000, MIB, 19 * MIB, smaps.is_allocator(label))]
    c = classify(T, anon, FLAT_FILE, FLAT_SHMEM, live, mappings=grew)
    assert c.kind is kind
    assert f"{label} +18.0 MiB" in c.reason


def test_neither_figures_nor_mappings_say_whose() -> None:
    live = noisy(9, 20 * MIB, 0.0)
    anon = [v + int(2 * MIB + 300 * 1024 * t) for v, t in zip(live, T, strict=True)]
    c = classify(T, anon, FLAT_FILE, FLAT_SHMEM, live)
    assert c.kind is Kind.NOT_IN_LIVE
    assert "--watch" in c.advice


@pytest.mark.parametrize(("part", "kind"), [("file", Kind.FILE), ("shmem", Kind.SHMEM)])
def test_file_and_shmem(part: str, kind: Kind) -> None:
    live = noisy(10, 20 * MIB, 0.0)
    anon = [v + 2 * MIB for v in live]
    growing = noisy(11, 4 * MIB, 250 * 1024)
    file, shmem = (growing, FLAT_SHMEM) if part == "file" else (FLAT_FILE, growing)
    c = classify(T, anon, file, shmem, live)
    assert c.kind is kind
    assert c.parts[part].verdict.value in ("LEAK", "GROWING")


def test_the_fastest_part_names_the_kind_and_the_others_are_said() -> None:
    live = noisy(12, 20 * MIB, 100 * 1024)
    anon = [v + 2 * MIB for v in live]
    file = noisy(13, 4 * MIB, 400 * 1024)
    c = classify(T, anon, file, FLAT_SHMEM, live)
    assert c.kind is Kind.FILE
    assert c.also == (Kind.LEAK,)
    assert c.reason.endswith("also growing: LEAK")


def test_flat_everything_is_none() -> None:
    live = noisy(14, 20 * MIB, 0.0)
    anon = [v + 2 * MIB for v in live]
    c = classify(T, anon, FLAT_FILE, FLAT_SHMEM, live)
    assert c.kind is Kind.NONE
    assert c.reason == "no part grows (the live heap, the rest of anon, file, shmem)"
    assert c.advice == ""


def test_heap_unknown_keeps_anon_and_says_how_to_know() -> None:
    anon = noisy(15, 30 * MIB, 300 * 1024)
    c = classify(T, anon, FLAT_FILE, FLAT_SHMEM, [None] * N)
    assert c.kind is Kind.HEAP_UNKNOWN and not c.heap_known
    assert "live heap is unknown" in c.reason
    assert "pmctl attach PID" in c.advice
    assert set(c.parts) == {"anon", "file", "shmem"}
    assert c.latest is not None and c.latest.live is None and c.latest.anon_other == anon[-1]
    # a single sample without the live heap makes it unknown: no guessing
    live: list[int | None] = [20 * MIB] * N
    live[40] = None
    assert classify(T, anon, FLAT_FILE, FLAT_SHMEM, live).kind is Kind.HEAP_UNKNOWN
    # the module's ring: the live heap known now, not its history
    c = classify(T, anon, FLAT_FILE, FLAT_SHMEM, None, live_now=20 * MIB)
    assert c.kind is Kind.HEAP_UNKNOWN
    assert "these samples lack the live heap's history (20.0 MiB live now)" in c.reason


def test_too_few_samples() -> None:
    c = classify(T[:10], [MIB] * 10, [0] * 10, [0] * 10, [0] * 10)
    assert c.kind is Kind.NONE and c.reason.startswith("not enough data: 10 samples")
    with pytest.raises(ValueError):
        classify(T, [MIB] * 3, [0] * N, [0] * N)


def test_split_point_clips_to_what_the_kernel_counts() -> None:
    # the hook's live figure ran ahead of rss_anon; the allocator's free
    # bytes include pages that are not resident
    assert split_point(10 * MIB, MIB, 0, 12 * MIB, MIB).to_dict() == \
        {"live": 10 * MIB, "heap_free": 0, "anon_other": 0, "file": MIB, "shmem": 0}
    assert split_point(10 * MIB, MIB, 0, 4 * MIB, 9 * MIB).to_dict() == \
        {"live": 4 * MIB, "heap_free": 6 * MIB, "anon_other": 0, "file": MIB, "shmem": 0}
    assert split_point(10 * MIB, 0, 0, None, None).anon_other == 10 * MIB


SMAPS_BEFORE = """\
55d0a0000000-55d0a0021000 rw-p 00000000 00:00 0                          [heap]
Rss:                 132 kB
Anonymous:           132 kB
7f1c00000000-7f1c00021000 rw-p 00000000 00:00 0
Rss:                 132 kB
Anonymous:           132 kB
7f1c00021000-7f1c04000000 ---p 00000000 00:00 0
Rss:                   0 kB
7f1c10000000-7f1c10100000 rw-p 00000000 00:00 0
Rss:                1024 kB
Anonymous:          1024 kB
7f1c20000000-7f1c20001000 ---p 00000000 00:00 0
Rss:                   0 kB
7f1c20001000-7f1c20801000 rw-p 00000000 00:00 0
Rss:                  16 kB
Anonymous:            16 kB
7f1c30000000-7f1c30010000 r-xp 00000000 08:01 1234                       /usr/lib/libc.so.6
Rss:                  64 kB
Anonymous:             0 kB
"""

SMAPS_AFTER = """\
55d0a0000000-55d0a0800000 rw-p 00000000 00:00 0                          [heap]
Rss:                8192 kB
Anonymous:          8192 kB
7f1c00000000-7f1c00400000 rw-p 00000000 00:00 0
Rss:                4096 kB
Anonymous:          4096 kB
7f1c00400000-7f1c04000000 ---p 00000000 00:00 0
Rss:                   0 kB
7f1c0ff00000-7f1c10100000 rw-p 00000000 00:00 0
Rss:                2048 kB
Anonymous:          2048 kB
7f1c20000000-7f1c20001000 ---p 00000000 00:00 0
Rss:                   0 kB
7f1c20001000-7f1c20801000 rw-p 00000000 00:00 0
Rss:                1040 kB
Anonymous:          1040 kB
7f1c30000000-7f1c30010000 r-xp 00000000 08:01 1234                       /usr/lib/libc.so.6
Rss:                  64 kB
Anonymous:             0 kB
"""


def test_smaps_names_what_grew() -> None:
    before, after = smaps.parse(SMAPS_BEFORE), smaps.parse(SMAPS_AFTER)
    assert len(after) == 7 and after[0].path == "[heap]" and after[0].rss == 8192 * 1024
    assert after[6].path == "/usr/lib/libc.so.6" and after[6].anon == 0
    grew = smaps.grown(before, after)
    assert [(g.label, g.growth, g.allocator) for g in grew] == [
        ("[heap]", (8192 - 132) * 1024, True),
        ("[arena] 0x7f1c00000000", (4096 - 132) * 1024, True),
        # merged with a new neighbour below: the same mapping by its end
        ("[anon] 0x7f1c0ff00000", 1024 * 1024, False),
        ("[thread stack] 0x7f1c20001000", (1040 - 16) * 1024, False),
    ]
    named = smaps.name_stacks(grew, {0x7F1C20001000: "[stack:4242]"})
    assert named[3].label == "[stack:4242] 0x7f1c20001000"
    assert smaps.grown(before, after, limit=1, min_bytes=5 * MIB)[0].label == "[heap]"


def test_smaps_of_this_process() -> None:
    import os

    maps = smaps.read(os.getpid())
    assert any(m.path == "[heap]" or m.path.endswith(".so.6") or "python" in m.path
               for m in maps)
    assert all(m.end > m.start for m in maps)
    assert sum(m.rss for m in maps) > 0


def test_pmds_tracker_on_samples() -> None:
    """The split window as pmd fills it: a process whose allocator's free bytes
    grow is RETENTION; its ring keeps the last `size` samples."""
    tr = Tracker(pid=1, size=N)
    live = noisy(16, 20 * MIB, 0.0)
    free = noisy(17, MIB, 200 * 1024)
    for i in range(N + 20):  # 20 more than the ring holds: the oldest go
        j = max(0, i - 20)
        tr.split.append(SampleRow(1, 0, i, 0, 0, rss_anon=live[j] + free[j] + MIB,
                                  rss_file=FLAT_FILE[j], rss_shmem=0, live_bytes=live[j],
                                  heap_free=free[j], heap_trimmable=5 * MIB,
                                  allocator="glibc"))
    assert len(tr.split) == N
    assert tr.split.part("live")[-1] == pytest.approx(live[-1], rel=1e-6)
    c = tr.classify(T)
    assert c is not None and c.kind is Kind.RETENTION
    assert c.allocator == "glibc" and c.heap_trimmable == 5 * MIB
    # out of step with the detector's times, or without the kernel's split: none
    assert tr.classify(T[:-1]) is None
    bare = Tracker(pid=1, size=N)
    for i in range(N):
        bare.split.append(SampleRow(1, 0, i, 0, 0))
    assert bare.classify(T) is None


BIN = Path(__file__).resolve().parents[2] / "tests" / "progs" / "bin"


@pytest.mark.parametrize(("prog", "grew"), [("kind_mmap", "[anon] 0x"), ("kind_frag", "[heap]"),
                                            ("kind_arenas", "[arena] 0x")])
def test_a_watch_names_the_mappings_of_a_bare_program(prog: str, grew: str,
                                                     tmp_path: Path) -> None:
    """`pmctl trend --watch` on the kinds' programs without the hook: the
    heap is unknown, the mappings that grew are named, and the split's anon
    agrees with the program's smaps_rollup once it holds."""
    report = tmp_path / "report"
    p = subprocess.Popen([str(BIN / prog), "60"], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "KIND_REPORT": str(report)})
    try:
        assert p.stdout is not None
        pid = int(p.stdout.readline())
        p.send_signal(signal.SIGUSR2)  # grow
        r = pmctl("trend", str(pid), "--watch", "3s", "--interval", "100ms", "--json")
        assert r.returncode == 10, r.stderr
        d = json.loads(r.stdout)
        ev = d["kind_evidence"]
        assert (d["kind"], ev["heap_known"]) == ("HEAP UNKNOWN", False), d
        assert ev["mappings"][0]["mapping"].startswith(grew), ev["mappings"]
        assert ev["mappings"][0]["growth"] > 512 * 1024
        assert f"mappings that grew: {grew}" in ev["reason"]
        p.send_signal(signal.SIGUSR2)  # hold
        assert p.stdout.readline() == "holding\n"
        r = pmctl("trend", str(pid), "--watch", "500ms", "--interval", "100ms", "--json")
        latest = json.loads(r.stdout)["kind_evidence"]["latest"]
        rollup = dict(line.split() for line in report.read_text().splitlines())
        anon = int(rollup["rollup.Anonymous"])
        # /proc/PID/status's counters are per-thread caches: up to 64 pages each
        threads = 40 if prog == "kind_arenas" else 1
        assert abs(latest["anon_other"] - anon) <= 0.02 * anon + threads * 64 * 4096
        assert latest["live"] is None and latest["heap_free"] is None
    finally:
        p.kill()
        p.wait()


def pmctl(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PMM_DEVICE": "/nonexistent/pmm"}
    return subprocess.run([sys.executable, "-m", "pmctl", *args], capture_output=True,
                          text=True, env=env, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
