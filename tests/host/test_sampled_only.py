"""After `pmd --pid PID` (samples from /proc, no hook in the process),
`pmctl leaks` and `pmctl stats` say that pmd recorded no sites for it and
how to get them, not "module not loaded" nor an empty table: the real pmd
writes the database, the real pmctl reads it, without the module."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

TOP = Path(__file__).resolve().parents[2]
NO_DEVICE = {"PMM_DEVICE": "/nonexistent/pmm"}  # the module is not loaded
NOT_MONITORED = 6  # pmctl/exitcodes.py: what `trend` says when it has nothing to show


def samples_of(db: Path, pid: int) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
            return int(c.execute("SELECT count(*) FROM samples WHERE pid = ?",
                                 (pid,)).fetchone()[0])
    except sqlite3.Error:
        return 0  # not made yet


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    """pmd's database with /proc samples of a running `sleep` (pmd stopped)."""
    db = tmp_path_factory.mktemp("db") / "pmm.db"
    sleeper = subprocess.Popen(["sleep", "120"])
    try:
        pmd = subprocess.Popen([sys.executable, "-m", "pmd.main", "--no-genl", "--db", str(db),
                                "--pid", str(sleeper.pid), "--interval", "50ms",
                                "--commit-interval", "50ms"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               cwd=TOP, env={**os.environ, **NO_DEVICE})
        deadline = time.monotonic() + 30
        while samples_of(db, sleeper.pid) < 3 and pmd.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        pmd.terminate()
        err = pmd.communicate(timeout=30)[1]
        assert pmd.returncode == 0, err
        assert samples_of(db, sleeper.pid) >= 3
        yield db, sleeper.pid
    finally:
        sleeper.kill()
        sleeper.wait()


def pmctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pmctl", *args], capture_output=True,
                          text=True, cwd=TOP, env={**os.environ, **NO_DEVICE}, timeout=60)


@pytest.mark.parametrize("command", ["leaks", "stats"])
def test_says_pmd_recorded_no_sites_and_how_to_get_them(recorded: tuple[Path, int],
                                                        command: str) -> None:
    db, pid = recorded
    for args in ([], ["--json"]):
        r = pmctl(command, str(pid), "--db", str(db), *args)
        assert (r.returncode, r.stdout) == (NOT_MONITORED, ""), r
        assert r.stderr == (
            f"pmctl: pmd recorded no sites for pid {pid} (sleep) in {db}: it sampled its "
            "memory from /proc only (the hook was not in it). To get its sites, start it with "
            f"the hook (`pmctl run -- CMD`) or run `pmctl attach {pid}` while pmd runs\n")
        assert "module" not in r.stderr


def test_a_pid_pmd_did_not_record_keeps_the_module_error(recorded: tuple[Path, int]) -> None:
    db, pid = recorded
    other = os.getpid()  # alive, in no table
    r = pmctl("leaks", str(other), "--db", str(db))
    assert r.returncode == 3 and "pmd recorded" not in r.stderr, r
    # the database is only read: the rows pmd wrote are all there still
    before = samples_of(db, pid)
    pmctl("stats", str(pid), "--db", str(db))
    assert samples_of(db, pid) == before
