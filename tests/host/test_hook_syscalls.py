"""System calls made by libpmmhook.so, counted with strace on the host,
using the fake-device build (its batches and queries are ioctls on
/dev/null, which refuses them): not monitored, a process makes no system
call per allocation; monitored, one ioctl per batch of at most MAX_BATCH
records."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hook_env import clean_env, fake_log_batches

from pmm.kernel import uapi

TOP = Path(__file__).resolve().parents[2]
FAKE = TOP / "hooklib" / "libpmmhook-fake.so"
BENCH = TOP / "bench" / "bin" / "malloc_bench"

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="no strace")


def pmm_ioctls(tmp: Path, iterations: int, **env: str) -> int:
    """The pmm ioctls (magic 0xb7) malloc_bench's hook makes."""
    e = clean_env(PMM_QUIET="1", **env)
    out = tmp / "strace.txt"
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=ioctl", "-o", str(out),
                    "env", f"LD_PRELOAD={FAKE}", str(BENCH), "-n", str(iterations)],
                   env=e, check=True, capture_output=True, timeout=120)
    return len(re.findall(r"ioctl\(\d+, _IOC\([^,]*, 0xb7,", out.read_text()))


def test_unmonitored_no_syscall_per_allocation(tmp_path: Path) -> None:
    # 200000 iterations (400000 hook calls) in well under a second:
    # at most one PMM_QUERY_SELF at load and one a second after
    n = pmm_ioctls(tmp_path, 200000, PMM_FAKE_UNMONITORED="1")
    assert 1 <= n <= 5


def batch_counts(log: Path) -> list[int]:
    """The record count of each batch in a PMM_FAKE_LOG file."""
    return [len(recs) for _, recs in fake_log_batches(log)]


@pytest.mark.parametrize(("value", "records"), [
    ("1000", 1000), ("100", 512), ("99999999", uapi.MAX_BATCH), ("abc", uapi.MAX_BATCH)])
def test_buffer_size_from_the_environment(tmp_path: Path, value: str, records: int) -> None:
    # PMM_BUFFER=N: a thread sends its records every N (512-32768, a number
    # out of range takes the nearest bound, anything else the default 32768,
    # which goes in batches of MAX_BATCH); the microbenchmark fills its
    # buffer within the 100 ms deadline, and a fifth of its buffers at least
    # merge nothing (a buffer that merged less than an eighth is followed by
    # 7 sent as they are)
    log = tmp_path / "records.bin"
    pmm_ioctls(tmp_path, 100000, PMM_FAKE_LOG=str(log), PMM_BUFFER=value)
    counts = batch_counts(log)
    assert max(counts) == records
    assert counts.count(records) >= len(counts) // 5, counts


def test_monitored_one_syscall_per_batch(tmp_path: Path) -> None:
    # 200000 allocations and up to 200000 frees (the first free of each of
    # the 4096 window slots is free(NULL), not recorded; a free whose
    # allocation is still in the buffer is not sent, and such allocations
    # merge), sent in batches of at most 4096 (MAX_BATCH): one system call
    # each, besides a query or two, the sites' registrations and the
    # allocator's report, once per (10 s) interval (the log: each batch's
    # thread and count)
    log = tmp_path / "records.bin"
    n = pmm_ioctls(tmp_path, 200000, PMM_FAKE_LOG=str(log))
    counts = batch_counts(log)
    assert max(counts) == uapi.MAX_BATCH and 50000 <= sum(counts) <= 400000, counts
    # a flush sends up to 8 full batches and one partial; flushes: when the
    # buffer fills, and the few the 100 ms deadline sends
    assert len(counts) <= sum(counts) // uapi.MAX_BATCH + 40, counts
    assert len(counts) <= n <= len(counts) + 6


def test_sampled_few_syscalls(tmp_path: Path) -> None:
    # ~270 bytes a malloc, one sample per 512 KiB: ~110 records, 1-2 batches
    # plus deadline flushes
    n = pmm_ioctls(tmp_path, 200000, PMM_SAMPLE="524288")
    assert n <= 40
