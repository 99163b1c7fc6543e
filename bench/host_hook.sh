#!/bin/bash
# The hook's own cost at native speed, on the host (figures, never pass/fail).
# The module cannot load here, so "exact" and "sampled" use
# hooklib/libpmmhook-fake.so: the same library, whose batches go to
# an ioctl on /dev/null (refused) instead of the module. That isolates the hook from
# the kernel's work and from QEMU's emulation, which bench/guest_hook.sh
# measures together.
#
# Configurations: bare; hooked with no /dev/pmm (pure pass-through); hooked,
# not monitored (the fake device answers PMM_QUERY_SELF "no"); exact and
# sampled (PMM_SAMPLE=524288) through the fake device. Each round runs every
# configuration once; a figure is the median over the rounds of the
# process's cpu time (user + system, from wait4) over the same round's bare
# run, with the interquartile range of those ratios.
#
#   bench/host_hook.sh [ROUNDS]   (default 30)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-30}
cd "$top"
. bench/workloads.sh
host_bench_start host_hook hooklib/libpmmhook.so hooklib/libpmmhook-fake.so bench/bin/malloc_bench

echo "host_hook: the hook alone at native speed (per-process cpu from wait4, median of $rounds paired rounds, interquartile range)"
/usr/bin/python3 -I - "$top" "$tmp" "$rounds" <<'PY'
import os
import statistics
import sys

top, tmp, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, f"{top}/bench")
from hook_runs import base_env, configs as hook_configs, programs as hook_programs  # noqa: E402

programs = hook_programs(top, tmp, micro_rounds=4000000)
configs = hook_configs(top)
base = base_env()
devnull = os.open(os.devnull, os.O_RDWR)
cpu: dict[tuple[str, str], list[float]] = {}
for _ in range(rounds):
    for name, argv in programs.items():
        for cfg, env in configs.items():
            pid = os.fork()
            if pid == 0:
                for fd in (0, 1, 2):
                    os.dup2(devnull, fd)
                os.execve(argv[0], argv, dict(base, **env))
            _, status, usage = os.wait4(pid, 0)
            if not os.WIFEXITED(status) or os.WEXITSTATUS(status):
                sys.exit(f"host_hook: {name} ({cfg}) failed: status {status}")
            cpu.setdefault((name, cfg), []).append(usage.ru_utime + usage.ru_stime)
for name in programs:
    bare = cpu[(name, "bare")]
    for cfg in configs:
        got = cpu[(name, cfg)]
        ratios = [g / max(b, 1e-4) for g, b in zip(got, bare)]
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        print(f"{name:<23} {cfg:<12} cpu {statistics.median(got) * 1000:7.1f} ms  "
              f"ratio {statistics.median(ratios):5.2f}x  (iqr {q1:.2f}-{q3:.2f})")
PY
