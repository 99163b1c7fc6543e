"""Fixtures of the in-guest suite; the helpers they use are helpers.py."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import PROGS, load_module, spawn_sleeper, unload_module


@pytest.fixture(scope="session", autouse=True)
def in_guest() -> None:
    if not Path("/sys/module").exists() or os.geteuid() != 0:
        pytest.exit("the guest suite runs as root inside the VM: use `make test`", 2)


@pytest.fixture()
def pmm() -> Iterator[None]:
    """The module is loaded for the test and unloaded after it, so every test
    starts from a fresh configuration and no state leaks between tests."""
    unload_module()
    load_module()
    yield
    unload_module()


@pytest.fixture(scope="session")
def progs() -> Path:
    return PROGS


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pmctl's maps cache in the test's own directory, and the default device."""
    monkeypatch.setenv("PMM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PMM_DEVICE", raising=False)
    return tmp_path / "cache"


@pytest.fixture()
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """`sleep 60` once it has exec'd (spawn_sleeper), killed after the test."""
    p = spawn_sleeper()
    try:
        yield p
    finally:
        p.kill()
        p.wait()
