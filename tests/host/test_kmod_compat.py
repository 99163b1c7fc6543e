"""kmod's compat layer: every HAVE_* that compat.h reads comes from a probe
Kbuild runs, the module's files call the wrappers and not the APIs behind
them, and a kernel with neither variant of an API stops the build with one
line naming it (what a DKMS user finds in make.log), before any of the
module's files is compiled."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]
KMOD = TOP / "kmod"


def kver() -> str:
    return subprocess.run([str(TOP / "scripts" / "kver.sh")], capture_output=True, text=True,
                          check=True).stdout.strip()


def compat_haves() -> set[str]:
    return set(re.findall(r"\bHAVE_(\w+)", (KMOD / "compat.h").read_text()))


def test_every_have_has_its_probe() -> None:
    probes = {p.stem for p in (KMOD / "probes").glob("*.c")}
    m = re.search(r"^pmm-exports := (.*)$", (KMOD / "Kbuild").read_text(), re.M)
    assert m
    exports = {"EXPORT_" + s.upper() for s in m.group(1).split()}
    assert compat_haves() == probes | exports
    # each probe defines only pmm_probe, with its prototype (W=1)
    for p in (KMOD / "probes").glob("*.c"):
        assert p.read_text().count("pmm_probe(") == 2, p


def test_module_calls_the_wrappers() -> None:
    """An API compat.h wraps is called only there: a changed kernel is one
    place to look."""
    wrapped = ["file_open_root_mnt", "kmalloc_size_roundup", "krealloc_array",
               "timer_shutdown_sync", "vma_lookup", "seq_escape_str", "get_dumpable",
               "set_active_memcg", "genlmsg_multicast", "file_path"]
    for c in sorted(KMOD.glob("*.c")):
        if c.name.endswith(".mod.c"):
            continue
        text = c.read_text()
        for api in wrapped:
            assert not re.search(rf"(?<![\w.>]){api}\(", text), f"{c.name} calls {api}"
        assert "mm->user_ns" not in text, c.name
        assert not re.search(r"vm_flags\s*[|&]?=(?!=)", text), c.name
        assert "LINUX_VERSION_CODE" not in text, c.name


def build(tmp_path: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    mdir = tmp_path / "kmod"
    shutil.copytree(KMOD, mdir, ignore=shutil.ignore_patterns(
        "*.o", "*.ko", "*.mod*", ".*", "Module.symvers", "modules.order", "pmm_probes.h*",
        "*.h.log", "[A-Z]*.h"))
    return mdir, subprocess.run(
        ["make", "-C", f"/lib/modules/{kver()}/build", f"M={mdir}", "-j2", "modules"],
        capture_output=True, text=True)


def test_probes_find_the_running_line(tmp_path: Path) -> None:
    """On Debian 12's 6.1 (the host's headers), what it has and what it lacks."""
    mdir, r = build(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    have = set(re.findall(r"#define HAVE_(\w+) 1", (mdir / "pmm_probes.h").read_text()))
    if kver().startswith("6.1."):
        assert have == {"FILE_OPEN_ROOT_MNT", "GENL_MCAST_CAP_NET_ADMIN", "GET_DUMPABLE",
                        "KMALLOC_SIZE_ROUNDUP", "KREALLOC_ARRAY", "MM_USER_NS",
                        "SEQ_ESCAPE_STR_NAP", "TIMER_SHUTDOWN_SYNC", "VMA_LOOKUP",
                        "EXPORT_INT_ACTIVE_MEMCG"}


def test_missing_api_is_one_line(tmp_path: Path) -> None:
    """Neither get_dumpable() nor exec_state: one line names them, and no file
    of the module is compiled (no wall of errors)."""
    mdir, _ = build(tmp_path)  # the sources, copied
    subprocess.run(["make", "-C", f"/lib/modules/{kver()}/build", f"M={mdir}", "clean"],
                   capture_output=True, check=True)
    probe = mdir / "probes" / "GET_DUMPABLE.c"
    probe.write_text(probe.read_text().replace("get_dumpable(", "no_such_function("))
    r = subprocess.run(["make", "-C", f"/lib/modules/{kver()}/build", f"M={mdir}", "modules"],
                       capture_output=True, text=True)
    assert r.returncode != 0
    lines = [x for x in (r.stdout + r.stderr).splitlines() if x.startswith("pmm: ")]
    assert lines == ["pmm: kernel has no get_dumpable() nor task_struct.exec_state"
                     " (dumpable state)"]
    assert "error:" not in r.stdout + r.stderr
    assert not list(mdir.glob("*.o"))
