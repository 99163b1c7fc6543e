"""The Python side's layering: src/pmm is the library; pmctl and pmd are front
ends over it that never import each other, and the library imports neither
them nor a CLI framework."""

from __future__ import annotations

import ast
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]


def imported(package_dir: Path) -> dict[str, set[str]]:
    """Top-level names each module of the package imports (lazy imports too)."""
    out: dict[str, set[str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
        out[str(path.relative_to(package_dir.parent))] = names
    return out


def offenders(package_dir: Path, forbidden: set[str]) -> dict[str, set[str]]:
    return {m: names & forbidden for m, names in imported(package_dir).items()
            if names & forbidden}


def test_library_imports_no_front_end() -> None:
    assert offenders(TOP / "src" / "pmm", {"pmctl", "pmd", "typer", "click"}) == {}


def test_front_ends_import_the_library_not_each_other() -> None:
    assert offenders(TOP / "pmctl", {"pmd"}) == {}
    assert offenders(TOP / "pmd", {"pmctl"}) == {}
    assert any("pmm" in names for names in imported(TOP / "pmctl").values())
    assert any("pmm" in names for names in imported(TOP / "pmd").values())


def test_the_check_sees_an_offender(tmp_path: Path) -> None:
    """A front end importing the other is caught (the check can fail)."""
    pkg = tmp_path / "pmctl"
    pkg.mkdir()
    (pkg / "probe.py").write_text("def f() -> None:\n    from pmd import main  # noqa: F401\n")
    assert offenders(pkg, {"pmd"}) == {"pmctl/probe.py": {"pmd"}}
