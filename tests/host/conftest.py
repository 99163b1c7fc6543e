"""Fixtures the host suite shares."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

TOP = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session", autouse=True)
def built() -> None:
    """The hook, its test programs (tests/progs, with postmortem/), the
    examples and the benchmarks' programs, built once a session (make does
    nothing when they are up to date)."""
    for d in ("hooklib", "tests/progs", "examples", "bench"):
        subprocess.run(["make", "-s", "-C", str(TOP / d)], check=True, timeout=600)


def start_sleeping() -> subprocess.Popen[bytes]:
    """`sleep 120`, returned once it is sleep: Popen returns when the exec
    closed its pipe, and the kernel names the process (comm) after that; a
    test that reads its /proc/PID/comm or its samples' comm could find the
    test's name."""
    p = subprocess.Popen(["sleep", "120"])
    deadline = time.monotonic() + 30
    while Path(f"/proc/{p.pid}/comm").read_text() != "sleep\n":
        assert time.monotonic() < deadline, "sleep did not start"
        time.sleep(0.005)
    return p


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture()
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process that only sleeps, to watch, sample or record: its rss and
    its maps do not move. Killed after the test."""
    p = start_sleeping()
    try:
        yield p
    finally:
        stop([p])


@pytest.fixture()
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Three sleepers."""
    ps: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(3):
            ps.append(start_sleeping())
        yield ps
    finally:
        stop(ps)
