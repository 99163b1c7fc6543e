"""The Python side as a user installs it: a wheel built from this tree goes into
a new venv (python3 -m venv, pip install of the wheel), whose pmctl and pmd
run; the wheel carries the long description, classifiers, the license and
its file, every package of the tree, and only the light dependencies.

Marked `packaging` (deselect with -m "not packaging"): it builds the wheel
and installs its dependencies from PyPI or pip's cache, about 25 s here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from collections.abc import Iterator
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest

TOP = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((TOP / "pyproject.toml").read_text())["project"]
pytestmark = pytest.mark.packaging


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # from a copy of what the build reads (pip builds in the tree it is given,
    # and another test run may be building in this one)
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(TOP / name, src / name)
    for d in ("src/pmm", "pmctl", "pmd"):
        shutil.copytree(TOP / d, src / d, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    # build isolation: the setuptools pyproject.toml asks for, not the venv's
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
                        str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (whl,) = out.glob("pmm-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A new venv with the wheel and its dependencies installed, nothing else."""
    d = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(d)], check=True,
                   timeout=120)
    # this Python's pip installs into the new venv (no ensurepip: seconds saved)
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(d / "bin" / "python"),
                        "install", "-q", str(wheel)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    yield d


def metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return Parser().parsestr(z.read(name).decode())


def run(venv: Path, tool: str, *args: str, timeout: float = 60
        ) -> subprocess.CompletedProcess[str]:
    # no PYTHONPATH, no source tree: only what the venv holds
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(venv), "PMM_DEVICE": "/nonexistent"}
    return subprocess.run([str(venv / "bin" / tool), *args], capture_output=True, text=True,
                          env=env, cwd=venv, timeout=timeout)


def test_pmctl_and_pmd_run_from_a_new_venv(venv: Path) -> None:
    version = PYPROJECT["version"]
    for tool in ("pmctl", "pmd"):
        r = run(venv, tool, "--version")
        assert (r.returncode, r.stdout, r.stderr) == (0, f"{tool} {version}\n", "")
    # the runtime needs neither numpy nor pyelftools (optional: the elf extra)
    r = run(venv, "python", "-c", "import importlib.util as u; "
            "print([m for m in ('numpy', 'elftools', 'matplotlib') if u.find_spec(m)])")
    assert r.stdout == "[]\n", r.stderr


def test_pipx_install_gives_pmctl_and_pmd(wheel: Path, tmp_path: Path) -> None:
    """pipx, as a user installs command-line tools: its own venv, the two
    commands on PATH."""
    pipx = Path(sys.executable).parent / "pipx"
    if not pipx.exists():
        pytest.skip("pipx is not installed in this venv (the dev extra has it)")
    home, bin_dir = tmp_path / "pipx", tmp_path / "bin"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIPX_HOME": str(home),
           "PIPX_BIN_DIR": str(bin_dir), "PIPX_MAN_DIR": str(tmp_path / "man")}
    r = subprocess.run([str(pipx), "install", "--python", sys.executable, str(wheel)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    version = PYPROJECT["version"]
    for tool in ("pmctl", "pmd"):
        r = subprocess.run([str(bin_dir / tool), "--version"], capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, timeout=60)
        assert (r.returncode, r.stdout, r.stderr) == (0, f"{tool} {version}\n", "")


def test_trend_watch_from_a_new_venv_without_the_module(venv: Path) -> None:
    # the detector in plain Python, from /proc alone
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        t = time.monotonic()
        r = run(venv, "pmctl", "trend", str(sleeper.pid), "--watch", "4s", "--interval", "100ms",
                "--json")
        assert time.monotonic() - t >= 4.0
    finally:
        sleeper.kill()
        sleeper.wait()
    # 4 s of a sleeper's unmoving rss rule nothing out: INCONCLUSIVE, exit 13
    assert r.returncode == 13, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["source"], doc["verdict"]) == ("proc", "INCONCLUSIVE")
    assert 35 <= doc["samples"] <= 42


def test_wheel_metadata(wheel: Path) -> None:
    m = metadata(wheel)
    classifiers = m.get_all("Classifier") or []
    requires = m.get_all("Requires-Dist") or []
    assert m["Name"] == "pmm" and m["Version"] == PYPROJECT["version"]
    assert m["Summary"] == PYPROJECT["description"]
    # the long description is the README
    assert m["Description-Content-Type"] == "text/markdown"
    assert str(m.get_payload()).strip() == (TOP / "README.md").read_text().strip()
    assert classifiers == PYPROJECT["classifiers"]
    assert "Operating System :: POSIX :: Linux" in classifiers
    assert m["License-Expression"] == "GPL-2.0-only"
    assert m.get_all("License-File") == ["LICENSE"]
    # project URLs as pyproject.toml gives them (none yet: the repository
    # names no public home, and none is invented)
    urls = [f"{k}, {v}" for k, v in PYPROJECT.get("urls", {}).items()]
    assert (m.get_all("Project-URL") or []) == urls
    assert sorted(m.get_all("Provides-Extra") or []) == ["dev", "elf", "plot"]
    runtime = [r for r in requires if "extra ==" not in r]
    assert sorted(r.split(">=")[0] for r in runtime) == ["ioctl-opt", "prometheus_client",
                                                         "protobuf", "pyroute2",
                                                         "sqlite-utils", "typer"]
    assert 'pyelftools>=0.31; extra == "elf"' in requires
    assert 'matplotlib>=3.8; extra == "plot"' in requires


def test_wheel_carries_the_license_and_every_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        lic = next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))
        text = z.read(lic).decode()
        entry_points = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert text == (TOP / "LICENSE").read_text()
    assert "GNU GENERAL PUBLIC LICENSE\n                       Version 2, June 1991" in text
    assert "pmctl = pmctl.cli:main" in entry_points and "pmd = pmd.main:main" in entry_points
    # every module of the tree's packages, subpackages included
    tree = {str(p.relative_to(TOP / "src")) for p in (TOP / "src" / "pmm").rglob("*.py")}
    tree |= {str(p.relative_to(TOP)) for d in ("pmctl", "pmd") for p in (TOP / d).rglob("*.py")}
    assert tree <= set(names), sorted(tree - set(names))
    assert not [n for n in names if n.startswith(("tests/", "bench/"))]


def test_pyproject_extras() -> None:
    extras = PYPROJECT["optional-dependencies"]
    assert extras["elf"] == ["pyelftools>=0.31"] and extras["plot"] == ["matplotlib>=3.8"]
    assert not [d for d in PYPROJECT["dependencies"] if d.startswith(("numpy", "pyelftools"))]
