"""bench/host_pmd_fleet.sh, part 2: pmd's work for N processes that the module
samples every second, replayed for an hour of their time: each second's N
genl sample events decoded and handled as pmd's loop does, a commit, a
snapshot for the metrics twice a second, and a real HTTP scrape of /metrics
every 15 s. Half the processes leak 4 KiB/s under noise, half are flat, so
the detector reaches both verdicts. Prints the cpu per second of replayed
time (pmd's share of a core) and pmd's memory once every window is full."""

from __future__ import annotations

import logging
import random
import resource
import struct
import sys
import time
import urllib.request
from pathlib import Path

from pmm.analysis.trend import detect
from pmm.daemon import Daemon, Options
from pmm.daemon.metrics import Exporter
from pmm.kernel import uapi
from pmm.kernel.genl import decode_datagram
from pmm.store import Store

FAMILY = 0x1B
PID0 = 4_000_000


def attr(kind: int, payload: bytes) -> bytes:
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind) + payload + b"\0" * (-n % 4)


def u64(kind: int, value: int) -> bytes:
    return attr(uapi.Attr.PAD, b"") + attr(kind, struct.pack("=Q", value))


def sample_message(pid: int, t_ns: int, rss: int) -> bytes:
    a = uapi.Attr
    body = struct.pack("=BBH", uapi.Cmd.SAMPLE, 1, 0) + attr(a.PID, struct.pack("=I", pid)) + \
        u64(a.START_TIME, 5 * 10**9 + pid) + u64(a.TIME, t_ns) + u64(a.VM, 1 << 30) + \
        u64(a.RSS, rss) + u64(a.RSS_ANON, rss // 2) + u64(a.RSS_FILE, rss // 2) + \
        u64(a.RSS_SHMEM, 0) + u64(a.LIVE_BYTES, rss // 4) + u64(a.LIVE_BLOCKS, 300)
    return struct.pack("=IHHII", 16 + len(body), FAMILY, 0, 0, 0) + body


def vm_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def main() -> None:
    db, n = sys.argv[1], int(sys.argv[2])
    seconds = int(sys.argv[3]) if len(sys.argv) > 3 else 3600
    logging.getLogger("pmd").addHandler(logging.NullHandler())  # its LEAK lines
    logging.getLogger("pmd").propagate = False
    store = Store.open(db)
    exporter = Exporter(("127.0.0.1", 0))
    exporter.start()
    assert exporter.server is not None
    url = f"http://{exporter.server.url_host()}/metrics"
    daemon = Daemon(store, Options(db=Path(db), pids=[], genl=False), exporter=exporter)
    detect(range(30), [float(i) for i in range(30)])  # warmed up, as pmd's thread does
    daemon.detector.ready.set()
    rng = random.Random(1)
    noise = [rng.randrange(-(200 << 10), 200 << 10) for _ in range(4096)]
    rss_before = vm_kib("VmRSS")
    cpu = 0.0
    scrape_bytes = 0
    scrapes = 0
    for sec in range(seconds):
        t_ns = (sec + 10) * 10**9
        # built outside the measured time: the kernel makes these
        msgs = [sample_message(PID0 + i, t_ns, (50 << 20) + (4096 * sec if i % 2 else 0)
                               + noise[(sec * 7 + i) % len(noise)]) for i in range(n)]
        c0 = time.process_time()
        for m in msgs:
            for ev in decode_datagram(m, FAMILY):
                daemon.handle_event(ev)
        daemon.flush_now()
        daemon.publish()
        daemon.publish()
        if sec % 15 == 0:
            with urllib.request.urlopen(url) as r:
                scrape_bytes = len(r.read())
            scrapes += 1
        cpu += time.process_time() - c0
    leaking = sum(1 for st in daemon.procs.values() if st.verdict == "LEAK")
    print(f"  {cpu / seconds * 100:.2f}% of a core (target < 2%): {n} processes, {seconds} s "
          f"replayed, {cpu / (seconds * n) * 1e6:.0f} us per event all in; {scrapes} scrapes "
          f"of {scrape_bytes} bytes; {leaking} of {n} found leaking")
    print(f"  memory: VmRSS {vm_kib('VmRSS') / 1024:.0f} MiB with every window full "
          f"({(vm_kib('VmRSS') - rss_before) / 1024:.0f} MiB of it the windows and rows), "
          f"peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB; "
          f"{store.sample_count()} samples stored")
    exporter.close()
    store.close()


if __name__ == "__main__":
    main()
