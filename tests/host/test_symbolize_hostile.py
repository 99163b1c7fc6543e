"""The symbolizers against what a monitored process's owner controls (root
never acts on it, docs/symbolize.md): a FIFO or a symlink to a device where a library was, an
absolute symlink inside a container's root, ELF files with wild indexes and
offsets (and a few thousand mutated ones), debug links that lead out of
where binutils should look, binutils made unprivileged and bounded in time,
and two objects of two users with one forged build-id.

Real files built here with gcc and ld, real addr2line, a real process in a
chroot and one run as nobody; strace (-y: each new descriptor with its
path) tells what was opened: a file that must not be opened may at most be
looked up with O_PATH, which opens nothing."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from pmm import symbolize as sy
from pmm.kernel.model import ObjectFile, Site
from pmm.sitestack import site_frames

NOBODY = 65534
OTHER = 54_321  # a uid no one uses


@pytest.fixture(autouse=True)
def own_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never the user's cache, /usr/lib/debug or a debuginfod server."""
    if os.geteuid() != 0:
        pytest.skip("needs root: files of other users, chroot, strace of setpriv")
    monkeypatch.setenv("PMM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PMM_DEBUG_DIRS", "")
    for var in ("DEBUGINFOD_URLS", "DEBUGINFOD_CACHE_PATH", "PMM_SYMBOLIZER"):
        monkeypatch.delenv(var, raising=False)


# -- building ------------------------------------------------------------------------

LIB_C = """\
__attribute__((noinline)) int {func}(int x)
{{
\treturn x * 3 + {n};
}}

__attribute__((noinline)) int call_{func}(int x)
{{
\treturn {func}(x) + 1;
}}
"""


def build_lib(d: Path, name: str, func: str, *flags: str, n: int = 1) -> Path:
    """A shared library of `func` (and its caller) built from d/name.c."""
    src = d / f"{name}.c"
    src.write_text(LIB_C.format(func=func, n=n))
    out = d / name
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", *flags, "-o", str(out), str(src)],
                   check=True)
    return out


def func_offset(lib: Path, func: str) -> int:
    """The file offset of func's first byte (nm -D, readelf's PT_LOADs)."""
    nm = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                        text=True, check=True).stdout
    vaddr = next(int(ln.split()[0], 16) for ln in nm.splitlines() if ln.split()[-1] == func)
    out = subprocess.run(["readelf", "-lW", str(lib)], capture_output=True, text=True,
                         check=True).stdout
    for ln in out.splitlines():
        f = ln.split()
        if f and f[0] == "LOAD":
            off, va, filesz = int(f[1], 16), int(f[2], 16), int(f[4], 16)
            if va <= vaddr < va + filesz:
                return vaddr - va + off
    raise AssertionError(f"{func} is in no PT_LOAD of {lib}")


def build_id(path: Path) -> str:
    out = subprocess.run(["readelf", "-n", str(path)], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", out)
    assert m, path
    return m.group(1)


def line_at(lib: Path, func: str) -> str:
    """'func() file.c:N' as addr2line names func's first byte (from nm -D)."""
    nm = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                        text=True, check=True).stdout
    vaddr = next(int(ln.split()[0], 16) for ln in nm.splitlines() if ln.split()[-1] == func)
    out = subprocess.run(["addr2line", "-f", "-e", str(lib), f"{vaddr:x}"], capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[0] == func, out
    return f"{func}() {os.path.basename(out[1].split(' ')[0])}"


def section(path: Path, name: str) -> tuple[int, int, int]:
    """(file offset, size, entry size) of a section, by readelf -SW."""
    out = subprocess.run(["readelf", "-SW", str(path)], capture_output=True, text=True,
                         check=True).stdout
    for ln in out.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)"
                     r"\s+([0-9a-f]+)", ln)
        if m and m.group(1) == name:
            return int(m.group(2), 16), int(m.group(3), 16), int(m.group(4), 16)
    raise AssertionError(f"no {name} in {path}")


# -- what a symbolization opens ------------------------------------------------------

OPENED = re.compile(r"^\d+\s+(open|openat|openat2)\((.*)\)\s+=\s+\d+<(.*)>$")


def traced(code: str, forbidden: Sequence[str], timeout: float = 60
           ) -> tuple[dict[str, Any], list[str], float]:
    """Runs the Python code (which prints one JSON line) under strace -f -y:
    (what it printed, the opens that gave a descriptor of a forbidden path
    without O_PATH, seconds taken)."""
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as log:
        t0 = time.monotonic()
        r = subprocess.run(["strace", "-f", "-qq", "-y", "-e", "trace=open,openat,openat2",
                            "-o", log.name, sys.executable, "-c", code],
                           capture_output=True, text=True, timeout=timeout, check=False)
        took = time.monotonic() - t0
        assert r.returncode == 0, r.stderr
        opened = []
        for ln in log.read().splitlines():
            m = OPENED.match(ln)
            if m and m.group(3) in forbidden and "O_PATH" not in m.group(2):
                opened.append(ln)
    return json.loads(r.stdout.splitlines()[-1]), opened, took


# (pmm's API before issue 37 had neither Target nor the module's inode and
# size in ObjectRef: run that way, the same files show what it did with them)
SYMBOLIZE = """\
import json, os, time
from pmm import symbolize as sy
Target = getattr(sy, "Target", None)
target = Target.of({pid}) if {pid} and Target else None
with_ino = "ino" in sy.ObjectRef.__dataclass_fields__
refs = [sy.ObjectRef(p, b, *((i, z) if with_ino else ())) for p, b, i, z in {refs!r}]
t0 = time.monotonic()
s = sy.Symbolizer(sy.parse_maps({maps!r}), **({{"target": target}} if Target else {{}}))
objects = s.symbolize_objects((r, o) for r in refs for o in {offsets!r})
mapped = s.symbolize({addrs!r})
print(json.dumps({{
    "objects": [[f.describe(), f.func] for f in objects.values()],
    "mapped": [[f.describe(), f.func] for f in mapped.values()],
    "refusals": getattr(s, "refusals", None), "s": time.monotonic() - t0}}))
"""


def symbolize_traced(forbidden: Sequence[str], refs: Sequence[tuple[Any, ...]] = (),
                     offsets: Sequence[int] = (), maps: str = "", addrs: Sequence[int] = (),
                     pid: int = 0) -> tuple[dict[str, Any], list[str], float]:
    code = SYMBOLIZE.format(pid=pid, refs=[tuple(r) for r in refs], offsets=list(offsets),
                            maps=maps, addrs=list(addrs))
    return traced(code, forbidden)


# -- a FIFO, a symlink to a device -----------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "device-symlink"])
def test_fifo_or_device_symlink_is_refused_unopened(kind: str, tmp_path: Path) -> None:
    """Where a library was, a FIFO (whose open waits for a writer) or a
    symlink named like a library to /dev/zero: named by the module's record
    and by a map, each is refused at once, saying why, and never opened."""
    lib = tmp_path / "libhostile.so"
    if kind == "fifo":
        os.mkfifo(lib)
        forbidden, why = [str(lib)], "a FIFO, not a regular file (not opened)"
    else:
        os.symlink("/dev/zero", lib)
        forbidden, why = ["/dev/zero", str(lib)], "a symbolic link, not a regular file (not opened)"
    ino = os.lstat(lib).st_ino
    maps = f"7f0000000000-7f0000002000 r-xp 00001000 08:01 {ino} {lib}\n"
    got, opened, took = symbolize_traced(forbidden, refs=[(str(lib), None, None, None)],
                                         offsets=[0x1010], maps=maps, addrs=[0x7F0000000010])
    assert opened == []
    assert got["objects"] == [["libhostile.so+0x1010", None]]
    assert got["mapped"] == [["libhostile.so+0x1010", None]]
    assert got["refusals"] == {str(lib): f"{lib}: {why}"}
    assert took < 20 and got["s"] < 5


@pytest.fixture()
def nobody_dir() -> Iterator[Path]:
    """A directory under /tmp that nobody owns and may enter."""
    d = Path(tempfile.mkdtemp(prefix="pmm-hostile-", dir="/tmp"))
    os.chmod(d, 0o755)
    os.chown(d, NOBODY, NOBODY)
    try:
        yield d
    finally:
        shutil.rmtree(d)


PROG_C = """\
#include <stdio.h>
int call_swap_work(int);
int main(void)
{
\tprintf("%p\\n", (void *)&call_swap_work);
\tfflush(stdout);
\t(void)getchar();
\treturn call_swap_work(1) == 0;
}
"""


def test_library_swapped_for_a_fifo_by_a_process_run_as_nobody(nobody_dir: Path) -> None:
    """nobody runs a program with its library, then puts a FIFO where the
    library was. The map, read while it runs, names the mapped file itself
    (/proc/PID/map_files): its function and line, read by addr2line as
    nobody. The module's record (path, inode, size) gives the FIFO: refused
    without opening it."""
    lib = build_lib(nobody_dir, "libswap.so", "swap_work", "-g")
    (nobody_dir / "prog.c").write_text(PROG_C)
    prog = nobody_dir / "prog"
    subprocess.run(["gcc", "-g", "-o", str(prog), str(nobody_dir / "prog.c"), str(lib),
                    "-Wl,-rpath,$ORIGIN"], check=True)
    for made in nobody_dir.iterdir():
        os.chown(made, NOBODY, NOBODY)
    st = lib.stat()
    bid = build_id(lib)
    p = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                          "--clear-groups", str(prog)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        addr = int(p.stdout.readline(), 16)
        maps = Path(f"/proc/{p.pid}/maps").read_text()
        os.rename(lib, nobody_dir / "libswap.so.old")
        os.mkfifo(lib)
        os.chown(lib, NOBODY, NOBODY)
        off = func_offset(nobody_dir / "libswap.so.old", "call_swap_work")
        got, opened, _ = symbolize_traced(
            [str(lib)], refs=[(str(lib), bid, st.st_ino, st.st_size)], offsets=[off + 1],
            maps=maps, addrs=[addr + 1], pid=p.pid)
    finally:
        p.kill()
        p.wait()
    assert opened == []
    assert got["mapped"] == [[line_at(nobody_dir / "libswap.so.old", "call_swap_work"),
                              "call_swap_work"]]
    assert got["objects"] == [[f"libswap.so+0x{off + 1:x}", None]]
    assert got["refusals"] == {str(lib): f"{lib}: a FIFO, not a regular file (not opened)"}


# -- an absolute symlink inside a container's root -------------------------------------

SLEEPER_C = "#include <unistd.h>\nint main(void) { pause(); return 0; }\n"


def test_container_symlinks_resolve_inside_its_root(tmp_path: Path) -> None:
    """A process chrooted in croot names T/p/libapp.so (T/p: an absolute
    symlink to T/q, inside croot as on the host) and T/p2/libapp.so (an
    absolute symlink to T/q/libapp.so). Inside its root the first is croot's
    T/q/libapp.so (container_work), the second refused; the host's
    T/q/libapp.so (secret_work) is never opened."""
    t = tmp_path
    croot = t / "croot"
    inside = croot / t.relative_to("/")
    for root, func in ((t, "secret_work"), (inside, "container_work")):
        (root / "q").mkdir(parents=True)
        build_lib(root / "q", "libapp.so", func, "-g")
        os.symlink(t / "q", root / "p")
        (root / "p2").mkdir()
        os.symlink(t / "q" / "libapp.so", root / "p2" / "libapp.so")
    sleeper = croot / "sleeper"
    (t / "sleeper.c").write_text(SLEEPER_C)
    subprocess.run(["gcc", "-static", "-o", str(sleeper), str(t / "sleeper.c")], check=True)
    off = func_offset(inside / "q" / "libapp.so", "call_container_work")
    secret = str(t / "q" / "libapp.so")
    p = subprocess.Popen(["chroot", str(croot), "/sleeper"])
    try:
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{p.pid}/root") != str(croot):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        got, opened, _ = symbolize_traced(
            [secret], refs=[(str(t / "p" / "libapp.so"), None, None, None),
                            (str(t / "p2" / "libapp.so"), None, None, None)],
            offsets=[off + 1], pid=p.pid)
    finally:
        p.kill()
        p.wait()
    assert opened == []
    (followed, _), (refused, _) = got["objects"]
    assert followed == line_at(inside / "q" / "libapp.so", "call_container_work")
    assert refused == f"libapp.so+0x{off + 1:x}"
    assert got["refusals"] == {
        str(t / "p2" / "libapp.so"):
        f"{t / 'p2' / 'libapp.so'}: a symbolic link, not a regular file (not opened)"}


# -- ELF files out of bounds -----------------------------------------------------------

def _elf_with_symbols(path: Path, strtab: bytes, names: Sequence[int]) -> None:
    """An ELF64 file whose .symtab has one function symbol per name offset
    into strtab, each in .text (section 1), at 0x1000 + 16 i."""
    text = bytes(0x1000)
    symtab = bytes(24) + b"".join(  # the null symbol, then one per name
        struct.pack("<IBBHQQ", name_at, 0x12, 0, 1, 0x1000 + 16 * i, 16)
        for i, name_at in enumerate(names))
    shstr = b"\0.text\0.strtab\0.symtab\0.shstrtab\0"
    body = [(0x1000, text), (0, strtab), (0, symtab), (0, shstr)]
    at = 64 + 56
    offs = []
    for align, data in body:
        at = (at + max(align, 8) - 1) // max(align, 8) * max(align, 8)
        offs.append(at)
        at += len(data)
    shoff = (at + 7) // 8 * 8
    ehdr = b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack(
        "<HHIQQQIHHHHHH", 3, 62, 1, 0, 64, shoff, 0, 64, 56, 1, 64, 5, 4)
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, offs[0] + len(text), offs[0] + len(text),
                       0x1000)
    shdrs = bytes(64)
    for (name, typ, flags, link, entsize), off, (_, data) in zip(
            [(1, 1, 6, 0, 0), (7, 3, 0, 0, 0), (15, 2, 0, 2, 24), (23, 3, 0, 0, 0)], offs, body,
            strict=True):
        shdrs += struct.pack("<IIQQQQIIQQ", name, typ, flags, 0x1000 if typ == 1 else 0, off,
                             len(data), link, 1 if typ == 2 else 0, 8, entsize)
    out = bytearray(shoff + len(shdrs))
    out[:64] = ehdr
    out[64:120] = phdr
    for off, (_, data) in zip(offs, body, strict=True):
        out[off:off + len(data)] = data
    out[shoff:] = shdrs
    path.write_bytes(bytes(out))


def malformed(kind: str, d: Path) -> tuple[Path, int, str]:
    """(a hostile ELF file of this kind, an offset in it to name, what the
    refusal says after 'malformed ELF: ')."""
    path = d / f"lib{kind}.so"
    if kind == "wild-st_name":
        lib = build_lib(d, path.name, "victim_work", "-s")  # .dynsym its only symbols
        off, _, entsize = section(lib, ".dynsym")
        syms = subprocess.run(["readelf", "--dyn-syms", "-W", str(lib)], capture_output=True,
                              text=True, check=True).stdout
        index = next(int(ln.split(":")[0]) for ln in syms.splitlines()
                     if ln.split()[-1:] == ["victim_work"])
        data = bytearray(lib.read_bytes())
        data[off + index * entsize:off + index * entsize + 4] = struct.pack("<I", 0xFFFFFFF0)
        lib.write_bytes(bytes(data))
        _, strsize, _ = section(lib, ".dynstr")
        return lib, func_offset(lib, "call_victim_work") + 1, (
            f"symbol {index}'s name at 0xfffffff0 is outside its table of {strsize} bytes")
    if kind in ("huge-e_shoff", "huge-e_shnum"):
        lib = build_lib(d, path.name, "victim_work")
        data = bytearray(lib.read_bytes())
        size = len(data)
        if kind == "huge-e_shoff":
            data[0x28:0x30] = struct.pack("<Q", 1 << 63)
            shnum = struct.unpack_from("<H", data, 0x3C)[0]
            why = (f"section headers at {1 << 63:#x}+{shnum * 64:#x} is outside the file "
                   f"({size} bytes)")
        else:
            data[0x3C:0x3E] = struct.pack("<H", 0xFFFF)
            shoff = struct.unpack_from("<Q", data, 0x28)[0]
            why = (f"section headers at {shoff:#x}+{0xFFFF * 64:#x} is outside the file "
                   f"({size} bytes)")
        lib.write_bytes(bytes(data))
        return lib, 0x1010, why
    if kind == "names-without-end":
        # 16 MiB of name bytes and no NUL, 200,000 symbols at its start: the
        # end of each name is looked for within 64 KiB, not 16 MiB each
        _elf_with_symbols(path, b"A" * (16 << 20), [0] * 200_000)
        return path, 0x1010, "symbol 1's name at 0x0 has no end within 65536 bytes"
    assert kind == "overlapping-names"
    # 200,000 names of up to 60,000 bytes, all in one 15 MiB table: their
    # total length is bounded by the table's
    unit = b"A" * 60_000 + b"\0"
    _elf_with_symbols(path, unit * 256, list(range(200_000)))
    return path, 0x1010, ("symbol table '.symtab': its names overlap beyond the size of "
                          "their string table")


@pytest.mark.parametrize("kind", ["wild-st_name", "huge-e_shoff", "huge-e_shnum",
                                  "names-without-end", "overlapping-names"])
def test_malformed_elf_is_refused_promptly(kind: str, tmp_path: Path) -> None:
    """Each named by the module's record: refused at once with what is out of
    bounds; the frame stays object+offset (no symbol from a table that lies)."""
    lib, off, why = malformed(kind, tmp_path)
    got, _, took = symbolize_traced([], refs=[(str(lib), None, None, None)], offsets=[off])
    assert got["objects"] == [[f"{lib.name}+0x{off:x}", None]]
    assert got["refusals"] == {str(lib): f"{lib}: malformed ELF: {why}"}
    assert took < 30 and got["s"] < 10


def fuzz_base(d: Path) -> Path:
    """A real object with every table the reader reads: program and section
    headers, notes (a build-id), .symtab and .dynsym, DWARF, a
    .gnu_debuglink."""
    lib = build_lib(d, "libfuzz.so", "fuzz_work", "-g", "-Wl,--build-id")
    (d / "libfuzz.debug").write_bytes(b"debug")
    subprocess.run(["objcopy", f"--add-gnu-debuglink={d / 'libfuzz.debug'}", str(lib)],
                   check=True, cwd=d)
    return lib


def read_everything(path: Path) -> str:
    """Everything the symbolizers ask of an ELF file: 'ok', or the
    MalformedElf message; any other exception propagates."""
    try:
        elf = sy.ElfFile.load(sy.opening.open_path(str(path)))
        elf.build_id  # noqa: B018
        elf.debuglink  # noqa: B018
        elf.debugaltlink  # noqa: B018
        elf.has_debug_info  # noqa: B018
        sy.unsafe_links(elf)
        sy.debug_file_load_segments(elf)
        for v in (0, 0x1000, 0x1139, 1 << 40):
            elf.nearest_symbol(v)
            sy.vaddr_in(elf.load_segments, v)
        return "ok"
    except sy.MalformedElf as e:
        return f"malformed: {e}"


def test_fuzzed_elf_files_give_malformed_or_an_answer(tmp_path: Path) -> None:
    """3000 mutations of a real object (its header, program and section
    headers, notes, symbol and string tables, debug link; bytes and whole
    fields set to extremes): the reader answers or says malformed, never
    raises anything else, never takes long."""
    base = fuzz_base(tmp_path)
    data = base.read_bytes()
    assert read_everything(base) == "ok"
    elf = sy.ElfFile.load(sy.opening.open_path(str(base)))
    regions = [(0, 64), (0x40, 56 * len(elf.phdrs))]
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    regions.append((shoff, 64 * len(elf.sections)))
    for s in elf.sections:
        if s.name in (".symtab", ".dynsym", ".strtab", ".dynstr", ".shstrtab",
                      ".note.gnu.build-id", ".gnu_debuglink") and s.has_data:
            regions.append((s.offset, min(s.size, 4096)))
    extremes = [0, 1, 0x7F, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, len(data), len(data) - 1,
                1 << 32, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]
    rng = random.Random(37)
    results: dict[str, int] = {}
    slowest = 0.0
    for i in range(3000):
        mutant = bytearray(data)
        for _ in range(rng.choice((1, 1, 2, 4))):
            start, size = rng.choice(regions)
            at = start + rng.randrange(max(size, 1))
            if rng.random() < 0.5:
                mutant[at] = rng.randrange(256)
            else:
                width = rng.choice((2, 4, 8))
                at -= at % width
                value = rng.choice(extremes) % (1 << (8 * width))
                mutant[at:at + width] = value.to_bytes(width, "little")
        if rng.random() < 0.05:
            del mutant[rng.randrange(len(mutant)):]  # cut short
        path = tmp_path / f"m{i}"
        path.write_bytes(bytes(mutant))
        t0 = time.monotonic()
        got = read_everything(path)
        slowest = max(slowest, time.monotonic() - t0)
        kind = got.split(":")[0]
        results[kind] = results.get(kind, 0) + 1
        path.unlink()
    assert slowest < 2.0
    assert results.get("malformed", 0) > 300 and results.get("ok", 0) > 300, results


# -- binutils: unprivileged, bounded, kept to what it is given ------------------------

FAKE_ADDR2LINE = """\
#!/bin/sh
# what addr2line would run as and with
{{
  echo "args $*"
  grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/$$/status
  echo "env $(tr '\\0' ' ' < /proc/$$/environ)"
  echo "stdin $(readlink /proc/$$/fd/0)"
  echo "cwd $(readlink /proc/$$/cwd)"
  for fd in /proc/$$/fd/*; do echo "fd ${{fd##*/}} $(readlink $fd)"; done
}} > {out}
{sleep}
"""


def fake_addr2line(d: Path, sleep: str = "") -> tuple[Path, Path]:
    out = d / "seen"
    exe = d / "addr2line"
    exe.write_text(FAKE_ADDR2LINE.format(out=out, sleep=sleep))
    exe.chmod(0o755)
    out.touch()
    out.chmod(0o666)
    return exe, out


def test_addr2line_on_another_users_file_runs_as_that_user_without_privileges(
        tmp_path: Path, nobody_dir: Path) -> None:
    """Root symbolizes an object nobody wrote: addr2line runs as nobody, no
    groups, every capability set (bounding too) empty, NO_NEW_PRIVS, an
    environment of LC_ALL=C alone, no stdin, in /, and reads the object as
    the descriptor it was given."""
    lib = build_lib(tmp_path, "libtheirs.so", "their_work", "-g")
    os.chown(lib, NOBODY, NOBODY)
    exe, seen = fake_addr2line(nobody_dir)
    ref = sy.ObjectRef(str(lib), None)
    sy.Symbolizer(backend=sy.Addr2line(str(exe))).symbolize_objects([(ref, 0x1010)])
    got = seen.read_text().splitlines()
    fields = {(ln.split(maxsplit=1) + [""])[0]: (ln.split(maxsplit=1) + [""])[1] for ln in got}
    assert fields["Uid:"].split() == [str(NOBODY)] * 4
    assert fields["Gid:"].split() == [str(NOBODY)] * 4
    assert fields.get("Groups:", "") == ""
    for cap in ("CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"):
        assert int(fields[cap], 16) == 0, cap
    assert fields["NoNewPrivs:"] == "1"
    assert fields["env"].strip() == "LC_ALL=C"
    assert (fields["stdin"], fields["cwd"]) == ("/dev/null", "/")
    args = fields["args"].split()
    assert args[:5] == ["-a", "-f", "-C", "-i", "-e"] and args[5].startswith("/proc/self/fd/")
    fd = args[5].rsplit("/", 1)[1]
    assert f"fd {fd} {lib}" in got


PMD_LIKE = """\
from pmm import symbolize as sy
ref = sy.ObjectRef({lib!r}, None)
s = sy.Symbolizer(backend=sy.Addr2line({exe!r}), disk_cache=False)
s.symbolize_objects([(ref, 0x1010)])
"""


def test_addr2line_run_by_pmd_for_another_users_file(nobody_dir: Path) -> None:
    """pmd's case: a caller that may not change users (user pmd with
    CAP_SYS_PTRACE, as its unit gives it) symbolizes nobody's object:
    addr2line keeps the caller's uid but no capability, and NO_NEW_PRIVS."""
    lib = build_lib(nobody_dir, "libtheirs.so", "their_work", "-g")
    os.chown(lib, NOBODY, NOBODY)
    exe, seen = fake_addr2line(nobody_dir)
    subprocess.run(["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups",
                    "--inh-caps=+sys_ptrace", "--ambient-caps=+sys_ptrace", sys.executable,
                    "-c", PMD_LIKE.format(lib=str(lib), exe=str(exe))],
                   check=True, env={**os.environ, "PMM_CACHE_DIR": str(nobody_dir / "cache")})
    got = seen.read_text().splitlines()
    fields = {(ln.split(maxsplit=1) + [""])[0]: (ln.split(maxsplit=1) + [""])[1] for ln in got}
    assert fields["Uid:"].split() == [str(OTHER)] * 4
    for cap in ("CapInh:", "CapPrm:", "CapEff:", "CapAmb:"):
        assert int(fields[cap], 16) == 0, cap
    assert fields["NoNewPrivs:"] == "1"
    assert fields["env"].strip() == "LC_ALL=C"


def test_pyelftools_does_not_read_another_users_file(tmp_path: Path) -> None:
    """pyelftools parses in the caller's process (root's): not a file
    someone else wrote; the frame keeps its nearest symbol, and why is said."""
    pytest.importorskip("elftools", reason="pyelftools (the elf extra) not installed")
    lib = build_lib(tmp_path, "libtheirs.so", "their_work", "-g")
    os.chown(lib, NOBODY, NOBODY)
    s = sy.Symbolizer(backend=sy.PyElfTools())
    off = func_offset(lib, "call_their_work") + 1
    (frame,) = s.symbolize_objects([(sy.ObjectRef(str(lib), None), off)]).values()
    assert (frame.func, frame.line, frame.symbol) == ("call_their_work", None,
                                                      "call_their_work+0x1")
    assert s.refusals == {str(lib): f"{lib}: pyelftools does not read a file someone else "
                                    "wrote (binutils' addr2line does, unprivileged)"}


def test_addr2line_that_does_not_answer_is_killed(tmp_path: Path, nobody_dir: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user's object whose parse takes forever: killed at the time
    budget; the frame keeps its nearest symbol, and why is said."""
    monkeypatch.setattr(sy.backends, "UNTRUSTED_TIMEOUT_S", 1.0, raising=False)
    lib = build_lib(tmp_path, "libslow.so", "slow_work", "-g")
    os.chown(lib, OTHER, OTHER)
    pidfile = nobody_dir / "pid"
    exe, _ = fake_addr2line(nobody_dir, sleep=f"echo $$ > {pidfile}; exec /bin/sleep 60")
    pidfile.touch()
    pidfile.chmod(0o666)
    s = sy.Symbolizer(backend=sy.Addr2line(str(exe)))
    t0 = time.monotonic()
    ref = sy.ObjectRef(str(lib), None)
    f = s.symbolize_objects([(ref, func_offset(lib, "call_slow_work") + 1)])
    assert time.monotonic() - t0 < 5
    (frame,) = f.values()
    assert frame.line is None and frame.func == "call_slow_work"  # its nearest symbol
    assert s.refusals == {str(lib): f"{lib}: addr2line: no answer within 1 s (killed)"}
    pid = int(pidfile.read_text())
    assert not Path(f"/proc/{pid}").exists() or \
        Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"


def test_one_users_objects_that_time_out_are_not_parsed_again(
        tmp_path: Path, nobody_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pmd's worker serves every user: after two time-outs on one user's
    files, its Symbolizer parses no more of that user's, at once; another
    user's are still parsed."""
    monkeypatch.setattr(sy.backends, "UNTRUSTED_TIMEOUT_S", 1.0, raising=False)
    exe, _ = fake_addr2line(nobody_dir, sleep="exec /bin/sleep 60")
    refs = []
    for n, owner in enumerate((OTHER, OTHER, OTHER, NOBODY)):
        lib = build_lib(tmp_path, f"libslow{n}.so", "slow_work", "-g")
        os.chown(lib, owner, owner)
        refs.append(sy.ObjectRef(str(lib), None))
    s = sy.Symbolizer(backend=sy.Addr2line(str(exe)))
    took = []
    for ref in refs:
        t0 = time.monotonic()
        s.symbolize_objects([(ref, 0x1010)])
        took.append(time.monotonic() - t0)
    assert [t >= 1.0 for t in took] == [True, True, False, True]
    assert s.refusals[str(refs[2].path)] == (
        f"{refs[2].path}: not parsed: files of uid {OTHER} gave no answer in time 2 times")
    assert s.refusals[str(refs[3].path)] == (
        f"{refs[3].path}: addr2line: no answer within 1 s (killed)")


ALT_S = """\
\t.text
\t.globl\t{func}
\t.type\t{func}, @function
{func}:
\tnop
\tret
\t.size\t{func}, .-{func}

\t.section\t.debug_abbrev,"",@progbits
\t.uleb128 1
\t.uleb128 0x11
\t.byte 0
\t.uleb128 0x3
\t.uleb128 0x1f21
\t.uleb128 0x11
\t.uleb128 0x1
\t.uleb128 0x12
\t.uleb128 0x1
\t.uleb128 0x10
\t.uleb128 0x17
\t.byte 0
\t.byte 0
\t.byte 0

\t.section\t.debug_info,"",@progbits
.Lcu:
\t.long .Lcu_end - .Lcu - 4
\t.value 4
\t.long .debug_abbrev
\t.byte 8
\t.uleb128 1
\t.long 0
\t.quad {func}
\t.quad {func} + 2
\t.long .Lline
.Lcu_end:

\t.section .debug_line,"",@progbits
.Lline:
\t.long .Lline_end - .Lline - 4
\t.value 4
\t.long .Lhdr_end - .Lhdr
.Lhdr:
\t.byte 1,1,1
\t.byte -5
\t.byte 14
\t.byte 13
\t.byte 0,1,1,1,1,0,0,0,1,0,0,1
\t.byte 0
\t.string "alt.c"
\t.uleb128 0,0,0
\t.byte 0
.Lhdr_end:
\t.byte 0
\t.uleb128 9
\t.byte 2
\t.quad {func}
\t.byte 0x14
\t.byte 0
\t.uleb128 9
\t.byte 2
\t.quad {func} + 2
\t.byte 0
\t.uleb128 1
\t.byte 1
.Lline_end:

\t.section .gnu_debugaltlink,"",@progbits
\t.string "{alt}"
\t.byte 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20
"""


def build_altlinked(d: Path, alt: str) -> Path:
    """A shared library whose one compile unit names itself through dwz's
    alternate file (DW_FORM_GNU_strp_alt), which its .gnu_debugaltlink names
    `alt`: addr2line opens that file to read the name."""
    src = d / "alt.s"
    src.write_text(ALT_S.format(func="alt_work", alt=alt))
    out = d / "libalt.so"
    subprocess.run(["gcc", "-shared", "-nostdlib", "-o", str(out), str(src)], check=True)
    return out


@pytest.mark.parametrize(("owner", "alt"), [(0, "fifo"), (NOBODY, "fifo"),
                                            (NOBODY, "../../../{d}/fifo")])
def test_debug_links_to_a_fifo_stall_nothing(owner: int, alt: str, tmp_path: Path) -> None:
    """An object whose .gnu_debugaltlink names a FIFO beside it (binutils
    opens it, waiting for a writer forever) or a path up out of the
    directories binutils is given: addr2line reads the object as
    /proc/self/fd/N, so 'fifo' is looked for under /proc/self/fd/; one that
    climbs out ('..'), in a file another user wrote, is not given to
    addr2line at all. Either way an answer at once, the FIFO never opened."""
    d = tmp_path / "obj"
    d.mkdir()
    alt = alt.format(d=str(d).lstrip("/"))
    lib = build_altlinked(d, alt)
    os.chown(lib, owner, owner)
    os.mkfifo(d / "fifo")
    off = func_offset(lib, "alt_work")
    got, opened, took = symbolize_traced([str(d / "fifo")], refs=[(str(lib), None, None, None)],
                                         offsets=[off + 1])
    assert opened == []
    assert took < 20 and got["s"] < 5
    ((where, func),) = got["objects"]
    if "/" in alt:
        assert got["refusals"] == {
            str(lib): f"{lib}: its .gnu_debugaltlink names {alt!r} (not followed)"}
        assert (where, func) == (f"libalt.so+0x{off + 1:x} (alt_work+0x1)", "alt_work")
    else:
        assert got["refusals"] == {}
        assert func == "alt_work"


# -- one forged build-id, two users' objects -----------------------------------------------

FORGED = "0x" + "5e" * 20


@pytest.fixture()
def forged(tmp_path: Path) -> list[tuple[ObjectFile, int, str]]:
    """Two libraries with one build-id (ld --build-id=0x...) and different
    code, owned by two users: (the module's record of each, the offset of a
    frame in it, the function there)."""
    out = []
    # names of one length and code of one size: one layout, the same offsets
    for n, (uid, func) in enumerate(((OTHER, "alpha_work"), (NOBODY, "bravo_work"))):
        d = tmp_path / f"user{uid}"
        d.mkdir()
        lib = build_lib(d, "libforged.so", func, "-g", f"-Wl,--build-id={FORGED}", n=n + 1)
        os.chown(lib, uid, uid)
        assert build_id(lib) == FORGED[2:]
        st = lib.stat()
        out.append((ObjectFile(1, str(lib), FORGED[2:], st.st_dev, st.st_ino, st.st_size),
                    func_offset(lib, f"call_{func}") + 1, f"call_{func}"))
    assert out[0][1] == out[1][1]
    return out


def site_of(obj: ObjectFile, off: int) -> Site:
    return Site(site=1, frames=(0x7F00_0000_0000 + off,), locs=((obj.obj, off),))


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_one_build_id_two_users_through_pmctl(order: tuple[int, int],
                                              forged: list[tuple[ObjectFile, int, str]]
                                              ) -> None:
    """pmctl's way (a Symbolizer a run, the disk cache shared between runs):
    each object is named by its own code, in both orders, again and again."""
    for i in (*order, *order):
        obj, off, func = forged[i]
        (frame,) = site_frames([site_of(obj, off)], [obj], depth=1,
                               symbolizer=sy.Symbolizer())[1]
        assert frame.func == func, (i, frame)


# -- pmd: one long-lived symbolizer, never in the loop ---------------------------------------

class FakeModule:
    """Stands in for /dev/pmm: running processes, their sites and objects."""

    def __init__(self) -> None:
        self.entries: dict[int, tuple[Any, list[Site], list[ObjectFile]]] = {}

    def open(self) -> FakeModule:
        return self

    def __enter__(self) -> FakeModule:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def add(self, pid: int, start_ns: int, sites: list[Site], objects: list[ObjectFile]) -> None:
        from pmm.kernel.model import STATE_RUNNING, PidInfo

        info = PidInfo(pid=pid, ppid=1, state=STATE_RUNNING, comm=f"p{pid}",
                       start_time_ns=start_ns, monitor_start_ns=start_ns, exit_time_ns=0,
                       live_blocks=1, live_bytes=1, records=1, dropped_records=0,
                       unmatched_frees=0, pending_frees=0, samples=1, vm_bytes=1 << 20,
                       rss_bytes=1 << 20)
        self.entries[pid] = (info, sites, objects)

    def pid_info(self, pid: int) -> Any:
        return self.entries[pid][0] if pid in self.entries else None

    def sites(self, pid: int) -> list[Site]:
        return list(self.entries[pid][1])

    def objects(self, pid: int) -> list[ObjectFile]:
        return list(self.entries[pid][2])

    def blocks(self, pid: int) -> list[Any]:
        return []

    def stats(self, pid: int) -> Any:
        raise LookupError("no statistics here")


PID = 4_000_401  # above pid_max: never a live process
START_NS = 9_000_000_000


def new_daemon(tmp_path: Path, module: FakeModule) -> Any:
    from pmm.daemon import Daemon, Options
    from pmm.store import Store

    st = Store.open(tmp_path / "pmm.db")
    d = Daemon(st, Options(db=tmp_path / "pmm.db", pids=[], genl=False, detect_every=10),
               open_device=module.open)
    d.detector.ready.set()
    return d


def sites_event(pid: int, t: int, live: int) -> Any:
    from pmm.kernel import uapi
    from pmm.kernel.genl import Event, SiteLive

    return Event(cmd=uapi.Cmd.SITES, pid=pid, start_time=START_NS, time=t,
                 sites=(SiteLive(1, live, 1),))


def sample_event(pid: int, t: int, rss: int) -> Any:
    from pmm.kernel import uapi
    from pmm.kernel.genl import Event

    return Event(cmd=uapi.Cmd.SAMPLE, pid=pid, start_time=START_NS, time=t, vm=1 << 30, rss=rss)


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_one_build_id_two_users_through_pmd(order: tuple[int, int], tmp_path: Path,
                                            forged: list[tuple[ObjectFile, int, str]]) -> None:
    """pmd's way (its worker's one Symbolizer for every process, no disk
    cache): the sites of two processes, one user's object each, are named
    by their own code, in both orders."""
    from pmm.store import start_key

    module = FakeModule()
    d = new_daemon(tmp_path, module)
    for n, i in enumerate(order):
        obj, off, _ = forged[i]
        module.add(PID + n, START_NS, [site_of(obj, off)], [obj])
        d.handle_event(sites_event(PID + n, 1, 100))
        assert d.wait_for_worker(60)
    d.flush_now()
    for n, i in enumerate(order):
        _, _, func = forged[i]
        where = d.store.sites(PID + n, start_key(START_NS))[1]
        assert where.startswith(f"{func}() libforged.so.c:"), (n, where)
    d.store.close()


SLOW_ADDR2LINE = "#!/bin/sh\nexec /bin/sleep 30\n"


def test_pmd_loop_goes_on_while_a_symbolization_hangs(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A process's site is in an object whose symbolization does not end
    (addr2line hangs: here it sleeps, as one reading a FIFO would). While
    pmd's worker waits on it, the loop takes every event at once: the
    process's LEAK alert is stored, another process's samples recorded."""
    from pmm.store import start_key

    slow = tmp_path / "bin"
    slow.mkdir()
    (slow / "addr2line").write_text(SLOW_ADDR2LINE)
    (slow / "addr2line").chmod(0o755)
    monkeypatch.setenv("PATH", f"{slow}:{os.environ['PATH']}")
    monkeypatch.setattr(sy.backends, "ADDR2LINE_TIMEOUT_S", 20)
    lib = build_lib(tmp_path, "libhang.so", "hang_work", "-g")
    st = lib.stat()
    obj = ObjectFile(1, str(lib), build_id(lib), st.st_dev, st.st_ino, st.st_size)
    off = func_offset(lib, "call_hang_work") + 1
    module = FakeModule()
    module.add(PID, START_NS, [site_of(obj, off)], [obj])
    d = new_daemon(tmp_path, module)
    slowest = 0.0
    for i in range(200):
        t = 10_000_000_000 + i * 100_000_000
        for ev in (sample_event(PID, t, (2 << 20) + 4096 * i),
                   *([sites_event(PID, t, 4096 * i)] if i % 10 == 0 else []),
                   sample_event(PID + 1, t, 1 << 20)):
            t0 = time.monotonic()
            d.handle_event(ev)
            slowest = max(slowest, time.monotonic() - t0)
    d.flush_now()
    assert slowest < 3.0  # the worker waits 20 s on the object
    (alert,) = d.store.alerts(PID)
    assert alert.site == 1 and "; fastest site 1 +" in alert.message
    assert d.store.sample_count(PID + 1, start_key(START_NS)) == 200
    assert d.worker.busy >= 1  # still on the hanging object
    d.worker.stop()
    d.store.close()


def test_file_kinds_are_said_in_words() -> None:
    assert sy.opening.kind_of(stat.S_IFIFO) == "a FIFO"
    assert sy.opening.kind_of(stat.S_IFCHR) == "a character device"
    assert sy.opening.kind_of(stat.S_IFLNK) == "a symbolic link"
