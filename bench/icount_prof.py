"""scripts/bench-icount.sh's kernel profile (PMM_ICOUNT_PROF=1): the QEMU
plugin's per-block instruction counts of each run (bench/icount/icount.c,
prof=FILE), summed over the runs of each program and configuration, shown
per guest kernel function (the guest's /proc/kallsyms) and, for pmm.ko's
functions, per source line (addr2line on the module built with -g).

    icount_prof.py PROF LABELS KALLSYMS PMM_KO [--top N]

Only the monitored configurations are shown, with instructions per run (or,
for the microbenchmark, per free+malloc round) beside the bare run's.
"""

from __future__ import annotations

import argparse
import bisect
import subprocess
import sys
from collections import Counter, defaultdict

Run = tuple[str, str]  # (program, configuration)


def read_prof(path: str) -> list[Counter[int]]:
    """The counters of each run, in marker order."""
    runs: list[Counter[int]] = []
    with open(path) as f:
        for line in f:
            if line.startswith("="):
                runs.append(Counter())
            else:
                addr, n = line.split()
                runs[-1][int(addr, 16)] += int(n)
    return runs


class Symbols:
    """The guest kernel's text symbols, by address."""

    def __init__(self, kallsyms: str) -> None:
        syms: list[tuple[int, str]] = []
        with open(kallsyms) as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3 or parts[1] not in "tTwW":
                    continue
                name = parts[2] + (f" {parts[3]}" if len(parts) > 3 else "")
                syms.append((int(parts[0], 16), name))
        syms.sort()
        self.addrs = [a for a, _ in syms]
        self.names = [n for _, n in syms]

    def find(self, addr: int) -> tuple[int, str]:
        i = bisect.bisect_right(self.addrs, addr) - 1
        if i < 0:
            return 0, "?"
        return self.addrs[i], self.names[i]


def ko_text_symbols(ko: str) -> dict[str, int]:
    """pmm.ko's function symbols in .text and their offsets in it."""
    out = subprocess.run(["objdump", "-t", ko], check=True, capture_output=True, text=True)
    syms: dict[str, int] = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[-3] == ".text" and "F" in parts[2:-3]:
            syms[parts[-1]] = int(parts[0], 16)
    return syms


def source_lines(ko: str, offsets: list[int]) -> dict[int, str]:
    """file:line (and function) of each .text offset of the module."""
    if not offsets:
        return {}
    out = subprocess.run(
        ["addr2line", "-e", ko, "-j", ".text", "-f", "-s", *[hex(o) for o in offsets]],
        check=True, capture_output=True, text=True)
    lines = out.stdout.splitlines()
    return {o: f"{lines[2 * i + 1]} ({lines[2 * i]})" for i, o in enumerate(offsets)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("prof")
    ap.add_argument("labels")
    ap.add_argument("kallsyms")
    ap.add_argument("ko")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()

    with open(args.labels) as f:
        head, *lines = f.read().splitlines()
    rounds = int(head.split()[1])
    labels = [tuple(line.split("\t")[:2]) for line in lines]
    runs = read_prof(args.prof)
    if len(runs) != len(labels):
        print(f"icount_prof: {len(runs)} profiled runs for {len(labels)} labels",
              file=sys.stderr)
        return 1
    syms = Symbols(args.kallsyms)
    ko_syms = ko_text_symbols(args.ko)

    per_run: dict[Run, Counter[int]] = defaultdict(Counter)
    reps: Counter[Run] = Counter()
    for (name, cfg), counts in zip(labels, runs, strict=True):
        per_run[(name, cfg)].update(counts)
        reps[(name, cfg)] += 1

    for (name, cfg), counts in per_run.items():
        if cfg in ("bare", "unmonitored"):
            continue
        unit = rounds if name.startswith("malloc_bench") else 1
        scale = 1 / (reps[(name, cfg)] * unit)
        what = "per free+malloc round" if unit > 1 else "per run"
        by_fn: Counter[str] = Counter()
        pmm_addrs: Counter[int] = Counter()
        for addr, n in counts.items():
            base, fn = syms.find(addr)
            by_fn[fn] += n
            if fn.endswith("[pmm]"):
                pmm_addrs[addr] += n
        bare = per_run.get((name, "bare"), Counter())
        bare_fn: Counter[str] = Counter()
        for addr, n in bare.items():
            bare_fn[syms.find(addr)[1]] += n
        bare_scale = 1 / (max(reps[(name, "bare")], 1) * unit)
        total = sum(counts.values())
        print(f"\n== {name}, {cfg}: guest kernel instructions {what}: "
              f"{total * scale:.1f} (bare {sum(bare.values()) * bare_scale:.1f})")
        for fn, n in by_fn.most_common(args.top):
            print(f"  {n * scale:10.1f}  (bare {bare_fn[fn] * bare_scale:8.1f})  {fn}")
        # pmm.ko by source line
        offs: dict[int, int] = {}
        for addr in pmm_addrs:
            base, fn = syms.find(addr)
            ko_base = ko_syms.get(fn.split()[0])
            if ko_base is not None:
                offs[addr] = ko_base + addr - base
        where = source_lines(args.ko, sorted(set(offs.values())))
        by_line: Counter[str] = Counter()
        for addr, n in pmm_addrs.items():
            by_line[where.get(offs.get(addr, -1), "?")] += n
        print(f"  pmm.ko by source line (block starts), {what}:")
        for line, n in by_line.most_common(args.top):
            print(f"  {n * scale:10.1f}  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
