"""A database of an older pmd, whose table sites holds a site's description
as text only (no `frame` column): pmctl report, trend and alerts show its
sites as they show those a newer pmd stored as fields (the same text out,
and the report's source lines), pmctl leaks (pmd's record of the exit,
whose table did not change) too, and pmd's open adds the column without
touching the rows."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import sqlite_utils
import trend_series as S
from typer.testing import CliRunner

from pmctl.cli import app
from pmm.report import data as rp
from pmm.store import AlertRow, ExitRecord, ExitSiteRow, ProcessRow, SampleRow, Store
from pmm.symbolize import Frame, SourceLoc

runner = CliRunner()
DEAD_PID = 4_000_000  # above pid_max: never a live process
NO_DEVICE = {"PMM_DEVICE": "/nonexistent/pmm", "TZ": "UTC"}  # the module is not loaded
END = 700 * 10**9
WALL = 1_700_000_000.0

# Every shape a site's description takes (Frame.describe), by site id: the
# growing sites' snapshots (site 7 the fastest) name them in the report, and
# the five fastest in trend.
FRAMES = {
    7: Frame.registered_at("leak", "src/leak.c", 30),
    9: Frame(0, object="/usr/lib/libfoo.so", offset=0x1139, func="leak_in_lib",
             symbol="leak_in_lib+0x19"),
    11: Frame(0, object="/usr/bin/leak", offset=0x1200, func="grow", file="/src/leak.c",
              line=12, lines=(SourceLoc("grow", "/src/leak.c", 12),
                              SourceLoc("main", "/src/leak.c", 40))),
    13: Frame(0, object="/lib/x86_64-linux-gnu/libc.so.6", offset=0x9a1ca, func="malloc"),
    15: Frame(0, object="/usr/bin/leak", offset=0x2000, func="operator new(unsigned long)",
              file="/src/new.cc", line=5),
    17: Frame(0, object="/lib/x86_64-linux-gnu/libc.so.6", offset=0x2a1ca),
}
TEXTS = {
    7: "leak() src/leak.c:30",
    9: "libfoo.so+0x1139 (leak_in_lib+0x19)",
    11: "grow() leak.c:12",
    13: "malloc() (libc.so.6+0x9a1ca)",
    15: "operator new(unsigned long) new.cc:5",
    17: "libc.so.6+0x2a1ca",
}
EXIT_SITE = 21  # the site of pmd's record of the exit: its frames, described as site 11


def fill(db: Path) -> None:
    """As a newer pmd writes it: a process leaking for 10 minutes, then
    exited; its sites growing, described as fields (Frame); an alert naming
    site 7; what pmd kept at the exit (EXIT_SITE's live blocks, described
    too: write_exit)."""
    t, v = S.leak(1, rate=4096)
    t0 = END - int(t[-1] * 1e9)
    rows = [SampleRow(DEAD_PID, 0, t0 + int(ti * 1e9), int(vi) + (8 << 20), int(vi))
            for ti, vi in zip(t, v, strict=True)]
    snaps = [(DEAD_PID, 0, t0 + int(t[i] * 1e9), site, 1000 + (20 - site) * 100 * int(t[i]), 1 + i)
             for i in range(0, len(t), 10) for site in FRAMES]
    st = Store.open(db)
    try:
        st.write(rows, [ProcessRow(DEAD_PID, 0, "leak", "/usr/bin/leak", "leak -n 100", t0)],
                 [(DEAD_PID, 0, END)], snaps,
                 [(DEAD_PID, 0, site, f) for site, f in FRAMES.items()])
        st.add_alert(AlertRow(pid=DEAD_PID, start_time=0, time=END - 10**9, wall_time=WALL,
                              comm="leak", verdict="LEAK", slope=4096.0, slope_low=4000.0,
                              slope_high=4200.0, confidence=0.95, growth=2.4e6, site=7,
                              message=f"LEAK pid {DEAD_PID} (leak): rss +240.0 KiB/min"))
        leak = ExitSiteRow(EXIT_SITE, live_bytes=300 * 4096,
                           live_blocks=300, alloc_bytes=900 * 4096, free_bytes=600 * 4096,
                           alloc_count={"MALLOC": 900}, oldest_age_s=590.0, newest_age_s=0.5,
                           histogram=(1, 2, 27, 270, 0),
                           frames=(FRAMES[11].as_dict(),), where=TEXTS[11])
        st.write_exit(ExitRecord(DEAD_PID, 0, "leak", END, END,
                                 {"comm": "leak", "exit_time_ns": END}, sites=(leak,)))
    finally:
        st.close()


def as_an_older_pmd_left_it(db: Path) -> None:
    """Table sites as the previous schema made it (pmm.store.schema before
    the frame column, 8a5ee19: the same call), holding the same descriptions
    as text; the other tables are the same in both schemas."""
    c = sqlite3.connect(db)
    try:
        with c:
            rows = c.execute("SELECT pid, start_time, site, where_ FROM sites").fetchall()
            c.execute("DROP TABLE sites")
        old = sqlite_utils.Database(c)
        old.table("sites").create(
            {"pid": int, "start_time": int, "site": int, "where_": str},
            pk=("pid", "start_time", "site"))
        with c:
            c.executemany("INSERT INTO sites VALUES (?,?,?,?)", rows)
    finally:
        c.close()


def sites_columns(db: Path) -> list[str]:
    c = sqlite3.connect(db)
    try:
        return [r[1] for r in c.execute("PRAGMA table_info(sites)")]
    finally:
        c.close()


def shown(db: Path, out_dir: Path) -> dict[str, str]:
    """What pmctl shows of the process from the database, by command."""
    got = {}
    for name, args in {
        "leaks": ["leaks", str(DEAD_PID), "--db", str(db)],
        "leaks --json": ["leaks", str(DEAD_PID), "--db", str(db), "--json"],
        "trend": ["trend", str(DEAD_PID), "--db", str(db)],
        "trend --json": ["trend", str(DEAD_PID), "--db", str(db), "--json"],
        "alerts --json": ["alerts", "--db", str(db), "--json"],
    }.items():
        r = runner.invoke(app, args, env=NO_DEVICE)
        assert r.exit_code in (0, 10), (name, r.output)
        # what varies from one run to the next: the host's free memory now
        got[name] = re.sub(r'"mem_available": \d+', '"mem_available": N', r.stdout)
    page = out_dir / "r.html"
    r = runner.invoke(app, ["report", str(DEAD_PID), "--db", str(db), "-o", str(page)],
                      env=NO_DEVICE)
    assert r.exit_code == 0, r.output
    got["report"] = re.sub(r"(report made</span>)[^<]*", r"\1T", page.read_text())
    st = Store.open(db, readonly=True)
    try:
        d = rp.gather(DEAD_PID, None, st, device_note="the module is not loaded")
    finally:
        st.close()
    got["report stacks"] = repr({site: [(f.text, f.location) for f in frames]
                                 for site, frames in sorted(d.stacks.items())})
    return got


def test_an_older_pmds_sites_read_unchanged(tmp_path: Path) -> None:
    db = tmp_path / "pmm.db"
    fill(db)
    assert {k: f.describe() for k, f in FRAMES.items()} == TEXTS
    newer = shown(db, tmp_path)
    # the descriptions are there to compare: each site's text, its source line
    # (leaks: from pmd's record of the exit, its frames)
    assert "grow() leak.c:12" in newer["leaks"]
    assert TEXTS[7] in newer["alerts --json"]
    for site, text in TEXTS.items():
        assert text in newer["report"], text
        assert (text in newer["trend --json"]) == (site != 17), text
    assert ("[('operator new(unsigned long) new.cc:5', 'new.cc:5')]"
            in newer["report stacks"])
    assert "[('libc.so.6+0x2a1ca', None)]" in newer["report stacks"]

    as_an_older_pmd_left_it(db)
    assert sites_columns(db) == ["pid", "start_time", "site", "where_"]
    assert shown(db, tmp_path) == newer
    assert sites_columns(db) == ["pid", "start_time", "site", "where_"]  # pmctl reads only

    Store.open(db).close()  # as pmd opens it: the column is added, the rows kept
    assert sites_columns(db) == ["pid", "start_time", "site", "where_", "frame"]
    c = sqlite3.connect(db)
    try:
        assert c.execute("SELECT site, where_, frame FROM sites ORDER BY site").fetchall() == [
            (site, text, None) for site, text in sorted({**TEXTS, EXIT_SITE: TEXTS[11]}.items())]
    finally:
        c.close()
    assert shown(db, tmp_path) == newer
