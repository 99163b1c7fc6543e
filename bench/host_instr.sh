#!/bin/bash
# The hook's cost in instructions: deterministic, so it shows changes of a
# few percent that the timed benchmarks (bench/host_hook.sh, and
# bench/guest_hook.sh under QEMU's emulation) cannot separate from noise.
# Figures, never pass/fail.
#
# valgrind's callgrind counts the user-space instructions of each run (the
# kernel's are not counted: bench/guest_kmod.sh measures the module). The
# programs and configurations are bench/host_hook.sh's (bench/hook_runs.py),
# the microbenchmark shorter: bare; hooked with no /dev/pmm;
# hooked, not monitored; exact and sampled (PMM_SAMPLE=524288) through
# hooklib/libpmmhook-fake.so, whose batches go to a system call
# instead of the module. One run each: the counts vary by well under 0.1%.
#
#   bench/host_instr.sh
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
command -v valgrind >/dev/null || { echo "host_instr: valgrind missing: run make setup" >&2; exit 1; }
. bench/workloads.sh
host_bench_start host_instr hooklib/libpmmhook.so hooklib/libpmmhook-fake.so bench/bin/malloc_bench

echo "host_instr: user-space instructions (valgrind callgrind), and the ratio to the bare run"
/usr/bin/python3 -I - "$top" "$tmp" <<'PY'
import re
import subprocess
import sys

top, tmp = sys.argv[1], sys.argv[2]
sys.path.insert(0, f"{top}/bench")
from hook_runs import base_env, configs as hook_configs, programs as hook_programs  # noqa: E402

ROUNDS = 200000  # malloc_bench: free+malloc rounds in all, split over its threads
programs = hook_programs(top, tmp, micro_rounds=ROUNDS)
configs = hook_configs(top)
base = base_env()


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
            line += f"  (+{(got - bare) / ROUNDS:.0f} per free+malloc)"
        print(line, flush=True)
PY
