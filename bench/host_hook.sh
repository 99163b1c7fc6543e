#!/bin/bash
# The hook's own cost at native speed, on the host (figures, never pass/fail).
# The module cannot load here, so "exact" and "sampled" use
# hooklib/bench/bin/libpmmhook-fake.so: the same library, whose batches go to
# a getppid() system call instead of the module. That isolates the hook from
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
tmp=$(mktemp -d /tmp/host_hook.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$top"
for f in hooklib/libpmmhook.so hooklib/bench/bin/libpmmhook-fake.so hooklib/bench/bin/malloc_bench; do
	[ -f "$f" ] || { echo "host_hook: $f missing: run make" >&2; exit 1; }
done
. bench/workloads.sh
write_workloads "$tmp"

echo "host_hook: the hook alone at native speed (per-process cpu from wait4, median of $rounds paired rounds, interquartile range)"
/usr/bin/python3 -I - "$top" "$tmp" "$rounds" <<'PY'
import os
import statistics
import sys

top, tmp, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
hook = f"{top}/hooklib/libpmmhook.so"
fake = f"{top}/hooklib/bench/bin/libpmmhook-fake.so"
mb = f"{top}/hooklib/bench/bin/malloc_bench"
programs = {
    "malloc_bench 1 thread": [mb, "-t", "1", "-n", "4000000"],
    "malloc_bench 2 threads": [mb, "-t", "2", "-n", "2000000"],
    "python3 json 10k": ["/usr/bin/python3", "-I", f"{tmp}/bench.py"],
    "sqlite3 10k inserts": ["/usr/bin/sqlite3", "-init", f"{tmp}/bench.sql", ":memory:", ".quit"],
}
configs = {
    "bare": {},
    "no device": {"LD_PRELOAD": hook},
    "unmonitored": {"LD_PRELOAD": fake, "PMM_FAKE_UNMONITORED": "1"},
    "exact": {"LD_PRELOAD": fake, "PMM_START": "1"},
    "sampled": {"LD_PRELOAD": fake, "PMM_START": "1", "PMM_SAMPLE": "524288"},
}
base = {k: v for k, v in os.environ.items() if not k.startswith("PMM_") and k != "LD_PRELOAD"}
base["PMM_QUIET"] = "1"
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
