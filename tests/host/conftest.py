"""Fixtures the host suite shares."""

from __future__ import annotations

import subprocess
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
