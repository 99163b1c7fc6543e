"""The allocator's report the hook sends (PMM_HEAP_REPORT), checked on the
host with the fake-device build: its figures are the program's own
mallinfo2 (or jemalloc's stats) at the same instant, and it is sent at most
once per sampling interval."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import pytest
from hook_env import NR_HEAP_REPORT, NR_RECORD_LOG, clean_env, fake_log_calls

from pmm.kernel import uapi

TOP = Path(__file__).resolve().parents[2]
FAKE = TOP / "hooklib" / "libpmmhook-fake.so"
HEAPREPORT = TOP / "tests" / "progs" / "bin" / "heapreport"
JEMALLOC = Path("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")


def run(tmp_path: Path, preload: str, interval_ms: int, wait_ms: int,
        **env: str) -> tuple[dict[str, list[int]], list[uapi.Heap]]:
    """heapreport 20000 blocks of 1000 bytes under the fake hook: what it
    printed (by line's first word) and the reports the hook sent."""
    log = tmp_path / "calls.bin"
    # small buffers: many batches, each a chance to report
    e = clean_env(LD_PRELOAD=preload, PMM_START="1", PMM_QUIET="1", PMM_FAKE_LOG=str(log),
                  PMM_FAKE_INTERVAL=str(interval_ms), PMM_BUFFER="512", **env)
    done = subprocess.run([str(HEAPREPORT), "20000", "1000", str(wait_ms)], env=e,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done
    lines = {ln.split()[0]: [int(x) for x in ln.split()[1:]] for ln in done.stdout.splitlines()}
    assert "ready" in lines
    heaps = [c.heap for c in fake_log_calls(log) if c.nr == NR_HEAP_REPORT]
    return lines, [h for h in heaps if h is not None]


def check_form(h: uapi.Heap, allocator: int) -> None:
    assert (h.size, h.allocator, h.time_ns, h.reserved) == (ctypes.sizeof(uapi.Heap),
                                                           allocator, 0, 0)


@pytest.mark.parametrize("mode", [{}, {"PMM_SAMPLE": "16384"}], ids=["exact", "sampled"])
def test_glibc_report_is_the_programs_mallinfo2(tmp_path: Path, mode: dict[str, str]) -> None:
    lines, heaps = run(tmp_path, str(FAKE), 100, 1000, **mode)
    arena, hblkhd, uordblks, fordblks, keepcost = lines["glibc"]
    assert heaps, "no report"
    last = heaps[-1]
    check_form(last, uapi.ALLOC_GLIBC)
    assert (last.mapped, last.in_use, last.free, last.top, last.retained) == \
        (arena + hblkhd, uordblks + hblkhd, fordblks, keepcost, 0)
    # the odd blocks' holes: about half the 20 MB the program wrote is free
    assert fordblks >= 9_000_000
    # one report when due: the first at the first batch, the last at pmm_flush
    # after the 1 s wait (longer than 100 ms and than 100 times a report's
    # cost), and at most one per 100 ms in between (the loop takes well
    # under a second)
    assert 2 <= len(heaps) <= 12, len(heaps)


def test_at_most_one_report_per_interval(tmp_path: Path) -> None:
    """The module's interval (10 s here) is longer than the program's life:
    of its many batches, only the first one's report goes."""
    log = tmp_path / "calls.bin"
    _, heaps = run(tmp_path, str(FAKE), 10000, 300)
    batches = [c for c in fake_log_calls(log) if c.nr == NR_RECORD_LOG]
    assert len(batches) >= 20 and len(heaps) == 1


@pytest.mark.skipif(not JEMALLOC.exists(), reason="Debian's libjemalloc2 is not installed")
def test_jemalloc_report_is_its_stats(tmp_path: Path) -> None:
    lines, heaps = run(tmp_path, f"{FAKE} {JEMALLOC}", 100, 1000)
    allocated, active, resident, mapped, retained = lines["jemalloc"]
    assert heaps
    last = heaps[-1]
    check_form(last, uapi.ALLOC_JEMALLOC)
    assert (last.in_use, last.mapped, last.free, last.top, last.retained) == \
        (allocated, mapped, max(resident - allocated, 0), 0, retained)
    assert allocated <= active <= mapped
