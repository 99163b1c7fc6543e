"""The module installed by `make install` into a staging root loads with
modprobe (DESTDIR layout plus depmod -b), and /dev/pmm appears as the udev
rule's default mode says."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from helpers import KO, TOP, module_loaded, unload_module


def test_staged_module_loads_with_modprobe(tmp_path: Path) -> None:
    unload_module()
    stage = tmp_path / "stage"
    kver = os.uname().release
    env = dict(os.environ, DESTDIR=str(stage), KVER=kver, PMM_INSTALL_PYTHON="0",
               PMM_KO=str(KO))
    subprocess.run([str(TOP / "scripts" / "install.sh"), "install"], cwd=TOP, env=env,
                   check=True, capture_output=True)
    assert (stage / f"lib/modules/{kver}/extra/pmm.ko").is_file()
    try:
        subprocess.run(["modprobe", "-d", str(stage), "pmm"], check=True, capture_output=True)
        assert module_loaded()
        assert Path("/dev/pmm").is_char_device()
        assert oct(Path("/dev/pmm").stat().st_mode & 0o777) == "0o600"
        info = subprocess.run(["modinfo", "-b", str(stage), "-k", kver, "-F", "filename", "pmm"],
                              capture_output=True, text=True, check=True).stdout.strip()
        assert info == str(stage / f"lib/modules/{kver}/extra/pmm.ko")
    finally:
        unload_module()
    subprocess.run([str(TOP / "scripts" / "install.sh"), "uninstall"], cwd=TOP, env=env,
                   check=True, capture_output=True)
    assert not (stage / f"lib/modules/{kver}/extra/pmm.ko").exists()
