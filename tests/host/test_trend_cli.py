"""`pmctl trend` end to end on the host: from a real SQLite database written
with pmd's store, from /proc with --watch on a leaking child; exit codes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trend_series as S
from typer.testing import CliRunner

from pmctl.cli import app
from pmm.store import ProcessRow, SampleRow, Store

runner = CliRunner()
DEAD_PID = 4_000_000  # above pid_max: never a live process
T0 = 1_000_000  # boottime ns of the first sample (1 ms after boot)
START = 0
NO_DEVICE = {"PMM_DEVICE": "/nonexistent/pmm"}  # the module is not loaded


def _fill(db: Path, pid: int, t: np.ndarray, v: np.ndarray, start: int = START,
          comm: str = "synthetic", sites: bool = False) -> None:
    st = Store.open(db)
    rows = [SampleRow(pid, start, T0 + int(ti * 1e9), int(vi) + (8 << 20), int(vi))
            for ti, vi in zip(t, v, strict=True)]
    snaps = []
    if sites:
        for i in range(0, len(t), 10):
            tn = T0 + int(t[i] * 1e9)
            snaps.append((pid, start, tn, 7, 1000 + 2048 * int(t[i]), 3 + i))  # 2 KiB/s
            snaps.append((pid, start, tn, 9, 500 + 100 * int(t[i]), 1))  # 100 B/s
            snaps.append((pid, start, tn, 11, 4096, 1))  # flat
    st.write(rows, [ProcessRow(pid, start, comm, "/bin/x", "x -y", T0)], (), snaps)
    if sites:
        st.set_site(pid, start, 7, "leak_here() leak.c:27")
    st.close()


def _run(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, ["trend", *args])
    return r.exit_code, r.output


def test_leak_from_db_json(tmp_path: Path) -> None:
    db = tmp_path / "pmm.db"
    _fill(db, DEAD_PID, *S.leak(1, rate=4096), sites=True)
    code, out = _run(str(DEAD_PID), "--db", str(db), "--json")
    assert code == 10, out
    d = json.loads(out)
    assert d["verdict"] == "LEAK" and d["exit_code"] == 10
    assert d["source"] == "db" and d["db"] == str(db)
    assert d["pid"] == DEAD_PID and d["start_time"] == START and d["comm"] == "synthetic"
    assert d["samples"] == 600 and d["span_s"] == pytest.approx(599.0)
    assert d["rate_kib_min"] == pytest.approx(240.0, rel=0.15)
    assert d["rate_kib_min_low"] < d["rate_kib_min"] < d["rate_kib_min_high"]
    assert [s["site"] for s in d["sites"]] == [7, 9]
    assert d["sites"][0]["rate_kib_min"] == pytest.approx(120.0)
    assert d["sites"][0]["where"] == "leak_here() leak.c:27"
    assert d["sites"][1]["where"] == ""
    assert len(d["table"]) == 12
    assert d["table"][0]["time_s"] == 0.0 and d["table"][-1]["time_s"] == pytest.approx(599.0)
    assert d["table"][0]["vm"] - d["table"][0]["rss"] == 8 << 20
    # DEAD_PID exited: no forecast of its memory running out
    assert d["exited"] is True and d["exhausted_in_s"] is None


def test_stable_from_db_table(tmp_path: Path) -> None:
    db = tmp_path / "pmm.db"
    _fill(db, DEAD_PID, *S.sawtooth(2))
    code, out = _run(str(DEAD_PID), "--db", str(db))
    assert code == 0, out
    assert f"pid {DEAD_PID} (synthetic): 600 samples over 9m59s from pmd database" in out
    assert "verdict:  STABLE" in out
    assert "rss ('*' samples, '.' fitted floor):" in out
    assert "process:  exited: these are the samples pmd kept of it" in out
    assert "exhausted" not in out


def test_not_enough_data_exit_12(tmp_path: Path) -> None:
    db = tmp_path / "pmm.db"
    _fill(db, DEAD_PID, *S.leak(0, n=10))
    code, out = _run(str(DEAD_PID), "--db", str(db), "--json")
    assert code == 12
    assert json.loads(out)["verdict"] == "NOT ENOUGH DATA"


def test_since_limits_the_window(tmp_path: Path) -> None:
    db = tmp_path / "pmm.db"
    _fill(db, DEAD_PID, *S.leak(0, n=100))
    # the samples are from "boottime" 1000 s; now is later: --since 0 keeps none
    code, out = _run(str(DEAD_PID), "--db", str(db), "--since", "0", "--source", "db")
    assert code == 6, out
    # an old database: how old its latest sample is, not just "no samples"
    assert re.fullmatch(rf"pmctl: no samples of pid {DEAD_PID} in the last 0ms in {db} "
                        r"\(the latest is \S+ old\)\n", out), out


def test_reused_pid_picks_latest_or_start_time(tmp_path: Path) -> None:
    db = tmp_path / "pmm.db"
    _fill(db, DEAD_PID, *S.leak(0), start=START, comm="old")
    _fill(db, DEAD_PID, *S.flat(0), start=START + 10_000_000, comm="new")
    code, out = _run(str(DEAD_PID), "--db", str(db), "--json")
    assert (code, json.loads(out)["comm"]) == (0, "new")
    code, out = _run(str(DEAD_PID), "--db", str(db), "--json", "--start-time", str(START))
    assert (code, json.loads(out)["comm"]) == (10, "old")


def test_no_samples_anywhere(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    Store.open(db).close()
    env = {"PMM_DEVICE": str(tmp_path / "no-device")}
    r = runner.invoke(app, ["trend", str(DEAD_PID), "--db", str(db)], env=env)
    assert r.exit_code == 5
    assert "the process does not exist" in r.output
    r = runner.invoke(app, ["trend", str(os.getpid()), "--db", str(db)], env=env)
    assert r.exit_code == 6
    assert r.output == (f"pmctl: no samples of pid {os.getpid()} in {db}, and the module is "
                        "not loaded: use --watch DURATION (e.g. --watch 30s), or run pmd\n")


@pytest.mark.parametrize("how", ["--db", "PMM_DB"])
def test_a_missing_database_that_was_named_is_the_stores_error(tmp_path: Path,
                                                                how: str) -> None:
    """--db PATH or PMM_DB names a file that is not there: said as --source db
    and `pmctl alerts` say it (exit 1), not 'no samples', whatever the module."""
    db = tmp_path / "missing.db"
    args = ["--db", str(db)] if how == "--db" else []
    for pid in (os.getpid(), DEAD_PID):
        r = runner.invoke(app, ["trend", str(pid), *args],
                          env={**NO_DEVICE, "PMM_DB": str(db) if how == "PMM_DB" else None})
        assert r.exit_code == 1, r.output
        assert r.output.startswith(f"pmctl: no database at {db}: No such file or directory "
                                   "(pmd writes it"), r.output
        assert "no samples" not in r.output


def test_no_database_at_the_default_path_and_no_module(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --db, a default database that is not there is no error: auto
    says plainly that neither pmd nor the module has samples, and what to do."""
    import pmm.store

    default = tmp_path / "share" / "pmm.db"
    monkeypatch.setattr(pmm.store, "default_db_path", lambda writer=False: default)
    env = {**NO_DEVICE, "PMM_DB": None}
    r = runner.invoke(app, ["trend", str(os.getpid())], env=env)
    assert r.exit_code == 6, r.output
    assert r.output == (f"pmctl: no samples of pid {os.getpid()}: there is no pmd database at "
                        f"{default} (pmd writes it), and the module is not loaded: use --watch "
                        "DURATION (e.g. --watch 30s), or run pmd\n")
    r = runner.invoke(app, ["trend", str(DEAD_PID)], env=env)
    assert r.exit_code == 5, r.output
    assert "the process does not exist" in r.output


def test_env_pmm_db(tmp_path: Path) -> None:
    db = tmp_path / "env.db"
    _fill(db, DEAD_PID, *S.leak(0))
    r = runner.invoke(app, ["trend", str(DEAD_PID), "--json"], env={"PMM_DB": str(db)})
    assert r.exit_code == 10
    assert json.loads(r.output)["db"] == str(db)


def test_plot_writes_png(tmp_path: Path) -> None:
    db = tmp_path / "pmm.db"
    _fill(db, DEAD_PID, *S.leak(0))
    png = tmp_path / "t.png"
    code, out = _run(str(DEAD_PID), "--db", str(db), "--plot", str(png))
    assert code == 10, out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot:     {png}" in out
    # refused before the samples are read: a usage error
    code, out = _run(str(DEAD_PID), "--db", str(db), "--plot", str(tmp_path / "no/dir/x.png"))
    assert code == 2 and "Invalid value for '--plot': cannot write" in out, out


def test_plot_without_an_extension_is_a_png_and_named(tmp_path: Path) -> None:
    db = tmp_path / "pmm.db"
    _fill(db, DEAD_PID, *S.leak(0))
    code, out = _run(str(DEAD_PID), "--db", str(db), "--plot", str(tmp_path / "noext"))
    assert code == 10, out
    written = tmp_path / "noext.png"
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "noext").exists()
    assert f"plot:     {written}\n" in out
    # an extension matplotlib knows gives that format
    code, out = _run(str(DEAD_PID), "--db", str(db), "--plot", str(tmp_path / "t.svg"))
    assert code == 10 and b"<svg" in (tmp_path / "t.svg").read_bytes()[:400], out


def test_plot_of_an_unknown_format_is_refused_before_the_watch(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        t = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "pmctl", "trend", str(sleeper.pid),
                            "--watch", "1m", "--plot", str(tmp_path / "t.xyz")],
                           capture_output=True, text=True, env={**os.environ, **NO_DEVICE},
                           timeout=60)
        took = time.monotonic() - t
    finally:
        sleeper.kill()
        sleeper.wait()
    assert took < 10  # not after the minute's watch
    assert (r.returncode, r.stdout) == (2, ""), r
    head = (f"pmctl: Invalid value for '--plot': {tmp_path / 't.xyz'}: .xyz is not a format "
            "the plot can be written in; use one of ")
    assert r.stderr.startswith(head) and r.stderr.count("\n") == 1, r.stderr
    formats = r.stderr[len(head):].split(" (see")[0].split(", ")
    assert {".png", ".svg", ".pdf", ".jpg"} <= set(formats), formats
    assert ".xyz" not in formats and ".pgf" not in formats
    assert not list(tmp_path.iterdir())


def test_plot_in_binary_units(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plot's sizes in the unit of its largest value, its rate as the text's."""
    from matplotlib.figure import Figure

    seen: dict[str, Any] = {}
    save = Figure.savefig

    def capture(fig: Any, *args: Any, **kwargs: Any) -> None:
        ax = fig.axes[0]
        seen["ylabel"] = ax.get_ylabel()
        seen["legend"] = [t.get_text() for t in ax.get_legend().get_texts()]
        seen["top"] = max(max(line.get_ydata()) for line in ax.get_lines())
        save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", capture)
    db = tmp_path / "pmm.db"
    _fill(db, DEAD_PID, *S.leak(1, rate=4 << 20))  # 50 MiB growing to 2.4 GiB
    code, out = _run(str(DEAD_PID), "--db", str(db), "--plot", str(tmp_path / "t.png"))
    assert code == 10, out
    assert seen["ylabel"] == "GiB"
    assert 2.3 < seen["top"] < 2.5
    legend = seen["legend"]
    assert legend[:3] == [
        "rss", "vm", "lowest sample of each time slice"]
    rate = re.search(r"^rate:     (\+\d+\.\d MiB/min) ", out, re.M)
    assert rate and legend[3] == f"fitted floor {rate.group(1)}"


def test_not_a_database(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    code, out = _run(str(DEAD_PID), "--db", str(bad))
    assert code == 1
    assert "not a pmm database" in out or "not a database" in out




def test_watch_a_leaking_process_subprocess() -> None:
    child = subprocess.Popen([sys.executable, "-c", S.LEAKER], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        t = time.monotonic()
        r = subprocess.run(
            [sys.executable, "-m", "pmctl", "trend", str(child.pid), "--watch", "3",
             "--interval", "0.05", "--json"],
            capture_output=True, text=True, timeout=60)
        assert time.monotonic() - t >= 3.0
    finally:
        child.kill()
        child.wait()
    assert r.returncode == 10, r.stderr
    d = json.loads(r.stdout)
    assert d["source"] == "proc" and d["verdict"] == "LEAK"
    assert 55 <= d["samples"] <= 62
    # 64 KiB every 20 ms (plus sleep overshoot): about 3 MiB/s, at most 3.2
    assert 1000 * 60 < d["rate_kib_min"] < 3200 * 60


def test_watch_sleeping_process_is_inconclusive_for_seconds() -> None:
    """A sleeper's rss never moves; the kernel's rss moves in steps of up to
    256 KiB, so 3.5 s of it rule out nothing below 4 MiB/min: INCONCLUSIVE
    (exit 13), with about how long to watch for STABLE (256 KiB / 64 KiB/min
    = 4 minutes in all)."""
    child = subprocess.Popen(["sleep", "30"])
    try:
        code, out = _run(str(child.pid), "--watch", "3.5", "--interval", "0.1", "--json")
    finally:
        child.kill()
        child.wait()
    d = json.loads(out.splitlines()[-1] if out.startswith("sampling") else out)
    assert code == 13, out
    assert d["verdict"] == "INCONCLUSIVE" and d["rate_kib_min"] == 0.0
    assert 3.5 + d["watch_more_s"] == pytest.approx(256 * 1024 / d["matters_bytes_min"] * 60,
                                                     rel=0.05)


def test_watch_proc_source_needs_watch() -> None:
    code, out = _run("1", "--source", "proc")
    assert code == 2
    assert "--watch" in out


# -- the module, the database, units ---------------------------------------------------


def test_source_kmod_without_the_module_exits_3() -> None:
    """As every other command: the module is not loaded (3), not 'no samples'."""
    r = runner.invoke(app, ["trend", str(os.getpid()), "--source", "kmod"], env=NO_DEVICE)
    assert r.exit_code == 3, r.output
    assert "pmctl: /nonexistent/pmm does not exist: the pmm module is not loaded" in r.output


def test_auto_without_the_module_says_so(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    Store.open(db).close()
    r = runner.invoke(app, ["trend", str(os.getpid()), "--db", str(db)], env=NO_DEVICE)
    assert r.exit_code == 6, r.output
    assert f"no samples of pid {os.getpid()} in {db}, and the module is not loaded" in r.output


def test_source_db_without_the_database(tmp_path: Path) -> None:
    db = tmp_path / "none.db"
    code, out = _run(str(DEAD_PID), "--db", str(db), "--source", "db")
    assert code == 1, out
    assert f"no database at {db}" in out


def test_since_takes_units(tmp_path: Path) -> None:
    """--since 2m keeps the last 120 of 600 samples a second apart that end now."""
    from pmm.kernel.sampler import boottime_ns

    db = tmp_path / "pmm.db"
    now = boottime_ns()
    t, v = S.leak(0)
    st = Store.open(db)
    st.write([SampleRow(DEAD_PID, START, now - int((599 - ti) * 1e9), int(vi), int(vi))
              for ti, vi in zip(t, v, strict=True)],
             [ProcessRow(DEAD_PID, START, "synthetic", "/bin/x", "x", now)], (), [])
    st.close()
    for since in ("2m", "120", "120s", "120000ms"):
        code, out = _run(str(DEAD_PID), "--db", str(db), "--since", since, "--json")
        # the command starts a moment after `now`: 118-120 samples remain
        assert 118 <= json.loads(out)["samples"] <= 120, (since, out)
    code, out = _run(str(DEAD_PID), "--db", str(db), "--since", "2 weeks")
    assert code == 2 and "is not a duration" in out


def test_rates_and_sizes_in_binary_units(tmp_path: Path) -> None:
    """4 MiB/s reads +240.0 MiB/min, not +245760.0 KiB/min; JSON keeps the numbers."""
    db = tmp_path / "pmm.db"
    _fill(db, DEAD_PID, *S.leak(1, rate=4 << 20), sites=True)
    code, out = _run(str(DEAD_PID), "--db", str(db))
    assert code == 10, out
    m = re.search(r"^rate:     \+(\d+\.\d) MiB/min \(95% CI \+(\d+\.\d) MiB/min \.\. "
                  r"\+(\d+\.\d) MiB/min\), floor (\d+\.\d) GiB, \+(\d+\.\d) GiB over the "
                  r"window$", out, re.M)
    assert m, out
    assert float(m.group(1)) == pytest.approx(240.0, abs=0.2)
    assert float(m.group(2)) <= float(m.group(1)) <= float(m.group(3))
    assert float(m.group(5)) == pytest.approx(4 * 599 / 1024, abs=0.1)  # GiB over 599 s
    assert "KiB/min" in out  # the sites: 2 KiB/s and 100 B/s
    site = re.search(r"^\s*7\s+\+120\.0 KiB/min\s+(\d+\.\d) MiB\s+\d+\s+leak_here\(\) leak\.c:27$",
                     out, re.M)
    assert site, out
    assert "+5.9 KiB/min" in out  # site 9: 100 B/s
    table = out.split("\n\n")[1].splitlines()
    assert table[0].split() == ["time", "rss", "vm"]
    assert re.fullmatch(r"\+0\.0s\s+50\.\d MiB\s+58\.\d MiB", table[1]), table[1]
    code, out = _run(str(DEAD_PID), "--db", str(db), "--json")
    d = json.loads(out)
    assert d["rate_bytes_min"] == pytest.approx(d["rate_kib_min"] * 1024)
    assert d["rate_bytes_min_low"] == pytest.approx(d["rate_kib_min_low"] * 1024)
    assert d["rate_bytes_min_high"] == pytest.approx(d["rate_kib_min_high"] * 1024)
    assert d["rate_bytes_min"] == pytest.approx(d["slope_bytes_s"] * 60)
    assert d["sites"][0]["rate_bytes_min"] == pytest.approx(2048 * 60)
    assert d["watch"] is None


def _live_start() -> int:
    from pmm.kernel.sampler import read_stat

    return read_stat(os.getpid()).start_time


def test_a_live_leak_forecasts_exhaustion_and_says_how_to_find_its_sites(
        tmp_path: Path) -> None:
    """The process runs (pytest itself): the forecast from the available
    memory, and, with no sites in the database, what to run to find them."""
    db = tmp_path / "pmm.db"
    pid = os.getpid()
    _fill(db, pid, *S.leak(1, rate=4096), start=_live_start())
    code, out = _run(str(pid), "--db", str(db), "--json")
    d = json.loads(out)
    assert (code, d["verdict"], d["exited"]) == (10, "LEAK", False)
    assert d["mem_available"] > 0
    assert d["exhausted_in_s"] == pytest.approx(d["mem_available"] / d["slope_bytes_s"])
    code, out = _run(str(pid), "--db", str(db))
    assert code == 10
    assert "exhausted in " in out
    assert (f"next:     find the sites: pmctl attach {pid} (or start it with pmctl run), "
            f"then pmctl leaks {pid}; or pmctl report {pid} -o FILE.html") in out


def test_a_leak_with_its_sites_listed_needs_no_hint(tmp_path: Path) -> None:
    db = tmp_path / "pmm.db"
    _fill(db, DEAD_PID, *S.leak(1, rate=4096), sites=True)
    code, out = _run(str(DEAD_PID), "--db", str(db))
    assert code == 10 and "sites whose live bytes grow fastest:" in out
    assert "next:" not in out


def test_inconclusive_has_its_own_exit_code_and_says_how_long_to_watch(
        tmp_path: Path) -> None:
    """A minute of flat but noisy samples rules nothing out: not STABLE (exit
    0, which a script reads as healthy) but INCONCLUSIVE, exit 13."""
    db = tmp_path / "pmm.db"
    pid = os.getpid()
    t, v = S.flat(1, n=60)
    _fill(db, pid, t, v, start=_live_start())
    code, out = _run(str(pid), "--db", str(db), "--json")
    d = json.loads(out)
    assert (code, d["verdict"], d["exit_code"]) == (13, "INCONCLUSIVE", 13), d["reason"]
    assert d["matters_bytes_min"] <= 64 * 1024 and d["watch_more_s"] > 0
    code, out = _run(str(pid), "--db", str(db))
    assert code == 13
    assert re.search(r"verdict:  INCONCLUSIVE \(60 samples over 59s\): .*, but the 95% CI "
                     r"reaches \+\S+ \S+/min .*above the \+\S+ \S+/min that matters", out), out
    assert re.search(r"next:     watch about \S+ more to decide: pmctl trend \d+ later "
                     r"\(pmd keeps sampling\)", out), out
