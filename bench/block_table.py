"""The module's block table at 1M and 10M live blocks (inside the VM, the
module loaded): kernel bytes per live block (kmem_bytes from GET_CONFIG
before and after, all of the process's tables in), the records a second,
and the slowest batch of 4096 records against the median one (a table that
grows by rehashing all of it at once shows there).

    python bench/block_table.py [N ...]      (default 1000000 10000000)
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "guest"))
from kmod_dev import RECORD_DTYPE, Dev  # noqa: E402

from pmm.kernel import uapi  # noqa: E402


def run(n: int, weighted: bool) -> str:
    with Dev() as d:
        base = d.config().kmem_bytes
        d.start()
        a = np.zeros(n, dtype=RECORD_DTYPE)
        # a heap's addresses: 32-byte blocks side by side in user space
        a["ptr"] = 0x5555_0000_0000 + np.arange(n, dtype=np.uint64) * 32
        a["size"] = 32
        a["time_ns"] = time.monotonic_ns()
        # exact mode's blocks weigh 1; sampled ones carry a weight (an ext record)
        a["weight"] = np.where(np.arange(n) % 2, 512, 7) if weighted else 1
        a["op"] = uapi.Op.MALLOC
        a["site"] = 1 + np.arange(n, dtype=np.uint32) % 64
        size = a.itemsize
        batches = []
        t0 = time.perf_counter()
        for i in range(0, n, uapi.MAX_BATCH):
            k = min(uapi.MAX_BATCH, n - i)
            b0 = time.perf_counter()
            d.send_raw(a.ctypes.data + i * size, k)
            batches.append(time.perf_counter() - b0)
        took = time.perf_counter() - t0
        info = d.info()
        held = d.config().kmem_bytes - base
        d.stop()
        assert info.live_blocks == n, (info.live_blocks, n)
        kind = "weighted" if weighted else "exact"
        return (f"{n:>10,} {kind:8} {held / n:6.1f} B/block {held / 2**20:8.1f} MiB "
                f"{n / took / 1e3:7.0f} k records/s  batch median "
                f"{statistics.median(batches) * 1e3:6.2f} ms, slowest "
                f"{max(batches) * 1e3:7.2f} ms")


def main() -> None:
    sizes = [int(x) for x in sys.argv[1:]] or [1_000_000, 10_000_000]
    print("blocks     kind      kernel memory a block, in all      send rate"
          "          4096-record batches")
    for n in sizes:
        print(run(n, False), flush=True)
    print(run(sizes[0], True), flush=True)


if __name__ == "__main__":
    main()
