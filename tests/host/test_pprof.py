"""pmm.pprof writes heap profiles that a real pprof reader reads back as
written: Go's `go tool pprof` (Debian's golang-go), run with -symbolize=none
and its HOME, GOCACHE and GOPATH in a temporary directory, so that it never
looks at the network or at this machine's binaries.

The samples are those of a made-up server: a big leak through an inlined
helper, a stripped plugin's allocation known only by its label, many small
cache entries (the most objects), a site its program registered with a file
and line but no object, and a site with no stack at all."""

from __future__ import annotations

import gzip
import hashlib
import importlib.metadata
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from pmm.pprof import (
    UNKNOWN_STACK,
    PprofFrame,
    PprofLine,
    PprofSample,
    build_profile,
    write_profile,
)
from pmm.pprof import profile_pb2 as pb

PPROF_DIR = Path(__file__).resolve().parents[2] / "src" / "pmm" / "pprof"
# google/pprof's proto/profile.proto at 101d87ff5bc3 (its last change): the
# vendored file's git blob id, as `git ls-tree 101d87ff proto/` prints it
PROFILE_PROTO_BLOB = "128b546b7458b011e271e9db384e39e4d209c408"

EXE = "/usr/local/bin/leakd"
EXE_ID = "5f2c8b1e0d4a7c6b9e3f2a1d0c8b7a6f5e4d3c2b"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
LIBC_ID = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"
PLUGIN = "/opt/leakd/plugins/libplugin.so"  # stripped, no debug file
PLUGIN_ID = "0123456789abcdef0123456789abcdef01234567"
PERIOD = 512 * 1024  # sampled mode's period, bytes
TIME_NS = 1_780_000_000_123_456_789
COMMENT = "pmctl leaks 4242 (leakd)"


def frame(obj: str, build_id: str | None, offset: int, label: str,
          *lines: tuple[str, str, int]) -> PprofFrame:
    return PprofFrame(obj, build_id, offset, tuple(PprofLine(*ln) for ln in lines), label)


# make_record() is inlined into handle_request(): its line comes first
MAKE_RECORD = frame(EXE, EXE_ID, 0x1A2B, "leakd+0x1a2b",
                    ("make_record", "src/leak.c", 42), ("handle_request", "src/leak.c", 77))
HANDLE_TO_PLUGIN = frame(EXE, EXE_ID, 0x1B40, "leakd+0x1b40", ("handle_request", "src/leak.c", 81))
HANDLE_TO_CACHE = frame(EXE, EXE_ID, 0x1B80, "leakd+0x1b80", ("handle_request", "src/leak.c", 90))
CACHE_PUT = frame(EXE, EXE_ID, 0x1D00, "leakd+0x1d00", ("cache_put", "src/cache.c", 15))
MAIN = frame(EXE, EXE_ID, 0x1C10, "leakd+0x1c10", ("main", "src/leak.c", 120))
LIBC_START = frame(LIBC, LIBC_ID, 0x271CA, "libc.so.6+0x271ca (__libc_start_call_main+0x7a)")
PLUGIN_LEAK = frame(PLUGIN, PLUGIN_ID, 0x1139, "libplugin.so+0x1139 (leak_in_lib+0x19)")
# a site its program registered with its function, file and line (no object)
POOL_ALLOC = PprofFrame(None, None, None, (PprofLine("pool_alloc", "src/pool.c", 33),),
                        "pool_alloc() src/pool.c:33")


def site(frames: Sequence[PprofFrame], alloc_objects: int, inuse_objects: int,
         size: int) -> PprofSample:
    return PprofSample(tuple(frames), alloc_objects, alloc_objects * size,
                       inuse_objects, inuse_objects * size)


BIG = site([MAKE_RECORD, MAIN, LIBC_START], 3000, 2500, 4096)
PLUGIN_SITE = site([PLUGIN_LEAK, HANDLE_TO_PLUGIN, MAIN, LIBC_START], 70, 64, 16384)
CACHE = site([CACHE_PUT, HANDLE_TO_CACHE, MAIN, LIBC_START], 90_000, 1000, 32)
POOL = site([POOL_ALLOC], 12, 10, 100)
NO_STACK = site([], 6, 5, 48)
SAMPLES = [BIG, PLUGIN_SITE, CACHE, POOL, NO_STACK]
TYPES = ("alloc_objects", "alloc_space", "inuse_objects", "inuse_space")


def totals(samples: Sequence[PprofSample]) -> list[int]:
    return [sum(getattr(s, t) for s in samples) for t in TYPES]


@pytest.fixture(scope="module")
def pprof(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., str]:
    """Runs `go tool pprof -symbolize=none ARGS`; its output (no errors)."""
    go = shutil.which("go")
    assert go is not None, "go tool pprof is needed: scripts/setup.sh installs golang-go"
    home = tmp_path_factory.mktemp("gohome")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GO", "PPROF"))}
    env.update(HOME=str(home), GOCACHE=str(home / "cache"), GOPATH=str(home / "go"),
               PPROF_TMPDIR=str(home / "pprof"))

    def run(*args: str | Path) -> str:
        proc = subprocess.run([go, "tool", "pprof", "-symbolize=none", *map(str, args)],
                              env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        return proc.stdout

    return run


@pytest.fixture(scope="module")
def profile_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pprof") / "heap.pb.gz"
    write_profile(path, SAMPLES, period=PERIOD, time_ns=TIME_NS, duration_ns=30 * 10**9,
                  comments=[COMMENT])
    return path


def raw_sections(text: str) -> dict[str, list[str]]:
    """`pprof -raw`'s output by section: the header's lines, Samples,
    Locations, Mappings."""
    sections: dict[str, list[str]] = {"header": []}
    current = sections["header"]
    for line in text.splitlines():
        name = line.rstrip(":")
        if name in ("Samples", "Locations", "Mappings"):
            current = sections[name] = []
        else:
            current.append(line)
    return sections


def top_rows(text: str) -> list[tuple[str, str]]:
    """`pprof -top`'s rows: (flat value, name)."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["flat", "flat%"])
    rows = []
    for line in lines[start + 1:]:
        fields = line.split(None, 5)
        rows.append((fields[0], fields[5]))
    return rows


def test_raw_read_back_has_every_total_mapping_and_offset(
        pprof: Callable[..., str], profile_file: Path) -> None:
    """Every sample type's total is the sum given; each location's address
    minus its mapping's start is the frame's file offset; mappings carry the
    object and its build-id, and say symbolized only when every location is."""
    raw = raw_sections(pprof("-raw", profile_file))
    header = raw["header"]
    assert f"Comment: {COMMENT}" in header
    assert "PeriodType: space bytes" in header and f"Period: {PERIOD}" in header
    assert "Duration: 30s" in header

    types_line, *sample_lines = raw["Samples"]
    assert types_line.split() == [
        "alloc_objects/count", "alloc_space/bytes", "inuse_objects/count",
        "inuse_space/bytes[dflt]"]
    read = []
    for line in sample_lines:
        values, _, location_ids = line.partition(":")
        read.append(([int(v) for v in values.split()], [int(i) for i in location_ids.split()]))
    assert len(read) == len(SAMPLES)
    assert [sum(col) for col in zip(*(v for v, _ in read), strict=True)] == totals(SAMPLES)
    assert totals(SAMPLES) == [93_088, 16_316_368, 3_579, 11_321_816]

    mappings = {}
    for line in raw["Mappings"]:
        m = re.fullmatch(r"(\d+): (0x[0-9a-f]+)/(0x[0-9a-f]+)/0x0 (\S+) (\S*) ?(.*)", line)
        assert m, line
        mappings[m[1]] = (int(m[2], 16), m[4], m[5], m[6].strip())
    assert sorted((f, b, flags) for _, f, b, flags in mappings.values()) == [
        (PLUGIN, PLUGIN_ID, ""),
        (LIBC, LIBC_ID, ""),
        (EXE, EXE_ID, "[FN][FL][LN][IN]"),
    ]

    located, unmapped, functions = set(), [], {}
    location_id = ""
    for line in raw["Locations"]:
        m = re.fullmatch(r"\s*(\d+): (0x[0-9a-f]+) (?:M=(\d+) )?(.*) s=0", line)
        if m:
            location_id, address, mapping, shown = m[1], int(m[2], 16), m[3], m[4]
            functions[location_id] = [shown]
            if mapping is None:
                assert address == 0
                unmapped.append(shown)
            else:
                start, file, _, _ = mappings[mapping]
                located.add((file, address - start))
        else:
            functions[location_id].append(line.strip().removesuffix(" s=0"))
    frames = {f for s in SAMPLES for f in s.frames}
    assert located == {(f.object, f.offset) for f in frames if f.object}
    assert sorted(unmapped) == [f"{UNKNOWN_STACK} :0", "pool_alloc src/pool.c:33"]
    # the inlined helper's line first, then its caller's
    assert ["make_record src/leak.c:42", "handle_request src/leak.c:77"] in functions.values()
    # no real address: all are synthetic mapping starts plus an offset
    assert all(start >> 40 and start & ((1 << 40) - 1) == 0
               for start, *_ in mappings.values())


def test_top_names_the_biggest_site_by_its_inlined_function_and_line(
        pprof: Callable[..., str], profile_file: Path) -> None:
    """-top's first row, per sample type: inuse_space (the default) is the
    big leak's innermost (inlined) function with its file:line; alloc_objects
    is the cache's many small entries."""
    space = top_rows(pprof("-top", "-lines", "-unit=B", profile_file))
    assert space[0] == ("10240000B", "make_record src/leak.c:42 (inline)")
    assert ("1048576B", "libplugin.so+0x1139 (leak_in_lib+0x19)") in space
    objects = top_rows(pprof("-top", "-lines", "-sample_index=alloc_objects", profile_file))
    assert objects[0] == ("90000", "cache_put src/cache.c:15")


def test_traces_show_inlined_frames_labels_and_the_stackless_site(
        pprof: Callable[..., str], profile_file: Path) -> None:
    """-traces lists the inlined helper and its caller as two functions, the
    stripped frames by their labels, and the site with no stack."""
    text = pprof("-traces", "-unit=B", profile_file)
    traces = {}
    for block in text.split("-----------+-------------------------------------------------------"):
        lines = [ln.strip() for ln in block.strip().splitlines()]
        if lines and re.fullmatch(r"\d+B\s+.*", lines[0]):
            value, first = lines[0].split(None, 1)
            traces[value] = [first, *lines[1:]]
    libc = "libc.so.6+0x271ca (__libc_start_call_main+0x7a)"
    assert traces == {
        "10240000B": ["make_record (inline)", "handle_request", "main", libc],
        "1048576B": ["libplugin.so+0x1139 (leak_in_lib+0x19)", "handle_request", "main", libc],
        "32000B": ["cache_put", "handle_request", "main", libc],
        "1000B": ["pool_alloc"],
        "240B": [UNKNOWN_STACK],
    }


def test_base_diff_names_the_site_that_grew_first(
        pprof: Callable[..., str], tmp_path: Path) -> None:
    """Two profiles of one process, the cache grown by 40,000 entries of 32
    bytes and the plugin by one block: `-top -base old new` puts the cache's
    function first with the growth as its value."""
    grown_cache = site(CACHE.frames, 130_000, 41_000, 32)
    grown_plugin = site(PLUGIN_SITE.frames, 71, 65, 16384)
    old, new = tmp_path / "old.pb.gz", tmp_path / "new.pb.gz"
    write_profile(old, SAMPLES, period=PERIOD, time_ns=TIME_NS)
    # another order, as a later read may list the sites: mappings get other ids
    write_profile(new, [grown_plugin, POOL, grown_cache, NO_STACK, BIG], period=PERIOD,
                  time_ns=TIME_NS + 60 * 10**9)
    rows = top_rows(pprof("-top", "-lines", "-unit=B", "-sample_index=inuse_space",
                          "-base", old, new))
    assert rows[:2] == [("1280000B", "cache_put src/cache.c:15"),
                        ("16384B", "libplugin.so+0x1139 (leak_in_lib+0x19)")]
    assert all(value == "0" for value, _ in rows[2:])
    # one mapping per object in the difference: the two profiles' mappings
    # of an object match though their ids (and so their starts) differ
    diff = raw_sections(pprof("-raw", "-base", old, new))
    assert sorted(line.split()[2] for line in diff["Mappings"]) == [PLUGIN, LIBC, EXE]


def test_profile_structure() -> None:
    """The encoding itself: Go's heap sample types and default, one
    Location per (object, offset) shared between samples, one Function per
    (name, file), one Mapping per object at a synthetic start, and the same
    bytes for the same samples (gzip's time stamp 0)."""
    data = build_profile(SAMPLES, period=PERIOD, time_ns=TIME_NS, comments=[COMMENT])
    assert data == build_profile(SAMPLES, period=PERIOD, time_ns=TIME_NS, comments=[COMMENT])
    assert data[:2] == b"\x1f\x8b" and data[4:8] == b"\0\0\0\0"
    p = pb.Profile.FromString(gzip.decompress(data))
    s = p.string_table
    assert s[0] == ""
    assert [(s[t.type], s[t.unit]) for t in p.sample_type] == [
        ("alloc_objects", "count"), ("alloc_space", "bytes"),
        ("inuse_objects", "count"), ("inuse_space", "bytes")]
    assert s[p.default_sample_type] == "inuse_space"
    assert (s[p.period_type.type], s[p.period_type.unit], p.period) == ("space", "bytes", PERIOD)
    assert p.time_nanos == TIME_NS and [s[c] for c in p.comment] == [COMMENT]

    assert [m.id for m in p.mapping] == [1, 2, 3]
    assert [(s[m.filename], s[m.build_id], m.memory_start, m.file_offset) for m in p.mapping] == [
        (EXE, EXE_ID, 1 << 40, 0), (LIBC, LIBC_ID, 2 << 40, 0), (PLUGIN, PLUGIN_ID, 3 << 40, 0)]
    # 5 frames of the program, 1 of libc, 1 of the plugin, pool_alloc, [unknown]
    assert len(p.location) == 9
    main_location = p.sample[0].location_id[1]
    assert [smp.location_id[-2] for smp in p.sample[1:3]] == [main_location] * 2
    names = [(s[f.name], s[f.filename]) for f in p.function]
    assert len(names) == len(set(names))
    assert names.count(("handle_request", "src/leak.c")) == 1
    assert [list(smp.value) for smp in p.sample] == [
        [x.alloc_objects, x.alloc_space, x.inuse_objects, x.inuse_space] for x in SAMPLES]


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="period"):
        build_profile(SAMPLES, period=0, time_ns=TIME_NS)
    far = replace(PLUGIN_LEAK, offset=1 << 40)
    with pytest.raises(ValueError, match="libplugin.so: file offset 0x10000000000"):
        build_profile([site([far], 1, 1, 1)], period=1, time_ns=TIME_NS)


def test_write_profile_replaces_atomically_with_the_umask(tmp_path: Path) -> None:
    """The file appears whole (a temporary file renamed over it), with mode
    0666 less the umask; a refused profile leaves the old file and no
    temporary file."""
    path = tmp_path / "heap.pb.gz"
    path.write_bytes(b"old profile")
    old_umask = os.umask(0o027)
    try:
        write_profile(path, SAMPLES, period=1, time_ns=TIME_NS)
    finally:
        os.umask(old_umask)
    assert path.read_bytes() == build_profile(SAMPLES, period=1, time_ns=TIME_NS)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert os.listdir(tmp_path) == ["heap.pb.gz"]

    before = path.read_bytes()
    with pytest.raises(ValueError):
        write_profile(path, SAMPLES, period=0, time_ns=TIME_NS)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["heap.pb.gz"]
    with pytest.raises(FileNotFoundError):
        write_profile(tmp_path / "missing" / "heap.pb.gz", SAMPLES, period=1, time_ns=TIME_NS)


def test_vendored_proto_is_upstreams_and_generated_code_is_regenerated(tmp_path: Path) -> None:
    """profile.proto is google/pprof's file unchanged (its git blob id), and
    grpc_tools.protoc regenerates the committed profile_pb2.py and .pyi byte
    for byte."""
    proto = (PPROF_DIR / "profile.proto").read_bytes()
    blob = hashlib.sha1(b"blob %d\0" % len(proto) + proto).hexdigest()
    assert blob == PROFILE_PROTO_BLOB
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{PPROF_DIR}", f"--python_out={tmp_path}",
         f"--pyi_out={tmp_path}", str(PPROF_DIR / "profile.proto")],
        check=True, timeout=60)
    # another grpcio-tools writes another protobuf version into the code
    tools = importlib.metadata.version("grpcio-tools")
    for name in ("profile_pb2.py", "profile_pb2.pyi"):
        assert (tmp_path / name).read_bytes() == (PPROF_DIR / name).read_bytes(), (
            f"{name} differs from grpcio-tools {tools}'s (committed: 1.85.1's)")


def test_importing_the_package_does_not_load_protobuf() -> None:
    """pmctl imports pmm.pprof for every command; protobuf (~50 ms) loads
    only when a profile is built."""
    code = ("import sys, pmm.pprof; assert 'google.protobuf' not in sys.modules; "
            "pmm.pprof.build_profile([], period=1, time_ns=0); "
            "assert 'google.protobuf' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
