"""The kind of growth on the real module, with the programs built for each kind
(tests/progs/kinds) under the hook: `pmctl trend --watch` names each kind
live, pmd's database names it after the programs exited (the alert's kind
and its evidence, `pmctl alerts`), and the split pmctl shows agrees with what each
program reports of itself (smaps_rollup, mallinfo2, the bytes it holds).

One pmd and the four programs run together, and the four watches run at
once, to keep the test to a few minutes under TCG. A program grows from
its first SIGUSR2, sent when its watch says it has begun (Python starts
slowly under TCG, and the programs would fill the guest's memory
meanwhile), to its second, then holds and writes its report. pmd looks
at the last 40 samples (4 s), so the growth is what it judges."""

from __future__ import annotations

import functools
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import kmod_dev
import pytest
from helpers import PROGS, TOP

from pmm.kernel.device import Device

pytestmark = pytest.mark.usefixtures("pmm")
HOOKLIB = TOP / "hooklib" / "libpmmhook.so"
PY = sys.executable
MIB = 1 << 20
KINDS = {"kind_leak": "LEAK", "kind_frag": "RETENTION", "kind_arenas": "RETENTION",
         "kind_mmap": "OUTSIDE THE HEAP"}
wait_for = functools.partial(kmod_dev.wait_for, step=0.1)


@pytest.fixture()
def tmp() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="kinds-") as d:
        yield Path(d)


def report(path: Path) -> dict[str, int]:
    """A program's report (kinds.h): name -> bytes."""
    out = {}
    for line in path.read_text().splitlines():
        name, _, value = line.partition(" ")
        out[name] = int(value)
    return out


def logged(log: Path, text: str) -> bool:
    return text in log.read_text()


def pmctl(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([PY, "-m", "pmctl", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=TOP)


def finish(p: subprocess.Popen[str], timeout: float = 900) -> tuple[int, dict[str, object]]:
    out, err = p.communicate(timeout=timeout)
    assert out, err
    return p.returncode, json.loads(out)


def test_each_program_gets_its_kind_live_and_post_mortem(tmp: Path) -> None:
    db = tmp / "pmm.db"
    with Device.open() as dev:
        dev.set_config(interval_ms=100)
    log = tmp / "pmd.log"
    logf = open(log, "w")  # noqa: SIM115
    # --min-span 0: the growth lasts seconds
    pmd = subprocess.Popen([PY, "-m", "pmd.main", "--db", str(db), "--detect-every", "10",
                            "--window", "40", "--min-span", "0"], stderr=logf, cwd=TOP)
    progs: dict[str, subprocess.Popen[str]] = {}
    try:
        assert wait_for(lambda: "detector ready" in log.read_text() or pmd.poll() is not None,
                        900), log.read_text()
        env = dict(os.environ, LD_PRELOAD=str(HOOKLIB), PMM_START="1", PMM_QUIET="1")
        for name in KINDS:
            progs[name] = subprocess.Popen([str(PROGS / name), "300"], stdout=subprocess.PIPE,
                                           text=True,
                                           env={**env, "KIND_REPORT": str(tmp / name)})
        pids = {name: int(p.stdout.readline())  # type: ignore[union-attr]
                for name, p in progs.items()}
        # live: the four watches at once, each program growing once its watch runs
        watches = {name: pmctl("trend", str(pid), "--watch", "8s", "--interval", "100ms",
                               "--report-every", "0") for name, pid in pids.items()}
        start_when_watched(watches, progs)
        live = {name: w.communicate(timeout=900) for name, w in watches.items()}
        for name, (out, err) in live.items():
            code = watches[name].returncode
            verdict = re.search(r"^verdict:  (\S+)", out, re.M)
            kind = re.search(r"^kind:     ([A-Z ]+): (.*)$", out, re.M)
            assert code == 10 and verdict and kind, (name, out, err)
            assert (verdict[1], kind[1]) == ("LEAK", KINDS[name]), (name, out)
            assert "live heap unknown" not in out, (name, out)
        assert "the allocator's mappings grew: [heap] +" in live["kind_frag"][0]
        assert "the allocator's mappings grew: [arena] 0x" in live["kind_arenas"][0]
        assert "mappings that grew: [anon] 0x" in live["kind_mmap"][0]
        assert "next:     find the sites: pmctl leaks" in live["kind_leak"][0]
        # pmd saw the same growth: its alert (it may come after the watch)
        for pid in pids.values():
            assert wait_for(functools.partial(logged, log, f"LEAK pid {pid} "), 300), \
                log.read_text()
        for p in progs.values():
            p.send_signal(signal.SIGUSR2)
            assert p.stdout is not None and p.stdout.readline() == "holding\n"

        # the figures: a short watch of the held programs against their reports;
        # the hook's allocator report is remade at most every 100 times the last
        # one took (hooklib/heap.c: seconds on a fragmented heap in a busy
        # guest), so a report from before the hold may still be the latest:
        # watch again until it is not, for at most a minute
        held = {name: pmctl("trend", str(pid), "--watch", "1s", "--interval", "100ms",
                            "--json") for name, pid in pids.items()}
        for name, w in held.items():
            _, d = finish(w)
            until = time.monotonic() + 60
            while not figures_agree(name, d, report(tmp / name)) and time.monotonic() < until:
                _, d = finish(pmctl("trend", str(pids[name]), "--watch", "1s", "--interval",
                                    "100ms", "--json"))
            check_figures(name, d, report(tmp / name))

        # post-mortem: the programs exit; pmd's database keeps the kind
        for p in progs.values():
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=60)
        for name, pid in pids.items():
            assert wait_for(functools.partial(logged, log, f"pid {pid} ({name[:15]}) exited"),
                            60), log.read_text()
        r = subprocess.run([PY, "-m", "pmctl", "alerts", "--db", str(db), "--json"],
                           capture_output=True, text=True, cwd=TOP, timeout=900)
        alerts = {a["pid"]: a for a in json.loads(r.stdout)["alerts"]}
        for name, pid in pids.items():
            a = alerts[pid]
            assert a["kind"] == KINDS[name], (name, a)
            assert f"kind {KINDS[name]}: " in a["message"], (name, a)
            assert f"kind {KINDS[name]}: " in log.read_text()
        assert "[anon]" in str(alerts[pids["kind_mmap"]]["evidence"]["mappings"])
        assert "[arena]" in str(alerts[pids["kind_arenas"]]["evidence"]["mappings"])
    finally:
        for p in progs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        pmd.send_signal(signal.SIGTERM)
        pmd.wait(timeout=120)
        logf.close()


def start_when_watched(watches: dict[str, subprocess.Popen[str]],
                       progs: dict[str, subprocess.Popen[str]]) -> None:
    """Starts each program's growth (SIGUSR2) as soon as its watch says, on
    stderr, that it samples."""
    sel = selectors.DefaultSelector()
    for name, w in watches.items():
        assert w.stderr is not None
        sel.register(w.stderr, selectors.EVENT_READ, name)
    waiting = set(watches)
    while waiting:
        for key, _ in sel.select(timeout=900):
            name = key.data
            line = watches[name].stderr.readline()  # type: ignore[union-attr]
            if line.startswith("watching pid") or not line:
                assert line, (name, watches[name].wait())
                progs[name].send_signal(signal.SIGUSR2)
                sel.unregister(key.fileobj)
                waiting.discard(name)
    sel.close()


def figures_agree(name: str, d: dict[str, object], rep: dict[str, int]) -> bool:
    try:
        check_figures(name, d, rep)
    except AssertionError:
        return False
    return True


def check_figures(name: str, d: dict[str, object], rep: dict[str, int]) -> None:
    """The split pmctl shows of a held program against what the program says:
    anonymous memory against smaps_rollup (the kernel's rss counters lag by
    up to 64 pages a thread: /proc/PID/status's are per-thread caches), the
    live heap against the bytes it holds (the hook keeps at most its last
    100 ms of records), what the allocator holds against mallinfo2."""
    ev = d["kind_evidence"]
    assert isinstance(ev, dict), (name, d)
    p = ev["latest"]
    threads = 200 if name == "kind_arenas" else 1
    anon = p["live"] + (p["heap_free"] or 0) + p["anon_other"]
    slack = 0.05 * rep["rollup.Anonymous"] + threads * 64 * 4096
    assert abs(anon - rep["rollup.Anonymous"]) <= slack, (name, p, rep)
    own = rep["own_live"]
    if name == "kind_leak":
        # 20 blocks of 1000 bytes each 10 ms: at most 100 ms not yet sent;
        # beyond its own count, stdio's buffer of stdout (a pipe: 4 KiB),
        # made by the program's first printf
        assert own - 300_000 <= p["live"] <= own + 4096, (name, p, rep)
        assert own > 8 * MIB
    else:
        assert p["live"] < MIB, (name, p, rep)
    if name in ("kind_frag", "kind_arenas"):
        # the allocator's free bytes were all written: resident, not in live blocks
        assert (p["heap_free"] or 0) + p["anon_other"] >= 0.9 * rep["mallinfo2.fordblks"], \
            (name, p, rep)
        assert rep["mallinfo2.fordblks"] > 4 * MIB
        if p["heap_free"] is not None:  # the hook reports the allocator's figures
            assert abs(p["heap_free"] - rep["mallinfo2.fordblks"]) <= \
                0.1 * rep["mallinfo2.fordblks"], (name, p, rep)
    if name == "kind_mmap":
        assert p["anon_other"] >= 0.9 * (rep["rollup.Anonymous"] - rep["mallinfo2.arena"])
