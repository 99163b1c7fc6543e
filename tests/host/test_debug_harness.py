"""The debug-kernel checker (tests/debug/kcheck.py) on kernel logs and
kmemleak reports in the kernel's exact formats: each bug finder's report is
a failure, a clean debug boot is not, and a leak counts only when it comes
from our modules. (The same checker is proved live on the debug kernel by
`make test-debug`'s selftest with tests/progs/badmod.)"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOP = Path(__file__).resolve().parents[2]
KCHECK = TOP / "tests" / "debug" / "kcheck.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kcheck", KCHECK)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["kcheck"] = mod
    spec.loader.exec_module(mod)
    return mod


kcheck = _load()

# Lines a debug kernel prints at every boot: none is a finding.
CLEAN_BOOT = """\
[    0.000000] Linux version 6.1.192 (root@host) (gcc (Debian 12.2.0-14) 12.2.0) #1 SMP
[    0.000000] Command line: kasan_multi_shot earlyprintk=serial,ttyS0,115200 console=ttyS0
[    0.012345] kasan: KernelAddressSanitizer initialized (generic)
[    0.020000] Lock dependency validator: Copyright (c) 2006 Red Hat, Inc., Ingo Molnar
[    0.020001] ... MAX_LOCKDEP_SUBCLASSES:  8
[    0.020002] ... MAX_LOCK_DEPTH:          48
[    0.500000] kmemleak: Kernel memory leak detector initialized (mem pool available: 15732)
[    0.600000] debug_objects: selftest passed
[    9.000000] pmm: loading out-of-tree module taints kernel.
[    9.100000] pmm: CONFIG_DEBUG_ATOMIC_SLEEP build, debug knobs on
"""

KASAN_UAF = """\
[   30.100000] ==================================================================
[   30.100001] BUG: KASAN: use-after-free in badmod_uaf+0x8c/0xb0 [pmm_badmod]
[   30.100002] Read of size 1 at addr ffff888006b2e408 by task insmod/412
[   30.100003] CPU: 1 PID: 412 Comm: insmod Tainted: G           O       6.1.192 #1
[   30.100004] Call Trace:
[   30.100005]  <TASK>
[   30.100006]  dump_stack_lvl+0x5b/0x77
[   30.100007]  print_report+0x17f/0x47b
[   30.100008]  kasan_report+0xad/0x130
[   30.100009]  badmod_uaf+0x8c/0xb0 [pmm_badmod]
[   30.100010] Disabling lock debugging due to kernel taint
"""

LOCKDEP = """\
[   41.000000] ======================================================
[   41.000001] WARNING: possible circular locking dependency detected
[   41.000002] 6.1.192 #1 Tainted: G           O
[   41.000003] ------------------------------------------------------
"""

INCONSISTENT = "[   42.0] WARNING: inconsistent lock state\n"
ATOMIC_SLEEP = (
    "[   43.0] BUG: sleeping function called from invalid context at mm/slab.h:742\n"
)
UBSAN = "[   44.0] UBSAN: array-index-out-of-bounds in kmod/pmm_main.c:210:9\n"
WARN_ON = "[   45.0] WARNING: CPU: 0 PID: 90 at kmod/pmm_main.c:77 pmm_ioctl+0x1/0x2 [pmm]\n"
LIST = "[   46.0] list_add corruption. prev->next should be next (ffff8880), but was 0000\n"
OOPS = "[   47.0] general protection fault, probably for non-canonical address 0xdead\n"

LEAK_UNLOADED = """\
unreferenced object 0xffff888004a3c000 (size 128):
  comm "insmod", pid 130, jiffies 4294901234 (age 12.340s)
  hex dump (first 32 bytes):
    a5 a5 a5 a5 a5 a5 a5 a5 a5 a5 a5 a5 a5 a5 a5 a5  ................
    a5 a5 a5 a5 a5 a5 a5 a5 a5 a5 a5 a5 a5 a5 a5 a5  ................
  backtrace:
    [<00000000f8a1b2c3>] kmalloc_trace+0x26/0x90
    [<00000000d1e2f3a4>] 0xffffffffc0200012
    [<000000001234abcd>] do_one_initcall+0xfe/0x580
    [<00000000aa55aa55>] do_init_module+0x1d6/0x640
"""

LEAK_LOADED = """\
unreferenced object 0xffff888004b00000 (size 64):
  comm "python", pid 220, jiffies 4294902000 (age 8.100s)
  hex dump (first 32 bytes):
    00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  ................
  backtrace:
    [<00000000f8a1b2c3>] __kmalloc+0x4a/0x150
    [<0000000011112222>] pmm_site_get+0x91/0x300 [pmm]
    [<0000000033334444>] pmm_ioctl+0x210/0x900 [pmm]
    [<0000000055556666>] __x64_sys_ioctl+0x105/0x160
"""

LEAK_KERNEL = """\
unreferenced object 0xffff888003000000 (size 32):
  comm "swapper/0", pid 1, jiffies 4294892000 (age 60.000s)
  hex dump (first 32 bytes):
    00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  ................
  backtrace:
    [<00000000f8a1b2c3>] kmalloc_trace+0x26/0x90
    [<0000000077778888>] acpi_os_create_semaphore+0x31/0x80
    [<0000000099990000>] acpi_ev_install_xrupt_handlers+0x1a/0x90
"""


def test_clean_debug_boot_is_clean() -> None:
    assert kcheck.scan_dmesg(CLEAN_BOOT) == []
    assert kcheck.verdict([]) == "clean"


@pytest.mark.parametrize(
    ("text", "category"),
    [
        (KASAN_UAF, "KASAN"),
        (LOCKDEP, "lockdep"),
        (INCONSISTENT, "lockdep"),
        (ATOMIC_SLEEP, "atomic-sleep"),
        (UBSAN, "UBSAN"),
        (WARN_ON, "WARNING"),
        (LIST, "list-corruption"),
        (OOPS, "Oops"),
    ],
)
def test_each_bug_finder_is_a_failure(text: str, category: str) -> None:
    found = kcheck.scan_dmesg(CLEAN_BOOT + text)
    assert found, text
    assert found[0].category == category
    assert kcheck.expected(found, "clean") is False
    # The offending line itself is kept, verbatim, to be printed on the host.
    assert found[0].line in text.splitlines()


def test_kasan_report_verdict() -> None:
    found = kcheck.scan_dmesg(KASAN_UAF)
    assert [f.category for f in found] == ["KASAN"]
    assert found[0].line.endswith("BUG: KASAN: use-after-free in badmod_uaf+0x8c/0xb0 [pmm_badmod]")
    assert kcheck.verdict(found) == "KASAN"
    assert kcheck.expected(found, "kasan") is True
    assert kcheck.expected(found, "kmemleak") is False


def test_kmemleak_report_split_into_objects() -> None:
    reports = kcheck.kmemleak_reports(LEAK_KERNEL + LEAK_UNLOADED + LEAK_LOADED)
    assert [r[0] for r in reports] == [
        "unreferenced object 0xffff888003000000 (size 32):",
        "unreferenced object 0xffff888004a3c000 (size 128):",
        "unreferenced object 0xffff888004b00000 (size 64):",
    ]
    assert len(reports[1]) == 10


def test_leak_from_unloaded_module_is_ours() -> None:
    found, others = kcheck.scan_kmemleak(LEAK_UNLOADED)
    assert others == []
    assert found[0] == kcheck.Finding(
        "kmemleak", "unreferenced object 0xffff888004a3c000 (size 128):"
    )
    assert kcheck.verdict(found) == "kmemleak"
    assert kcheck.expected(found, "kmemleak") is True


def test_leak_named_pmm_is_ours() -> None:
    found, others = kcheck.scan_kmemleak(LEAK_LOADED)
    assert others == []
    assert "    [<0000000011112222>] pmm_site_get+0x91/0x300 [pmm]" in [f.line for f in found]


def test_kernel_leak_is_shown_not_judged() -> None:
    found, others = kcheck.scan_kmemleak(LEAK_KERNEL)
    assert found == []
    assert len(others) == 1
    # ... unless a module list says otherwise: the rule is by module name.
    found, _ = kcheck.scan_kmemleak(LEAK_LOADED, ("other",))
    assert found == []


def test_empty_kmemleak_is_clean() -> None:
    assert kcheck.scan_kmemleak("") == ([], [])


def _files(tmp_path: Path, dmesg: str, leaks: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "d").write_text(dmesg)
    (tmp_path / "k").write_text(leaks)
    return subprocess.run(
        [sys.executable, str(KCHECK), "files", "--dmesg", str(tmp_path / "d"),
         "--kmemleak", str(tmp_path / "k")],
        capture_output=True, text=True, check=False,
    )


def test_cli_clean(tmp_path: Path) -> None:
    r = _files(tmp_path, CLEAN_BOOT, LEAK_KERNEL)
    assert r.returncode == 0, r.stdout
    assert r.stdout.splitlines() == ["kcheck: files: clean"]


def test_cli_prints_offending_lines_and_fails(tmp_path: Path) -> None:
    r = _files(tmp_path, CLEAN_BOOT + LOCKDEP, LEAK_UNLOADED)
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert ("kcheck: files: lockdep: [   41.000001] WARNING: possible circular locking "
            "dependency detected") in lines
    assert "kcheck: files: kmemleak:     [<00000000d1e2f3a4>] 0xffffffffc0200012" in lines
    assert lines[-1] == "kcheck: files: FAILED: lockdep+kmemleak"


def test_badmod_has_each_mode() -> None:
    src = (TOP / "tests" / "progs" / "badmod" / "pmm_badmod.c").read_text()
    for mode in ('"uaf"', '"leak"', '"ok"'):
        assert mode in src
    # Never part of pmm.ko: the module's Kbuild does not name it.
    kbuild = (TOP / "kmod" / "Kbuild").read_text()
    assert "pmm-y" in kbuild and "badmod" not in kbuild
