"""How this copy of pmm was installed, and so what to tell a user to install.

Three ways: Debian's pmm-tools package (scripts/build-deb.sh leaves the
file PACKAGED_MARK in the package's pmm/: missing pieces come from apt), a
source checkout (the code in the tree's src/, beside pyproject.toml: pip's
extras), or pip/pipx from a wheel (pip). The hints name what the user's way
installs.
"""

from __future__ import annotations

from pathlib import Path

# a file beside this one in the pmm-tools package (scripts/build-deb.sh)
PACKAGED_MARK = "debian-package"
# the Debian package of the hook (libpmmhook.so, pmm-inject, pmm-scan)
HOOK_PACKAGE = "libpmmhook"


def _package_dir() -> Path:
    return Path(__file__).resolve().parent


def packaged(package_dir: Path | None = None) -> bool:
    """This code is pmm-tools' (Debian's package)."""
    return ((package_dir or _package_dir()) / PACKAGED_MARK).is_file()


def source_tree(package_dir: Path | None = None) -> Path | None:
    """The checkout this code runs from (its src/pmm), else None."""
    top = (package_dir or _package_dir()).parents[1]
    return top if (top / "pyproject.toml").is_file() and (top / "hooklib").is_dir() else None


def python_hint(module: str, debian: str, extra: str,
                package_dir: Path | None = None) -> str:
    """The command that installs the Python distribution `module`: apt's
    `debian` package for pmm-tools, the `extra` of pmm's pyproject.toml in a
    source checkout, else pip."""
    if packaged(package_dir):
        return f"apt install {debian}"
    if source_tree(package_dir) is not None:
        return f"pip install '.[{extra}]' in pmm's source tree"
    return f"pip install {module}"


def hook_hint(package_dir: Path | None = None, helper: bool = False) -> str:
    """How to get the hook library (or, `helper`, pmm-inject and pmm-scan,
    which come with it) when it is missing."""
    if packaged(package_dir):
        return f"install it with `apt install {HOOK_PACKAGE}`" + (
            "" if helper else ", or set PMM_HOOKLIB to its path")
    if helper:
        return "build it with `make`, or install it with `make install` (beside the hook library)"
    return ("build it with `make`, install it with `make install`, or set PMM_HOOKLIB to "
            "its path")
