"""pmd's command line as a user meets it: --version, help, --pid given once per
process (and the older `--pid A B`), durations with units, and one line with
exit 2 for a bad argument or 1 for a database that cannot be opened, never a
traceback."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import pmm
from pmd import main as pmd_main
from pmm.daemon import Options
from pmm.store import default_db_path

TOP = Path(__file__).resolve().parents[2]


def run_pmd(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pmd.main", "--no-genl", *args],
                          capture_output=True, text=True, cwd=TOP, timeout=timeout)


@pytest.fixture()
def served(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Options, bool]]:
    """The options pmd's command line hands the daemon (which does not run)."""
    calls: list[tuple[Options, bool]] = []

    def serve(opts: Options, create_parents: bool = False) -> int:
        calls.append((opts, create_parents))
        return 0

    monkeypatch.setattr(pmd_main, "serve", serve)
    return calls


def invoke(*args: str) -> Any:
    return CliRunner().invoke(pmd_main.app, list(args))


def test_version() -> None:
    r = subprocess.run([sys.executable, "-m", "pmd.main", "--version"], capture_output=True,
                       text=True, cwd=TOP, timeout=30)
    assert (r.returncode, r.stdout, r.stderr) == (0, f"pmd {pmm.__version__}\n", "")
    assert re.fullmatch(r"pmd \d+\.\d+\.\d+\S*\n", r.stdout)


def test_help_names_what_things_are() -> None:
    r = invoke("--help")
    assert r.exit_code == 0
    text = re.sub(r"[\s│╭╮╰╯─]+", " ", r.stdout)
    assert "Usage: pmd [OPTIONS]" in text
    assert "--pid PID" in text and "repeat for more (--pid 1 --pid 2)" in text
    assert "--interval DURATION" in text and "[default: 1s]" in text
    assert "a bare number is seconds" in text
    assert "1 a --pid names no process, the database cannot be opened" in text
    for private in ("{pid}", "START_PID", "GET_PIDS", "PMM_CMD", "PMM_A_", "the article"):
        assert private not in text


def test_durations_take_units_and_a_bare_number_is_seconds(
        served: list[tuple[Options, bool]]) -> None:
    for args, interval, commit in ((["--interval", "100ms", "--commit-interval", "2s"], 0.1, 2),
                                   (["--interval", "0.05", "--commit-interval", "1m"], 0.05, 60),
                                   (["--interval", "1h"], 3600, 1.0),
                                   ([], 1.0, 1.0)):
        served.clear()
        r = invoke("--db", "/nonexistent/x.db", *args)
        assert r.exit_code == 0, r.output
        (opts, _), = served
        assert (opts.interval, opts.commit_interval) == (interval, commit), args


def test_the_default_database_and_its_directories(served: list[tuple[Options, bool]],
                                                  tmp_path: Path) -> None:
    """Without --db, pmd writes where pmctl looks and makes the directories
    (~/.local/share/pmm); a path given is used as it is."""
    r = CliRunner().invoke(pmd_main.app, [], env={"PMM_DB": None, "HOME": str(tmp_path)})
    assert r.exit_code == 0, r.output
    assert served[-1][0].db == default_db_path(writer=True) and served[-1][1] is True
    r = CliRunner().invoke(pmd_main.app, [], env={"PMM_DB": str(tmp_path / "e.db")})
    assert served[-1][0].db == tmp_path / "e.db" and served[-1][1] is False
    invoke("--db", str(tmp_path / "o.db"))
    assert served[-1][0].db == tmp_path / "o.db" and served[-1][1] is False


def test_pid_once_per_process_and_the_older_list(served: list[tuple[Options, bool]]) -> None:
    assert invoke("--db", "x.db", "--pid", "7", "--pid", "9", "--pid", "7").exit_code == 0
    assert served[-1][0].pids == [7, 9]  # in order, each once
    assert pmd_main._spread_pid_lists(["--pid", "7", "8", "-v", "--pid=3", "4", "--db", "5"]) \
        == ["--pid", "7", "--pid", "8", "-v", "--pid=3", "--pid", "4", "--db", "5"]
    assert pmd_main._spread_pid_lists(["--db", "5", "6"]) == ["--db", "5", "6"]


def test_pid_repeated_and_listed_samples_each(tmp_path: Path,
                                             sleepers: list[subprocess.Popen[bytes]]) -> None:
    pids = [p.pid for p in sleepers]
    a, b, c = pids
    db = tmp_path / "pmm.db"
    p = subprocess.Popen([sys.executable, "-m", "pmd.main", "--no-genl", "--db", str(db),
                          "--pid", str(a), "--pid", str(b), str(c), "--interval", "50ms",
                          "--commit-interval", "50ms"],
                         stderr=subprocess.PIPE, text=True, cwd=TOP)
    assert p.stderr is not None

    def sampled() -> list[int]:
        try:
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            try:
                return [r[0] for r in conn.execute(
                    "SELECT DISTINCT pid FROM samples ORDER BY pid")]
            finally:
                conn.close()
        except sqlite3.Error:
            return []  # not made yet

    try:
        line = p.stderr.readline()
        while "pmd running" not in line:
            assert line, "pmd exited early"
            line = p.stderr.readline()
        assert "3 pid(s) from /proc every 50ms" in line
        end = time.monotonic() + 20
        while sampled() != sorted(pids) and time.monotonic() < end:
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=20) == 0
    finally:
        p.kill()
        p.wait()
    assert sampled() == sorted(pids)


@pytest.mark.parametrize(("args", "says"), [
    (["--interval", "5x"], "Invalid value for '--interval': '5x' is not a duration: write a "
     "number with a unit, e.g. 100ms, 5s, 2m, 1h (a bare number is seconds)"),
    (["--interval", "0"], "Invalid value for '--interval': 0 is out of range: 10ms to 1h"),
    (["--commit-interval", "2h"],
     "Invalid value for '--commit-interval': 2h is out of range: 10ms to 1h"),
    (["--pid", "0"], "Invalid value for '--pid'"),
    (["--window", "5"], "Invalid value for '--window'"),
    (["--frobnicate"], "No such option: --frobnicate"),
    (["7"], "Got unexpected extra argument"),
])
def test_bad_argument_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    r = run_pmd(*args)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"pmd: {says}"), r.stderr
    assert r.stderr.endswith(" (see `pmd --help`)\n")
    assert len(r.stderr.splitlines()) == 1 and r.stdout == ""


def test_database_errors_say_what_happened(tmp_path: Path) -> None:
    garbage = tmp_path / "notes.txt"
    garbage.write_text("not a database\n" * 300)
    cases = [
        (tmp_path, f"cannot open the database {tmp_path}: Is a directory (give the database "
         f"file, e.g. {tmp_path}/pmm.db)"),
        (tmp_path / "no" / "such" / "pmm.db",
         f"cannot open the database {tmp_path}/no/such/pmm.db: No such file or directory (no "
         f"directory {tmp_path}/no: create it, or choose another path with --db)"),
        (garbage, f"cannot open the database {garbage}: not a pmm database (another kind of "
         "file, or a damaged database: file is not a database)"),
        (tmp_path / "file.db" / "x.db",
         f"cannot open the database {tmp_path}/file.db/x.db: Not a directory"),
    ]
    (tmp_path / "file.db").write_text("")
    for db, says in cases:
        r = run_pmd("--db", str(db), "--pid", str(os.getpid()))
        assert r.returncode == 1, r.stderr
        assert r.stderr.startswith(f"pmd: {says}"), r.stderr
        assert len(r.stderr.splitlines()) == 1
    assert not (tmp_path / "no").exists()  # a mistyped --db makes no directories


def test_an_unexpected_failure_is_one_line_and_exit_1(monkeypatch: pytest.MonkeyPatch) -> None:
    def serve(opts: Options, create_parents: bool = False) -> int:
        raise RuntimeError("the loop broke")

    monkeypatch.setattr(pmd_main, "serve", serve)
    r = invoke("--db", "x.db")
    assert (r.exit_code, r.stdout) == (1, "")
    assert r.stderr == ("pmd: internal error: RuntimeError: the loop broke (please "
                        "report this)\n")


def test_nothing_to_watch_is_a_usage_error(tmp_path: Path) -> None:
    """--no-genl without --pid would log "0 pid(s)" and run for ever."""
    r = run_pmd("--db", str(tmp_path / "pmm.db"))
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == ("pmd: nothing to watch: --no-genl without --pid; give --pid PID, or "
                        "drop --no-genl to record the processes the module monitors (see "
                        "`pmd --help`)\n")
    assert not (tmp_path / "pmm.db").exists()


def test_a_pid_that_names_no_process_is_refused(tmp_path: Path) -> None:
    """Exit 1 (pmd's failure; pmctl's own status for it, 5, is not pmd's),
    before the database is made."""
    with open("/proc/sys/kernel/pid_max") as f:
        never = int(f.read())  # pids are below pid_max
    db = tmp_path / "pmm.db"
    r = run_pmd("--db", str(db), "--pid", str(os.getpid()), "--pid", str(never))
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == f"pmd: no such process: pid {never}\n"
    r = run_pmd("--db", str(db), "--pid", str(never), "--pid", str(never + 1))
    assert r.stderr == f"pmd: no such processes: pids {never}, {never + 1}\n"
    assert not db.exists()
