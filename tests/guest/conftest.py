"""Fixtures for the in-guest suite: it runs as root inside the VM, on a kernel
that loads the freshly built pmm.ko (scripts/vmtest.sh)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

TOP = Path(os.environ.get("PMM_TOP", Path(__file__).resolve().parents[2]))
KO = Path(os.environ.get("PMM_KO", TOP / "kmod" / "pmm.ko"))
PROGS = TOP / "tests" / "progs" / "bin"
FULL = os.environ.get("PMM_FULL", "0") == "1"


def module_loaded(name: str = "pmm") -> bool:
    with open("/proc/modules") as f:
        return any(line.split()[0] == name for line in f)


def load_module(ko: Path = KO, *params: str) -> None:
    if not module_loaded():
        subprocess.run(["insmod", str(ko), *params], check=True)


def unload_module() -> None:
    if module_loaded():
        subprocess.run(["rmmod", "pmm"], check=True)


def as_nobody(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    """Runs argv as the unprivileged user nobody (no capabilities)."""
    cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv]
    return subprocess.run(cmd, text=True, capture_output=True, **kw)  # type: ignore[call-overload,no-any-return]


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
