"""Helpers of the in-guest suite (it runs as root inside the VM, on a kernel
that loads the freshly built pmm.ko: scripts/vmtest.sh): the tree's paths,
loading and unloading the module, processes to monitor, other users.
conftest.py holds only the fixtures; /dev/pmm's helpers are kmod_dev.py."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

TOP = Path(os.environ.get("PMM_TOP", Path(__file__).resolve().parents[2]))
KO = Path(os.environ.get("PMM_KO", TOP / "kmod" / "pmm.ko"))
PROGS = TOP / "tests" / "progs" / "bin"
FULL = os.environ.get("PMM_FULL", "0") == "1"


def kmod_has(feature: str) -> bool:
    """Whether the module was built with HAVE_<feature>: the compat layer's
    probes (pmm_probes.h, beside pmm.ko) found that kernel API."""
    return f"#define HAVE_{feature} 1" in (KO.parent / "pmm_probes.h").read_text()


def module_loaded(name: str = "pmm") -> bool:
    with open("/proc/modules") as f:
        return any(line.split()[0] == name for line in f)


def load_module(ko: Path = KO, *params: str) -> None:
    if not module_loaded():
        r = subprocess.run(["insmod", str(ko), *params], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"insmod {ko} failed: {r.stderr.strip()}")


def holders_of_device(path: str = "/dev/pmm") -> list[int]:
    """Pids (other than ours) with the device open."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if any(os.readlink(fd) == path for fd in (proc / "fd").iterdir()):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def unload_module() -> None:
    """rmmod pmm. A test that failed may have left a process holding /dev/pmm:
    kill it, so one failure does not turn every later test into an error."""
    for attempt in range(80):
        if not module_loaded():
            return
        if subprocess.run(["rmmod", "pmm"], capture_output=True).returncode == 0:
            return
        if attempt < 30:  # a reader (pmd harvesting an exit) may be about to close it
            time.sleep(0.1)
            continue
        for pid in holders_of_device():
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    raise RuntimeError(f"rmmod pmm keeps failing; /dev/pmm held by {holders_of_device()}")


def as_nobody(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    """Runs argv as the unprivileged user nobody (no capabilities)."""
    cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv]
    return subprocess.run(cmd, text=True, capture_output=True, **kw)  # type: ignore[call-overload,no-any-return]


def spawn_sleeper(seconds: int = 60) -> subprocess.Popen[bytes]:
    """`sleep SECONDS`, returned once it has exec'd: Popen returns after fork,
    and until exec the child's comm is still the test's."""
    p = subprocess.Popen(["sleep", str(seconds)])
    for _ in range(500):
        try:
            if Path(f"/proc/{p.pid}/comm").read_text() == "sleep\n":
                break
        except OSError:
            break
        time.sleep(0.01)
    return p


def pmctl(*args: str) -> Any:
    """pmctl in this process (a new Python starts slowly under TCG): the
    result's exit_code, stdout and stderr are the real command's."""
    from typer.testing import CliRunner

    from pmctl import cli

    return CliRunner().invoke(cli.app, list(args))


def pmctl_json(*args: str) -> Any:
    r = pmctl(*args, "--json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)
