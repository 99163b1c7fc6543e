"""Frames that outlive their process: (object, file offset) pairs named with
no process and no map, by `Symbolizer.symbolize_objects`, with the programs
of tests/progs/postmortem (each leaks at a line marked `LEAK: name`).

The file offsets are the return addresses after the call at the marked line,
found in the built binaries: objdump's disassembly with its line numbers
(objdump -d -l) for the calls, readelf's program headers for the offsets.
Debug info comes from the object itself, a DIR/.build-id tree, a
.gnu_debuglink, or a real local debuginfod server."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hook_env import clean_env, fake_log_sites

from pmm import symbolize as sy

TOP = Path(__file__).resolve().parents[2]
PM = TOP / "tests" / "progs" / "postmortem"
BIN = PM / "bin"
DEBUG = PM / "debug"
FAKE = TOP / "hooklib" / "libpmmhook-fake.so"


@pytest.fixture(autouse=True)
def own_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never the user's cache, /usr/lib/debug or debuginfod servers unless a test says so."""
    monkeypatch.setenv("PMM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PMM_DEBUG_DIRS", "")
    for var in ("DEBUGINFOD_URLS", "DEBUGINFOD_CACHE_PATH", "PMM_SYMBOLIZER",
                "PMM_DEBUGINFOD_INSECURE", "PMM_DEBUGINFOD_MAX_FETCHES",
                "PMM_DEBUGINFOD_MAX_BYTES", "PMM_DEBUGINFOD_CACHE_MAX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(sy.debuginfo, "budget", sy.debuginfo.DebuginfodBudget())


# -- where the leaks are, from the binaries ----------------------------------

def marked_line(src: Path, marker: str) -> int:
    """The line of src carrying the comment `marker` (e.g. 'LEAK: inline')."""
    hits = [n for n, text in enumerate(src.read_text().splitlines(), 1) if marker in text]
    assert len(hits) == 1, (src, marker, hits)
    return hits[0]


def build_id(path: Path) -> str:
    out = subprocess.run(["readelf", "-n", str(path)], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", out)
    assert m, path
    return m.group(1)


def file_offset(path: Path, vaddr: int) -> int:
    """vaddr's file offset, through readelf's PT_LOAD headers."""
    out = subprocess.run(["readelf", "-lW", str(path)], capture_output=True, text=True,
                         check=True).stdout
    for ln in out.splitlines():
        f = ln.split()
        if f and f[0] == "LOAD":
            off, va, filesz = int(f[1], 16), int(f[2], 16), int(f[4], 16)
            if va <= vaddr < va + filesz:
                return vaddr - va + off
    raise AssertionError(f"{vaddr:#x} not in a PT_LOAD of {path}")


INSN = re.compile(r"\s+([0-9a-f]+):\t(.*)")
LINE = re.compile(r"(/\S+):(\d+)(?: \(discriminator \d+\))?")
LABEL = re.compile(r"[0-9a-f]+ <(.+)>:")


def return_offsets(path: Path, line: int | None = None, func: str | None = None,
                   callee: str = "") -> list[int]:
    """File offsets of the return addresses of the calls (to a callee whose
    name contains `callee`) at `line` of the source (objdump -d -l), or in
    function `func` (a binary without line numbers)."""
    out = subprocess.run(["objdump", "-d", "-l", "--no-show-raw-insn", str(path)],
                         capture_output=True, text=True, check=True).stdout
    insns: list[tuple[int, str, int | None, str | None]] = []
    where: int | None = None
    label: str | None = None
    for text in out.splitlines():
        if m := INSN.fullmatch(text):
            insns.append((int(m.group(1), 16), m.group(2), where, label))
        elif m := LINE.fullmatch(text):
            where = int(m.group(2))
        elif m := LABEL.fullmatch(text):
            label = m.group(1)
    rets = [insns[i + 1][0] for i, (_, insn, at, fn) in enumerate(insns[:-1])
            if insn.startswith("call") and callee in insn
            and (line is None or at == line)
            and (func is None or (fn or "").split("@")[0] == func)]
    assert rets, (path, line, func)
    return [file_offset(path, r) for r in rets]


def sym_value(path: Path, name: str, dynamic: bool = True) -> int:
    """The value of a symbol, by nm (-D: the dynamic ones, all a stripped object has)."""
    out = subprocess.run(["nm", *(["-D"] if dynamic else []), "--defined-only", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return next(int(ln.split()[0], 16) for ln in out.splitlines() if ln.split()[-1] == name)


def one(frames: dict[tuple[sy.ObjectRef, int], sy.Frame]) -> sy.Frame:
    assert len({(f.func, f.file, f.line, f.symbol) for f in frames.values()}) == 1, frames
    return next(iter(frames.values()))


def symbolize(ref: sy.ObjectRef, offsets: Sequence[int]) -> sy.Frame:
    """The frame all of offsets name (a fresh Symbolizer: no memory of earlier ones)."""
    return one(sy.Symbolizer().symbolize_objects((ref, off) for off in offsets))


# -- (a) the inlined helper ------------------------------------------------------

def test_inlined_helper_names_leak_line_and_chain() -> None:
    src, exe = PM / "inline.c", BIN / "pm-inline"
    leak, call = marked_line(src, "LEAK: inline"), marked_line(src, "CALL: inline")
    offs = return_offsets(exe, leak, callee="malloc")
    ref = sy.ObjectRef(str(exe), build_id(exe).upper())  # any case: kept lowercase
    assert ref.build_id == build_id(exe)
    f = symbolize(ref, offs)
    assert (f.func, os.path.basename(f.file or ""), f.line) == ("new_buffer", "inline.c", leak)
    assert [(loc.func, loc.line) for loc in f.lines] == [("new_buffer", leak),
                                                         ("fill_buffers", call)]
    assert (f.addr, f.object, f.offset, f.build_id, f.symbol) == (
        0, str(exe), offs[0], build_id(exe), None)
    assert f.describe() == f"new_buffer() inline.c:{leak}"
    assert f.describe(inlined=True) == (
        f"new_buffer() inline.c:{leak} (inlined into fill_buffers() inline.c:{call})")
    d = f.as_dict()
    assert (d["addr"], d["build_id"], d["symbol"]) == (0, build_id(exe), None)
    assert [(x["func"], x["line"]) for x in d["lines"]] == [("new_buffer", leak),
                                                            ("fill_buffers", call)]
    assert sy.DebugFinder().find(ref).source == "object"
    # the offset of the call itself, given as an exact address: the same line
    exact = sy.Symbolizer(return_addresses=False).symbolize_objects([(ref, offs[0] - 1)])
    assert exact[(ref, offs[0] - 1)].line == leak


# -- (b) C++ operator new, eight calls deep, from the hook's own frames ---------

def test_cxx_new_depth_8_first_user_frame(tmp_path: Path) -> None:
    """The hook (fake-device build, which logs its sites) records pm-deep's
    stack; as the module will, each frame becomes (object, file offset) by
    the process's map. The first frame is libstdc++'s operator new (the hook
    does not interpose it); first_user_frame is the marked line, and all
    eight user functions follow at their calls."""
    subprocess.run(["make", "-s", "-C", str(TOP / "hooklib"), FAKE.name], check=True,
                   timeout=300)
    src, exe = PM / "deep.cc", BIN / "pm-deep"
    log = tmp_path / "fake.log"
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_QUIET="1", PMM_FAKE_LOG=str(log),
                    PMM_DEPTH="16", PMM_UNWIND="eh")
    p = subprocess.Popen([str(exe), "3", "sleep"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline() == "leaked 3\n"
        maps = sy.parse_maps(Path(f"/proc/{p.pid}/maps").read_text())
    finally:
        p.kill()
        p.wait()
    exe_sites = []
    for site in fake_log_sites(log).values():
        frames = list(site.frames[:site.depth])
        objs = [sy.find_mapping(maps, a) for a in frames]
        if any(m is not None and m.object_path == str(exe) for m in objs[1:2]) and \
                objs[0] is not None and "libstdc++" in objs[0].object_path:
            exe_sites.append((frames, objs))
    assert len(exe_sites) == 1  # the Block site: operator new, called from pm-deep
    frames, objs = exe_sites[0]
    items = []
    for a, m in zip(frames, objs, strict=True):
        assert m is not None and m.is_file
        items.append((sy.ObjectRef(m.object_path, sy.read_build_id(m.object_path)),
                      m.translate(a)))
    got = sy.Symbolizer().symbolize_objects(items)
    stack = [got[i] for i in items]
    top = stack[0]
    assert top.object_name is not None and top.object_name.startswith("libstdc++.so")
    assert top.func is not None and top.func.startswith("operator new")
    assert sy.is_allocator_frame(top)
    user = sy.first_user_frame(stack)
    leak = marked_line(src, "LEAK: deep")
    assert user is not None and (user.func, user.line) == ("level8(long)", leak)
    assert user.describe() == f"level8(long) deep.cc:{leak}"
    calls = [marked_line(src, f"void level{n}(long i) {{ level{n + 1}(i); }}")
             for n in range(7, 0, -1)]
    shown = sy.user_frames(stack)
    assert [(f.func, f.line) for f in shown[:8]] == [
        (f"level{8 - k}(long)", line) for k, line in enumerate([leak, *calls])]
    assert shown[8].func == "main" and shown[8].file and shown[8].file.endswith("deep.cc")


# -- (c) stripped, its debug info in DIR/.build-id ------------------------------

def stripped_debug() -> Path:
    """pm-stripped's debug file, in the tree's DIR/.build-id/xx/rest.debug."""
    bid = build_id(BIN / "pm-stripped")
    debug = DEBUG / ".build-id" / bid[:2] / f"{bid[2:]}.debug"
    assert debug.is_file() and build_id(debug) == bid
    return debug


def load_headers(path: Path) -> list[str]:
    out = subprocess.run(["readelf", "-lW", str(path)], capture_output=True, text=True,
                         check=True).stdout
    return [ln for ln in out.splitlines() if ln.split()[:1] == ["LOAD"]]


@pytest.fixture(scope="module")
def stripped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, list[int]]:
    """pm-stripped's debug file, its leak line, and the leak's return offsets
    (from the program put back together by eu-unstrip: the same layout)."""
    debug = stripped_debug()
    leak = marked_line(PM / "stripped.c", "LEAK: stripped")
    whole = tmp_path_factory.mktemp("unstrip") / "pm-stripped"
    subprocess.run(["eu-unstrip", "-o", str(whole), str(BIN / "pm-stripped"), str(debug)],
                   check=True)
    assert load_headers(whole) == load_headers(BIN / "pm-stripped")
    return debug, leak, return_offsets(whole, leak, callee="malloc")


def test_stripped_with_build_id_debug_dir_then_deleted(
        stripped: tuple[Path, int, list[int]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _, leak, offs = stripped
    exe = tmp_path / "pm-stripped"
    shutil.copy(BIN / "pm-stripped", exe)
    ref = sy.ObjectRef(str(exe), build_id(exe))
    # no debug directory: the object alone has no line
    bare = symbolize(ref, offs)
    assert (bare.line, bare.file) == (None, None)
    assert bare.describe().startswith(f"pm-stripped+0x{offs[0]:x}")
    monkeypatch.setenv("PMM_DEBUG_DIRS", f"{tmp_path / 'none'}:{DEBUG}")
    assert sy.DebugFinder().find(ref).source == "build-id"
    f = symbolize(ref, offs)
    assert (f.func, f.line) == ("keep_record", leak)
    assert f.describe() == f"keep_record() stripped.c:{leak}"
    exe.unlink()
    # gone: the same answer from the cache, which is keyed by build-id ...
    monkeypatch.setenv("PMM_DEBUG_DIRS", "")
    assert (symbolize(ref, offs).func, symbolize(ref, offs).line) == ("keep_record", leak)
    # ... and without the cache, from the debug file alone: its program
    # headers give the vaddr (their file offsets rebuilt), its DWARF the line
    monkeypatch.setenv("PMM_CACHE_DIR", str(tmp_path / "fresh-cache"))
    monkeypatch.setenv("PMM_DEBUG_DIRS", str(DEBUG))
    files = sy.DebugFinder().find(ref)
    assert (files.object, files.source) == (None, "build-id")
    gone = symbolize(ref, offs)
    assert (gone.func, gone.line, gone.object, gone.offset) == ("keep_record", leak, str(exe),
                                                               offs[0])
    # by build-id only, with no path at all
    nopath = symbolize(sy.ObjectRef(None, ref.build_id), offs)
    assert (nopath.line, nopath.object) == (leak, None)


def test_debug_file_program_headers_rebuilt(stripped: tuple[Path, int, list[int]]) -> None:
    """objcopy --only-keep-debug keeps each PT_LOAD's vaddr and sizes in memory
    but not its file offset: rebuilt, they are the object's, for pm-stripped
    and every library of this machine whose debug file is installed."""
    debug, _, _ = stripped
    pairs = [(BIN / "pm-stripped", debug)]
    for lib in ("libc.so.6", "libm.so.6"):
        obj = Path("/usr/lib/x86_64-linux-gnu") / lib
        bid = build_id(obj)
        dbg = Path("/usr/lib/debug/.build-id") / bid[:2] / f"{bid[2:]}.debug"
        assert dbg.is_file(), f"{dbg}: libc6-dbg (valgrind's, scripts/setup.sh) is not installed"
        pairs.append((obj, dbg))
    for obj, dbg in pairs:
        want = sy.load_segments(str(obj))
        d = sy.ElfFile.open(str(dbg))
        assert want and d is not None
        assert d.load_segments != want  # what the debug file says as it is
        rebuilt = sy.debug_file_load_segments(d)
        assert [(s.offset, s.vaddr) for s in rebuilt] == [(s.offset, s.vaddr) for s in want]
        assert [s.filesz for s in rebuilt[:-1]] == [s.filesz for s in want[:-1]]


# -- (c') through a real debuginfod only ------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def debuginfod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local debuginfod serving pm-stripped (executable and debug file) and
    libpm-nodebug.so (executable only); its URL once it has indexed them."""
    d = tmp_path_factory.mktemp("debuginfod")
    served = d / "files"
    served.mkdir()
    debug = stripped_debug()
    shutil.copy(BIN / "pm-stripped", served / "pm-stripped")
    shutil.copy(debug, served / "pm-stripped.debug")
    shutil.copy(BIN / "libpm-nodebug.so", served / "libpm-nodebug.so")
    port = free_port()
    p = subprocess.Popen(["debuginfod", "-F", str(served), "-p", str(port),
                          "-d", str(d / "index.sqlite"), "-t", "0", "-g", "0"],
                         stdout=subprocess.DEVNULL, stderr=(d / "log").open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        # asked directly (the client would cache a miss): indexed when both answer
        wanted = [f"{url}/buildid/{build_id(BIN / 'pm-stripped')}/debuginfo",
                  f"{url}/buildid/{build_id(BIN / 'libpm-nodebug.so')}/executable"]
        deadline = time.monotonic() + 30
        while wanted:
            assert p.poll() is None, (d / "log").read_text()
            assert time.monotonic() < deadline, (d / "log").read_text()
            try:
                with urllib.request.urlopen(wanted[0], timeout=5) as r:
                    r.read()
                wanted.pop(0)
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.1)
        yield url
    finally:
        p.terminate()
        p.wait(timeout=10)


def test_debuginfod_only(stripped: tuple[Path, int, list[int]], debuginfod: str,
                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, leak, offs = stripped
    monkeypatch.setenv("DEBUGINFOD_URLS", debuginfod)
    monkeypatch.setenv("PMM_DEBUGINFOD_INSECURE", "1")  # the local server is plain http
    cache = tmp_path / "cache"
    exe = tmp_path / "pm-stripped"
    shutil.copy(BIN / "pm-stripped", exe)
    ref = sy.ObjectRef(str(exe), build_id(exe))
    files = sy.DebugFinder().find(ref)
    assert (files.object, files.source) == (str(exe), "debuginfod")
    # fetched into pmm's cache directory (DEBUGINFOD_CACHE_PATH unset)
    assert files.debug is not None and Path(files.debug).is_relative_to(cache / "debuginfod")
    assert (symbolize(ref, offs).func, symbolize(ref, offs).line) == ("keep_record", leak)
    exe.unlink()
    monkeypatch.setenv("PMM_CACHE_DIR", str(tmp_path / "fresh-cache"))
    monkeypatch.setenv("DEBUGINFOD_CACHE_PATH", str(tmp_path / "client-cache"))
    gone = symbolize(ref, offs)
    assert (gone.func, gone.line, gone.build_id) == ("keep_record", leak, ref.build_id)
    assert list((tmp_path / "client-cache").glob(f"{ref.build_id}/debuginfo"))
    # unknown to the server: object+offset, quickly
    other = sy.ObjectRef("/gone/libx.so", "ab" * 20)
    t0 = time.monotonic()
    miss = symbolize(other, [0x1234])
    assert miss.describe() == "libx.so+0x1234" and time.monotonic() - t0 < 5


def test_debuginfod_executable_for_symbols_of_a_gone_object(debuginfod: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """No debug info anywhere and the object gone: debuginfod's copy of the
    executable gives its program headers and dynamic symbols."""
    monkeypatch.setenv("DEBUGINFOD_URLS", debuginfod)
    monkeypatch.setenv("PMM_DEBUGINFOD_INSECURE", "1")
    lib = BIN / "libpm-nodebug.so"
    offs = return_offsets(lib, func="leak_in_lib", callee="malloc")
    ref = sy.ObjectRef(str(tmp_path / "gone" / lib.name), build_id(lib))
    f = symbolize(ref, offs)
    delta = offs[0] - file_offset(lib, sym_value(lib, "leak_in_lib"))
    assert f.describe() == f"libpm-nodebug.so+0x{offs[0]:x} (leak_in_lib+0x{delta:x})"
    assert sy.DebugFinder().find(ref).object is not None


# -- (d) the dlopen()ed plugin ------------------------------------------------------

def test_dlopened_plugin_line() -> None:
    lib = BIN / "libpm-plugin.so"
    leak = marked_line(PM / "plugin.c", "LEAK: plugin")
    offs = return_offsets(lib, leak, callee="malloc")
    f = symbolize(sy.ObjectRef(str(lib), build_id(lib)), offs)
    assert f.describe() == f"plugin_leak() plugin.c:{leak}"
    r = subprocess.run([str(BIN / "pm-dlopen"), "2"], capture_output=True, text=True,
                       timeout=30, check=True)
    assert r.stdout == "leaked 2\n"


# -- (e) stripped library without debug info: object+offset (symbol+offset) -------

def test_stripped_library_nearest_symbol() -> None:
    lib = BIN / "libpm-nodebug.so"
    offs = return_offsets(lib, func="leak_in_lib", callee="malloc")
    f = symbolize(sy.ObjectRef(str(lib), build_id(lib)), offs)
    delta = offs[0] - file_offset(lib, sym_value(lib, "leak_in_lib"))
    assert f.describe() == f"libpm-nodebug.so+0x{offs[0]:x} (leak_in_lib+0x{delta:x})"
    assert f.where() == f"libpm-nodebug.so+0x{offs[0]:x}"
    assert (f.addr, f.func, f.file, f.line, f.symbol) == (
        0, "leak_in_lib", None, None, f"leak_in_lib+0x{delta:x}")
    assert "0x0" not in f.describe()
    r = subprocess.run([str(BIN / "pm-nodebug"), "2"], capture_output=True, text=True,
                       timeout=30, check=True)
    assert r.stdout == "leaked 2\n"


# -- a rebuilt object at the same path ----------------------------------------------

def test_build_id_mismatch_gives_no_wrong_line(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The process ran one build; the file at its path is now another (its
    lines shifted). Named by the old build-id: never the new file's lines;
    the old one's debug file, where there is one, still names the right
    line. Named by the new build-id: the new file's, not the cached old."""
    src = (PM / "inline.c").read_text()
    (tmp_path / "pm.h").write_text((PM / "pm.h").read_text())
    obj = tmp_path / "lib" / "pm-inline"
    obj.parent.mkdir()

    def build(text: str, out: Path) -> str:
        (tmp_path / "inline.c").write_text(text)
        subprocess.run(["gcc", "-g", "-O1", "-Wl,--build-id", "-o", str(out),
                        str(tmp_path / "inline.c")], check=True)
        return build_id(out)

    old_id = build(src, obj)
    with obj.open("ab") as fh:
        fh.write(bytes(4096))  # room for the new build in the same size
    leak = marked_line(tmp_path / "inline.c", "LEAK: inline")
    offs = return_offsets(obj, leak, callee="malloc")
    old = sy.ObjectRef(str(obj), old_id)
    assert symbolize(old, offs).line == leak  # cached, under the file's identity
    dbg = tmp_path / "debug" / ".build-id" / old_id[:2] / f"{old_id[2:]}.debug"
    dbg.parent.mkdir(parents=True)
    subprocess.run(["objcopy", "--only-keep-debug", str(obj), str(dbg)], check=True)

    before = obj.stat()
    new_id = build("/* shifted */\n" * 7 + src, tmp_path / "new")
    assert new_id != old_id
    # written over the old one in place, padded to its size, its mtime set
    # back: path, inode, size and mtime all as before; only the build-id tells
    new_bytes = (tmp_path / "new").read_bytes()
    assert len(new_bytes) <= before.st_size
    with obj.open("r+b") as rewrite:
        rewrite.write(new_bytes + bytes(before.st_size - len(new_bytes)))
    os.utime(obj, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = obj.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino, before.st_size, before.st_mtime_ns)
    assert build_id(obj) == new_id
    # the same code (only its lines moved): the same offsets name other lines now
    assert return_offsets(obj, leak + 7, callee="malloc") == offs
    # the old file's answers came from its own DWARF: kept under its identity,
    # which the rewritten file no longer has (its ctime moved): the new file's
    # lines are never taken for the old build
    f = symbolize(old, offs)
    assert (f.func, f.file, f.line, f.symbol) == (None, None, None, None)
    assert f.describe() == f"pm-inline+0x{offs[0]:x}"
    assert symbolize(sy.ObjectRef(str(obj), new_id), offs).line == leak + 7
    # no build-id given: the file at the path, whatever it is now
    assert symbolize(sy.ObjectRef(str(obj), None), offs).line == leak + 7
    # the old one's debug file names its line
    monkeypatch.setenv("PMM_DEBUG_DIRS", str(tmp_path / "debug"))
    assert symbolize(old, offs).line == leak


# -- .gnu_debuglink ------------------------------------------------------------------

@pytest.mark.parametrize("with_build_id", [True, False])
def test_gnu_debuglink(with_build_id: bool, tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A stripped object with a .gnu_debuglink: its debug file in .debug/
    beside it, checked by build-id, or without one by the link's CRC."""
    src = PM / "inline.c"
    shutil.copy(PM / "pm.h", tmp_path / "pm.h")
    full = tmp_path / "full"
    subprocess.run(["gcc", "-g", "-O1", "-I", str(PM),
                    "-Wl,--build-id" if with_build_id else "-Wl,--build-id=none",
                    "-o", str(full), str(src)], check=True)
    leak = marked_line(src, "LEAK: inline")
    offs = return_offsets(full, leak, callee="malloc")
    (tmp_path / "bin" / ".debug").mkdir(parents=True)
    dbg = tmp_path / "bin" / ".debug" / "prog.debug"
    exe = tmp_path / "bin" / "prog"
    subprocess.run(["objcopy", "--only-keep-debug", str(full), str(dbg)], check=True)
    subprocess.run(["strip", "-o", str(exe), str(full)], check=True)
    subprocess.run(["objcopy", f"--add-gnu-debuglink={dbg}", str(exe)], check=True)
    bid = build_id(exe) if with_build_id else None
    ref = sy.ObjectRef(str(exe), bid)
    files = sy.DebugFinder().find(ref)
    assert (files.source, files.debug, files.build_id) == ("debuglink", str(dbg), bid)
    assert symbolize(ref, offs).line == leak
    if not with_build_id:
        # another file under that name: its CRC differs, it is not taken
        dbg.write_bytes(full.read_bytes())
        assert sy.DebugFinder().find(ref).source == ""
        monkeypatch.setenv("PMM_CACHE_DIR", str(tmp_path / "fresh-cache"))
        assert symbolize(ref, offs).line is None


# -- the cache --------------------------------------------------------------------------

def test_answers_cached_only_located_ones(tmp_path: Path) -> None:
    """Answers with a line are kept on disk: a second Symbolizer runs no
    addr2line. Answers without one are not kept (debug info installed later
    may name them). The object's own DWARF: kept under the file's identity."""
    calls: list[int] = []

    class Counting(sy.Addr2line):
        def resolve_inlined(self, path: sy.backends.ElfInput, vaddrs: Sequence[int]
                            ) -> list[tuple[sy.SourceLoc, ...]]:
            calls.append(len(vaddrs))
            return super().resolve_inlined(path, vaddrs)

    exe = BIN / "pm-inline"
    leak = marked_line(PM / "inline.c", "LEAK: inline")
    offs = return_offsets(exe, leak, callee="malloc")
    # crt1's _start: no line information
    start = file_offset(exe, sym_value(exe, "_start", dynamic=False)) + 4
    ref = sy.ObjectRef(str(exe), build_id(exe))
    for _ in range(2):
        got = sy.Symbolizer(backend=Counting()).symbolize_objects([(ref, offs[0]), (ref, start)])
        assert got[(ref, offs[0])].line == leak
        assert (got[(ref, start)].func, got[(ref, start)].line) == ("_start", None)
        assert got[(ref, start)].symbol == "_start+0x4"
    assert calls == [2, 1]  # the second time, only the one without a line
    st = exe.stat()
    ident = ":".join(str(x) for x in (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                                      st.st_ctime_ns, st.st_uid))
    cached = sy.object_cache_file(f"file:{ident}", "addr2line")
    assert cached is not None
    assert list((tmp_path / "cache" / "sym").glob("*.json")) == [cached]
    assert list(json.loads(cached.read_text())["offsets"]) == [str(offs[0] - 1)]


def test_answers_of_a_trusted_debug_file_cached_by_build_id(
        stripped: tuple[Path, int, list[int]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """From a debug file under a debug directory: kept by build-id, and
    all cached, no file is looked for (nor debuginfod asked)."""
    _, leak, offs = stripped
    monkeypatch.setenv("PMM_DEBUG_DIRS", str(DEBUG))
    ref = sy.ObjectRef(str(BIN / "pm-stripped"), build_id(BIN / "pm-stripped"))
    assert symbolize(ref, offs).line == leak

    class NoFinder(sy.DebugFinder):
        def find(self, ref: sy.ObjectRef, target: sy.Target | None = None) -> sy.DebugFiles:
            raise AssertionError(f"looked for {ref}'s files (maybe asking debuginfod)")

    got = sy.Symbolizer(finder=NoFinder()).symbolize_objects([(ref, offs[0])])
    assert one(got).line == leak
    cached = sy.object_cache_file(f"build-id:{ref.build_id}", "addr2line")
    assert cached is not None
    assert list((tmp_path / "cache" / "sym").glob("*.json")) == [cached]


# -- pieces -----------------------------------------------------------------------------

def test_addr2line_inlined_output_parsed() -> None:
    out = ("0x0000000000001139\nnew_buffer\n/src/inline.c:10\nfill_buffers\n"
           "/src/inline.c:16 (discriminator 3)\n0x0000000000000010\n??\n??:0\n"
           "0x0000000000001040\n_start\n??:?\n")
    assert sy.backends._parse_inlined(out) == {
        0x1139: (sy.SourceLoc("new_buffer", "/src/inline.c", 10),
                 sy.SourceLoc("fill_buffers", "/src/inline.c", 16)),
        0x10: (),
        0x1040: (sy.SourceLoc("_start", None, None),),
    }


def test_frame_text_never_shows_address_zero() -> None:
    assert sy.Frame(0).where() == "?" and sy.Frame(0).describe() == "?"
    f = sy.Frame(0, "/lib/libfoo.so", 0x1139, "leak_in_lib", lines=(
        sy.SourceLoc("leak_in_lib", None, None),), symbol="leak_in_lib+0x19")
    assert f.describe() == "libfoo.so+0x1139 (leak_in_lib+0x19)"
    assert sy.Frame(0, "/lib/libfoo.so", 0x1139).describe() == "libfoo.so+0x1139"
    # a live address keeps its old forms
    assert sy.Frame(0x10).describe() == "0x10"
    assert sy.Frame(0x7f00, "/lib/libc.so.6", 0x9a1ca, "malloc").describe() == (
        "malloc() (libc.so.6+0x9a1ca)")


def test_first_user_frame_skips_allocator_frames() -> None:
    def fr(obj: str, func: str | None, line: int | None = None) -> sy.Frame:
        return sy.Frame(0, obj, 0x10, func, "/src/a.cc" if line else None, line,
                        lines=(sy.SourceLoc(func, None, line),) if func else ())

    new = fr("/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "operator new(unsigned long)")
    hook = fr("/usr/lib/pmm/libpmmhook.so", None)
    strdup = fr("/usr/lib/x86_64-linux-gnu/libc.so.6", "strdup")
    static_new = fr("/opt/app", "operator new(unsigned long)", 3)
    user = fr("/opt/app", "work", 12)
    assert sy.first_user_frame([new, user]) is user
    assert sy.first_user_frame([hook, strdup, user, new]) is user
    assert sy.first_user_frame([static_new, user]) is user
    assert sy.user_frames([hook, new, user, strdup]) == [user, strdup]
    assert sy.first_user_frame([new]) is new
    assert sy.first_user_frame([]) is None
    assert not sy.is_allocator_frame(fr("/opt/libcrypto.so.3", "CRYPTO_malloc"))


def test_debug_dirs_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PMM_DEBUG_DIRS")
    assert sy.debug_dirs() == ["/usr/lib/debug"]
    monkeypatch.setenv("PMM_DEBUG_DIRS", "/a::/b")
    assert sy.debug_dirs() == ["/a", "/b"]
    monkeypatch.setenv("PMM_DEBUG_DIRS", "")
    assert sy.debug_dirs() == []


def test_fifo_at_the_path_does_not_block(tmp_path: Path) -> None:
    """pmd opens the paths a monitored process's objects had: one replaced by
    a FIFO (whose open would wait for a writer) or a device is not read."""
    fifo = tmp_path / "libgone.so"
    os.mkfifo(fifo)
    code = ("from pmm import symbolize as sy\n"
            f"for path in ({str(fifo)!r}, '/dev/zero'):\n"
            "    assert sy.ElfFile.open(path) is None and sy.load_segments(path) is None\n"
            "    f = sy.Symbolizer().symbolize_objects([(sy.ObjectRef(path, None), 0x10)])\n"
            "    print(next(iter(f.values())).describe())\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=20, check=True)
    assert r.stdout == "libgone.so+0x10\nzero+0x10\n"


def test_debuginfod_that_does_not_answer_is_given_up(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """A server that takes the connection and never answers: debuginfod-find
    is killed after DEBUGINFOD_FIND_TIMEOUT_S, the frame is object+offset,
    and it is said once."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # connections complete in the backlog, never accepted
        monkeypatch.setenv("DEBUGINFOD_URLS", f"http://127.0.0.1:{silent.getsockname()[1]}")
        monkeypatch.setenv("PMM_DEBUGINFOD_INSECURE", "1")
        monkeypatch.setattr(sy.debuginfo, "DEBUGINFOD_FIND_TIMEOUT_S", 1)
        ref = sy.ObjectRef("/gone/libslow.so", "cd" * 20)
        t0 = time.monotonic()
        f = symbolize(ref, [0x1234])
        assert f.describe() == "libslow.so+0x1234"
        assert time.monotonic() - t0 < 10  # debuginfo and executable: a second each
    said = [r.getMessage() for r in caplog.records if "debuginfod" in r.getMessage()]
    assert said == [f"debuginfod: no answer for debuginfo of build-id {'cd' * 20} within 1 s",
                    f"debuginfod: no answer for executable of build-id {'cd' * 20} within 1 s"]


def test_debuginfod_urls_without_the_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("DEBUGINFOD_URLS", "http://127.0.0.1:9")
    assert sy.debuginfod_find("debuginfo", "ef" * 20) is None
    assert sy.debuginfod_find("debuginfo", "ef" * 20) is None
    said = [r.getMessage() for r in caplog.records]
    assert said == ["DEBUGINFOD_URLS is set but debuginfod-find is not installed (Debian: apt "
                    "install debuginfod): debug info is looked for on this machine only"]


def test_frame_json_round_trip() -> None:
    f = sy.Frame(0, "/lib/libfoo.so", 0x1139, "grow", "/src/a.c", 5, build_id="ab" * 20,
                 lines=(sy.SourceLoc("grow", "/src/a.c", 5), sy.SourceLoc("main", "/src/a.c", 9)))
    assert sy.Frame.from_dict(f.as_dict()) == f
    assert sy.Frame.from_dict({"addr": 16}) == sy.Frame(16)


# -- debuginfod within bounds ----------------------------------------------------------

def test_debuginfod_over_http_needs_the_opt_in(monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    """A process's build-ids are fetched over https only: an http:// server
    is not even connected to without PMM_DEBUGINFOD_INSECURE=1 (said once),
    nor one of another scheme."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.setblocking(False)
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        monkeypatch.setenv("DEBUGINFOD_URLS", f"{url} file:///srv/debuginfod")
        for _ in range(2):
            f = symbolize(sy.ObjectRef("/gone/libhttp.so", "a1" * 20), [0x1234])
            assert f.describe() == "libhttp.so+0x1234"
        with pytest.raises(BlockingIOError):
            server.accept()  # no one connected
    said = [r.getMessage() for r in caplog.records if "debuginfod" in r.getMessage()]
    assert said == [f"debuginfod: {url} is not asked: plain http (set PMM_DEBUGINFOD_INSECURE=1 "
                    "to allow it)",
                    "debuginfod: file:///srv/debuginfod is not asked: only https:// servers are"]
    monkeypatch.setenv("DEBUGINFOD_URLS", "https://a.example http://b.example")
    assert sy.debuginfod_urls() == "https://a.example"
    monkeypatch.setenv("PMM_DEBUGINFOD_INSECURE", "1")
    assert sy.debuginfod_urls() == "https://a.example http://b.example"


def test_debuginfod_budget_per_run(stripped: tuple[Path, int, list[int]], debuginfod: str,
                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   caplog: pytest.LogCaptureFixture) -> None:
    """At most PMM_DEBUGINFOD_MAX_FETCHES requests a run (each build-id a
    process names is one), and no file larger than the bytes left of
    PMM_DEBUGINFOD_MAX_BYTES: past either, nothing is asked, and it is said."""
    _, leak, offs = stripped
    monkeypatch.setenv("DEBUGINFOD_URLS", debuginfod)
    monkeypatch.setenv("PMM_DEBUGINFOD_INSECURE", "1")
    cache = tmp_path / "cache" / "debuginfod"
    stripped_id = build_id(BIN / "pm-stripped")
    ref = sy.ObjectRef("/gone/pm-stripped", stripped_id)
    # smaller than the debug file: the client does not fetch it
    monkeypatch.setenv("PMM_DEBUGINFOD_MAX_BYTES", "1000")
    assert symbolize(ref, offs).line is None
    assert not list(cache.glob(f"{stripped_id}/debuginfo"))
    monkeypatch.delenv("PMM_DEBUGINFOD_MAX_BYTES")
    monkeypatch.setattr(sy.debuginfo, "budget", sy.debuginfo.DebuginfodBudget())
    monkeypatch.setenv("PMM_DEBUGINFOD_MAX_FETCHES", "1")
    assert symbolize(ref, offs).line == leak
    size = (cache / stripped_id / "debuginfo").stat().st_size
    assert sy.debuginfo.budget.fetches == 1 and sy.debuginfo.budget.bytes == size
    lib = BIN / "libpm-nodebug.so"
    other = sy.ObjectRef("/gone/libpm-nodebug.so", build_id(lib))
    got = symbolize(other, return_offsets(lib, func="leak_in_lib", callee="malloc"))
    assert got.symbol is None  # its executable is on the server, but not asked for
    assert not list(cache.glob(f"{build_id(lib)}/*"))
    said = [r.getMessage() for r in caplog.records if "PMM_DEBUGINFOD_MAX_FETCHES" in
            r.getMessage()]
    assert said == ["debuginfod: 1 requests made in this run (PMM_DEBUGINFOD_MAX_FETCHES): "
                    "no more"]


def test_debuginfod_cache_is_capped(debuginfod: str, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Past PMM_DEBUGINFOD_CACHE_MAX bytes, what was used longest ago goes
    (with its build-id's directory once empty); the client's own files at
    the top and what was just fetched stay."""
    cache = tmp_path / "cache" / "debuginfod"
    old = [cache / ("0" * 39 + str(n)) / "debuginfo" for n in range(3)]
    for n, f in enumerate(old):
        f.parent.mkdir(parents=True)
        f.write_bytes(bytes(1000))
        os.utime(f, (1000 + n, 1000 + n))
    (cache / "cache_clean_interval_s").write_text("86400")
    monkeypatch.setenv("PMM_DEBUGINFOD_CACHE_MAX", "2500")
    sy.prune_debuginfod_cache(str(cache))
    assert [f.exists() for f in old] == [False, True, True]
    assert not old[0].parent.exists() and (cache / "cache_clean_interval_s").exists()
    # fetching more: the older ones go, the new one stays even if it alone is over
    monkeypatch.setenv("DEBUGINFOD_URLS", debuginfod)
    monkeypatch.setenv("PMM_DEBUGINFOD_INSECURE", "1")
    monkeypatch.setenv("PMM_DEBUGINFOD_CACHE_MAX", "1")
    got = sy.debuginfod_find("executable", build_id(BIN / "libpm-nodebug.so"))
    assert got is not None and Path(got).is_relative_to(cache)
    kept = {p.relative_to(cache) for p in cache.rglob("*") if p.is_file()}
    assert {p for p in kept if p.parent != Path(".")} == {Path(got).relative_to(cache)}
    assert Path("cache_clean_interval_s") in kept
