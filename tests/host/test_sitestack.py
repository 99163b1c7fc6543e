"""Sites as the module gives them (frames as object + file offset) named
without the process: pmm.sitestack, and `pmctl leaks`'s pprof samples and
frame lines (pmm.analysis.leakview), with the programs of tests/progs/postmortem."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

# no symbol source but the files themselves
from test_symbolize_objects import (  # noqa: F401 - own_env: an autouse fixture
    BIN,
    PM,
    build_id,
    marked_line,
    own_env,
    return_offsets,
)

from pmm.analysis import leakview
from pmm.kernel.model import ObjectFile, Site
from pmm.sitestack import describe_site, site_frames

ADDR = 0x7F3A12345678  # an absolute address the process had: must never be shown


def libstdcxx() -> Path:
    out = subprocess.run(["ldd", str(BIN / "pm-deep")], capture_output=True, text=True,
                         check=True).stdout
    return Path(next(ln.split()[2] for ln in out.splitlines() if "libstdc++" in ln))


def objects() -> list[ObjectFile]:
    return [ObjectFile(1, str(BIN / "pm-inline"), build_id(BIN / "pm-inline")),
            ObjectFile(2, str(libstdcxx()), build_id(libstdcxx())),
            ObjectFile(3, str(BIN / "pm-deep"), build_id(BIN / "pm-deep"))]


def test_frames_by_object_name_lines_and_never_an_address() -> None:
    inline = return_offsets(BIN / "pm-inline", marked_line(PM / "inline.c", "LEAK: inline"),
                            callee="malloc")[0]
    site = Site(site=4, frames=(ADDR, ADDR + 8), locs=((1, inline), None))
    frames = site_frames([site], objects(), depth=32, addresses=False)[4]
    assert [x.func for x in frames[0].lines][:2] == ["new_buffer", "fill_buffers"]
    assert frames[0].line == marked_line(PM / "inline.c", "LEAK: inline")
    assert frames[1].addr == 0 and frames[1].object is None  # unplaced: no address
    assert describe_site(site, frames) == \
        f"new_buffer() inline.c:{marked_line(PM / 'inline.c', 'LEAK: inline')}"
    # with addresses allowed (pmctl, whose reader may see the process), it shows
    shown = site_frames([site], objects(), depth=32, addresses=True)[4]
    assert shown[1].addr == ADDR + 8


def test_cxx_site_is_named_past_operator_new() -> None:
    """Frame 0 in libstdc++ (operator new calls malloc): the description is
    the user's line, and the pprof stack keeps every frame, leaf first."""
    lib = libstdcxx()
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                         text=True, check=True).stdout
    new = next(int(ln.split()[0], 16) for ln in out.splitlines()
               if ln.split()[-1].split("@")[0] == "_Znwm")
    leak = marked_line(PM / "deep.cc", "LEAK: deep")
    at_leak = return_offsets(BIN / "pm-deep", leak)[0]
    site = Site(site=9, frames=(ADDR, ADDR + 1), locs=((2, new + 0x10), (3, at_leak)),
                live_bytes=560, live_blocks=10, alloc_bytes=560,
                alloc_count=(0, 10) + (0,) * 11)
    frames = site_frames([site], objects(), depth=32)[9]
    assert frames[0].object == str(lib)
    assert describe_site(site, frames) == f"level8(long) deep.cc:{leak}"
    entry: dict[str, Any] = {
        "site": 9, "blocks": 10, "bytes": 560, "alloc_blocks": 12, "alloc_bytes": 700,
        "source": "debuginfo", "where": describe_site(site, frames),
        "frames": [f.as_dict() for f in frames]}
    report = leakview.LeakReport(pid=1, comm="pm-deep", state="exited", live_blocks=10,
                                   live_bytes=560, nsites=1, sites=[entry])
    (sample,) = leakview.pprof_samples(report)
    assert (sample.inuse_objects, sample.inuse_space, sample.alloc_objects,
            sample.alloc_space) == (10, 560, 12, 700)
    assert sample.frames[0].object == str(lib) and sample.frames[0].offset == new + 0x10
    assert sample.frames[1].lines[0].line == leak
    assert sample.frames[1].build_id == build_id(BIN / "pm-deep")
    text = leakview.frames_as_text(entry["frames"])
    assert text[-1] == f"#1 level8(long) deep.cc:{leak}", text
    assert all("0x7f3a" not in t for t in text)


def test_report_stacks_by_object_after_the_process() -> None:
    """The HTML report's call chains come from the module's objects and
    offsets: named with no process and no map."""
    from pmm.report.stacks import site_stacks

    leak = marked_line(PM / "deep.cc", "LEAK: deep")
    at_leak = return_offsets(BIN / "pm-deep", leak)[0]
    objs = objects()

    class Module:
        def objects(self, pid: int) -> list[ObjectFile]:
            return objs

    site = Site(site=9, frames=(ADDR,), locs=((3, at_leak),))
    stacks = site_stacks(4194000, None, [site], {}, device=Module())
    assert [f.text for f in stacks[9]] == [f"level8(long) deep.cc:{leak}"]
