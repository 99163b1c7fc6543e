"""Symbolization against a real program compiled with -g: exact function,
file and line, through its live maps and through the maps cache after exit."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from pmm import symbolize as sy

SRC = r"""#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static void *where(void)
{
	return __builtin_return_address(0);
}

__attribute__((noinline)) void *leaky_function(void)
{
	void *ra = where();	/* line 11 */
	return ra;
}

int main(void)
{
	void *a = leaky_function();	/* line 17 */
	printf("%p %p\n", a, (void *)&main);
	fflush(stdout);
	(void)getchar();	/* wait until the test has read our maps */
	return 0;
}
"""


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PMM_CACHE_DIR", str(tmp_path / "cache"))  # never the user's


@pytest.fixture(scope="module")
def prog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    d = tmp_path_factory.mktemp("sym")
    (d / "where.c").write_text(SRC)
    exe = d / "where"
    subprocess.run(["gcc", "-g", "-O0", "-fPIE", "-pie", "-o", str(exe), "where.c"], cwd=d,
                   check=True)
    return exe


@pytest.mark.parametrize("backend", ["addr2line", "pyelftools"])
def test_symbolize_live_and_after_exit(prog: Path, backend: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    if backend == "pyelftools":
        pytest.importorskip("elftools", reason="pyelftools (the elf extra) not installed")
    monkeypatch.setenv("PMM_CACHE_DIR", str(tmp_path / "cache"))
    p = subprocess.Popen([str(prog)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdin is not None
    ra_s, main_s = p.stdout.readline().split()
    ra, main_addr = int(ra_s, 16), int(main_s, 16)
    ticks = sy.proc_start_ticks(p.pid)
    assert ticks is not None
    saved = sy.capture_maps(p.pid)
    assert saved == tmp_path / "cache" / "maps" / f"{p.pid}-{ticks}"
    live = sy.maps_for(p.pid)
    p.stdin.write("\n")
    p.stdin.close()
    assert p.wait() == 0

    # after exit: the cached map, found by (pid, start time in ns as the module gives it)
    cached = sy.maps_for(p.pid, ticks * sy.NS_PER_TICK)
    assert cached is not None and live is not None
    assert [m for m in cached if m.is_file] == [m for m in live if m.is_file]
    assert sy.maps_for(p.pid, (ticks + 50) * sy.NS_PER_TICK) is None  # another process

    s = sy.Symbolizer(cached, sy.make_backend(backend))
    # main's entry + 1: a return address there is looked up at the entry itself
    fr = s.symbolize([ra, main_addr + 1, 0x10])
    f = fr[ra]
    assert (f.func, os.path.basename(f.file or ""), f.line) == ("leaky_function", "where.c", 11)
    assert f.object == str(prog) and f.describe() == "leaky_function() where.c:11"
    m = fr[main_addr + 1]
    assert (m.func, m.line) == ("main", 16)
    assert fr[0x10].describe() == "0x10" and fr[0x10].object is None


def test_no_debug_info_gives_object_offset(prog: Path, tmp_path: Path) -> None:
    stripped = tmp_path / "stripped"
    subprocess.run(["strip", "-o", str(stripped), str(prog)], check=True)
    maps = [sy.Mapping(0x555555554000, 0x555555556000, "r-xp", 0, stripped.stat().st_ino,
                       str(stripped))]
    ra = 0x555555554000 + 0x1180
    f = sy.Symbolizer(maps, sy.Addr2line()).symbolize([ra])[ra]
    assert f.line is None and f.file is None
    assert f.where() == "stripped+0x1180"


def test_parse_maps_and_find() -> None:
    text = (
        "55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 1234 /usr/bin/x\n"
        "55d0c0a01000-55d0c0a05000 r-xp 00001000 08:01 1234 /usr/bin/x\n"
        "7f0000000000-7f0000021000 rw-p 00000000 00:00 0 \n"
        "7f1000000000-7f1000001000 r-xp 00002000 08:01 99 /lib/gone.so (deleted)\n"
        "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n"
    )
    maps = sy.parse_maps(text)
    assert len(maps) == 5
    m = sy.find_mapping(maps, 0x55D0C0A01234)
    assert m is not None and m.translate(0x55D0C0A01234) == 0x1234 and m.is_file
    assert sy.find_mapping(maps, 0x55D0C0A05000) is None
    anon = sy.find_mapping(maps, 0x7F0000000010)
    assert anon is not None and not anon.is_file
    gone = sy.find_mapping(maps, 0x7F1000000010)
    assert gone is not None and gone.object_path == "/lib/gone.so"
    assert sy.parse_maps(maps[1].line())[0] == maps[1]


def test_merge_keeps_unloaded_libraries() -> None:
    a = sy.Mapping(0x1000, 0x2000, "r-xp", 0, 1, "/lib/a.so")
    b = sy.Mapping(0x3000, 0x4000, "r-xp", 0, 2, "/lib/b.so")
    c = sy.Mapping(0x3000, 0x5000, "r-xp", 0, 3, "/lib/c.so")
    assert sy.merge_maps([a, b], [c]) == [a, c]  # b overlapped by c: dropped


def test_proc_start_ticks_of_self() -> None:
    t = sy.proc_start_ticks(os.getpid())
    assert t is not None and t > 0
    assert sy.proc_start_ticks(4194305) is None
    assert sy.ticks_from_ns(t * sy.NS_PER_TICK + 5) == t


def test_parse_fileline() -> None:
    assert sy._parse_fileline("/a/b.c:12") == ("/a/b.c", 12)
    assert sy._parse_fileline("/a/b.c:12 (discriminator 3)") == ("/a/b.c", 12)
    assert sy._parse_fileline("??:0") == (None, None)
    assert sy._parse_fileline("/a/b.c:?") == ("/a/b.c", None)


def test_disk_cache_per_object(prog: Path, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A second Symbolizer answers from the disk cache without running the backend;
    a rebuilt object (new mtime) is looked up again."""
    monkeypatch.setenv("PMM_CACHE_DIR", str(tmp_path / "cache"))
    exe = tmp_path / "copy"
    shutil.copy2(prog, exe)
    maps = [sy.Mapping(0x555555554000, 0x555555558000, "r-xp", 0, exe.stat().st_ino, str(exe))]
    segs = sy.load_segments(str(exe))
    assert segs
    calls: list[int] = []

    class Counting(sy.Addr2line):
        def resolve(self, path: sy.backends.ElfInput, vaddrs: Sequence[int]
                    ) -> list[sy.SourceLoc]:
            calls.append(len(vaddrs))
            return super().resolve(path, vaddrs)

    # an address inside main: entry of `main` from the symbol table
    out = subprocess.run(["nm", str(exe)], capture_output=True, text=True, check=True).stdout
    main_vaddr = next(int(ln.split()[0], 16) for ln in out.splitlines() if ln.endswith(" main"))
    seg = next(s for s in segs if s.vaddr <= main_vaddr < s.vaddr + s.filesz)
    addr = 0x555555554000 + (main_vaddr - seg.vaddr + seg.offset) + 1
    f1 = sy.Symbolizer(maps, Counting()).symbolize([addr])[addr]
    f2 = sy.Symbolizer(maps, Counting()).symbolize([addr])[addr]
    assert (f1.func, f1.line) == (f2.func, f2.line) == ("main", 16)
    assert calls == [1]
    assert len(list((tmp_path / "cache" / "sym").glob("*.json"))) == 1
    os.utime(exe, ns=(1, 1))  # "rebuilt"
    sy.Symbolizer(maps, Counting()).symbolize([addr])
    assert calls == [1, 1]


# -- pyelftools is optional (the elf extra) ----------------------------------

NO_ELFTOOLS = "import sys; sys.modules['elftools'] = None  # as if not installed\n"


@pytest.fixture(scope="module")
def where_maps(prog: Path) -> tuple[str, int]:
    """(the maps text, the return address into leaky_function) of one run."""
    p = subprocess.Popen([str(prog)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdin is not None
    ra = int(p.stdout.readline().split()[0], 16)
    maps = Path(f"/proc/{p.pid}/maps").read_text()
    p.stdin.write("\n")
    p.stdin.close()
    assert p.wait() == 0
    return maps, ra


def symbolize_elsewhere(where_maps: tuple[str, int], tmp_path: Path, path_env: str,
                        symbolizer: str = "") -> tuple[dict[str, object], str]:
    """Symbolizes the return address in a Python without pyelftools, with PATH
    set to path_env: (what it found, its stderr)."""
    maps, ra = where_maps
    code = NO_ELFTOOLS + f"""
import json
from pmm import symbolize as sy
maps = sy.parse_maps({maps!r})
backend = sy.make_backend()
s = sy.Symbolizer(maps, backend)
f = s.symbolize([{ra}])[{ra}]
s.symbolize([{ra}])  # a second lookup: no second warning
print(json.dumps({{"backend": backend.name, "describe": f.describe(), "func": f.func,
                  "segments": len(sy.load_segments(f.object or "") or [])}}))
"""
    env = {**os.environ, "PATH": path_env, "PMM_CACHE_DIR": str(tmp_path / "cache"),
           "PMM_SYMBOLIZER": symbolizer}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       check=True)
    return json.loads(r.stdout), r.stderr


def test_addr2line_needs_no_pyelftools(prog: Path, where_maps: tuple[str, int],
                                       tmp_path: Path) -> None:
    # the ELF program headers are read without it; addr2line does the rest
    got, err = symbolize_elsewhere(where_maps, tmp_path, os.environ["PATH"])
    assert got == {"backend": "addr2line", "describe": "leaky_function() where.c:11",
                   "func": "leaky_function", "segments": len(sy.load_segments(str(prog)) or [])}
    assert err == ""
    # asked for by name, the missing pyelftools is said, and addr2line used
    got, err = symbolize_elsewhere(where_maps, tmp_path, os.environ["PATH"], "pyelftools")
    assert (got["backend"], got["describe"]) == ("addr2line", "leaky_function() where.c:11")
    assert err == ("the pyelftools symbolizer was asked for (PMM_SYMBOLIZER=pyelftools) but "
                   "pyelftools is not installed (pip install '.[elf]' in pmm's source tree): "
                   "using addr2line\n")


def test_neither_backend_says_what_to_install(prog: Path, where_maps: tuple[str, int],
                                              tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    got, err = symbolize_elsewhere(where_maps, tmp_path, str(empty))
    assert got["backend"] == "none" and got["func"] is None
    assert str(got["describe"]).startswith("where+0x")  # object+offset
    assert err == sy.NO_BACKEND + "\n"  # once, for two lookups
    assert "pip install '.[elf]'" in sy.NO_BACKEND and "binutils" in sy.NO_BACKEND
    # nothing cached: a back-end installed later gives the names
    assert not list((tmp_path / "cache").glob("sym/*.json"))


def _elf(cls: int, order: str, loads: list[tuple[int, int, int]], extended: bool = False
         ) -> bytes:
    """A minimal ELF file: its header, one PT_NOTE and the PT_LOADs
    (offset, filesz, vaddr); extended: e_phnum 0xffff, the count in section
    header 0's sh_info."""
    phdrs = [(4, 0x300, 0x300, 0x20)] + [(1, *x) for x in loads]
    ehsize, phsize, shsize = (52, 32, 40) if cls == 1 else (64, 56, 64)
    phoff, shoff = ehsize, ehsize + phsize * len(phdrs)
    word = "I" if cls == 1 else "Q"
    ident = b"\x7fELF" + bytes([cls, 1 if order == "<" else 2, 1]) + bytes(9)
    head = struct.pack(f"{order}HHI{word}{word}{word}IHHHHHH", 3, 62, 1, 0, phoff, shoff, 0,
                       ehsize, phsize, 0xFFFF if extended else len(phdrs), shsize, 1, 0)
    body = b""
    for t, off, filesz, vaddr in phdrs:
        if cls == 1:
            body += struct.pack(f"{order}8I", t, off, vaddr, vaddr, filesz, filesz, 5, 0x1000)
        else:
            body += struct.pack(f"{order}IIQQQQQQ", t, 5, off, vaddr, vaddr, filesz, filesz,
                                0x1000)
    if cls == 1:
        sh0 = struct.pack(f"{order}10I", 0, 0, 0, 0, 0, 0, 0, len(phdrs), 0, 0)
    else:
        sh0 = struct.pack(f"{order}IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, len(phdrs), 0, 0)
    return ident + head + body + sh0


@pytest.mark.parametrize(("cls", "order", "extended"),
                         [(2, "<", False), (1, "<", False), (1, ">", False), (2, ">", True)])
def test_elf_program_headers_of_each_class_and_byte_order(cls: int, order: str, extended: bool,
                                                          tmp_path: Path) -> None:
    loads = [(0, 0x1234, 0x400000), (0x2000, 0x800, 0x602000)]
    f = tmp_path / f"obj{cls}{order}{extended}"
    f.write_bytes(_elf(cls, order, loads, extended))
    assert sy.load_segments(str(f)) == [sy.LoadSegment(*x) for x in loads]
    assert sy.elf_vaddr(str(f), 0x2010) == 0x602010
    short = tmp_path / "short"
    short.write_bytes(f.read_bytes()[:100])  # the headers cut off
    assert sy.load_segments(str(short)) is None
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    assert sy.load_segments(str(script)) is None


def test_elf_program_headers_as_pyelftools_reads_them(prog: Path) -> None:
    elffile = pytest.importorskip("elftools.elf.elffile")
    objs = [str(prog), "/bin/true", sys.executable]
    objs += sorted({m.object_path for m in sy.maps_for(os.getpid()) or [] if m.is_file
                    and ".so" in m.path})[:10]
    for path in objs:
        with open(path, "rb") as fh:
            want = [sy.LoadSegment(s["p_offset"], s["p_filesz"], s["p_vaddr"])
                    for s in elffile.ELFFile(fh).iter_segments() if s["p_type"] == "PT_LOAD"]
        assert sy.load_segments(path) == want, path
