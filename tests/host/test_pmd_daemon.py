"""pmd as a process, without the module: /proc sampling into a real SQLite
file; SIGTERM, kill -9, a read-only database and a full disk."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pmm.daemon import Daemon, Options
from pmm.store import Store

TOP = Path(__file__).resolve().parents[2]


def pmd(*args: str, **kw: object) -> subprocess.Popen[str]:
    p: subprocess.Popen[str] = subprocess.Popen(  # type: ignore[call-overload]
        [sys.executable, "-m", "pmd.main", "--no-genl", *args],
        stderr=subprocess.PIPE, text=True, cwd=TOP, **kw)
    return p


def count(db: Path) -> int:
    if not db.exists():
        return 0
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(c.execute("SELECT count(*) FROM samples").fetchone()[0])
    except sqlite3.OperationalError:
        return 0  # not created yet
    finally:
        c.close()


def wait_for(pred: object, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def test_sigterm_flushes_and_exits_0(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    db = tmp_path / "pmm.db"
    p = pmd("--db", str(db), "--pid", str(sleeper.pid), "--interval", "0.05",
            "--commit-interval", "3600")
    assert p.stderr is not None
    try:
        line = p.stderr.readline()
        while "pmd running" not in line:
            assert line, "pmd exited early"
            line = p.stderr.readline()
        time.sleep(1.0)
        assert db.exists()
        assert count(db) == 0  # nothing committed yet: all pending in memory
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=20)
        err = p.stderr.read()
    finally:
        p.kill()
    assert rc == 0, err
    n = count(db)
    assert n >= 10
    assert f"SIGTERM: wrote {n} samples in all, exiting" in err
    c = sqlite3.connect(db)
    assert (c.execute("SELECT DISTINCT pid, source FROM samples").fetchall()
            == [(sleeper.pid, "proc")])
    assert c.execute("SELECT comm, cmdline FROM processes").fetchall() == [("sleep", "sleep 120")]


def test_kill_9_keeps_committed_samples(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    db = tmp_path / "pmm.db"
    p = pmd("--db", str(db), "--pid", str(sleeper.pid), "--interval", "0.02",
            "--commit-interval", "0.1")
    try:
        wait_for(lambda: count(db) >= 30)
        seen = count(db)
        p.kill()
        p.wait(timeout=10)
    finally:
        p.kill()
    c = sqlite3.connect(db)
    assert c.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    n = c.execute("SELECT count(*) FROM samples").fetchone()[0]
    assert n >= seen
    times = [r[0] for r in c.execute("SELECT time FROM samples ORDER BY time")]
    assert times == sorted(set(times)) and len(times) == n


def test_unwritable_database_is_one_clear_error(tmp_path: Path) -> None:
    p = pmd("--db", "/proc/self/no/pmm.db", "--pid", str(os.getpid()))
    _, err = p.communicate(timeout=30)
    assert p.returncode == 1
    assert err.startswith("pmd: cannot open the database /proc/self/no/pmm.db: ")
    assert len(err.strip().splitlines()) == 1


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_read_only_file_system(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "ro", "4m") as mnt:
        db = mnt / "pmm.db"
        p = pmd("--db", str(db), "--pid", str(os.getpid()), "--interval", "0.05")
        wait_for(lambda: db.exists() and count(db) > 0)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=20) == 0
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        p = pmd("--db", str(db), "--pid", str(os.getpid()))
        _, err = p.communicate(timeout=30)
        assert p.returncode == 1
        assert err.startswith(f"pmd: cannot open the database {db}: ")
        assert "read-only" in err or "unable to open" in err
        assert len(err.strip().splitlines()) == 1


def test_disk_full_no_busy_loop_then_recovers(tmp_path: Path,
                                              sleeper: subprocess.Popen[bytes]) -> None:
    with small_tmpfs(tmp_path / "full", "2m") as mnt:
        db = mnt / "pmm.db"
        p = pmd("--db", str(db), "--pid", str(sleeper.pid), "--interval", "0.01",
                "--commit-interval", "0.2")
        assert p.stderr is not None
        os.set_blocking(p.stderr.fileno(), False)
        try:
            wait_for(lambda: count(db) > 0)
            filler = mnt / "filler"
            with open(filler, "wb") as f, contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            time.sleep(1.0)
            before = cpu_s(p.pid)
            time.sleep(4.0)
            used = cpu_s(p.pid) - before
            assert p.poll() is None  # still running
            # sampling 100/s costs a little; a busy retry loop would use a whole core
            assert used < 2.0, used
            log = p.stderr.read() or ""
            errors = [ln for ln in log.splitlines() if "cannot write to the database" in ln]
            assert 1 <= len(errors) <= 3, log
            assert "full" in errors[0] and "rows kept in memory, retrying in 5s" in errors[0]
            stuck = count(db)
            filler.unlink()
            wait_for(lambda: count(db) > stuck + 100, timeout=30)
            time.sleep(0.5)
            log = p.stderr.read() or ""
            assert "database writable again" in log
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=20) == 0
        finally:
            p.kill()
            p.wait()
        c = sqlite3.connect(db)
        times = [r[0] for r in c.execute("SELECT time FROM samples ORDER BY time")]
        # nothing was lost across the outage: no gap much longer than the interval
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert max(gaps) < 1_000_000_000, max(gaps)


def test_bad_arguments_exit_2() -> None:
    for args in (["--interval", "0"], ["--pid", "-3"], ["--detect-every", "0"]):
        p = pmd(*args)
        _, err = p.communicate(timeout=30)
        assert p.returncode == 2, (args, err)
        assert err.startswith("pmd: Invalid value for "), err


def test_warm_up_says_its_duration_as_durations_are_written(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pmd")
    st = Store.open(tmp_path / "pmm.db")
    try:
        Daemon(st, Options(db=tmp_path / "pmm.db", pids=[], genl=False)).detector.warm_up()
    finally:
        st.close()
    said = [r.getMessage() for r in caplog.records if "warm up" in r.getMessage()]
    assert len(said) == 1 and re.fullmatch(r"detector ready \(\d+\.\ds to warm up\)", said[0])


def test_series_window_keeps_the_last_samples_in_order() -> None:
    from pmm.daemon.procstate import SeriesWindow

    w = SeriesWindow(4)
    for i in range(3):
        w.append(float(i), float(10 * i))
    assert [list(x) for x in w.samples()] == [[0.0, 1.0, 2.0], [0.0, 10.0, 20.0]]
    for i in range(3, 10):
        w.append(float(i), float(10 * i))
    assert len(w) == 4
    assert [list(x) for x in w.samples()] == [[6.0, 7.0, 8.0, 9.0], [60.0, 70.0, 80.0, 90.0]]


def test_the_detector_runs_less_often_as_the_window_fills(tmp_path: Path) -> None:
    from pmm.store import SampleRow

    store = Store.open(tmp_path / "pmm.db")
    try:
        d = Daemon(store, Options(db=tmp_path / "pmm.db", pids=[], genl=False, detect_every=20,
                               window=3600))
        d.detector.ready.set()
        runs: list[int] = []
        d.detector.run = lambda st, now_ns: runs.append(len(st.series))  # type: ignore[method-assign]
        for i in range(3600):
            d.add_sample(SampleRow(7, 0, (i + 1) * 10**9, 1 << 30, 8 << 20), comm="x")
    finally:
        store.close()
    assert [d.detector.interval(n) for n in (30, 400, 1200, 3600)] == [20, 20, 60, 180]
    assert runs[:3] == [30, 50, 70]  # every 20 while the window is small
    gaps = [b - a for a, b in zip(runs, runs[1:], strict=False)]
    assert 170 <= gaps[-1] <= max(gaps) <= 180  # then every held/20 samples
    assert 40 < len(runs) < 70


def test_a_failing_loop_leaves_pmd_down_in_the_textfile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pmm import daemon as daemon_mod

    def broken(self: Daemon) -> int:
        raise RuntimeError("the loop broke")

    monkeypatch.setattr(daemon_mod.Daemon, "run", broken)
    textfile = tmp_path / "pmm.prom"
    with pytest.raises(RuntimeError, match="the loop broke"):
        daemon_mod.serve(Options(db=tmp_path / "pmm.db", pids=[], genl=False,
                                 metrics_textfile=textfile))
    assert "pmm_pmd_up 0.0" in textfile.read_text()


def test_pmd_drops_the_ambient_capabilities_its_helpers_would_inherit(
        tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    # as its unit starts it: capabilities in the ambient set
    db = tmp_path / "pmm.db"
    p = subprocess.Popen(["setpriv", "--inh-caps=+sys_ptrace", "--ambient-caps=+sys_ptrace",
                          sys.executable, "-m", "pmd.main", "--no-genl", "--db", str(db),
                          "--pid", str(sleeper.pid)], cwd=TOP, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: count(db) >= 1, 30)
        status = Path(f"/proc/{p.pid}/status").read_text()
        amb = re.search(r"^CapAmb:\s+(\w+)$", status, re.M)
        eff = re.search(r"^CapEff:\s+(\w+)$", status, re.M)
        assert amb and eff, status
        assert int(amb.group(1), 16) == 0
        assert int(eff.group(1), 16) & (1 << 19)  # CAP_SYS_PTRACE: pmd keeps its own
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=30)


# -- alerts that have a life ----------------------------------------------------

MIB = 1 << 20


def _feed(d: Daemon, pid: int, times_s: list[float], rss: list[float]) -> None:
    from pmm.store import SampleRow

    for t, v in zip(times_s, rss, strict=True):
        d.add_sample(SampleRow(pid, 0, int(t * 1e9), 1 << 30, int(v)), comm="svc")


def _ramp_then_flat(seed: int) -> tuple[list[float], list[float]]:
    """A service's warm-up: 30 MiB in 15 s (caches filling, a sample every
    0.5 s), then flat for 15 minutes."""
    import random

    r = random.Random(seed)
    t = [i * 0.5 for i in range(int(15 * 60 / 0.5))]
    v = [50 * MIB + min(ti, 15.0) * 2 * MIB + r.gauss(0, 16 * 1024) for ti in t]
    return t, v


@pytest.mark.parametrize("min_span", [0.0, 600.0])
def test_a_warm_up_ramp_raises_no_alert_before_the_minimum_span(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, min_span: float) -> None:
    """The issue's case: pmd called a 15 s warm-up LEAK after 30 samples.
    With --min-span (10 minutes by default) the detector may not alarm
    before; by then the ramp is history and the verdict STABLE."""
    caplog.set_level(logging.INFO, logger="pmd")
    store = Store.open(tmp_path / "pmm.db")
    try:
        d = Daemon(store, Options(db=tmp_path / "pmm.db", pids=[], genl=False, detect_every=10,
                                  window=3600, min_span=min_span))
        d.detector.ready.set()
        _feed(d, 4_000_002, *_ramp_then_flat(1))
        d.flush_now()
        alerts = store.alerts(4_000_002)
    finally:
        store.close()
    if min_span == 0.0:  # what pmd did: an alert at the start of every such service
        assert [a.verdict for a in alerts] == ["LEAK"]
        return
    assert alerts == []
    said = [r.getMessage() for r in caplog.records if "4000002" in r.getMessage()]
    assert not [m for m in said if "LEAK" in m.split(":")[1]], said
    assert any("no alert before 10m of samples (--min-span)" in m for m in said), said
    assert said[-1].startswith("pid 4000002 (svc): STABLE after "), said
    assert d.procs[(4_000_002, 0)].verdict == "STABLE"


def _leak_then_stop(seed: int) -> tuple[list[float], list[float]]:
    """5 minutes leaking 4 KiB/s, then 15 minutes flat (a sample a second)."""
    import random

    r = random.Random(seed)
    t = [float(i) for i in range(20 * 60)]
    v = [50 * MIB + min(ti, 300.0) * 4096 + r.gauss(0, 16 * 1024) for ti in t]
    return t, v


def test_an_alert_resolves_when_the_verdict_clears(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A leak that stops: its alert is marked resolved in the store, the
    metrics' alert state returns to 0, and a warning says so (the alert's
    priority); no STABLE line shows a rate."""
    caplog.set_level(logging.INFO, logger="pmd")
    pid = 4_000_003
    store = Store.open(tmp_path / "pmm.db")
    try:
        d = Daemon(store, Options(db=tmp_path / "pmm.db", pids=[], genl=False, detect_every=10,
                                  window=600, min_span=120.0))
        d.detector.ready.set()
        t, v = _leak_then_stop(2)
        _feed(d, pid, t[:300], v[:300])
        (a,) = store.alerts(pid)
        assert (a.verdict, a.resolved) == ("LEAK", None)
        assert [p.alert for p in d.snapshot().processes] == [True]
        _feed(d, pid, t[300:], v[300:])
        d.flush_now()
        (a,) = store.alerts(pid)
        assert a.resolved is not None and a.resolved_wall is not None
        assert 300 * 10**9 < a.resolved <= int(t[-1] * 1e9)
        assert [p.alert for p in d.snapshot().processes] == [False]
    finally:
        store.close()
    records = [r for r in caplog.records if str(pid) in r.getMessage()]
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and warnings[0] == a.message
    assert re.fullmatch(rf"RESOLVED pid {pid} \(svc\): its LEAK alert: STABLE after \d+ "
                        r"samples: growth stopped: the later part of the window is flat",
                        warnings[1]), warnings
    # a STABLE line never shows a growth rate that contradicts it
    assert not [r.getMessage() for r in records
                if "STABLE" in r.getMessage() and "/min" in r.getMessage()]


def test_the_last_pid_target_gone_is_said(tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pmd")
    for genl in (True, False):
        p = subprocess.Popen(["sleep", "60"])
        store = Store.open(tmp_path / "pmm.db")
        try:
            d = Daemon(store, Options(db=tmp_path / "pmm.db", pids=[p.pid], genl=genl))
            d.processes.sample_targets()
            assert not d.processes.finished
            p.kill()
            p.wait()
            d.processes.sample_targets()
        finally:
            store.close()
        said = caplog.records[-1]
        assert said.levelno == logging.WARNING
        if genl:
            assert said.getMessage() == ("the last --pid target has gone: pmd goes on "
                                         "recording the processes the module monitors")
            assert not d.processes.finished
        else:
            assert said.getMessage() == ("the last --pid target has gone and --no-genl "
                                         "leaves nothing to watch: pmd writes what is "
                                         "pending and exits")
            assert d.processes.finished


def test_pmd_without_genl_exits_when_its_last_target_exits(tmp_path: Path) -> None:
    # The target exits when the test says so, once pmd has stored samples of
    # it: a fixed lifetime ('sleep 2') raced pmd's start (over a second,
    # several on a busy machine), which then found it gone or sampled it
    # too few times.
    target = subprocess.Popen(["cat"], stdin=subprocess.PIPE)
    assert target.stdin is not None
    db = tmp_path / "pmm.db"
    p = pmd("--db", str(db), "--pid", str(target.pid), "--interval", "100ms")
    try:
        wait_for(lambda: count(db) > 5 or p.poll() is not None, timeout=60)
        target.stdin.close()  # cat exits at the end of its input
        _, err = p.communicate(timeout=60)
    finally:
        target.kill()
        target.wait()
    assert p.returncode == 0, err
    lines = err.splitlines()
    assert any(ln.endswith(f"pmd: INFO: pid {target.pid} exited") for ln in lines), err
    assert any(ln.endswith("the last --pid target has gone and --no-genl leaves nothing to "
                           "watch: pmd writes what is pending and exits") for ln in lines), err
    assert re.search(r"no --pid target left: wrote \d+ samples in all, exiting", err), err
    # every line of the log (not the journal here) starts with its time
    assert all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4} pmd: ", ln)
               for ln in lines), err
    assert count(db) > 5


def test_retention_runs_in_steps_from_the_loop(tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    """--retain: the loop prunes a step at a time (10 ms apart while there
    is something to delete, a round every retain_every) and says once what
    a round deleted."""
    from pmm.kernel.sampler import boottime_ns
    from pmm.store import ProcessRow, SampleRow

    caplog.set_level(logging.INFO, logger="pmd")
    now_s = boottime_ns() / 1e9
    old = [now_s - 7200 + i for i in range(3000)]  # two hours ago, 3000 s long
    store = Store.open(tmp_path / "pmm.db")
    try:
        store.write([SampleRow(5, 0, int(t * 1e9), 1 << 20, 1 << 20) for t in old],
                    [ProcessRow(5, 0, "x")])
        d = Daemon(store, Options(db=tmp_path / "pmm.db", pids=[], genl=False, retain=3600.0))
        clock = d.retention.next_retain
        steps = 0
        while store.sample_count(5, 0) > 0 and steps < 10:
            d.retention.maybe_retain(clock)
            assert d.retention.next_retain == pytest.approx(clock + 0.01)  # a backlog: soon again
            clock = d.retention.next_retain
            steps += 1
        assert steps == 2  # 2000 samples a step
        d.retention.maybe_retain(clock)  # the round ends: said once
        assert d.retention.next_retain == pytest.approx(clock + 60.0)
    finally:
        store.close()
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("retention")]
    assert len(said) == 1 and said[0].startswith(
        "retention: deleted 3000 samples, 0 site snapshots and 0 exited processes older "
        "than 1h (the longest step took "), said


RAMP = """
import sys, time
keep = []
print("ready", flush=True)
for _ in range(int(sys.argv[1])):
    b = bytearray(int(sys.argv[2]))
    for i in range(0, len(b), 4096):
        b[i] = 1
    keep.append(b)
    time.sleep(float(sys.argv[3]))
print("done", flush=True)
time.sleep(600)
"""


def test_pmd_on_a_warm_up_and_a_leak_that_stops(tmp_path: Path) -> None:
    """Real programs under pmd (/proc, --min-span 5s): a 3 s warm-up ramp
    (30 MiB) raises no alert; a leak of 12 s (2.4 MiB/s) raises one, which is
    resolved once the leak has stopped long enough for the verdict to clear."""
    def start(*args: str) -> subprocess.Popen[str]:
        p = subprocess.Popen([sys.executable, "-c", RAMP, *args], stdout=subprocess.PIPE,
                             text=True)
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        return p

    ramp = start("30", str(1 << 20), "0.1")
    leak = start("600", str(48 << 10), "0.02")
    db = tmp_path / "pmm.db"
    p = pmd("--db", str(db), "--pid", str(ramp.pid), "--pid", str(leak.pid), "--interval",
            "100ms", "--commit-interval", "100ms", "--detect-every", "10", "--min-span", "5s")
    log_lines: list[str] = []
    try:
        assert p.stderr is not None
        # resolved once the flat later part rules out 64 KiB/min: at least a
        # step of the rss (its smallest move) over that part
        end = time.monotonic() + 240
        while time.monotonic() < end:
            line = p.stderr.readline()
            assert line, "".join(log_lines)
            log_lines.append(line)
            if f"RESOLVED pid {leak.pid} " in line:
                break
        else:
            raise AssertionError("".join(log_lines))
        p.send_signal(signal.SIGTERM)
        _, rest = p.communicate(timeout=30)
        log_lines.append(rest)
    finally:
        for q in (ramp, leak, p):
            if q.poll() is None:
                q.kill()
                q.wait()
    text = "".join(log_lines)
    c = sqlite3.connect(db)
    try:
        rows = c.execute("SELECT pid, verdict, resolved FROM alerts").fetchall()
    finally:
        c.close()
    # the ramp: never an alert; the leak: one, resolved
    assert [(pid, v) for pid, v, _ in rows] == [(leak.pid, "LEAK")], text
    assert rows[0][2] is not None, text
    assert f"LEAK pid {ramp.pid}" not in text
    assert text.count(f"WARNING: LEAK pid {leak.pid} ") == 1, text
