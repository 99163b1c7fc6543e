"""make install into a staging root (DESTDIR) lays out every file, the
installed Python package imports and runs, and make uninstall removes it all.
(Loading the installed module with modprobe is tests/guest/test_install.py.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TOP = Path(__file__).resolve().parents[2]
BUILT = [TOP / "kmod" / "pmm.ko", TOP / "hooklib" / "libpmmhook.so", TOP / "hooklib" / "pmm-inject",
         TOP / "hooklib" / "pmm-scan"]
RESTART_RULE = ('ACTION=="add", SUBSYSTEM=="misc", KERNEL=="pmm", '
                'RUN+="/bin/systemctl --no-block try-restart pmd.service"')


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
        "usr/local/libexec/pmm/pmm-scan",
        "usr/local/include/pmm_hooks.h",
        "usr/local/include/pmm.h",
        "usr/local/bin/pmctl",
        "usr/local/bin/pmd",
        "usr/local/lib/pmm/python/pmctl/cli.py",
        "usr/local/lib/pmm/python/pmd/main.py",
        "etc/udev/rules.d/60-pmm.rules",
        "etc/systemd/system/pmd.service",
        "etc/default/pmd",
        "usr/local/share/pmm/manifest",
    ]
    for rel in expected:
        assert (stage / rel).is_file(), rel
    assert "extra/pmm.ko:" in (stage / f"lib/modules/{k}/modules.dep").read_text()
    rules = (stage / "etc/udev/rules.d/60-pmm.rules").read_text()
    assert 'KERNEL=="pmm", SUBSYSTEM=="misc", OWNER="root", GROUP="pmm", MODE="0660"' in rules
    unit = (stage / "etc/systemd/system/pmd.service").read_text().splitlines()
    assert "ExecStart=/usr/local/bin/pmd --db /var/lib/pmm/pmm.db $PMD_OPTS" in unit
    assert "Documentation=file:///usr/local/share/doc/pmm/README.md" in unit
    # the database is the group's to read, no one else's: pmd's primary group
    for line in ("User=pmd", "Group=pmm", "StateDirectoryMode=0750", "UMask=0027",
                 "Environment=PMM_GROUP=pmm"):
        assert line in unit
    assert (stage / "etc/default/pmd").read_text().count("PMD_OPTS=") >= 1
    wrapper = (stage / "usr/local/bin/pmctl").read_text()
    assert 'sys.path.insert(0, \\"/usr/local/lib/pmm/python\\")' in wrapper
    assert "PYTHONPATH" not in wrapper  # the user's own is kept
    assert_anyone_may_run(wrapper)
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


@pytest.fixture(scope="module")
def staged_usr(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`make install PREFIX=/usr DESTDIR=stage`'s result (the script make runs)."""
    if not all(p.exists() for p in BUILT):
        pytest.skip("run `make` first")
    stage = tmp_path_factory.mktemp("usr") / "stage"
    env = dict(os.environ, DESTDIR=str(stage), PREFIX="/usr")
    subprocess.run([str(TOP / "scripts" / "install.sh"), "install"], cwd=TOP, env=env,
                   check=True, capture_output=True)
    yield stage
    subprocess.run([str(TOP / "scripts" / "install.sh"), "uninstall"], cwd=TOP, env=env,
                   check=True, capture_output=True)


def test_plain_install_lets_pmd_open_the_device(staged_usr: Path) -> None:
    # no PMM_GROUP: the unit runs pmd as user pmd, group pmm, so the rule
    # gives /dev/pmm to group pmm (as the Debian package does), not root only
    rules = (staged_usr / "etc/udev/rules.d/60-pmm.rules").read_text()
    assert 'KERNEL=="pmm", SUBSYSTEM=="misc", OWNER="root", GROUP="pmm", MODE="0660"' in rules
    assert 'GROUP="root"' not in rules
    assert RESTART_RULE in rules.splitlines()
    unit = (staged_usr / "etc/systemd/system/pmd.service").read_text().splitlines()
    assert "User=pmd" in unit and "Group=pmm" in unit
    assert not any(line.startswith("Environment=PMM_GROUP") for line in unit)
    assert "ExecStart=/usr/bin/pmd --db /var/lib/pmm/pmm.db $PMD_OPTS" in unit


@pytest.mark.skipif(not all(p.exists() for p in BUILT), reason="run `make` first")
def test_install_with_another_group_writes_it_in_rule_and_unit(tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    env = dict(os.environ, DESTDIR=str(stage), PMM_GROUP="pmmusers")
    subprocess.run([str(TOP / "scripts" / "install.sh"), "install"], cwd=TOP, env=env,
                   check=True, capture_output=True)
    rules = (stage / "etc/udev/rules.d/60-pmm.rules").read_text()
    assert ('KERNEL=="pmm", SUBSYSTEM=="misc", OWNER="root", GROUP="pmmusers", MODE="0660"'
            in rules)
    assert RESTART_RULE in rules.splitlines()
    unit = (stage / "etc/systemd/system/pmd.service").read_text().splitlines()
    assert "Group=pmmusers" in unit and "Environment=PMM_GROUP=pmmusers" in unit
    subprocess.run([str(TOP / "scripts" / "install.sh"), "uninstall"], cwd=TOP, env=env,
                   check=True, capture_output=True)
    assert [p for p in stage.rglob("*") if p.is_file() and not p.name.startswith("modules.")] == []


def assert_anyone_may_run(wrapper: str) -> None:
    """The wrapper's interpreter is a file every user may execute, reached
    through directories every user may enter (not a pyenv shim or a venv
    under root's 0700 home), so the pmm group's members can run the tools."""
    interpreter = Path(wrapper.split("\n")[1].split()[1])
    assert interpreter.is_absolute(), wrapper
    real = interpreter.resolve()
    assert real.stat().st_mode & 0o001, real
    for d in real.parents:
        assert d.stat().st_mode & 0o001, d


def staged_tool(stage: Path, tool: str, *args: str, env: dict[str, str] | None = None
                ) -> subprocess.CompletedProcess[str]:
    """The installed wrapper's command, with the staged tree for its final path."""
    wrapper = (stage / "usr/bin" / tool).read_text()
    assert 'sys.path.insert(0, \\"/usr/lib/pmm/python\\")' in wrapper
    staged = wrapper.replace("/usr/lib/pmm/python", str(stage / "usr/lib/pmm/python"))
    return subprocess.run(["sh", "-c", staged.split("\n", 1)[1], tool, *args],
                          capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", **(env or {})}, timeout=60)


def test_installed_pmctl_run_finds_the_installed_hook(staged_usr: Path, tmp_path: Path) -> None:
    # PREFIX=/usr: the hook in /usr/lib, pmm-inject in /usr/libexec/pmm, found
    # from where the package is (PREFIX/lib/pmm/python), not from /usr/local
    dev = tmp_path / "pmm"
    dev.write_bytes(b"")  # opens, so `run` starts the command
    env = {"PMM_DEVICE": str(dev), "PMM_QUIET": "1", "PMM_CACHE_DIR": str(tmp_path / "cache")}
    r = staged_tool(staged_usr, "pmctl", "run", "--", "sh", "-c", 'printf "%s\n" "$LD_PRELOAD"',
                    env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{staged_usr}/usr/lib/libpmmhook.so\n"
    code = ("from pmm.attach import find_inject; from pmm.run import find_hooklib; "
            "from pmm.unreachable import find_scan; "
            "print(find_inject(find_hooklib())); print(find_scan(find_hooklib()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(staged_usr / "usr/lib/pmm/python")}, check=True)
    assert out.stdout == (f"{staged_usr}/usr/libexec/pmm/pmm-inject\n"
                          f"{staged_usr}/usr/libexec/pmm/pmm-scan\n")


def test_hook_found_beside_an_installed_package(tmp_path: Path) -> None:
    # make install's layout without a build: PREFIX/lib/pmm/python/pmm and
    # PREFIX/lib/libpmmhook.so (any PREFIX), then PREFIX/libexec/pmm/pmm-inject
    prefix = tmp_path / "opt"
    shutil.copytree(TOP / "src" / "pmm", prefix / "lib/pmm/python/pmm")
    (prefix / "lib/libpmmhook.so").write_bytes(b"")
    (prefix / "libexec/pmm").mkdir(parents=True)
    (prefix / "libexec/pmm/pmm-inject").write_bytes(b"")
    code = ("from pmm.attach import find_inject; from pmm.run import find_hooklib; "
            "h = find_hooklib(); print(h); print(find_inject(h))")
    env = {"PYTHONPATH": str(prefix / "lib/pmm/python"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"{prefix}/lib/libpmmhook.so\n{prefix}/libexec/pmm/pmm-inject\n"


def test_hook_found_in_the_source_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    # src/pmm's source tree: hooklib/ at its top, before any installed copy
    from pmm import run

    monkeypatch.delenv("PMM_HOOKLIB", raising=False)
    assert run.hooklib_candidates()[0] == TOP / "hooklib" / "libpmmhook.so"
    assert run.hooklib_candidates()[-2:] == [Path("/usr/local/lib/libpmmhook.so"),
                                             Path("/usr/lib/libpmmhook.so")]


def test_missing_hook_and_injector_say_where_they_were_looked_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pmm import run
    from pmm.attach import find_inject
    from pmm.errors import PmmError

    monkeypatch.setattr(run, "hooklib_candidates", lambda: [tmp_path / "a.so", tmp_path / "b.so"])
    with pytest.raises(PmmError) as e:
        run.find_hooklib()
    assert str(e.value) == (
        f"the hook library libpmmhook.so is not found (tried {tmp_path}/a.so, {tmp_path}/b.so): "
        "build it with `make`, install it with `make install`, or set PMM_HOOKLIB to its path")
    with pytest.raises(PmmError) as e:
        find_inject(tmp_path / "lib" / "libpmmhook.so")
    assert str(e.value) == (
        f"pmm-inject is not found (tried {tmp_path}/lib/pmm-inject, "
        f"{tmp_path}/libexec/pmm/pmm-inject): build it with `make`, or install it with "
        "`make install` (beside the hook library)")


def test_uninstall_without_install_says_so(tmp_path: Path) -> None:
    env = dict(os.environ, DESTDIR=str(tmp_path))
    r = subprocess.run([str(TOP / "scripts" / "install.sh"), "uninstall"], cwd=TOP, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert "pmm is not installed there" in r.stderr
