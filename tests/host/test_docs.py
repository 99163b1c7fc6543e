"""The README is the manual: every pmctl and pmd command and option, and every
environment variable the hook or the tools read, is named in it (the
sqlite-utils model: the docs test fails when something new is undocumented)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer

from pmctl.cli import app as pmctl_app

TOP = Path(__file__).resolve().parents[2]
README = (TOP / "README.md").read_text()

# test-only knobs of the fake device build and the benchmarks, not for users
INTERNAL = re.compile(r"PMM_FAKE_\w+|PMM_FASTPATH|PMM_INJECT_DEBUG")


# typer vendors its own click (typer._click): its commands are duck-typed here
Command = Any


def commands(group: Command, prefix: str) -> list[tuple[str, Command]]:
    out: list[tuple[str, Command]] = []
    for name, cmd in sorted(group.commands.items()):
        if cmd.hidden:
            continue
        out.append((f"{prefix} {name}", cmd))
        if hasattr(cmd, "commands"):
            out.extend(commands(cmd, f"{prefix} {name}"))
    return out


def long_options(cmd: Command) -> list[str]:
    """Its options' long names; --json, which every pmctl command has, is said once."""
    return sorted(o for p in cmd.params
                  if p.param_type_name == "option" and not getattr(p, "hidden", False)
                  for o in p.opts if o.startswith("--") and o not in ("--help", "--json"))


def pmctl_commands() -> list[tuple[str, Command]]:
    return commands(typer.main.get_command(pmctl_app), "pmctl")


def pmd_command() -> Command:
    from pmd import main as pmd_main

    return typer.main.get_command(pmd_main.app)


def hook_variables() -> set[str]:
    names: set[str] = set()
    for path in (TOP / "hooklib").rglob("*.c"):
        text = path.read_text(errors="replace")
        names.update(re.findall(r'env_\w+\(\s*\w+,\s*"(PMM_\w+)"', text))
        names.update(re.findall(r'getenv\("(PMM_\w+)"\)', text))
    return {n for n in names if not INTERNAL.fullmatch(n)}


def tool_variables() -> set[str]:
    names: set[str] = set()
    for d in ("src", "pmctl", "pmd"):
        for path in (TOP / d).rglob("*.py"):
            text = path.read_text()
            names.update(re.findall(r'environ(?:\.get)?[\[(]\s*"(PMM_\w+)"', text))
            names.update(re.findall(r'getenv\(\s*"(PMM_\w+)"', text))
    return {n for n in names if not INTERNAL.fullmatch(n)}


def command_row(name: str) -> str | None:
    """The README's table rows of a command (`| `pmctl NAME ...` ... |`), joined."""
    rows = [line for line in README.splitlines()
            if line.startswith(f"| `{name}") and line[len(name) + 3] in " `"]
    return "\n".join(rows) if rows else None


def section(title: str) -> str:
    """The README's text under `## title`, up to the next heading of that level."""
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else None]


def test_every_pmctl_command_and_option_is_in_the_readme() -> None:
    """Each command has its row in the command table, naming each of its options."""
    missing = []
    for name, cmd in pmctl_commands():
        row = command_row(name)
        if row is None:
            missing.append(name)
            continue
        missing.extend(f"{name} {o}" for o in long_options(cmd) if o not in row)
    assert missing == []


def test_every_pmd_option_is_in_the_readme() -> None:
    text = section("pmd")
    missing = [o for o in long_options(pmd_command()) if o not in text]
    assert missing == []


def test_every_environment_variable_is_in_the_readme() -> None:
    found = hook_variables() | tool_variables()
    assert {"PMM_SAMPLE", "PMM_START", "PMM_DB"} <= found  # the scan itself works
    assert sorted(v for v in found if v not in README) == []


def test_the_check_fails_on_an_undocumented_command() -> None:
    """A command the README does not name is reported (the test can fail)."""
    probe = typer.Typer()

    @probe.command("frobnicate-heap")
    def frobnicate(level: int = typer.Option(1, "--frob-level")) -> None: ...

    @probe.command("status")
    def status() -> None: ...

    names = [n for n, _ in commands(typer.main.get_command(probe), "pmctl")]
    assert "pmctl frobnicate-heap" in names
    assert command_row("pmctl frobnicate-heap") is None
    status_row = command_row("pmctl status")
    assert status_row is not None and "--frob-level" not in status_row


def test_the_readme_is_a_manual_not_a_notebook() -> None:
    # a manual: every command and option once, no history (room for the
    # kernels, the permissions model and the unreachable scan)
    assert len(README.splitlines()) <= 275


def test_the_common_options_are_in_the_readme() -> None:
    for words in ("--json", "pmctl --version", "pmd --version", "make demo", "make test"):
        assert words in README, words
