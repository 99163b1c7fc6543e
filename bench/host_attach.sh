#!/bin/bash
# The attached hook's cost against the preloaded hook's (issue 26: attach at
# the same overhead), on the host, at native speed (figures, never
# pass/fail). As bench/host_hook.sh, exact and sampled use
# hooklib/libpmmhook-fake.so, whose batches go to an ioctl on /dev/null
# (refused) instead of the module, which cannot load here.
#
# bench/bin/attach_bench prints "ready PID", waits for a line on stdin, then
# runs its malloc/free/realloc work in threads it starts then and prints
# that phase's own cpu time (getrusage, user + system): the start and the
# attach do not count. Configurations: bare; preloaded exact (LD_PRELOAD,
# PMM_START=1); attached exact (started bare, then hooklib/pmm-inject --lib
# the fake library PID PMM_START=1, then the line); preloaded and attached
# sampled (PMM_SAMPLE=524288, host_instr's). Each round runs every
# configuration once, the order rotated a step each round; a figure is the
# median over the rounds of the work phase's cpu, and of its ratio to the
# same round's bare run (interquartile range); attached/preloaded pairs the
# same round's two runs. Also the attach's own cost: pmm-inject's wall time
# and how long it says the chosen thread was stopped (whole ms).
#
#   bench/host_attach.sh [ROUNDS]    (default 7; or ATTACH_ROUNDS)
#   ATTACH_THREADS="1 2"  thread counts (default 1); ATTACH_ITERS  iterations
#   in all, split over the threads (default 12000000: about 0.6 s bare)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-${ATTACH_ROUNDS:-7}}
threads=${ATTACH_THREADS:-1}
iters=${ATTACH_ITERS:-12000000}
cd "$top"
for f in hooklib/libpmmhook-fake.so hooklib/pmm-inject bench/bin/attach_bench; do
	[ -f "$f" ] || { echo "host_attach: $f missing: run make" >&2; exit 1; }
done
# private copies: every run uses the same build, even if hooklib is rebuilt meanwhile
tmp=$(mktemp -d /tmp/host_attach.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cp hooklib/libpmmhook-fake.so hooklib/pmm-inject "$tmp/"

echo "host_attach: attached vs preloaded hook (work-phase cpu from getrusage, median of" \
	"$rounds rounds, $iters malloc/free/realloc iterations per run)"
/usr/bin/python3 -I - "$top" "$tmp" "$rounds" "$iters" $threads <<'PY'
import re
import statistics
import subprocess
import sys
import time

top, tmp, rounds, iters = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
thread_counts = [int(t) for t in sys.argv[5:]]
sys.path.insert(0, f"{top}/bench")
from hook_runs import base_env  # noqa: E402

FAKE = f"{tmp}/libpmmhook-fake.so"  # copies of hooklib's
INJECT = f"{tmp}/pmm-inject"
PROG = f"{top}/bench/bin/attach_bench"
SAMPLED = {"PMM_SAMPLE": "524288"}
# name -> (how: bare / preload / attach, the hook's settings)
CONFIGS: dict[str, tuple[str, dict[str, str]]] = {
    "bare": ("bare", {}),
    "preloaded exact": ("preload", {"PMM_START": "1"}),
    "attached exact": ("attach", {"PMM_START": "1"}),
    "preloaded sampled": ("preload", {"PMM_START": "1", **SAMPLED}),
    "attached sampled": ("attach", {"PMM_START": "1", **SAMPLED}),
}
base = base_env()  # PMM_QUIET=1, no PMM_* or LD_PRELOAD of the caller's


def run(argv: list[str], how: str, settings: dict[str, str],
        inject: list[tuple[float, int]]) -> float:
    """One run; the work phase's cpu ms. An attach appends (wall ms,
    stopped ms) to inject."""
    env = dict(base, LD_PRELOAD=FAKE, **settings) if how == "preload" else base
    p = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    ready = p.stdout.readline().split()
    if len(ready) != 2 or ready[0] != "ready":
        p.kill()
        sys.exit(f"host_attach: {argv} ({how}) did not start: {ready} {p.communicate()[1]}")
    if how == "attach":
        t0 = time.perf_counter()
        r = subprocess.run([INJECT, "--lib", FAKE, ready[1], "PMM_QUIET=1",
                            *[f"{k}={v}" for k, v in settings.items()]],
                           capture_output=True, text=True)
        wall = (time.perf_counter() - t0) * 1000
        m = re.search(r"stopped (\d+) ms", r.stdout)
        if r.returncode or not m:
            p.kill()
            sys.exit(f"host_attach: pmm-inject failed ({r.returncode}): {r.stdout}{r.stderr}")
        inject.append((wall, int(m.group(1))))
    out, err = p.communicate("go\n", timeout=600)
    m = re.search(r"^cpu ([\d.]+) ms", out, re.M)
    if p.returncode or not m:
        sys.exit(f"host_attach: {argv} ({how}) failed ({p.returncode}): {out}{err}")
    return float(m.group(1))


def med_iqr(xs: list[float]) -> str:
    q1, _, q3 = statistics.quantiles(xs, n=4)
    return f"{statistics.median(xs):5.2f}x (iqr {q1:.2f}-{q3:.2f})"


for t in thread_counts:
    argv = [PROG, "-t", str(t), "-n", str(iters // t)]
    cpu: dict[str, list[float]] = {c: [] for c in CONFIGS}
    inject: list[tuple[float, int]] = []
    names = list(CONFIGS)
    for r in range(rounds):
        for c in names[r % len(names):] + names[:r % len(names)]:
            cpu[c].append(run(argv, *CONFIGS[c], inject))
    label = f"{t} thread{'s' if t > 1 else ''}"
    for c in names:
        ratios = [g / max(b, 1e-3) for g, b in zip(cpu[c], cpu["bare"], strict=True)]
        print(f"{label:<10} {c:<18} cpu {statistics.median(cpu[c]):7.1f} ms  "
              f"ratio to bare {med_iqr(ratios)}")
    for mode in ("exact", "sampled"):
        ratios = [a / max(p, 1e-3)
                  for a, p in zip(cpu[f"attached {mode}"], cpu[f"preloaded {mode}"],
                                 strict=True)]
        print(f"{label:<10} attached/preloaded {mode:<8} {med_iqr(ratios)}")
    walls = [w for w, _ in inject]
    stops = [s for _, s in inject]
    print(f"{label:<10} pmm-inject: wall {statistics.median(walls):.1f} ms median "
          f"({min(walls):.1f}-{max(walls):.1f}), thread stopped {statistics.median(stops):.0f} ms "
          f"median ({min(stops)}-{max(stops)}), {len(inject)} attaches")
PY
