"""`make deb` (scripts/build-deb.sh), built once into a temporary directory:
the packages' fields, file lists, conffiles and maintainer scripts; lintian
shows no error on them; the hook's binaries stripped with their debug info
in libpmmhook-dbgsym; the man pages from the tools' help;
nothing in pmm-tools compiled or naming a Python version; pmm-tools'
postinst run on this machine's tree (throwaway layers: accounts_ns), making
system accounts and refusing those it must not adopt; and the tools,
unpacked with dpkg-deb -x, run on Debian's /usr/bin/python3 with only the
package's directory and Debian's dist-packages on sys.path (the vendored set
is complete), and from a directory of a user's modules. Installing them for
real is tests/guest/test_deb.py."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from accounts_ns import Outcome, can_run, run_in_namespace, system_range

TOP = Path(__file__).resolve().parents[2]
VERSION = re.search(r'^PACKAGE_VERSION="(.*)"', (TOP / "dkms.conf").read_text(), re.M)[1]  # type: ignore[index]
PYDIR = "usr/share/pmm/python"
# Debian's interpreter and packages only: no venv, no site directories (-S)
DEBIAN_PYTHON = ["/usr/bin/python3", "-S"]


@pytest.fixture(scope="module")
def debs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("deb")
    r = subprocess.run([str(TOP / "scripts" / "build-deb.sh"), str(out)], cwd=TOP,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return {p.name.split("_")[0]: p for p in out.glob("*.deb")}


def field(deb: Path, name: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True,
                          check=True).stdout.strip()


def contents(deb: Path) -> dict[str, str]:
    """Path (without the leading .) -> its tar listing's mode string."""
    out = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[5].lstrip(".").rstrip("/") or "/": line.split()[0]
            for line in out.splitlines()}


@pytest.fixture(scope="module")
def unpacked(debs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("root")
    for deb in debs.values():
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    return root


def test_the_packages_and_their_fields(debs: dict[str, Path]) -> None:
    assert sorted(debs) == ["libpmmhook", "libpmmhook-dbgsym", "pmm-dkms", "pmm-tools"]
    assert debs["libpmmhook"].name == f"libpmmhook_{VERSION}_amd64.deb"
    for name, arch in (("pmm-dkms", "all"), ("libpmmhook", "amd64"), ("pmm-tools", "all"),
                       ("libpmmhook-dbgsym", "amd64")):
        assert field(debs[name], "Package") == name
        assert field(debs[name], "Version") == VERSION
        assert field(debs[name], "Architecture") == arch
        assert int(field(debs[name], "Installed-Size")) > 0
    assert field(debs["pmm-dkms"], "Depends") == "dkms"
    # dpkg-shlibdeps': libc's symbol versions, libunwind for pmm-inject
    hook = field(debs["libpmmhook"], "Depends")
    assert re.search(r"\blibc6 \(>= 2\.\d+\)", hook) and "libunwind8" in hook, hook
    tools = [d.strip() for d in field(debs["pmm-tools"], "Depends").split(",")]
    for dep in ("python3 (>= 3.11)", "binutils", "passwd"):
        assert dep in tools
    assert any(d.startswith("python3-pygments (>= 2.") for d in tools), tools
    assert field(debs["pmm-tools"], "Recommends") == (
        f"pmm-dkms (= {VERSION}), libpmmhook (= {VERSION})")
    # --plot's matplotlib, which the hints name (pmm.installed)
    assert field(debs["pmm-tools"], "Suggests") == "python3-matplotlib"
    dbgsym = debs["libpmmhook-dbgsym"]
    assert field(dbgsym, "Depends") == f"libpmmhook (= {VERSION})"
    assert (field(dbgsym, "Section"), field(dbgsym, "Auto-Built-Package")) == (
        "debug", "debug-symbols")


def test_the_python_dependencies_are_debian_packages_installed_here(
        debs: dict[str, Path]) -> None:
    # what dpkg -i in the guest (and an offline machine) finds without network
    names = [d.split()[0] for d in field(debs["pmm-tools"], "Depends").split(", ")]
    for pkg in (n for n in names if n.startswith("python3-")):
        status = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True,
                                text=True).stdout
        assert status == "install ok installed", pkg


def test_setup_installs_the_debian_python_packages_make_deb_uses() -> None:
    build = (TOP / "scripts/build-deb.sh").read_text()
    used = re.findall(r"^\t[a-z0-9-]+:(python3-[a-z0-9-]+)$", build, re.M)
    setup = [w.strip("()") for w in (TOP / "scripts/setup.sh").read_text().split()]
    assert len(used) >= 5 and [p for p in used if p not in setup] == []


def test_file_lists(debs: dict[str, Path]) -> None:
    dkms = contents(debs["pmm-dkms"])
    src = f"/usr/src/pmm-{VERSION}"
    for rel in ("dkms.conf", "kmod/Makefile", "kmod/Kbuild", "kmod/main.c", "kmod/pmm_int.h",
                "kmod/uapi/pmm.h", "scripts/kver.sh"):
        assert f"{src}/{rel}" in dkms, rel
    # sources only: nothing a build of the tree left beside them
    assert not [p for p in dkms if re.search(r"\.(o|ko|mod|mod\.c|cmd)$|symvers", p)]
    assert "/usr/lib/modules-load.d/pmm.conf" in dkms

    hook = contents(debs["libpmmhook"])
    # a private directory: a preloaded library has no soname
    assert not [p for p in hook if re.fullmatch(r"/usr/lib/[^/]+\.so.*", p)]
    for path, mode in (("/usr/lib/pmm/libpmmhook.so", "-rw-r--r--"),
                       ("/usr/libexec/pmm/pmm-inject", "-rwxr-xr-x"),
                       ("/usr/libexec/pmm/pmm-scan", "-rwxr-xr-x"),
                       ("/usr/include/pmm_hooks.h", "-rw-r--r--"),
                       ("/usr/include/pmm.h", "-rw-r--r--"),
                       ("/usr/share/doc/libpmmhook/copyright", "-rw-r--r--"),
                       ("/usr/share/doc/libpmmhook/changelog.gz", "-rw-r--r--")):
        assert hook.get(path) == mode, path

    tools = contents(debs["pmm-tools"])
    for path, mode in (("/usr/bin/pmctl", "-rwxr-xr-x"), ("/usr/bin/pmd", "-rwxr-xr-x"),
                       (f"/{PYDIR}/pmctl/cli.py", "-rw-r--r--"),
                       (f"/{PYDIR}/pmd/main.py", "-rw-r--r--"),
                       (f"/{PYDIR}/pmm/pprof/profile_pb2.py", "-rw-r--r--"),
                       (f"/{PYDIR}/pmm/report/vendor/plotly.min.js", "-rw-r--r--"),
                       (f"/{PYDIR}/typer/__init__.py", "-rw-r--r--"),
                       (f"/{PYDIR}/google/protobuf/__init__.py", "-rw-r--r--"),
                       ("/lib/systemd/system/pmd.service", "-rw-r--r--"),
                       ("/etc/default/pmd", "-rw-r--r--"),
                       ("/usr/lib/udev/rules.d/60-pmm.rules", "-rw-r--r--"),
                       ("/usr/share/python3/runtime.d/pmm-tools.rtupdate", "-rwxr-xr-x"),
                       ("/usr/share/doc/pmm-tools/README.md", "-rw-r--r--"),
                       ("/usr/share/doc/pmm-tools/copyright", "-rw-r--r--"),
                       ("/usr/share/doc/pmm-tools/changelog.gz", "-rw-r--r--"),
                       ("/usr/share/man/man1/pmctl.1.gz", "-rw-r--r--"),
                       ("/usr/share/man/man1/pmd.1.gz", "-rw-r--r--")):
        assert tools.get(path) == mode, path
    assert f"/{PYDIR}/pip" not in tools  # sqlite-utils' install command's, unused
    # Debian's packages are not shadowed by copies
    for debian in ("pygments", "dateutil", "tabulate"):
        assert f"/{PYDIR}/{debian}" not in tools
    for deb in debs.values():
        listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True,
                                 check=True).stdout
        assert all(" root/root " in line for line in listing.splitlines())


def test_no_file_belongs_to_an_installed_package(unpacked: Path) -> None:
    # dpkg -i would refuse to overwrite another package's file (the guest
    # test's quick install skips that check: it leaves the file lists out)
    files = ["/" + str(p.relative_to(unpacked)) for p in unpacked.rglob("*") if p.is_file()]
    r = subprocess.run(["dpkg-query", "-S", *files], capture_output=True, text=True)
    owned = [line for line in r.stdout.splitlines() if line.split(": ", 1)[1] in files]
    assert owned == []


def test_conffiles_and_maintainer_scripts(debs: dict[str, Path], tmp_path: Path) -> None:
    for name, deb in debs.items():
        control = tmp_path / name
        subprocess.run(["dpkg-deb", "-e", str(deb), str(control)], check=True)
        for script in control.iterdir():
            if script.name in ("postinst", "prerm", "postrm"):
                assert os.access(script, os.X_OK), script
                text = script.read_text()
                assert text.startswith("#!/bin/sh\n") and "@VERSION@" not in text
                assert "python3.1" not in text
                subprocess.run(["sh", "-n", str(script)], check=True)
        # every file's sum but the conffiles' (dpkg --verify; dh_md5sums' form)
        sums = (control / "md5sums").read_text().splitlines()
        files = sorted(p for p, mode in contents(deb).items() if mode.startswith("-"))
        conffiles = ["/etc/default/pmd"] if name == "pmm-tools" else []
        assert sorted("/" + line.split("  ", 1)[1] for line in sums) == \
            [f for f in files if f not in conffiles]
        if name == "pmm-tools":
            assert (control / "conffiles").read_text() == "/etc/default/pmd\n"
            postinst = (control / "postinst").read_text()
            assert "groupadd --system pmm" in postinst and "useradd --system --gid pmm" in postinst
            # scripts/accounts.sh, copied in: the accounts are checked before either is made
            assert postinst.index("pmm_account_refusal() {") < \
                postinst.index("refused=$(pmm_account_refusal group pmm)") < \
                postinst.index("groupadd --system pmm\n")
            assert "py3compile -p pmm-tools /usr/share/pmm/python" in postinst
            assert "py3clean -p pmm-tools" in (control / "prerm").read_text()
        elif name == "pmm-dkms":
            assert sorted(p.name for p in control.iterdir()) == ["control", "md5sums",
                                                                  "postinst", "prerm"]
            postinst = (control / "postinst").read_text()
            assert f"DKMS_VERSION={VERSION}\n" in postinst
            assert "/usr/lib/dkms/common.postinst" in postinst
            assert f"DKMS_VERSION={VERSION}\n" in (control / "prerm").read_text()
        else:
            assert not (control / "conffiles").exists()


def test_pmm_tools_is_pure_and_names_no_python_version(unpacked: Path) -> None:
    files = [p for p in unpacked.rglob("*") if p.is_file()]
    tools = [p for p in files if str(p.relative_to(unpacked)).startswith(PYDIR)]
    assert len(tools) > 100
    compiled = [p for p in tools if re.search(r"\.(so|pyd|pyc)$|\.so\.", p.name)]
    assert compiled == []
    assert not [p for p in tools if "__pycache__" in p.parts or p.name.endswith(".data")]
    # no path; no script, unit or file of pmm's own code, .pth or metadata
    # (a vendored library's comment may quote a traceback: not searched)
    assert [p for p in files if "python3.1" in str(p)] == []
    searched = [p for p in files if not str(p.relative_to(unpacked)).startswith(PYDIR)
                and not p.name.endswith(".so") and p.name not in ("pmm-inject", "pmm-scan")] + [
        p for p in tools if p.relative_to(unpacked / PYDIR).parts[0] in ("pmm", "pmctl", "pmd")
        or p.suffix == ".pth" or ".dist-info" in str(p)]
    assert len(searched) > 50
    assert [p for p in searched if b"python3.1" in p.read_bytes()] == []
    for tool in ("pmctl", "pmd"):
        script = (unpacked / "usr/bin" / tool).read_text()
        assert script.startswith("#!/usr/bin/python3 -I\n")
        assert f'sys.path.insert(0, "/{PYDIR}")' in script


def test_unit_udev_rule_and_modules_load(unpacked: Path) -> None:
    unit = (unpacked / "lib/systemd/system/pmd.service").read_text()
    assert "/usr/local" not in unit
    assert re.search(r"^ExecStart=/usr/bin/pmd ", unit, re.M)
    assert re.search(r"^EnvironmentFile=-/etc/default/pmd$", unit, re.M)
    docs = re.findall(r"^Documentation=file://(\S+)$", unit, re.M)
    assert docs and all((unpacked / d.lstrip("/")).is_file() for d in docs), docs
    assert (unpacked / "etc/default/pmd").read_text() == (TOP / "packaging/pmd.default").read_text()
    rule = (unpacked / "usr/lib/udev/rules.d/60-pmm.rules").read_text()
    assert 'KERNEL=="pmm", SUBSYSTEM=="misc", OWNER="root", GROUP="pmm", MODE="0660"' in rule
    # a module loaded after pmd started: udev restarts pmd so DeviceAllow= holds the new device
    assert ('ACTION=="add", SUBSYSTEM=="misc", KERNEL=="pmm", '
            'RUN+="/bin/systemctl --no-block try-restart pmd.service"') in rule.splitlines()
    modules = (unpacked / "usr/lib/modules-load.d/pmm.conf").read_text().splitlines()
    assert [m for m in modules if m and not m.startswith("#")] == ["pmm"]


def debian_python(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{root / PYDIR}:/usr/lib/python3/dist-packages"}
    return subprocess.run([*DEBIAN_PYTHON, *argv], capture_output=True, text=True, env=env,
                          timeout=120)


def test_unpacked_tools_run_on_debian_python(unpacked: Path) -> None:
    r = debian_python(unpacked, str(unpacked / "usr/bin/pmctl"), "--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"pmctl {VERSION}\n"
    r = debian_python(unpacked, str(unpacked / "usr/bin/pmd"), "--help")
    assert r.returncode == 0, r.stderr
    assert "--metrics" in r.stdout
    # every module of the three packages imports (those --help leaves alone too)
    code = """
import importlib, pkgutil, sys
for top in ("pmm", "pmctl", "pmd"):
    pkg = importlib.import_module(top)
    for m in pkgutil.walk_packages(pkg.__path__, top + "."):
        if not m.name.endswith(".__main__"):  # runs the command
            importlib.import_module(m.name)
import google.protobuf, prometheus_client, typer, sqlite_utils, pyroute2, pygments
print(sys.modules["pygments"].__file__)
print(sys.modules["typer"].__file__)
"""
    r = debian_python(unpacked, "-c", code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["/usr/lib/python3/dist-packages/pygments/__init__.py",
                                     f"{unpacked / PYDIR}/typer/__init__.py"]


def test_packaged_tools_import_nothing_from_the_current_directory(unpacked: Path,
                                                                  tmp_path: Path) -> None:
    # `sudo pmctl` where a user left modules, and with that user's PYTHONPATH
    # (sudo -E): run as themselves (their #! line), the scripts import only
    # the packaged code and Debian's
    from test_install import poisoned_directory

    bad = poisoned_directory(tmp_path / "user")
    (tmp_path / "bin").mkdir()
    for tool in ("pmctl", "pmd"):
        copy = tmp_path / "bin" / tool
        copy.write_text((unpacked / "usr/bin" / tool).read_text()
                        .replace(f"/{PYDIR}", str(unpacked / PYDIR)))
        copy.chmod(0o755)
        r = subprocess.run([str(copy), "--version"], capture_output=True, text=True, cwd=bad,
                           env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(bad)}, timeout=60)
        assert not (bad / "ran").exists(), (tool, (bad / "ran").read_text())
        assert (r.returncode, r.stdout, r.stderr) == (0, f"{tool} {VERSION}\n", ""), r


def postinst_for_real(debs: dict[str, Path], tmp: Path, setup: str) -> Outcome:
    """pmm-tools' postinst configure, run on this machine's /usr, /etc and
    /var (throwaway layers: accounts_ns) with the accounts `setup` makes;
    py3compile and deb-systemd-helper/-invoke stubbed (the package is not
    unpacked there, and the unit is not what is tested)."""
    control, stubs = tmp / "control", tmp / "stubs"
    subprocess.run(["dpkg-deb", "-e", str(debs["pmm-tools"]), str(control)], check=True)
    stubs.mkdir()
    for cmd in ("py3compile", "deb-systemd-helper", "deb-systemd-invoke"):
        (stubs / cmd).write_text("#!/bin/sh\nexit 0\n")
        (stubs / cmd).chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/sbin:/usr/bin:/sbin:/bin"}
    return run_in_namespace(tmp, setup, [str(control / "postinst"), "configure"], env)


@pytest.mark.skipif(can_run() is not None, reason=str(can_run()))
def test_postinst_refuses_accounts_it_should_not_adopt(debs: dict[str, Path],
                                                       tmp_path: Path) -> None:
    from test_install import person_and_directory_accounts

    for n, (case, setup, _, refusal) in enumerate(person_and_directory_accounts()):
        (tmp_path / str(n)).mkdir()
        got = postinst_for_real(debs, tmp_path / str(n), setup)
        assert (got.rc, got.stderr) == (1, f"pmm-tools: {refusal}\n"), (case, got)
        assert got.changed == [], (case, got.changed)


@pytest.mark.skipif(can_run() is not None, reason=str(can_run()))
def test_postinst_creates_system_accounts_or_adopts_them(debs: dict[str, Path],
                                                         tmp_path: Path) -> None:
    (tmp_path / "new").mkdir()
    got = postinst_for_real(debs, tmp_path / "new", "! getent group pmm && ! getent passwd pmd")
    assert (got.rc, got.stderr) == (0, ""), got
    gid = int(got.group.split(":")[2])
    assert got.group == got.group_files and gid in system_range("GID")
    assert got.user == got.user_files
    assert got.user.split(":")[2:] == [got.user.split(":")[2], str(gid), "pmm monitoring daemon",
                                       "/nonexistent", "/usr/sbin/nologin"]
    assert int(got.user.split(":")[2]) in system_range("UID")
    readers = int(got.readers.split(":")[2])
    assert got.readers.startswith("pmm-readers:") and readers in system_range("GID")
    assert got.modprobe.splitlines()[1:] == [f"options pmm reader_gid={readers}"]
    # system accounts of the files: adopted as they are
    (tmp_path / "old").mkdir()
    setup = ("groupadd --system pmm\nuseradd --system --gid pmm --comment mine pmd\n"
             "groupadd --system pmm-readers")
    got = postinst_for_real(debs, tmp_path / "old", setup)
    assert (got.rc, got.stderr) == (0, ""), got
    assert got.user.split(":")[4] == "mine"
    assert not [line for line in got.changed if " etc.up/" in line and
                line.split()[1] in ("etc.up/group", "etc.up/passwd")]


def samples_in(db: Path) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
            return int(c.execute("select count(*) from samples").fetchone()[0])
    except sqlite3.Error:
        return 0


def test_unpacked_pmd_records_and_pmctl_reads_its_database(unpacked: Path,
                                                           tmp_path: Path) -> None:
    # pmd's store on the packaged sqlite-utils (3.x lacked Database.atomic):
    # /proc samples of a process, then pmctl trend reads them back
    db = tmp_path / "pmm.db"
    sleeper = subprocess.Popen(["sleep", "60"])
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "PYTHONPATH": f"{unpacked / PYDIR}:/usr/lib/python3/dist-packages"}
    try:
        pmd = subprocess.Popen([*DEBIAN_PYTHON, str(unpacked / "usr/bin/pmd"), "--db", str(db),
                                "--pid", str(sleeper.pid), "--interval", "100ms",
                                "--commit-interval", "100ms"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and pmd.poll() is None and samples_in(db) < 3:
            time.sleep(0.2)
        pmd.terminate()
        log = pmd.communicate(timeout=30)[0]
        r = debian_python(unpacked, str(unpacked / "usr/bin/pmctl"), "trend", str(sleeper.pid),
                          "--db", str(db), "--json")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert pmd.returncode == 0, log
    assert "internal error" not in log and "Traceback" not in log, log
    assert samples_in(db) >= 3
    # 0 stable, 10 leak, 11 growing, 12 not enough data: a verdict, read from the database
    assert r.returncode in (0, 10, 11, 12), r.stdout + r.stderr
    assert str(sleeper.pid) in r.stdout


def test_installed_pmctl_finds_the_packaged_hook_and_injector(unpacked: Path) -> None:
    # /usr/lib/pmm/libpmmhook.so is one of pmctl's places, and pmm-inject
    # and pmm-scan are found from it at /usr/libexec/pmm
    code = f"""
from pathlib import Path
from pmm.attach import find_inject
from pmm.run import hooklib_candidates
from pmm.unreachable import find_scan
print(Path("/usr/lib/pmm/libpmmhook.so") in hooklib_candidates())
print(find_inject(Path("{unpacked}/usr/lib/pmm/libpmmhook.so")))
print(find_scan(Path("{unpacked}/usr/lib/pmm/libpmmhook.so")))
"""
    r = debian_python(unpacked, "-c", code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["True", f"{unpacked}/usr/libexec/pmm/pmm-inject",
                                     f"{unpacked}/usr/libexec/pmm/pmm-scan"]


def test_lintian_shows_no_error(debs: dict[str, Path]) -> None:
    if shutil.which("lintian") is None:
        pytest.skip("lintian is not installed (make setup installs it)")
    r = subprocess.run(["lintian", "--tag-display-limit", "0", *map(str, debs.values())],
                       capture_output=True, text=True, timeout=600)
    tags = [line for line in (r.stdout + r.stderr).splitlines() if re.match(r"[EWIXPO]: ", line)]
    errors = [t for t in tags if t.startswith("E: ")]
    assert errors == [], "\n".join(tags)
    # it ran on all of them (an unreadable package is an error line too)
    assert r.returncode == 0, r.stdout + r.stderr


def test_binaries_stripped_with_their_debug_info_in_dbgsym(unpacked: Path) -> None:
    for rel in ("usr/lib/pmm/libpmmhook.so", "usr/libexec/pmm/pmm-inject",
                "usr/libexec/pmm/pmm-scan"):
        f = unpacked / rel
        sections = subprocess.run(["readelf", "-SW", str(f)], capture_output=True, text=True,
                                  check=True).stdout
        assert ".debug_info" not in sections and ".symtab" not in sections, rel
        assert ".gnu_debuglink" in sections and ".dynsym" in sections, rel
        notes = subprocess.run(["readelf", "-n", str(f)], capture_output=True, text=True,
                               check=True).stdout
        build_id = re.search(r"Build ID: ([0-9a-f]+)", notes)[1]  # type: ignore[index]
        debug = unpacked / "usr/lib/debug/.build-id" / build_id[:2] / f"{build_id[2:]}.debug"
        dsections = subprocess.run(["readelf", "-SW", str(debug)], capture_output=True,
                                   text=True, check=True).stdout
        assert ".debug_info" in dsections and ".symtab" in dsections, rel
    # gdb and pmctl's symbolizer find the debug info by the build-id
    r = subprocess.run(["addr2line", "-f", "-e", str(unpacked / "usr/libexec/pmm/pmm-inject"),
                        "0"], capture_output=True, text=True)
    assert r.returncode == 0


def test_changelog_and_man_pages(unpacked: Path) -> None:
    for pkg in ("pmm-dkms", "libpmmhook", "pmm-tools"):
        with gzip.open(unpacked / "usr/share/doc" / pkg / "changelog.gz", "rt") as f:
            first = f.readline()
        assert first == f"pmm ({VERSION}) unstable; urgency=medium\n"
    env = {"PATH": "/usr/bin:/bin", "MANWIDTH": "100", "LANG": "C.UTF-8"}
    pages = {}
    for tool in ("pmctl", "pmd"):
        page = unpacked / f"usr/share/man/man1/{tool}.1.gz"
        r = subprocess.run(["man", "--warnings", "-l", str(page)], capture_output=True,
                           text=True, env=env, timeout=60)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        pages[tool] = " ".join(r.stdout.split())
    # from their help, as installed: every pmctl command's usage and options
    from typer.main import get_command

    from pmctl.cli import app

    commands = get_command(app).commands  # type: ignore[attr-defined]
    assert len(commands) >= 13
    for name in commands:
        assert f"Usage: pmctl {name} [OPTIONS]" in pages["pmctl"], name
    assert "needs matplotlib: apt install python3-matplotlib" in pages["pmctl"]
    assert "--metrics" in pages["pmd"] and "pmd [OPTIONS]" in pages["pmd"]
    assert "╭" not in pages["pmctl"] + pages["pmd"]  # typer's plain help, no boxes


def test_packaged_tools_hint_at_apt(unpacked: Path, tmp_path: Path) -> None:
    # matplotlib missing (a module that fails to import): said before the
    # watch, with apt's package
    shim = tmp_path / "shim"
    (shim / "matplotlib").mkdir(parents=True)
    (shim / "matplotlib" / "__init__.py").write_text("raise ImportError('no matplotlib')\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PMM_DEVICE": "/nonexistent",
           "PYTHONPATH": f"{shim}:{unpacked / PYDIR}:/usr/lib/python3/dist-packages"}
    r = subprocess.run([*DEBIAN_PYTHON, str(unpacked / "usr/bin/pmctl"), "trend", "1",
                        "--watch", "1m", "--plot", str(tmp_path / "t.png")],
                       capture_output=True, text=True, env=env, timeout=60)
    assert (r.returncode, r.stderr) == (1, "pmctl: drawing a plot needs matplotlib, which is "
                                        "not installed: install matplotlib (apt install "
                                        "python3-matplotlib)\n"), r
    # the hook missing: apt's libpmmhook (find_hooklib's and find_helper's hint)
    r = subprocess.run([*DEBIAN_PYTHON, "-c", "from pathlib import Path\n"
                        "from pmm.attach import find_inject\n"
                        "from pmm.installed import hook_hint\n"
                        "print(hook_hint())\n"
                        f"find_inject(Path('{tmp_path}/lib/pmm/libpmmhook.so'))"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.stdout.startswith("install it with `apt install libpmmhook`"), r
    assert "pmm-inject is not found" in r.stderr and "apt install libpmmhook" in r.stderr, r
    assert "make install" not in r.stdout + r.stderr


def test_make_install_loads_the_module_at_boot(tmp_path: Path) -> None:
    if not all((TOP / p).exists() for p in ("kmod/pmm.ko", "hooklib/libpmmhook.so",
                                            "hooklib/pmm-inject")):
        subprocess.run(["make", "-s", "all"], cwd=TOP, check=True, capture_output=True)
    stage = tmp_path / "stage"
    env = dict(os.environ, DESTDIR=str(stage), PMM_INSTALL_PYTHON="0")
    subprocess.run([str(TOP / "scripts/install.sh"), "install"], cwd=TOP, env=env, check=True,
                   capture_output=True)
    conf = stage / "etc/modules-load.d/pmm.conf"
    assert conf.read_text() == (TOP / "packaging/modules-load.d/pmm.conf").read_text()
    subprocess.run([str(TOP / "scripts/install.sh"), "uninstall"], cwd=TOP, env=env, check=True,
                   capture_output=True)
    assert not conf.exists()
