"""`pmctl report`: the HTML report, made from real pieces and looked at in a
real browser.

The module cannot load on the host, so its side is a `ModuleEntry` that
answers as pmm.kernel.device.Device does, for a real running program compiled with
-g whose call chain (backtrace() at leak.c:30, called from grow() and main())
gives the sites' frames; the report names them through the program's live
memory map. pmd's side is a real SQLite database written with pmm.store.
The page is loaded by Debian's chromium, headless, over the DevTools
protocol on a pipe (tests/host/browser.py): no exception, no console error,
no request but the file itself; the text, both figures and the flame
graph's labels are checked, and a screenshot is kept in build/test-output/.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trend_series as S
from browser import Browser
from typer.testing import CliRunner

from pmctl.cli import app, main
from pmm import report as rp
from pmm.errors import NoSuchPid, NotMonitored
from pmm.kernel.model import (
    SITE_F_SOURCE,
    Block,
    Bucket,
    ObjectFile,
    PidInfo,
    Sample,
    Site,
    StatsInfo,
)
from pmm.kernel.sampler import boottime_ns
from pmm.report import figures as rfigures
from pmm.report import html as rhtml
from pmm.store import AlertRow, ExitRecord, ExitSiteRow, ProcessRow, SampleRow, Store, start_key
from pmm.symbolize import NS_PER_TICK, Symbolizer, maps_for, proc_start_ticks

TOP = Path(__file__).resolve().parents[2]
VENDOR = TOP / "src" / "pmm" / "report" / "vendor"
OUTPUT = TOP / "build" / "test-output"
runner = CliRunner()
DEAD_PID = 4_000_000  # above pid_max: never a live process
NO_DEVICE = {"PMM_DEVICE": "/nonexistent/pmm"}  # the module is not loaded
LEAK_SITE, GROW_SITE, SHIM_SITE = 7, 9, 11

# leak() calls record() at line 30: the frame the report must name "leak.c:30"
LEAK_C = """#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/*
 * The report's test program: record() takes the call chain where leak()
 * would allocate (line 30), called from grow() and main(); main prints its
 * pid and the chain's return addresses, then waits for a line on stdin so
 * that the test reads its live memory map.
 */
static void *chain[16];
static int depth;

__attribute__((noinline)) static void record(void)
{
	depth = backtrace(chain, 16);
}

/* padding, so that the leak is at a known line */
static int unused1;
static int unused2;
static int unused3;
static int unused4;
static int unused5;
static int unused6;

__attribute__((noinline)) void leak(void)
{
	record();	/* the leak */
}

__attribute__((noinline)) void grow(void)
{
	leak();	/* grow */
}

int main(void)
{
	grow();	/* main */
	printf("%d", (int)getpid());
	for (int i = 1; i < depth; i++)
		printf(" %p", chain[i]);
	printf("\\n");
	fflush(stdout);
	(void)getchar();
	return unused1 + unused2 + unused3 + unused4 + unused5 + unused6;
}
"""


def line_of(marker: str) -> int:
    return next(i for i, text in enumerate(LEAK_C.splitlines(), 1) if marker in text)


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PMM_CACHE_DIR", str(tmp_path / "cache"))  # never the user's


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int, list[int]]]:
    """(pid, start time in ns, the call chain's return addresses) of the
    running test program."""
    d = tmp_path_factory.mktemp("leakprog")
    (d / "leak.c").write_text(LEAK_C)
    subprocess.run(["gcc", "-g", "-O0", "-fno-omit-frame-pointer", "-o", "leak", "leak.c"],
                   cwd=d, check=True)
    p = subprocess.Popen([str(d / "leak")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout is not None and p.stdin is not None
    pid_s, *addrs = p.stdout.readline().split()
    ticks = proc_start_ticks(p.pid)
    assert int(pid_s) == p.pid and ticks is not None
    try:
        yield p.pid, ticks * NS_PER_TICK, [int(a, 16) for a in addrs]
    finally:
        p.stdin.close()
        p.wait(10)


class ModuleEntry:
    """The module's entry of one process, as pmm.kernel.device.Device reads it."""

    def __init__(self, info: PidInfo, blocks: list[Block], sites: list[Site],
                 stats: StatsInfo, samples: list[Sample]) -> None:
        self.info, self._blocks, self._sites = info, blocks, sites
        self._stats, self._samples = stats, samples

    def pid_info(self, pid: int) -> PidInfo | None:
        return self.info if pid == self.info.pid else None

    def blocks(self, pid: int) -> list[Block]:
        return self._blocks

    def sites(self, pid: int) -> list[Site]:
        return self._sites

    def objects(self, pid: int) -> list[ObjectFile]:
        return []  # frames the module did not place: named with the process's map

    def stats(self, pid: int) -> StatsInfo:
        return self._stats

    def samples(self, pid: int, cursor: int = 0) -> list[Sample]:
        return self._samples


def module_entry(pid: int, start_ns: int, chain: list[int], comm: str = "leak") -> ModuleEntry:
    """The program monitored: 300 blocks of 4 KiB at leak.c:30 (of all ages),
    20 of 512 B allocated in grow(), 3 at a site the program described
    itself (a function name with markup in it)."""
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    blocks = [Block(0x1000 + i * 0x1000, 0, 4096, now - int((0.2 + i * 7) * 1e9), LEAK_SITE, 1, 1)
              for i in range(300)]
    blocks += [Block(0x900000 + i * 0x200, 0, 512, now - int(5e9), GROW_SITE, 1, 1)
               for i in range(20)]
    blocks += [Block(0xa00000 + i * 64, 0, 64, now - int(50e9), SHIM_SITE, 1, 2)
               for i in range(3)]
    sites = [Site(LEAK_SITE, frames=tuple(chain), live_bytes=300 * 4096, live_blocks=300),
             Site(GROW_SITE, frames=tuple(chain[1:]), live_bytes=20 * 512, live_blocks=20),
             Site(SHIM_SITE, flags=SITE_F_SOURCE, func="parse<b>bold</b>", file="cfg.c",
                  line=5, live_bytes=192, live_blocks=3)]
    buckets = tuple(Bucket(malloc_count=n, free_count=f, alloc_bytes=n * size,
                           free_bytes=f * size)
                    for n, f, size in ((500, 497, 16), (40, 20, 512), (0, 0, 1024),
                                       (900, 600, 4096), (0, 0, 16384), (0, 0, 65536),
                                       (1, 1, 1 << 20)))
    info = PidInfo(pid, 1, 1, comm, start_ns, start_ns + 10**9, 0, 323, 300 * 4096 + 10432,
                   1441, 0, 0, 0, 0, 64 << 20, 8 << 20)
    return ModuleEntry(info, blocks, sites, StatsInfo(pid, buckets, 0, 0),
                       [Sample(start_ns + i * 10**8, 64 << 20, 8 << 20, 0, 0, 0)
                        for i in range(5)])


def fill_db(db: Path, pid: int, start: int, end_ns: int, comm: str = "leak",
            exited: int | None = None) -> None:
    """pmd's database of a process leaking 4 KiB/s for 10 minutes up to end_ns,
    with site snapshots (site 7 grows 2 KiB/s, 9 100 B/s) and site 7's name."""
    t, v = S.leak(1, rate=4096)
    t0 = end_ns - int(t[-1] * 1e9)
    st = Store.open(db)
    rows = [SampleRow(pid, start, t0 + int(ti * 1e9), int(vi) + (8 << 20), int(vi))
            for ti, vi in zip(t, v, strict=True)]
    snaps = []
    for i in range(0, len(t), 10):
        tn = t0 + int(t[i] * 1e9)
        snaps.append((pid, start, tn, LEAK_SITE, 1000 + 2048 * int(t[i]), 3 + i))
        snaps.append((pid, start, tn, GROW_SITE, 500 + 100 * int(t[i]), 1))
        snaps.append((pid, start, tn, 13, 4096, 1))  # flat: not growing
    exits = [(pid, start, exited)] if exited is not None else []
    st.write(rows, [ProcessRow(pid, start, comm, "/bin/leak", "leak -n 100", t0)], exits, snaps)
    st.set_site(pid, start, LEAK_SITE, "leak() leak.c:30")
    st.close()


def add_exit_record(db: Path, pid: int, start: int, exit_ns: int,
                    frames: list[dict[str, Any]]) -> None:
    """What pmd keeps at the exit: site 7 (300 blocks of 4 KiB) with the
    program's call chain (as pmd stores frames: no address), site 9 freed
    before the exit, and the statistics by size."""
    info = PidInfo(pid, 1, 2, "leak", start, start + 10**9, exit_ns, 300, 300 * 4096, 1441,
                   0, 0, 0, 600, 64 << 20, 8 << 20)
    stats = StatsInfo(pid, tuple(Bucket(malloc_count=n, free_count=f, alloc_bytes=n * z,
                                        free_bytes=f * z)
                                 for n, f, z in ((0, 0, 16), (0, 0, 256), (0, 0, 1024),
                                                 (900, 600, 4096), (0, 0, 1), (0, 0, 1),
                                                 (0, 0, 1))), 2, 0)
    sites = (ExitSiteRow(LEAK_SITE, live_bytes=300 * 4096, live_blocks=300,
                         alloc_bytes=900 * 4096, free_bytes=600 * 4096,
                         alloc_count={"MALLOC": 900}, oldest_age_s=590.0, newest_age_s=0.5,
                         histogram=(1, 2, 27, 270, 0), frames=tuple(frames),
                         where="leak() leak.c:30"),
             ExitSiteRow(GROW_SITE, alloc_bytes=512, free_bytes=512, alloc_count={"MALLOC": 1},
                         histogram=(0, 0, 0, 0, 0)))
    st = Store.open(db)
    st.write_exit(ExitRecord(pid, start, "leak", exit_ns, exit_ns, info.to_dict(exit_ns),
                             sites=sites, stats=stats.to_dict()))
    st.close()


def stored_frames(program: tuple[int, int, list[int]]) -> list[dict[str, Any]]:
    """The program's call chain as pmd stores it: symbolized, addresses left out."""
    pid, start_ns, chain = program
    named = Symbolizer(maps_for(pid, start_ns)).symbolize(chain)
    return [dataclasses.replace(named[a], addr=0).as_dict() for a in chain]


def figures(page: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="pmm-figures">(.*?)</script>', page)
    assert m is not None
    out: dict[str, Any] = json.loads(m.group(1))
    return out


# -- the vendored plotly.js -----------------------------------------------------------


def test_vendored_plotly_is_the_npm_release() -> None:
    js = (VENDOR / "plotly.min.js").read_bytes()
    lic = (VENDOR / "LICENSE").read_bytes()
    assert hashlib.sha256(js).hexdigest() == rp.PLOTLY_SHA256
    assert hashlib.sha256(lic).hexdigest() == rhtml.LICENSE_SHA256
    sums = {name: digest for digest, name in
            (line.split() for line in (VENDOR / "SHA256SUMS").read_text().splitlines())}
    assert sums == {"plotly.min.js": rp.PLOTLY_SHA256, "LICENSE": rhtml.LICENSE_SHA256}
    assert js.startswith(b"/**\n* plotly.js v" + rp.PLOTLY_VERSION.encode() + b"\n")
    assert b"MIT License" in lic and b"Plotly" in lic
    # inlined in a <script>: nothing in it may end the element early
    assert b"</script" not in js.lower()
    assert rp.plotly_js().encode() == js


def test_a_changed_plotly_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    real = rhtml._vendor("plotly.min.js")
    monkeypatch.setattr(rhtml, "_vendor", lambda name: real + b"\n;fetch('//x')")
    rhtml.plotly_js.cache_clear()
    try:
        with pytest.raises(rp.DamagedVendorFile, match="damaged .*reinstall pmm"):
            rhtml.plotly_js()
    finally:
        monkeypatch.undo()
        rhtml.plotly_js.cache_clear()
    assert rhtml.plotly_js().encode() == real


# -- the pieces -----------------------------------------------------------------------


def test_site_stacks_name_the_program_frames(program: tuple[int, int, list[int]]) -> None:
    pid, start_ns, chain = program
    stacks = rp.site_stacks(pid, start_ns, [Site(LEAK_SITE, frames=tuple(chain))],
                            {99: "parse() cfg.c:5"})
    leak, grow, main = (line_of(m) for m in ("/* the leak */", "/* grow */", "/* main */"))
    assert leak == 30
    texts = [f.text for f in stacks[LEAK_SITE]]
    assert texts[:3] == [f"leak() leak.c:{leak}", f"grow() leak.c:{grow}",
                         f"main() leak.c:{main}"]
    obj = stacks[LEAK_SITE][0].object
    assert obj is not None and obj.endswith("/leak")
    assert stacks[LEAK_SITE][0].location == "leak.c:30"
    assert stacks[99] == [rp.StackFrame("parse() cfg.c:5")]  # pmd's description alone


def test_thin_keeps_each_slice_extremes() -> None:
    n = 100_000
    rss = [1000 + i // 10 for i in range(n)]
    rss[54_321] = 10**9  # a spike
    rss[77_777] = 0  # a dip
    vm = [5000] * n
    keep = rfigures.thin(n, [rss, vm], most=4000)
    assert len(keep) <= 4002 and keep == sorted(set(keep))
    assert {0, n - 1, 54_321, 77_777} <= set(keep)
    assert rfigures.thin(10, [rss[:10]], most=4000) == list(range(10))


def test_flame_graph_tree() -> None:
    d = rp.ReportData(1, 0, "x", "running", 0.0, 0)
    d.live_by_site = [(1, 3000), (2, 1000), (3, 500)]
    main, grow = rp.StackFrame("main() a.c:9"), rp.StackFrame("grow() a.c:5")
    d.stacks = {1: [rp.StackFrame("leak() a.c:2"), grow, main],
                2: [rp.StackFrame("other() a.c:3"), grow, main]}
    d.described = {3: "x() <b>.c:1"}
    fig = rfigures.flame_figure(d)
    assert fig is not None
    trace = fig["data"][0]
    nodes = {i: (label, parent, value) for i, label, parent, value in
             zip(trace["ids"], trace["labels"], trace["parents"], trace["values"],
                 strict=True)}
    by_label = {label: (i, parent, value) for i, (label, parent, value) in nodes.items()}
    assert by_label["all live bytes"] == ("all", "", 4500)
    # outermost frames first: main, then grow, then the allocating calls
    assert by_label["main() a.c:9"][1:] == ("all", 4000)
    main_id = by_label["main() a.c:9"][0]
    assert by_label["grow() a.c:5"][1:] == (main_id, 4000)
    grow_id = by_label["grow() a.c:5"][0]
    assert by_label["leak() a.c:2"][1:] == (grow_id, 3000)
    assert by_label["other() a.c:3"][1:] == (grow_id, 1000)
    # plotly reads tags in labels: escaped, it shows them as text
    assert by_label["x() &lt;b&gt;.c:1"][1:] == ("all", 500)
    assert trace["branchvalues"] == "total" and trace["tiling"] == {"orientation": "v",
                                                                     "flip": "y"}


# -- gathering ------------------------------------------------------------------------


def test_gather_from_the_module_alone(program: tuple[int, int, list[int]]) -> None:
    pid, start_ns, chain = program
    d = rp.gather(pid, module_entry(pid, start_ns, chain), None,
                  store_note="there is no pmd database at /x/pmm.db (pmd writes it)")
    assert (d.pid, d.start_time, d.comm, d.state) == (pid, start_key(start_ns), "leak",
                                                      "running")
    assert d.sources == ["the module (live blocks, sites, sizes, samples)"]
    assert [g.site for g in d.leaks] == [LEAK_SITE, GROW_SITE, SHIM_SITE]
    assert d.leaks[0].bytes == 300 * 4096 and d.leaks[0].histogram == (1, 1, 13, 128, 157)
    assert d.live_by_site == [(LEAK_SITE, 300 * 4096), (GROW_SITE, 20 * 512),
                              (SHIM_SITE, 192)]
    assert d.stats is not None and d.stats.totals.malloc == 1441
    assert d.where(LEAK_SITE) == "leak() leak.c:30"
    assert d.where(GROW_SITE) == f"grow() leak.c:{line_of('/* grow */')}"
    assert d.where(SHIM_SITE) == "parse<b>bold</b>() cfg.c:5"
    assert d.trend is not None and d.trend.data.source == "kmod" and len(d.trend.data) == 5
    assert d.trend.trend.verdict == "NOT ENOUGH DATA"
    assert d.monitored_from_ns == start_ns + 10**9 and d.wall_offset_ns is not None
    assert d.missing == ["No growing sites and only the module's recent samples: there is no "
                         "pmd database at /x/pmm.db (pmd writes it)."]


def test_gather_from_the_database_alone(tmp_path: Path) -> None:
    db = tmp_path / "pmm.db"
    end = 700 * 10**9
    fill_db(db, DEAD_PID, 0, end, exited=end)
    st = Store.open(db, readonly=True)
    try:
        d = rp.gather(DEAD_PID, None, st, device_note="the module is not loaded")
    finally:
        st.close()
    assert (d.comm, d.state, d.cmdline) == ("leak", "exited", "leak -n 100")
    assert d.sources == [f"pmd's database {db}"]
    assert d.trend is not None and d.trend.trend.verdict == "LEAK"
    assert d.trend.data.source == "db" and len(d.trend.data) == 600
    assert [s.site for s in d.trend.sites] == [LEAK_SITE, GROW_SITE]
    assert d.where(LEAK_SITE) == "leak() leak.c:30" and d.where(GROW_SITE) == "site 9"
    # live bytes at pmd's last snapshot (t = 590 s)
    assert sorted(d.live_by_site) == [(LEAK_SITE, 1000 + 2048 * 590),
                                      (GROW_SITE, 500 + 100 * 590), (13, 4096)]
    assert d.live_from == "pmd's last site snapshot"
    assert d.leaks == [] and d.stats is None
    assert d.monitored_s == pytest.approx(599.0)
    assert d.wall_offset_ns is None  # nothing ties that boot's clock to the wall clock
    assert d.missing == ["No live blocks by site with their ages and no size table: the module "
                         "is not loaded, and pmd's database holds no record of its exit."]
    assert "Not in this report" in rp.render(d)


def test_gather_from_pmds_record_of_the_exit(program: tuple[int, int, list[int]],
                                             tmp_path: Path) -> None:
    """Long after the exit: pmd's samples, snapshots and what it kept at the
    exit give the age and size tables and the whole call chain."""
    db = tmp_path / "pmm.db"
    end = 700 * 10**9
    fill_db(db, DEAD_PID, 0, end, exited=end)
    add_exit_record(db, DEAD_PID, 0, end, stored_frames(program))
    st = Store.open(db, readonly=True)
    try:
        d = rp.gather(DEAD_PID, None, st, device_note="the module is not loaded")
    finally:
        st.close()
    assert d.missing == []
    assert d.sources == [f"pmd's database {db}",
                         "pmd's record of its exit (live blocks by site, sizes)"]
    assert [(g.site, g.bytes, g.blocks, g.histogram) for g in d.leaks] == [
        (LEAK_SITE, 300 * 4096, 300, (1, 2, 27, 270, 0))]
    assert d.leaks_at_exit and d.live_from == "pmd's record of the process at its exit"
    assert d.live_by_site == [(LEAK_SITE, 300 * 4096)]
    assert d.stats is not None and d.stats.totals.malloc == 900
    assert d.stats.totals.inuse_bytes == 300 * 4096 and d.stats.failed_allocs == 2
    texts = [f.text for f in d.stacks[LEAK_SITE]]
    assert texts[:3] == ["leak() leak.c:30", f"grow() leak.c:{line_of('/* grow */')}",
                         f"main() leak.c:{line_of('/* main */')}"]
    page = rp.render(d)
    assert "ages as of the exit, from pmd's record of it" in page
    assert "Not in this report" not in page


def test_gather_refuses_a_process_nobody_knows(tmp_path: Path) -> None:
    db = tmp_path / "pmm.db"
    fill_db(db, DEAD_PID, 0, 700 * 10**9)
    st = Store.open(db, readonly=True)
    try:
        with pytest.raises(NoSuchPid, match=f"pid {DEAD_PID + 1} does not exist, the module "
                           f"is not loaded, and pmd's database {db} has no record of it"):
            rp.gather(DEAD_PID + 1, None, st, device_note="the module is not loaded")
        with pytest.raises(NotMonitored, match=f"nothing to report on pid {os.getpid()}"):
            rp.gather(os.getpid(), None, st, device_note="the module is not loaded")
    finally:
        st.close()


# -- in the browser -------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    assert shutil.which("chromium"), "chromium is installed by scripts/setup.sh"
    with Browser(tmp_path_factory.mktemp("chromium")) as b:
        for domain in ("Runtime", "Log", "Network", "Page"):
            b.page(f"{domain}.enable")
        yield b


def load(b: Browser, page: Path) -> dict[str, Any]:
    """Loads the page and waits for its figures; what it did: the problems
    it logged, the URLs it requested, its text."""
    b.events.clear()
    b.page("Page.navigate", {"url": page.as_uri()})
    b.wait_event("Page.loadEventFired")
    drawn = b.evaluate("new Promise(done => { const t0 = Date.now(); (function poll() { "
                       "if (document.body.dataset.figures || Date.now() - t0 > 10000) "
                       "done(document.body.dataset.figures || 'not drawn'); "
                       "else setTimeout(poll, 20); })(); })")
    problems = []
    for ev in b.events:
        m, p = ev["method"], ev["params"]
        if m == "Runtime.exceptionThrown" or (
                m == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert")) or (
                m == "Log.entryAdded" and p["entry"]["level"] == "error"):
            problems.append(json.dumps(p)[:500])
    return {
        "drawn": drawn,
        "problems": problems,
        "requests": [ev["params"]["request"]["url"] for ev in b.events
                     if ev["method"] == "Network.requestWillBeSent"],
        "text": b.evaluate("document.body.innerText"),
        "plots": b.evaluate("document.querySelectorAll('.js-plotly-plot').length"),
        "flame": b.evaluate("Array.from(document.querySelectorAll('#flame-graph svg text'))"
                            ".map(t => t.textContent)"),
        "lines": b.evaluate("document.querySelectorAll('#memory-chart .scatterlayer .trace')"
                            ".length"),
    }


def only_the_file(requests: list[str], page: Path) -> None:
    assert requests and all(u == page.as_uri() or u.startswith("data:") for u in requests), \
        requests


def test_report_in_chromium(program: tuple[int, int, list[int]], tmp_path: Path,
                            browser: Browser) -> None:
    """Both sources: the module's entry of the running program and pmd's
    database of it; then the page as a browser shows it."""
    pid, start_ns, chain = program
    db = tmp_path / "pmm.db"
    comm = "<img src=x onerror=alert(1)>"  # a process names itself
    fill_db(db, pid, start_key(start_ns), boottime_ns(), comm=comm)
    st = Store.open(db, readonly=True)
    try:
        d = rp.gather(pid, module_entry(pid, start_ns, chain, comm), st)
    finally:
        st.close()
    assert d.missing == []
    assert d.trend is not None and d.trend.data.source == "db"  # the long history
    page = rp.render(d)
    out = tmp_path / "report.html"
    rp.write_report(page, out)
    assert "<img" not in page.replace("&lt;img", "")  # the comm is text, not an element
    figs = figures(page)
    assert set(figs) == {"memory-chart", "flame-graph"}

    seen = load(browser, out)
    OUTPUT.mkdir(parents=True, exist_ok=True)
    browser.screenshot(OUTPUT / "report.png")
    assert seen["problems"] == []
    only_the_file(seen["requests"], out)
    assert seen["drawn"] == "drawn" and seen["plots"] == 2
    assert seen["lines"] == 4  # rss, vm, the slices' lowest, the fitted floor
    text = seen["text"]
    assert f"pid {pid} ({comm})" in text
    assert "LEAK" in text and "the floor grows steadily" in text
    assert "leak() leak.c:30" in text  # the growing site, and the age table
    assert re.search(r"\+240\.\d KiB/min \(95% confidence interval", text)
    assert "Not in this report" not in text
    # the flame graph: the allocating call on top of grow() and main()
    flame = " ".join(seen["flame"])
    assert "leak() leak.c:30" in flame and f"main() leak.c:{line_of('/* main */')}" in flame
    assert "parse<b>bold</b>() cfg.c:5" in flame  # markup in a name is shown, not applied
    assert seen["flame"][0].startswith("all live bytes")
    png = (OUTPUT / "report.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 50_000


# -- the command ----------------------------------------------------------------------


def test_cli_report_from_the_database_alone(program: tuple[int, int, list[int]],
                                            tmp_path: Path, browser: Browser) -> None:
    """The process is long gone and the module has nothing: all from pmd's
    database (its samples, site snapshots and its record of the exit)."""
    db = tmp_path / "pmm.db"
    fill_db(db, DEAD_PID, 0, 700 * 10**9, exited=700 * 10**9)
    add_exit_record(db, DEAD_PID, 0, 700 * 10**9, stored_frames(program))
    out = tmp_path / "r.html"
    r = runner.invoke(app, ["report", str(DEAD_PID), "--db", str(db), "-o", str(out)],
                      env=NO_DEVICE)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert re.fullmatch(rf"wrote {out} \(4\.\d MiB\): pid {DEAD_PID} \(leak, exited\), LEAK",
                        lines[0]), lines
    assert lines[1:] == []
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~current_umask())
    seen = load(browser, out)
    OUTPUT.mkdir(parents=True, exist_ok=True)
    browser.screenshot(OUTPUT / "report-from-db.png")
    assert seen["problems"] == [] and seen["drawn"] == "drawn" and seen["plots"] == 2
    only_the_file(seen["requests"], out)
    text = seen["text"]
    assert "Not in this report" not in text
    assert "leak() leak.c:30" in text and "LEAK" in text
    assert "1.2 MiB in 300 live blocks, 1 site." in text  # the age table, as of the exit
    assert "Allocations by size" in text and "Failed allocations: 2" in text
    flame = " ".join(seen["flame"])
    assert "leak() leak.c:30" in flame and f"main() leak.c:{line_of('/* main */')}" in flame

    r = runner.invoke(app, ["report", str(DEAD_PID), "--db", str(db), "-o", str(out),
                            "--json"], env=NO_DEVICE)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc == {"output": str(out), "bytes": out.stat().st_size, "pid": DEAD_PID,
                   "start_time": 0, "comm": "leak", "state": "exited", "verdict": "LEAK",
                   "sources": [f"pmd's database {db}",
                               "pmd's record of its exit (live blocks by site, sizes)"],
                   "missing": []}


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_cli_refuses_a_pid_the_database_does_not_have(tmp_path: Path) -> None:
    db = tmp_path / "pmm.db"
    fill_db(db, DEAD_PID, 0, 700 * 10**9)
    out = tmp_path / "r.html"
    r = runner.invoke(app, ["report", str(DEAD_PID + 1), "--db", str(db), "-o", str(out)],
                      env=NO_DEVICE)
    assert r.exit_code == 5
    assert r.output == (f"pmctl: no such process: pid {DEAD_PID + 1} does not exist, the "
                        f"module is not loaded, and pmd's database {db} has no record of "
                        "it\n")
    assert not out.exists() and not [p for p in tmp_path.iterdir() if "r.html" in p.name]


def pmctl(args: list[str], capsys: pytest.CaptureFixture[str],
          monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """pmctl's entry point as the console script runs it: (status, stderr)."""
    monkeypatch.setenv("PMM_DEVICE", NO_DEVICE["PMM_DEVICE"])
    with pytest.raises(SystemExit) as e:
        main(args)
    return int(e.value.code or 0), capsys.readouterr().err


def test_cli_refuses_an_output_it_cannot_write_before_reading(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    missing_db = tmp_path / "none.db"  # would fail (exit 1) if it were read first
    (tmp_path / "file").write_text("")
    for output, why in [
        (tmp_path / "no" / "r.html",
         f"cannot write {tmp_path}/no/r.html: its directory {tmp_path}/no does not exist"),
        (tmp_path, f"{tmp_path} is a directory: give the file to write, e.g. "
         f"{tmp_path}/report.html"),
        (tmp_path / "file" / "r.html",
         f"cannot write {tmp_path}/file/r.html: {tmp_path}/file is not a directory"),
    ]:
        code, err = pmctl(["report", str(DEAD_PID), "--db", str(missing_db), "-o",
                           str(output)], capsys, monkeypatch)
        assert code == 2, err
        assert err == (f"pmctl: Invalid value for '-o' / '--output': {why} (see `pmctl "
                       "report --help`)\n")
    assert not missing_db.exists()


def test_cli_a_named_database_must_exist(tmp_path: Path) -> None:
    r = runner.invoke(app, ["report", str(DEAD_PID), "--db", str(tmp_path / "none.db"), "-o",
                            str(tmp_path / "r.html")], env=NO_DEVICE)
    assert r.exit_code == 1
    assert "no database at" in r.output or "does not exist" in r.output
    assert not (tmp_path / "r.html").exists()


def test_the_split_of_a_retaining_process(tmp_path: Path) -> None:
    """Samples with the split (pmd stores rss_anon, rss_file, rss_shmem and the
    live heap): the report names the kind and stacks the split over time."""
    db = tmp_path / "pmm.db"
    end = 700 * 10**9
    t0 = end - 599 * 10**9
    rows = []
    for i in range(600):
        anon = (40 << 20) + i * 8192  # grows 8 KiB/s
        rows.append(SampleRow(DEAD_PID, 0, t0 + i * 10**9, 1 << 30, anon + (6 << 20),
                              rss_anon=anon, rss_file=5 << 20, rss_shmem=1 << 20,
                              live_bytes=(30 << 20) + (i % 7) * 100, live_blocks=1000))
    st = Store.open(db)
    st.write(rows, [ProcessRow(DEAD_PID, 0, "keeper", "/bin/keeper", "keeper", t0)],
             [(DEAD_PID, 0, end)])
    st.add_alert(AlertRow(DEAD_PID, 0, end, 0.0, "keeper", "LEAK", 8192.0, 8000.0, 8400.0,
                          0.95, 4.8e6, None, "LEAK", kind="RETENTION", evidence={"mappings": [
                              {"mapping": "[heap]", "start": 0x5000, "rss_before": 1 << 20,
                               "rss_after": 6 << 20, "growth": 5 << 20, "allocator": True}]}))
    st.close()
    st = Store.open(db, readonly=True)
    try:
        d = rp.gather(DEAD_PID, None, st, device_note="the module is not loaded")
    finally:
        st.close()
    assert d.trend is not None and d.trend.kind is not None
    # the live heap is flat, anon grows, and the alert kept that [heap] grew
    assert d.trend.kind.kind == "RETENTION"
    assert "[heap] +5.0 MiB" in d.trend.kind.reason
    page = rp.render(d)
    assert "Where the rss goes" in page and "malloc_trim" in page
    fig = figures(page)["split-chart"]
    assert [tr["name"] for tr in fig["data"]] == ["live heap", "other anon", "file + shmem"]
    assert all(tr["stackgroup"] == "rss" for tr in fig["data"])
    # the layers add up to the process's anon + file + shmem (MiB)
    last = sum(tr["y"][-1] for tr in fig["data"])
    assert last == pytest.approx(((40 << 20) + 599 * 8192 + (6 << 20)) / (1 << 20), abs=0.01)
