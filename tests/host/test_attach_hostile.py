"""pmm-inject, run as root, against a target that turns what it reads into
a weapon (tests/progs/hook/hostile_target.c, run as nobody): a FIFO or a
device where its maps say a library is, lying symbol tables, a memfd_create
that returns a descriptor of root's file. The injector opens nothing the
target names, never hangs or crashes, and writes only to a real new memfd.
Its ELF reader is fuzzed under ASan and UBSan."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hook_env import clean_env

TOP = Path(__file__).resolve().parents[2]
INJECT = TOP / "hooklib" / "pmm-inject"
FAKE = TOP / "hooklib" / "libpmmhook-fake.so"
BIN = TOP / "tests" / "progs" / "bin"
HOSTILE = BIN / "hostile_target"
LIB = BIN / "libattachee.so"
FUZZ = BIN / "fuzz_elfmem"
NOBODY = 65534
EXIT_NO_LIBRARY = 7


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory nobody may use (pytest's own are root's, 0700)."""
    d = Path(tempfile.mkdtemp(prefix="pmm-hostile-", dir="/tmp"))
    d.chmod(0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def start(argv: list[str], wrap: list[str] | None = None) -> subprocess.Popen[bytes]:
    """The hostile target as nobody, once it says it is ready."""
    cmd = [*(wrap or []), "setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY),
           "--clear-groups", str(HOSTILE), *argv]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=clean_env())
    assert p.stdout is not None
    line = p.stdout.readline().decode()
    assert line == "ready\n", (line, p.stderr.read() if p.stderr else b"")
    return p


def target_pid(p: subprocess.Popen[bytes]) -> int:
    """The hostile program's pid under its wrappers (setpriv, unshare exec it)."""
    return p.pid


def inject_traced(pid: int, log: Path, lib: Path = FAKE,
                  env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str],
                                                             float]:
    """pmm-inject under strace (every file it or its children open), timed."""
    t0 = time.monotonic()
    r = subprocess.run(["strace", "-f", "-qq", "-e", "trace=open,openat,openat2,creat",
                        "-o", str(log), str(INJECT), "--lib", str(lib), str(pid),
                        "PMM_START=1", "PMM_FAKE_LOG=/dev/null"],
                       capture_output=True, text=True, timeout=120,
                       env={**clean_env(), **(env or {})})
    return r, time.monotonic() - t0


def opened(log: Path) -> list[str]:
    """The paths pmm-inject (and its unwinder child) asked to open."""
    return re.findall(r'open(?:at2?)?\((?:[^,]*, )?"([^"]*)"', log.read_text())


def stop(p: subprocess.Popen[bytes]) -> None:
    assert p.poll() is None, "the target died"
    p.kill()
    p.wait()


@pytest.mark.parametrize("trap", ["fifo", "devlink"])
def test_a_trap_where_the_maps_name_a_library_is_never_opened(shared_dir: Path, trap: str,
                                                              tmp_path: Path) -> None:
    """The library the target loaded is gone and a FIFO (an open would block
    for ever) or a symlink to /dev/zero has its maps name: pmm-inject attaches
    promptly, its threads judged by the unwinder, and opens neither."""
    p = start([trap, str(shared_dir), str(LIB)])
    try:
        trap_path = shared_dir / "lib.so (deleted)"
        assert trap_path.is_fifo() if trap == "fifo" else trap_path.is_symlink()
        maps = Path(f"/proc/{p.pid}/maps").read_text()
        assert str(trap_path) in maps
        log = tmp_path / "strace"
        r, took = inject_traced(p.pid, log, env={"PMM_INJECT_DEBUG": "1"})
        assert r.returncode == 0, r.stderr
        assert took < 30
        assert "unwound, safe" in r.stderr  # the confined unwinder judged it
        paths = opened(log)
        assert not [x for x in paths if str(shared_dir) in x or x.startswith("/dev/")], paths
        assert not [x for x in paths if "/root/" in x], paths  # nothing in its mounts
    finally:
        stop(p)


def lying_symbols(src: Path, dst: Path) -> None:
    """A copy of src whose .dynsym names all point far past .dynstr."""
    data = bytearray(src.read_bytes())
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    for i in range(shnum):
        sh = shoff + i * shentsize
        sh_type, = struct.unpack_from("<I", data, sh + 4)
        if sh_type == 11:  # SHT_DYNSYM
            off, size = struct.unpack_from("<QQ", data, sh + 0x18)
            for e in range(off, off + size, 24):
                struct.pack_into("<I", data, e, 0xFFFFFFF0 - (e - off) // 24)
    dst.write_bytes(bytes(data))


def test_lying_symbol_tables_do_not_crash_the_injector(shared_dir: Path, tmp_path: Path) -> None:
    """An object mapped as code whose symbol names lie outside its string
    table (st_name near 2^32): the attach works; nothing is read out of
    bounds (the old reader died of SIGSEGV)."""
    wild = shared_dir / "wild.so"
    lying_symbols(LIB, wild)
    p = start(["wildsym", str(wild)])
    try:
        r, took = inject_traced(p.pid, tmp_path / "strace")
        assert r.returncode == 0, r.stderr
        assert took < 30
        assert str(wild) not in opened(tmp_path / "strace")
    finally:
        stop(p)


def test_a_memfd_that_is_not_one_is_refused(shared_dir: Path, tmp_path: Path) -> None:
    """The target (in a mount namespace where the hook's path is hidden, so the
    hook goes through a memfd) makes memfd_create return an O_PATH descriptor
    of root's 0600 file: pmm-inject refuses and the file is unchanged (the old
    injector reopened /proc/PID/fd/N for writing and overwrote it)."""
    hidden = Path(tempfile.mkdtemp(prefix="pmm-hidden-", dir="/tmp"))
    try:
        hidden.chmod(0o755)
        lib = hidden / "libpmmhook-fake.so"
        shutil.copy(FAKE, lib)
        victim = shared_dir / "victim"
        victim.write_text("root's secret\n")
        victim.chmod(0o600)
        wrap = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                f"mount -t tmpfs none {hidden} && exec \"$@\"", "sh"]
        p = start(["memfd", str(victim)], wrap=wrap)
        try:
            r, took = inject_traced(p.pid, tmp_path / "strace", lib=lib)
            assert victim.read_bytes() == b"root's secret\n"
            assert r.returncode == EXIT_NO_LIBRARY, r.stderr
            assert "is not a new memfd" in r.stderr, r.stderr
            assert not [x for x in opened(tmp_path / "strace") if "/fd/" in x]
        finally:
            stop(p)
    finally:
        subprocess.run(["umount", str(hidden)], capture_output=True)
        shutil.rmtree(hidden, ignore_errors=True)


OBJECTS = ["/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2",
           "/usr/lib/x86_64-linux-gnu/libstdc++.so.6", str(TOP / "hooklib" / "libpmmhook.so"),
           "/usr/bin/python3.11", str(LIB)]


def readelf_functions(path: str) -> int:
    """Defined functions of the object's dynamic symbol table, by binutils."""
    out = subprocess.run(["readelf", "-W", "--dyn-syms", path], capture_output=True,
                         text=True, check=True).stdout
    return sum(1 for line in out.splitlines()
               if len(f := line.split()) >= 8 and f[3] == "FUNC" and f[6] != "UND")


def test_elf_reader_fuzz() -> None:
    """pmm-inject's ELF reader, built with ASan and UBSan, reads each object
    laid out as mapped exactly as binutils does, then 1,000 mutations of each
    (headers, dynamic section, hash and symbol tables, .eh_frame_hdr) with no
    sanitizer report."""
    r = subprocess.run([str(FUZZ), "7", "1000", *OBJECTS], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "ASAN_OPTIONS": "detect_leaks=1"})
    assert r.returncode == 0, r.stderr[-3000:]
    counts = dict(re.findall(r"^(\S+) functions (\d+) eh 1$", r.stdout, re.M))
    assert {k: int(v) for k, v in counts.items()} == \
        {o: readelf_functions(o) for o in OBJECTS}
    assert f"rounds {1000 * len(OBJECTS)}" in r.stdout
