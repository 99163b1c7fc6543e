"""pmd's retention on a big database (docs/performance.md, "pmd's database
size and retention"): how many bytes a sample takes on disk, so a
process-day at pmd's default 1 s interval, and how long the longest step of
Store.prune_step (pmd --retain) holds the loop.

    bench/host_retain.sh [PROCESSES [SAMPLES_EACH]]

Defaults: 200 processes x 20,000 samples (4M samples, a sample a second for
5.6 hours each), half of them older than the horizon; the samples are as
pmd writes them from the module (rss, vm, anon/file/shmem, live heap).
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pmm.store import ProcessRow, SampleRow, Store

S = 10**9


def main() -> None:
    procs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    each = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
    r = random.Random(1)
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/var/tmp")) as tmp:
        path = Path(tmp) / "pmm.db"
        st = Store.open(path)
        t0 = 1_000 * S
        st.write((), [ProcessRow(pid, 0, f"p{pid}") for pid in range(1, procs + 1)])
        chunk = 1000  # seconds of samples per transaction, every process
        for at in range(0, each, chunk):
            rows = []
            for pid in range(1, procs + 1):
                rss = (64 << 20) + pid * 4096
                for i in range(at, min(at + chunk, each)):
                    v = rss + r.randrange(1 << 20)
                    rows.append(SampleRow(pid, 0, t0 + i * S + pid, v + (200 << 20), v,
                                          v - (8 << 20), 8 << 20, 0, v - (16 << 20),
                                          1000 + i, "kmod"))
            st.write(rows)
        st.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        n = st.sample_count()
        size = path.stat().st_size
        per = size / n
        print(f"{n} samples of {procs} processes: {size / 2**20:.1f} MiB, {per:.1f} B a "
              f"sample, {per * 86400 / 2**20:.1f} MiB a process-day at 1 s")
        before = t0 + each // 2 * S
        steps: list[float] = []
        deleted = 0
        began = time.monotonic()
        while True:
            s = time.monotonic()
            step = st.prune_step(before)
            steps.append(time.monotonic() - s)
            deleted += step.samples
            if not step.more:
                break
        total = time.monotonic() - began
        print(f"pruned {deleted} samples in {len(steps)} steps, {total:.1f} s: step median "
              f"{statistics.median(steps) * 1000:.1f} ms, longest {max(steps) * 1000:.1f} ms")
        st.close()


if __name__ == "__main__":
    main()
