"""`pmctl trend PID --watch`: a watch of /proc on the host (no module here):
its running report, its end by Ctrl-C or SIGTERM with the verdict so far, by
the process's exit, and the option checks made before it starts."""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from trend_series import LEAKER
from typer.testing import CliRunner

from pmctl import trend_cli
from pmctl.cli import app
from pmm.analysis import samplesource

runner = CliRunner()
PMCTL = Path(sys.executable).parent / "pmctl"  # the venv's console script
NO_DEVICE = {"PMM_DEVICE": "/nonexistent/pmm"}


# a report line: wall clock, elapsed, rss, vm, rate ('-' or signed binary units), samples
REPORT = re.compile(r"^(\d\d:\d\d:\d\d)\s+(\S+)\s+(\d+\.\d \w?i?B|\d+ B)\s+(\d+\.\d \w?i?B|\d+ B)"
                    r"\s+(-|[+-]\d+(?:\.\d)? (?:B|KiB|MiB|GiB)/min)\s+(\d+)$")


@pytest.fixture
def leaker() -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen([sys.executable, "-c", LEAKER], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        yield child
    finally:
        child.kill()
        child.wait()


class Lines:
    """A child's stdout read line by line, with a deadline."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.proc = proc
        self.fd = proc.stdout.fileno()
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.fd, selectors.EVENT_READ)
        self.buf = b""
        self.seen: list[str] = []

    def until(self, pattern: re.Pattern[str], timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                self.seen.append(line.decode())
                m = pattern.search(self.seen[-1])
                if m:
                    return m
            left = deadline - time.monotonic()
            assert left > 0, f"no line matching {pattern.pattern!r} in {self.seen}"
            if self.sel.select(left):
                chunk = os.read(self.fd, 65536)
                assert chunk, f"end of output before {pattern.pattern!r}: {self.seen}"
                self.buf += chunk

    def rest(self, timeout: float) -> tuple[int, str]:
        """The exit status and all the output."""
        code = self.proc.wait(timeout)
        assert self.proc.stdout is not None
        tail = self.buf + self.proc.stdout.read()
        return code, "\n".join(self.seen) + "\n" + tail.decode()


def foreground_signals() -> None:
    """SIGINT and SIGTERM as a shell's foreground command gets them (default,
    not blocked), whatever this test process inherited or was left with."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def watch(pid: int, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([str(PMCTL), "trend", str(pid), "--watch", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **NO_DEVICE}, preexec_fn=foreground_signals)


# -- the end of a watch ----------------------------------------------------------------


def test_sigint_after_the_first_report_prints_the_verdict_so_far(
        leaker: subprocess.Popen[str]) -> None:
    """Ctrl-C: the verdict on the samples so far, and its exit status (LEAK: 10),
    where pmctl used to die with 130 and no output."""
    t = time.monotonic()
    proc = watch(leaker.pid, "10m", "--interval", "50ms", "--report-every", "3s")
    out = Lines(proc)
    first = out.until(REPORT, 30)
    assert first.group(2) == "3.0s"
    assert 55 <= int(first.group(6)) <= 62
    assert first.group(5).endswith("MiB/min")  # about 3 MiB/s: +150..190 MiB/min
    proc.send_signal(signal.SIGINT)
    code, text = out.rest(30)
    assert code == 10, text
    assert time.monotonic() - t < 60  # not the 10 minutes asked for
    assert re.search(r"^watch stopped by SIGINT after \d+\.\ds$", text, re.M), text
    m = re.search(r"^verdict:  LEAK \((\d+) samples over (\d+\.\d)s\): ", text, re.M)
    assert m, text
    assert int(m.group(1)) >= 55 and float(m.group(2)) >= 2.9
    assert re.search(r"^rate:     \+\d+\.\d MiB/min \(95% CI \+", text, re.M), text
    assert proc.stderr is not None
    assert "Traceback" not in proc.stderr.read().decode()


def test_sigterm_ends_the_watch_with_the_verdict(sleeper: subprocess.Popen[bytes]) -> None:
    proc = watch(sleeper.pid, "10m", "--interval", "50ms", "--report-every", "2s")
    out = Lines(proc)
    first = out.until(REPORT, 30)
    assert first.group(5) == "+0 B/min"  # 41 samples: enough for a rate
    proc.send_signal(signal.SIGTERM)
    code, text = out.rest(30)
    # a sleeper's rss never moves: seconds of it cannot rule out 64 KiB/min
    assert code == 13, text
    assert re.search(r"^watch stopped by SIGTERM after \d+\.\ds$", text, re.M), text
    assert re.search(r"^verdict:  INCONCLUSIVE \(\d+ samples over \d+\.\ds\): ", text,
                     re.M), text


def test_sigterm_in_json_mode_prints_the_document(leaker: subprocess.Popen[str]) -> None:
    """SIGTERM after 3 s or more of samples: the document with the verdict so
    far. --json prints nothing before its end, so how many samples pmctl took
    before the signal is only known after: fewer than 30 (its start-up took
    most of the wait on a busy machine) must give NOT ENOUGH DATA, and the
    watch is tried again with a longer wait until one gives LEAK."""
    for wait in (4.5, 9.0, 18.0):
        proc = watch(leaker.pid, "10m", "--interval", "50ms", "--json")
        time.sleep(wait)  # pmctl's start-up, then samples
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
        assert stderr == b""  # --json: the document alone
        d = json.loads(stdout)
        assert d["watch"]["ended"] == "stopped" and d["watch"]["duration_s"] == 600.0
        assert d["watch"]["elapsed_s"] < wait
        # the k-th sample is due k x 50 ms after the watch began
        assert (d["samples"] - 1) * 0.05 <= d["watch"]["elapsed_s"] + 0.001
        if d["samples"] < 30:
            assert (proc.returncode, d["verdict"]) == (12, "NOT ENOUGH DATA"), d
            continue
        assert proc.returncode == 10, d
        assert d["verdict"] == "LEAK" and d["exit_code"] == 10
        return
    pytest.fail("no watch of 30 samples or more before SIGTERM")


def test_a_watched_process_that_exits_is_reported() -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        proc = watch(child.pid, "1m", "--interval", "50ms", "--report-every", "2s")
        out = Lines(proc)
        out.until(REPORT, 30)
        t = time.monotonic()
        child.kill()
        child.wait()
        m = out.until(re.compile(rf"^pid {child.pid} exited after (\d+\.\d)s of watching$"), 30)
        assert time.monotonic() - t < 5  # noticed at the next sample
        code, text = out.rest(30)
    finally:
        child.kill()
        child.wait()
    assert 2.0 <= float(m.group(1)) <= 10
    assert code == 13, text  # the report's samples and more, of a flat rss
    v = re.search(r"^verdict:  INCONCLUSIVE \((\d+) samples over (\d+\.\d)s\)", text,
                  re.M)
    assert v, text
    reports = [r for r in map(REPORT.match, out.seen) if r]
    assert int(v.group(1)) >= int(reports[-1].group(6)) >= 30, text
    assert float(v.group(2)) >= 2.0


def test_json_says_the_process_exited() -> None:
    child = subprocess.Popen(["sleep", "1"])
    try:
        r = runner.invoke(app, ["trend", str(child.pid), "--watch", "30s", "--interval",
                                "100ms", "--json"], env=NO_DEVICE)
    finally:
        child.kill()
        child.wait()
    assert r.exit_code == 12, r.output
    d = json.loads(r.output)
    assert d["verdict"] == "NOT ENOUGH DATA" and d["exit_code"] == 12
    assert d["watch"]["ended"] == "exited"
    assert d["watch"]["interval_s"] == 0.1 and d["watch"]["duration_s"] == 30.0
    # the exit ended it, at its first sample after the exit (pmctl's start-up
    # may take longer than the process's second on a busy machine: no sample)
    assert d["watch"]["elapsed_s"] < 30
    assert d["span_s"] <= d["watch"]["elapsed_s"]
    assert (d["samples"] - 1) * 0.1 <= d["watch"]["elapsed_s"] + 0.001


# -- the running report ---------------------------------------------------------------


def test_interval_report_lines(sleeper: subprocess.Popen[bytes]) -> None:
    """A heading, then one line a second: clock, elapsed, rss, vm, the rate so
    far ('-' until the detector has its 30 samples), the number of samples."""
    r = runner.invoke(app, ["trend", str(sleeper.pid), "--watch", "3.5s", "--interval",
                            "50ms", "--report-every", "1s"], env=NO_DEVICE)
    assert r.exit_code == 13, r.output  # INCONCLUSIVE: 3.5 s of an unmoving rss
    lines = r.output.splitlines()
    head = lines.index(next(x for x in lines if x.startswith("time ")))
    assert lines[head].split() == ["time", "elapsed", "rss", "vm", "rate", "samples"]
    rows = [REPORT.match(x) for x in lines[head + 1: head + 4]]
    assert all(rows), lines
    # a line at the first sample within half an interval of each second,
    # one line a second: its elapsed time and sample count are measured (on
    # a busy machine a sample comes late, and the line with it)
    elapsed = [float(m.group(2).rstrip("s")) for m in rows if m]
    due = [1.0, 2.0, 3.0]
    assert all(d - 0.025 <= e < d + 1 for d, e in zip(due, elapsed, strict=True)), elapsed
    counts = [int(m.group(6)) for m in rows if m]
    assert 30 <= counts[1] < counts[2] <= 71, counts  # the rate from 30 samples on
    assert [m.group(5) for m in rows if m] == ["-", "+0 B/min", "+0 B/min"]
    assert all(m.group(3).endswith("iB") for m in rows if m)  # a sleep's rss: KiB or MiB
    # 71 samples, the last one due at 3.5 s
    m = re.search(rf"^pid {sleeper.pid} \(sleep\): 71 samples over (\d+\.\d)s from "
                  rf"/proc/{sleeper.pid}$", r.output, re.M)
    assert m and float(m.group(1)) >= 3.4, r.output
    assert "watching pid" in r.output and "Ctrl-C ends it early" in r.output


def test_report_every_zero_prints_no_lines(sleeper: subprocess.Popen[bytes]) -> None:
    r = runner.invoke(app, ["trend", str(sleeper.pid), "--watch", "1s", "--report-every", "0"],
                      env=NO_DEVICE)
    assert r.exit_code == 12, r.output
    assert not any(REPORT.match(x) for x in r.output.splitlines())
    # 11 samples, the last one due at 1 s (the span is measured: later on a busy machine)
    m = re.search(r"^verdict:  NOT ENOUGH DATA \(11 samples over (\d+\.\d)s\)", r.output, re.M)
    assert m and float(m.group(1)) >= 0.9, r.output


def test_watch_needs_no_module(sleeper: subprocess.Popen[bytes], tmp_path: Path) -> None:
    """pmd and the module absent (PMM_DEVICE names nothing, PMM_DB no file)."""
    env = {**NO_DEVICE, "PMM_DB": str(tmp_path / "none.db")}
    r = runner.invoke(app, ["trend", str(sleeper.pid), "--watch", "3.5s", "--json"], env=env)
    assert r.exit_code == 13, r.output
    d = json.loads(r.output)
    assert d["source"] == "proc" and d["verdict"] == "INCONCLUSIVE" and d["samples"] == 36
    assert d["rate_kib_min"] == 0.0 and d["rate_bytes_min"] == 0.0


def test_watch_of_no_process() -> None:
    r = runner.invoke(app, ["trend", "4000000", "--watch", "1s"], env=NO_DEVICE)
    assert r.exit_code == 5
    assert "pid 4000000 does not exist" in r.output


# -- what is checked before a watch ----------------------------------------------------


def test_plot_without_matplotlib_fails_before_sampling(
        sleeper: subprocess.Popen[bytes], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    t = time.monotonic()
    r = runner.invoke(app, ["trend", str(sleeper.pid), "--watch", "1m", "--plot",
                            str(tmp_path / "t.png")], env=NO_DEVICE)
    assert time.monotonic() - t < 10  # not after the minute's watch
    assert r.exit_code == 1, r.output
    # this code runs from the source tree: its extra
    assert ("needs matplotlib, which is not installed: install matplotlib (pip install "
            "'.[plot]' in pmm's source tree)") in r.output
    assert "pmm[plot]" not in r.output  # pmm on PyPI is another project
    assert "watching pid" not in r.output and "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert not (tmp_path / "t.png").exists()


def test_plot_without_matplotlib_subprocess(sleeper: subprocess.Popen[bytes],
                                            tmp_path: Path) -> None:
    """The installed command, with matplotlib made unimportable by a shim."""
    shim = tmp_path / "shim"
    (shim / "matplotlib").mkdir(parents=True)
    (shim / "matplotlib" / "__init__.py").write_text(
        "raise ImportError('No module named matplotlib')\n")
    path = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, **NO_DEVICE, "PYTHONPATH": path}
    t = time.monotonic()
    r = subprocess.run([str(PMCTL), "trend", str(sleeper.pid), "--watch", "1m", "--plot",
                        str(tmp_path / "t.png")], capture_output=True, text=True, env=env,
                       timeout=60)
    assert time.monotonic() - t < 10
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip() == ("pmctl: drawing a plot needs matplotlib, which is not "
                                "installed: install matplotlib (pip install '.[plot]' in "
                                "pmm's source tree)")
    assert r.stdout == ""


@pytest.mark.parametrize(("args", "option", "why"), [
    (["--watch", "1s", "--since", "2m"], "'--since'", "does not apply to --watch"),
    (["--interval", "100ms"], "'--interval'", "applies only to --watch"),
    (["--report-every", "2s"], "'--report-every'", "applies only to --watch"),
    (["--watch", "1s", "--source", "db"], "'--watch'", "does not apply with --source db"),
    (["--watch", "1s", "--source", "kmod"], "'--watch'", "does not apply with --source kmod"),
    (["--source", "proc"], "'--source'", "proc needs --watch"),
    (["--watch", "1s", "--start-time", "5"], "'--start-time'", "does not apply to --watch"),
    (["--watch", "1s", "--db", "x.db"], "'--db'", "does not apply to --watch"),
    (["--source", "kmod", "--db", "x.db"], "'--db'", "does not apply with --source kmod"),
    (["--watch", "1s", "--json", "--report-every", "2s"], "'--report-every'",
     "does not apply to --json"),
])
def test_options_that_do_not_apply(args: list[str], option: str, why: str,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # refused before any sampling: no source is read (this asserted a time
    # under 0.9 s instead, which the first command line of a process, with
    # its lazy imports, could take on a busy machine)
    sampled: list[str] = []
    for owner, source in ((trend_cli, "from_watch"), (trend_cli, "stored"),
                          (samplesource, "from_db"), (samplesource, "from_kmod")):
        monkeypatch.setattr(owner, source,
                            lambda *_a, _name=source, **_k: sampled.append(_name))
    r = runner.invoke(app, ["trend", str(os.getpid()), *args], env=NO_DEVICE)
    assert r.exit_code == 2, r.output
    text = " ".join(r.output.replace("│", " ").split())  # the usage box wraps lines
    assert f"Invalid value for {option}: {why}" in text, r.output
    assert sampled == []


def test_an_interval_longer_than_the_watch_is_refused(sleeper: subprocess.Popen[bytes]) -> None:
    """--watch 1s --interval 2s used to take one sample and say NOT ENOUGH DATA."""
    t = time.monotonic()
    r = runner.invoke(app, ["trend", str(sleeper.pid), "--watch", "1s", "--interval", "2s"],
                      env=NO_DEVICE)
    assert r.exit_code == 2, r.output
    text = " ".join(r.output.replace("│", " ").split())
    assert ("Invalid value for '--interval': 2s is longer than --watch 1s: the watch would "
            "take a single sample") in text, r.output
    assert time.monotonic() - t < 0.9  # refused before any sampling


@pytest.mark.parametrize(("watch_for", "interval", "samples", "enough"), [
    ("2s", "100ms", 21, "2.9s"),
    ("280ms", "10ms", 29, "290ms"),
])
def test_a_watch_too_short_for_a_verdict_warns(sleeper: subprocess.Popen[bytes], watch_for: str,
                                               interval: str, samples: int,
                                               enough: str) -> None:
    """One line on stderr before sampling: the watch gives fewer samples than
    the detector's minimum (30), and what would give enough."""
    r = runner.invoke(app, ["trend", str(sleeper.pid), "--watch", watch_for, "--interval",
                            interval, "--report-every", "0"], env=NO_DEVICE)
    assert r.exit_code == 12, r.output
    warning = (f"pmctl: warning: --watch {watch_for} at --interval {interval} takes {samples} "
               "samples, and the verdict needs at least 30: use a longer --watch (at least "
               f"{enough}) or a shorter --interval")
    assert r.stderr.splitlines()[0] == warning, r.stderr
    assert r.stderr.count("warning") == 1
    assert f"verdict:  NOT ENOUGH DATA ({samples} samples over" in r.stdout


def test_a_watch_of_30_samples_does_not_warn(sleeper: subprocess.Popen[bytes]) -> None:
    r = runner.invoke(app, ["trend", str(sleeper.pid), "--watch", "290ms", "--interval", "10ms",
                            "--report-every", "0"], env=NO_DEVICE)
    assert "warning" not in r.stderr, r.stderr
    assert "(30 samples over" in r.stdout, r.output


@pytest.mark.parametrize(("path", "why"), [
    ("nodir/t.png", "cannot write nodir/t.png: its directory nodir does not exist"),
    ("adir", "adir is a directory: give the file to write, e.g. adir/trend.png"),
    ("afile/t.png", "cannot write afile/t.png: afile is not a directory"),
])
def test_a_plot_that_cannot_be_written_is_refused_before_sampling(
        sleeper: subprocess.Popen[bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        path: str, why: str) -> None:
    """Not after the whole watch: usage error (2) naming the path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("")
    t = time.monotonic()
    r = runner.invoke(app, ["trend", str(sleeper.pid), "--watch", "1m", "--plot", path],
                      env=NO_DEVICE)
    assert r.exit_code == 2, r.output
    assert f"Invalid value for '--plot': {why}" in " ".join(r.output.replace("│", " ").split())
    assert "watching pid" not in r.output
    assert time.monotonic() - t < 0.9


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write in any directory")
def test_a_plot_in_a_directory_this_user_cannot_write(
        sleeper: subprocess.Popen[bytes], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "closed").mkdir(mode=0o500)
    r = runner.invoke(app, ["trend", str(sleeper.pid), "--watch", "1m", "--plot",
                            "closed/t.png"], env=NO_DEVICE)
    assert r.exit_code == 2, r.output
    assert ("Invalid value for '--plot': cannot write closed/t.png: this user cannot create "
            "files in closed") in " ".join(r.output.replace("│", " ").split())


def test_pmm_db_from_the_environment_is_not_a_conflict(sleeper: subprocess.Popen[bytes],
                                                       tmp_path: Path) -> None:
    env = {**NO_DEVICE, "PMM_DB": str(tmp_path / "x.db")}
    r = runner.invoke(app, ["trend", str(sleeper.pid), "--watch", "300ms", "--json"], env=env)
    assert r.exit_code == 12, r.output
    assert json.loads(r.output)["samples"] == 4  # at 0, 100, 200 and 300 ms


@pytest.mark.parametrize(("value", "message"), [
    ("2x", "'2x' is not a duration"),
    ("5ms", "'5ms' is shorter than 10ms"),
    ("0", "'0' is shorter than 10ms"),
])
def test_watch_durations_refused(value: str, message: str) -> None:
    r = runner.invoke(app, ["trend", "1", "--watch", value])
    assert r.exit_code == 2
    assert message in " ".join(r.output.replace("│", " ").split())


def test_usage_line_names_pid() -> None:
    r = runner.invoke(app, ["trend", "--help"])
    assert r.exit_code == 0
    assert "Usage: pmctl trend [OPTIONS] PID" in r.output
    assert "{pid}" not in r.output.lower()
    text = " ".join(r.output.replace("│", " ").split())
    assert ("needs matplotlib: pip install '.[plot]' in pmm's source tree") in text, r.output
    assert "pmm[plot]" not in text  # pmm on PyPI is another project

