"""pmm.installed: the hints name what the user's way of installing installs
(apt in Debian's package, the extra in a source checkout, pip otherwise);
the packaged code itself is tests/host/test_deb.py's."""

from __future__ import annotations

from pathlib import Path

import pmm
from pmm import installed

HERE = Path(pmm.__file__).resolve().parent


def test_this_checkout_is_a_source_tree() -> None:
    assert installed.source_tree(HERE) == HERE.parents[1]
    assert not installed.packaged(HERE)
    assert installed.python_hint("matplotlib", "python3-matplotlib", "plot", HERE) == \
        "pip install '.[plot]' in pmm's source tree"
    assert "make install" in installed.hook_hint(HERE)


def test_debian_package_says_apt(tmp_path: Path) -> None:
    pkg = tmp_path / "usr/share/pmm/python/pmm"
    pkg.mkdir(parents=True)
    assert installed.python_hint("matplotlib", "python3-matplotlib", "plot", pkg) == \
        "pip install matplotlib"  # a wheel's copy: no mark yet
    (pkg / installed.PACKAGED_MARK).write_text("pmm-tools\n")
    assert installed.packaged(pkg)
    assert installed.python_hint("matplotlib", "python3-matplotlib", "plot", pkg) == \
        "apt install python3-matplotlib"
    assert installed.hook_hint(pkg).startswith("install it with `apt install libpmmhook`")
    assert "pip" not in installed.hook_hint(pkg) and "make" not in installed.hook_hint(pkg)
    assert installed.hook_hint(pkg, helper=True) == "install it with `apt install libpmmhook`"
