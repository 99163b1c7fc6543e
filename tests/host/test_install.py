"""make install into a staging root (DESTDIR) lays out every file, the
installed Python package imports and runs, and make uninstall removes it all.
(Loading the installed module with modprobe is tests/guest/test_install.py.)"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

TOP = Path(__file__).resolve().parents[2]
BUILT = [TOP / "kmod" / "pmm.ko", TOP / "hooklib" / "libpmmhook.so", TOP / "hooklib" / "pmm-inject"]


def kver() -> str:
    return subprocess.run([str(TOP / "scripts" / "kver.sh")], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.skipif(not all(p.exists() for p in BUILT), reason="run `make` first")
def test_install_layout_and_uninstall(tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    env = dict(os.environ, DESTDIR=str(stage), PREFIX="/usr/local", PMM_GROUP="pmm")
    subprocess.run([str(TOP / "scripts" / "install.sh"), "install"], cwd=TOP, env=env,
                   check=True, capture_output=True)
    k = kver()
    expected = [
        f"lib/modules/{k}/extra/pmm.ko",
        f"lib/modules/{k}/modules.dep",
        "usr/local/lib/libpmmhook.so",
        "usr/local/libexec/pmm/pmm-inject",
        "usr/local/include/pmm_hooks.h",
        "usr/local/include/pmm.h",
        "usr/local/bin/pmctl",
        "usr/local/bin/pmd",
        "usr/local/lib/pmm/python/pmctl/cli.py",
        "usr/local/lib/pmm/python/pmd/main.py",
        "etc/udev/rules.d/60-pmm.rules",
        "etc/systemd/system/pmd.service",
        "usr/local/share/pmm/manifest",
    ]
    for rel in expected:
        assert (stage / rel).is_file(), rel
    assert "extra/pmm.ko:" in (stage / f"lib/modules/{k}/modules.dep").read_text()
    rules = (stage / "etc/udev/rules.d/60-pmm.rules").read_text()
    assert 'KERNEL=="pmm", SUBSYSTEM=="misc", OWNER="root", GROUP="pmm", MODE="0660"' in rules
    unit = (stage / "etc/systemd/system/pmd.service").read_text().splitlines()
    assert "ExecStart=/usr/local/bin/pmd --db /var/lib/pmm/pmm.db" in unit
    # the database is the group's to read, no one else's
    for line in ("StateDirectoryMode=0750", "UMask=0027", "Environment=PMM_GROUP=pmm"):
        assert line in unit
    assert "CAP_CHOWN" in next(ln for ln in unit if ln.startswith("CapabilityBoundingSet="))
    wrapper = (stage / "usr/local/bin/pmctl").read_text()
    assert "PYTHONPATH=/usr/local/lib/pmm/python" in wrapper
    # The wrapper names its final path; run its command with the staged tree instead.
    staged = wrapper.replace("/usr/local/lib/pmm/python", str(stage / "usr/local/lib/pmm/python"))
    out = subprocess.run(["sh", "-c", staged.split("\n", 1)[1], "pmctl", "--help"],
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert "start" in out.stdout and "trend" in out.stdout

    subprocess.run([str(TOP / "scripts" / "install.sh"), "uninstall"], cwd=TOP, env=env,
                   check=True, capture_output=True)
    left = [p for p in stage.rglob("*") if p.is_file() and not p.name.startswith("modules.")]
    assert left == []


def test_uninstall_without_install_says_so(tmp_path: Path) -> None:
    env = dict(os.environ, DESTDIR=str(tmp_path))
    r = subprocess.run([str(TOP / "scripts" / "install.sh"), "uninstall"], cwd=TOP, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert "pmm is not installed there" in r.stderr
