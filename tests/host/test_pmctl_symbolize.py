"""Symbolization against a real program compiled with -g: exact function,
file and line, through its live maps and through the maps cache after exit."""

from __future__ import annotations

import os
import shutil
import subprocess
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
    maps = [sy.Mapping(0x555555554000, 0x555555556000, "r-xp", 0, 42, str(stripped))]
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
    maps = [sy.Mapping(0x555555554000, 0x555555558000, "r-xp", 0, 42, str(exe))]
    segs = sy.load_segments(str(exe))
    assert segs
    calls: list[int] = []

    class Counting(sy.Addr2line):
        def resolve(self, path: str, vaddrs: list[int]) -> list[sy.SourceLoc]:  # type: ignore[override]
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


def test_describe_sites(prog: Path) -> None:
    """A site from the shim keeps its file:line; one of return addresses
    only (a hook preloaded or attached without the shim) is described by its
    first frame, symbolized: the form `pmctl trend` and pmd's alerts show."""
    from pmm.model import Site

    p = subprocess.Popen([str(prog)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdin is not None
    ra = int(p.stdout.readline().split()[0], 16)
    maps = sy.maps_for(p.pid)
    p.stdin.write("\n")
    p.stdin.close()
    assert p.wait() == 0
    sites = [Site(site=1, frames=(ra,)), Site(site=2, func="f", file="a.c", line=3),
             Site(site=3, frames=(0x10,)), Site(site=4)]
    assert sy.describe_sites(sites, maps) == {
        1: "leaky_function() where.c:11", 2: "f() a.c:3", 3: "caller 0x10"}
    assert sy.describe_sites(sites[:1], None) == {1: f"caller 0x{ra:x}"}
