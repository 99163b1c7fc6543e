"""scripts/bench-icount.sh's report: pairs the QEMU plugin's counts (one
"K COUNT" line per marker, K 1 at "mark start", 2 at "mark stop") with the
labels bench/guest_icount.sh wrote for its runs, in order, and prints each
run's guest instructions and the ratio to the same program's bare run. A
label's optional fourth field is the run's count of requests (bench/guest_redis.sh
--icount): the instructions per request are printed too, and their excess over
the bare run's.

    icount_report.py COUNTS LABELS
"""

from __future__ import annotations

import statistics
import sys

START, STOP = 1, 2


def runs(counts_path: str) -> list[int]:
    """Instructions between each start marker and the stop marker after it;
    the plugin's "#" line (its counts are not exact) stops the report."""
    out: list[int] = []
    start: int | None = None
    with open(counts_path) as f:
        for line in f:
            if line.startswith("#"):
                sys.exit(f"guest_icount: {counts_path}: {line.strip()}")
            k, n = (int(x) for x in line.split())
            if k == START:
                start = n
            elif k == STOP and start is not None:
                out.append(n - start)
                start = None
    return out


def main(counts_path: str, labels_path: str) -> int:
    with open(labels_path) as f:
        head, *lines = f.read().splitlines()
    rounds = int(head.split()[1])
    labels = [line.split("\t") for line in lines]
    got = runs(counts_path)
    if len(got) != len(labels):
        print(f"guest_icount: {len(got)} counted runs for {len(labels)} labels "
              f"({counts_path}, {labels_path})", file=sys.stderr)
        return 1
    # (program, config) -> the counts of its repetitions, in the guest's order
    table: dict[tuple[str, str], list[int]] = {}
    failed: set[tuple[str, str]] = set()
    requests: dict[tuple[str, str], int] = {}
    for (name, cfg, rc, *units), count in zip(labels, got, strict=True):
        table.setdefault((name, cfg), []).append(count)
        if rc != "0":
            failed.add((name, cfg))
        if units:
            requests[(name, cfg)] = int(units[0])
    reps = max(len(v) for v in table.values())
    print("guest_icount: guest instructions between the markers, all vCPUs, kernel and user "
          f"(QEMU plugin), and the ratio to the bare run; {reps} run(s) each"
          + (", median and spread ((max - min) / median)" if reps > 1 else ""))
    for (name, cfg), ns in table.items():
        n = statistics.median(ns)
        bare = statistics.median(table[(name, "bare")])
        line = f"{name:<23} {cfg:<12} {n / 1e6:9.2f} M  ratio {n / bare:5.3f}x"
        if name.startswith("malloc_bench") and cfg != "bare":
            line += f"  (+{(n - bare) / rounds:.0f} per free+malloc)"
        if (name, cfg) in requests:
            req = requests[(name, cfg)]
            line += f"  {n / req:.0f} per request"
            if cfg != "bare":
                line += f" ({(n - bare) / req:+.0f})"
        if len(ns) > 1:
            line += f"  spread {(max(ns) - min(ns)) / n:.2%}"
        if (name, cfg) in failed:
            line += "  FAILED"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
