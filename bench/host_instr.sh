#!/bin/bash
# The hook's cost in instructions: deterministic, so it shows changes of a
# few percent that the timed benchmarks (bench/host_hook.sh, and
# bench/guest_hook.sh under QEMU's emulation) cannot separate from noise.
# Figures, never pass/fail.
#
# valgrind's callgrind counts the user-space instructions of each run (the
# kernel's are not counted: bench/guest_kmod.sh measures the module). The
# configurations are bench/host_hook.sh's: bare; hooked with no /dev/pmm;
# hooked, not monitored; exact and sampled (PMM_SAMPLE=524288) through
# hooklib/bench/bin/libpmmhook-fake.so, whose batches go to a system call
# instead of the module. One run each: the counts vary by well under 0.1%.
#
#   bench/host_instr.sh
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/host_instr.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$top"
command -v valgrind >/dev/null || { echo "host_instr: valgrind missing: run make setup" >&2; exit 1; }
for f in hooklib/libpmmhook.so hooklib/bench/bin/libpmmhook-fake.so hooklib/bench/bin/malloc_bench; do
	[ -f "$f" ] || { echo "host_instr: $f missing: run make" >&2; exit 1; }
done
. bench/workloads.sh
write_workloads "$tmp"

echo "host_instr: user-space instructions (valgrind callgrind), and the ratio to the bare run"
/usr/bin/python3 -I - "$top" "$tmp" <<'PY'
import os
import re
import subprocess
import sys

top, tmp = sys.argv[1], sys.argv[2]
hook = f"{top}/hooklib/libpmmhook.so"
fake = f"{top}/hooklib/bench/bin/libpmmhook-fake.so"
mb = f"{top}/hooklib/bench/bin/malloc_bench"
ROUNDS = 200000  # malloc_bench: one free + one malloc per round and thread
programs = {
    "malloc_bench 1 thread": [mb, "-t", "1", "-n", str(ROUNDS)],
    "malloc_bench 2 threads": [mb, "-t", "2", "-n", str(ROUNDS)],
    "python3 json 10k": ["/usr/bin/python3", "-s", f"{tmp}/bench.py"],
    "sqlite3 10k inserts": ["/usr/bin/sqlite3", "-init", f"{tmp}/bench.sql", ":memory:", ".quit"],
}
configs = {
    "bare": {},
    "no device": {"LD_PRELOAD": hook},
    "unmonitored": {"LD_PRELOAD": fake, "PMM_FAKE_UNMONITORED": "1"},
    "exact": {"LD_PRELOAD": fake, "PMM_START": "1"},
    "sampled": {"LD_PRELOAD": fake, "PMM_START": "1", "PMM_SAMPLE": "524288"},
}
base = {k: v for k, v in os.environ.items()
        if not k.startswith(("PMM_", "PYTHON")) and k != "LD_PRELOAD"}
base.update(PMM_QUIET="1", PYTHONHASHSEED="0")  # python3's counts: the same each run


def instructions(argv: list[str], env: dict[str, str]) -> int:
    """Instructions of the program (the preload reaches it, not valgrind)."""
    out = f"{tmp}/callgrind.out"
    vg = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    if env:
        vg.append("--trace-children=yes")
        argv = ["/usr/bin/env", *[f"{k}={v}" for k, v in env.items()], *argv]
    r = subprocess.run([*vg, *argv], env=base, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    counts = re.findall(r"Collected : (\d+)", r.stderr)
    if r.returncode or not counts:
        sys.exit(f"host_instr: {argv} failed: {r.stderr[-2000:]}")
    return int(counts[-1])  # with env: the second process, the program


for name, argv in programs.items():
    bare = instructions(argv, {})
    for cfg, env in configs.items():
        got = bare if cfg == "bare" else instructions(argv, env)
        line = f"{name:<23} {cfg:<12} {got / 1e6:9.2f} M  ratio {got / bare:5.3f}x"
        if name.startswith("malloc_bench") and cfg != "bare":
            threads = 2 if "2 threads" in name else 1
            line += f"  (+{(got - bare) / (ROUNDS * threads):.0f} per free+malloc)"
        print(line, flush=True)
PY
