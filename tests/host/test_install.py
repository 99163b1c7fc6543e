"""make install into a staging root (DESTDIR) lays out every file, the
installed Python package imports and runs (and nothing from the current
directory), and make uninstall removes it all; make install onto this
machine's tree (throwaway layers: accounts_ns) creates system accounts and
refuses, changing nothing, accounts it must not adopt. (Loading the
installed module with modprobe is tests/guest/test_install.py.)"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from accounts_ns import Outcome, can_run, run_in_namespace, system_range, userdb_group, userdb_user

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
    assert 'sys.path.insert(0, "/usr/local/lib/pmm/python")' in wrapper
    assert_anyone_may_run(wrapper)
    out = run_staged(stage, "/usr/local", "pmctl", "--help", bin_dir=tmp_path / "bin")
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
    interpreter = Path(wrapper.split("\n")[0].removeprefix("#!").split()[0])
    assert interpreter.is_absolute(), wrapper
    real = interpreter.resolve()
    assert real.stat().st_mode & 0o001, real
    for d in real.parents:
        assert d.stat().st_mode & 0o001, d


def run_staged(stage: Path, prefix: str, tool: str, *args: str, bin_dir: Path,
               env: dict[str, str] | None = None, cwd: Path | None = None
               ) -> subprocess.CompletedProcess[str]:
    """The installed script run as itself (its #! line), from a copy in
    bin_dir that names the staged tree instead of its final path."""
    script = (stage / prefix.lstrip("/") / "bin" / tool).read_text()
    pydir = f"{prefix}/lib/pmm/python"
    assert f'sys.path.insert(0, "{pydir}")' in script
    bin_dir.mkdir(exist_ok=True)
    copy = bin_dir / tool
    copy.write_text(script.replace(pydir, str(stage / pydir.lstrip("/"))))
    copy.chmod(0o755)
    return subprocess.run([str(copy), *args], capture_output=True, text=True, cwd=cwd,
                          env={"PATH": "/usr/bin:/bin", **(env or {})}, timeout=60)


def staged_tool(stage: Path, tool: str, *args: str, env: dict[str, str] | None = None,
                cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The installed wrapper (PREFIX=/usr), with the staged tree for its final path."""
    with tempfile.TemporaryDirectory() as d:
        return run_staged(stage, "/usr", tool, *args, bin_dir=Path(d), env=env, cwd=cwd)


# modules the interpreter or pmctl imports, as a user may leave them in a directory
POISON = ("dataclasses", "typing", "json", "enum", "pathlib", "typer", "pmm", "pmctl")


def poisoned_directory(d: Path) -> Path:
    """A directory whose every module writes d/ran (its name) when imported:
    the marker says whether root ran a user's file."""
    d.mkdir()
    for name in POISON:
        (d / f"{name}.py").write_text(
            f"open({str(d / 'ran')!r}, 'a').write({name!r} + '\\n')\n")
    return d


def test_installed_tools_import_nothing_from_the_current_directory(
        staged_usr: Path, tmp_path: Path) -> None:
    # `sudo pmctl` where a user left modules, and with that user's PYTHONPATH
    # (sudo -E): the scripts import the installed code only
    bad = poisoned_directory(tmp_path / "user")
    for tool in ("pmctl", "pmd"):
        r = staged_tool(staged_usr, tool, "--version", env={"PYTHONPATH": str(bad)}, cwd=bad)
        assert not (bad / "ran").exists(), (tool, (bad / "ran").read_text())
        assert (r.returncode, r.stdout.split()[0], r.stderr) == (0, tool, ""), r


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
    assert run.hooklib_candidates()[-3:] == [Path("/usr/local/lib/libpmmhook.so"),
                                             Path("/usr/lib/pmm/libpmmhook.so"),  # the .deb's
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


# -- the accounts an install adopts ---------------------------------------------------


def free_id(taken: Callable[[int], object], ids: range) -> int:
    """An id no account of this machine has, from the top of `ids`."""
    for i in reversed(ids):
        try:
            taken(i)
        except KeyError:
            return i
    raise AssertionError(f"no free id in {ids}")


def install_for_real(tmp_path: Path, setup: str, python: bool) -> Outcome:
    """make install onto this machine's /usr, /etc, /var (throwaway layers:
    accounts_ns), module copied rather than built by DKMS; with the Python
    tools and pmd's unit (user pmd) when `python`."""
    env = {k: v for k, v in os.environ.items() if k not in ("DESTDIR", "PMM_GROUP", "PREFIX")}
    env.update(PMM_DKMS="0", PMM_INSTALL_PYTHON="1" if python else "0")
    return run_in_namespace(tmp_path, setup, [str(TOP / "scripts" / "install.sh"), "install"],
                            env, cwd=TOP)


def person_and_directory_accounts() -> list[tuple[str, str, bool, str]]:
    """(case, setup, with pmd's user, the refusal) for accounts an install
    must not adopt; the directory's accounts have system-range ids: it is
    where they come from that counts."""
    gids, uids = system_range("GID"), system_range("UID")
    sys_gid = free_id(grp.getgrgid, gids)
    sys_uid = free_id(pwd.getpwuid, uids)
    person_gid = free_id(grp.getgrgid, range(1500, 1600))
    person_uid = free_id(pwd.getpwuid, range(1600, 1700))
    limits = f"{gids.start}..{gids.stop - 1}"
    ulimits = f"{uids.start}..{uids.stop - 1}"
    system_group = "groupadd --system pmm\n"
    return [
        ("a person's group", f"groupadd --gid {person_gid} pmm", False,
         f"group pmm exists, but is not a system group (GID {person_gid} is outside "
         f"SYS_GID_MIN..SYS_GID_MAX of /etc/login.defs, {limits}): its members would use "
         "/dev/pmm and read pmd's database; refusing to adopt it"),
        ("a directory's group", userdb_group("pmm", sys_gid), False,
         "group pmm exists, but from a name service other than /etc/group (LDAP, NIS, "
         "sssd, userdb): its members would use /dev/pmm and read pmd's database; refusing "
         "to adopt it"),
        ("a person's user", f"{system_group}useradd --uid {person_uid} --gid pmm pmd", True,
         f"user pmd exists, but is not a system user (UID {person_uid} is outside "
         f"SYS_UID_MIN..SYS_UID_MAX of /etc/login.defs, {ulimits}): pmd would run as it, "
         "with pmd's capabilities; refusing to adopt it"),
        ("a directory's user", system_group + userdb_user("pmd", sys_uid), True,
         "user pmd exists, but from a name service other than /etc/passwd (LDAP, NIS, "
         "sssd, userdb): pmd would run as it, with pmd's capabilities; refusing to adopt it"),
        ("a person's reader group", f"groupadd --gid {person_gid} pmm-readers", True,
         f"group pmm-readers exists, but is not a system group (GID {person_gid} is outside "
         f"SYS_GID_MIN..SYS_GID_MAX of /etc/login.defs, {limits}): its members would read "
         "every monitored process; refusing to adopt it"),
    ]


@pytest.mark.skipif(not all(p.exists() for p in BUILT), reason="run `make` first")
@pytest.mark.skipif(can_run() is not None, reason=str(can_run()))
def test_install_refuses_accounts_it_should_not_adopt(tmp_path: Path) -> None:
    for n, (case, setup, python, refusal) in enumerate(person_and_directory_accounts()):
        (tmp_path / str(n)).mkdir()
        got = install_for_real(tmp_path / str(n), setup, python)
        assert (got.rc, got.stderr) == (1, f"install: {refusal}; nothing was installed\n"), \
            (case, got)
        assert got.changed == [], (case, got.changed[:20])


@pytest.mark.skipif(not all(p.exists() for p in BUILT), reason="run `make` first")
@pytest.mark.skipif(can_run() is not None, reason=str(can_run()))
def test_install_creates_system_accounts_or_adopts_them(tmp_path: Path) -> None:
    # none yet: a system group pmm and a system user pmd, in the files
    (tmp_path / "new").mkdir()
    setup = "! getent group pmm && ! getent passwd pmd"
    got = install_for_real(tmp_path / "new", setup, python=True)
    assert got.rc == 0, got.stderr
    assert got.group and got.group == got.group_files
    assert int(got.group.split(":")[2]) in system_range("GID")
    assert got.user and got.user == got.user_files
    uid, gid = (int(x) for x in got.user.split(":")[2:4])
    assert uid in system_range("UID") and gid == int(got.group.split(":")[2])
    assert any(line.startswith("> usr.up/local/bin/pmctl ") for line in got.changed)
    # the module's reader group (pmd.service's), its gid the module's reader_gid
    readers = int(got.readers.split(":")[2])
    assert got.readers.startswith("pmm-readers:") and readers in system_range("GID")
    assert got.modprobe.splitlines()[1:] == [f"options pmm reader_gid={readers}"]
    # a system group of the files: adopted as it is
    (tmp_path / "old").mkdir()
    gid = free_id(grp.getgrgid, system_range("GID"))
    got = install_for_real(tmp_path / "old", f"groupadd --gid {gid} pmm", python=False)
    assert got.rc == 0, got.stderr
    assert got.group == got.group_files == f"pmm:x:{gid}:"
    assert not any(line.startswith(("> etc.up/group ", "< etc.up/group "))
                   for line in got.changed)
