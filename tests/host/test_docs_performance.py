"""docs/performance.md names the commands that regenerate its tables: every
script it names exists (the commands executable), every `make` target it
names is in the Makefile, and every benchmark setting it names is read by a
benchmark script."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]
DOC = TOP / "docs" / "performance.md"


def commands() -> list[str]:
    """The indented command lines, without their comments."""
    return [line.split("#", 1)[0].strip() for line in DOC.read_text().splitlines()
            if line.startswith("    ") and line.strip()]


def test_every_section_has_a_command() -> None:
    text = DOC.read_text()
    for section in text.split("\n## ")[1:-1]:  # the last: benchmarks without a table
        assert re.search(r"^    \S", section, re.M), section.splitlines()[0]


def test_commands_exist() -> None:
    cmds = commands()
    assert cmds
    makefile = (TOP / "Makefile").read_text()
    for cmd in cmds:
        words = [w for w in shlex.split(cmd) if not re.fullmatch(r"[A-Z_]+=.*", w)]
        if words[0] == "make":
            assert re.search(rf"^{re.escape(words[1])}:", makefile, re.M), cmd
            continue
        script = TOP / words[0]
        assert script.is_file() and os.access(script, os.X_OK), cmd
        for w in words[1:]:
            if "/" in w and not w.startswith("["):
                assert (TOP / w).is_file(), cmd


def test_named_files_exist() -> None:
    # built files (bench/bin/, hooklib/*.so, pmm.ko) are not in the tree
    for path in re.findall(r"`((?:bench|scripts|tests|hooklib)/[^`\s]+)`", DOC.read_text()):
        if path.startswith("bench/bin/") or path.endswith(".so"):
            continue
        assert (TOP / path).exists(), path


def test_settings_are_read() -> None:
    sources = "".join(p.read_text(errors="replace") for d in ("bench", "scripts")
                      for p in (TOP / d).rglob("*") if p.suffix in (".sh", ".py"))
    for var in set(re.findall(r"\b((?:PMM|GUEST|ATTACH)_[A-Z_]+)\b", DOC.read_text())):
        if var in ("PMM_START", "PMM_SAMPLE", "PMM_SYMBOLIZER", "PMM_RECORD_LOG"):
            continue  # the hook's, pmctl's and the ABI's, not the benchmarks'
        assert var in sources, var
