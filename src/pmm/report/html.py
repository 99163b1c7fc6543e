"""The report as one self-contained HTML file.

plotly.js (vendored, `vendor/`) is inlined in the page and draws the
figures of pmm.report.figures (rss and vm over time, the split of the rss,
live bytes by call chain), written in the page as plain JSON; everything
else is HTML text, escaped. A Content-Security-Policy lets the page run
only its own two scripts (by hash) and load nothing: the file shows the
same with no network.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import json
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import pmm
from pmm.analysis.leaks import AGE_LABELS
from pmm.analysis.stats import HEADERS as SIZE_HEADERS
from pmm.analysis.trend import Verdict
from pmm.analysis.trendview import rests_on
from pmm.errors import PmmError
from pmm.files import replace_file
from pmm.output import human_age
from pmm.report.data import ReportData
from pmm.report.figures import CHART_POINTS, flame_figure, memory_figure, split_figure
from pmm.report.stacks import StackFrame
from pmm.text import printable
from pmm.units import human_bytes, human_rate
from pmm.unreachable import short_duration

PLOTLY_VERSION = "4.1.2"
# of vendor/plotly.min.js, as npm's plotly.js-dist-min@4.1.2 ships it (vendor/README.md)
PLOTLY_SHA256 = "2f645d1bade8182fce161b7f10f89402f8b315805250ff4a94672a28d23c390a"
LICENSE_SHA256 = "8c45d9eaf50c2f72dd9c7ab9ef440788ba58a3538484b5c51c1f17d5128752e7"

AGE_TABLE_ROWS = 50

MEMORY_CHART_ID = "memory-chart"
SPLIT_CHART_ID = "split-chart"
FLAME_ID = "flame-graph"


class DamagedVendorFile(PmmError):
    """The vendored plotly.min.js is not the file pmm was released with."""


def _vendor(name: str) -> bytes:
    return resources.files("pmm.report").joinpath("vendor", name).read_bytes()


@functools.cache
def plotly_js() -> str:
    """The vendored plotly.min.js, checked against PLOTLY_SHA256."""
    raw = _vendor("plotly.min.js")
    digest = hashlib.sha256(raw).hexdigest()
    if digest != PLOTLY_SHA256:
        raise DamagedVendorFile(
            f"pmm's copy of plotly.min.js is damaged (sha256 {digest}, expected "
            f"{PLOTLY_SHA256}): reinstall pmm")
    return raw.decode("utf-8")


def _csp_hash(script: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"


def esc(s: object) -> str:
    """Text from anywhere (a process's comm, a function name) as HTML text."""
    return html.escape(printable(str(s)))


def _json_for_script(obj: Any) -> str:
    """JSON that cannot end its <script> element or open a comment."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# -- HTML -------------------------------------------------------------------------

CSS = """
:root { --fg: #1d2330; --muted: #5d6778; --line: #d9dee7; --bg: #f6f7f9; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: var(--fg); background: var(--bg); }
main { max-width: 1200px; margin: 0 auto; padding: 24px; }
header h1 { margin: 0 0 4px; font-size: 26px; }
header .cmd { color: var(--muted); font-family: ui-monospace, monospace; font-size: 13px;
              word-break: break-all; }
section { background: #fff; border: 1px solid var(--line); border-radius: 8px;
          padding: 16px 20px; margin: 16px 0; }
h2 { font-size: 18px; margin: 0 0 10px; }
.facts { display: flex; flex-wrap: wrap; gap: 8px 28px; margin-top: 10px; }
.facts div span { display: block; color: var(--muted); font-size: 12px; text-transform: uppercase;
                  letter-spacing: .04em; }
.state { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 13px;
         background: #e8ebf0; vertical-align: middle; }
.verdict { display: inline-block; padding: 4px 14px; border-radius: 6px; font-weight: 700;
           font-size: 20px; color: #fff; margin-right: 12px; }
.v-LEAK { background: #c62828; } .v-GROWING { background: #ef6c00; }
.v-STABLE { background: #2e7d32; } .v-NOT-ENOUGH-DATA { background: #78828f; }
.v-INCONCLUSIVE { background: #78828f; }
.reason { font-size: 16px; }
.missing { background: #fff8e1; border-color: #f3d77b; }
.missing ul { margin: 4px 0 0; padding-left: 20px; }
table { border-collapse: collapse; width: 100%; font-size: 14px; }
th, td { padding: 5px 8px; border-bottom: 1px solid var(--line); text-align: left;
         vertical-align: top; }
th { color: var(--muted); font-weight: 600; font-size: 12px; text-transform: uppercase;
     letter-spacing: .03em; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.total td { font-weight: 700; }
.where { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 13px; }
details summary { cursor: pointer; }
ol.stack { margin: 6px 0 2px; padding-left: 34px; font-family: ui-monospace, monospace;
           font-size: 13px; }
ol.stack li { margin: 1px 0; }
ol.stack .obj, ol.stack .inl { color: var(--muted); }
.evidence td:first-child { color: var(--muted); width: 230px; }
.note { color: var(--muted); font-size: 13px; margin: 6px 0 0; }
footer { color: var(--muted); font-size: 12px; text-align: center; padding: 8px 0 24px; }
"""

BOOT_JS = """(function () {
  var figures = JSON.parse(document.getElementById('pmm-figures').textContent);
  var drawn = Object.keys(figures).map(function (id) {
    var config = Object.assign({displaylogo: false, responsive: true}, figures[id].config);
    return Plotly.newPlot(id, figures[id].data, figures[id].layout, config);
  });
  Promise.all(drawn).then(function () { document.body.dataset.figures = 'drawn'; },
                          function (e) { console.error('pmm report: ' + e); });
})();"""


def _when(d: ReportData, boottime: int | None) -> str:
    if boottime is None:
        return "-"
    wall = d.wall_time(boottime)
    if wall is None:  # no tie to the wall clock (pmd kept none; an earlier boot)
        return f"{human_age(boottime / 1e9)} after boot"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall))


def _fact(label: str, value: str) -> str:
    return f"<div><span>{esc(label)}</span>{value}</div>"


def _header(d: ReportData) -> str:
    monitored = d.monitored_s
    period = "-" if monitored is None else esc(human_age(monitored))
    ended = _when(d, d.monitored_to_ns) if d.state == "exited" else "still running"
    facts = [
        _fact("state", f'<span class="state">{esc(d.state)}</span>'),
        _fact("monitored from", esc(_when(d, d.monitored_from_ns))),
        _fact("exited" if d.state == "exited" else "now", esc(ended)),
        _fact("monitored for", period),
        _fact("report made", esc(time.strftime("%Y-%m-%d %H:%M:%S",
                                               time.localtime(d.made_at)))),
        _fact("start time (ns since boot)", esc(d.start_time)),
    ]
    cmd = f'<div class="cmd">{esc(d.cmdline)}</div>' if d.cmdline else ""
    sources = esc("; ".join(d.sources) or "nothing")
    return (f"<header><h1>pid {d.pid} ({esc(d.comm or '?')})</h1>{cmd}"
            f'<div class="facts">{"".join(facts)}</div>'
            f'<p class="note">From {sources}.</p></header>')


def _missing(d: ReportData) -> str:
    if not d.missing:
        return ""
    items = "".join(f"<li>{esc(m)}</li>" for m in d.missing)
    return f'<section class="missing"><h2>Not in this report</h2><ul>{items}</ul></section>'


def _verdict(d: ReportData) -> str:
    if d.trend is None:
        return ('<section id="verdict"><h2>Verdict</h2><p>No memory samples of this '
                "process: no verdict.</p></section>")
    rep, r = d.trend, d.trend.trend
    cls = "v-" + str(r.verdict).replace(" ", "-")
    rows: list[tuple[str, str]] = [("samples", rests_on(rep.data))]
    if r.buckets:
        pct = round(r.confidence * 100)
        rows += [
            ("growth rate of the rss floor", f"{human_rate(r.slope * 60)} ({pct}% confidence "
             f"interval {human_rate(r.slope_low * 60)} .. {human_rate(r.slope_high * 60)})"),
            ("growth over the window", f"{'+' if r.growth >= 0 else '-'}"
             f"{human_bytes(abs(r.growth))} (it had to reach {human_bytes(r.min_growth)})"),
            ("rate in the later part", human_rate(r.late_slope * 60)),
            ("floor level", human_bytes(r.level)),
            ("scatter of the floor", human_bytes(r.noise)),
            ("time slices", str(r.buckets)),
            ("confidence", f"{pct}%"),
        ]
    data = rep.data
    if data.rss:
        rows.append(("rss first .. last", f"{human_bytes(data.rss[0])} .. "
                     f"{human_bytes(data.rss[-1])}"))
        rows.append(("vm first .. last", f"{human_bytes(data.vm[0])} .. "
                     f"{human_bytes(data.vm[-1])}"))
    if rep.mem_available is not None and d.state == "running":
        ex = rep.exhausted_in_s
        when = (f", used up in {human_age(ex)} at this rate" if ex is not None
                else ", not used up at this rate" if r.buckets else "")
        rows.append(("MemAvailable now", f"{human_bytes(rep.mem_available)}{when}"))
    source = {"db": f"pmd's database {data.db}", "kmod": "the module's sample ring"}.get(
        data.source, data.source)
    rows.append(("samples from", source))
    table = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in rows)
    return (f'<section id="verdict"><h2>Verdict</h2><p><span class="verdict {cls}">'
            f'{esc(r.verdict)}</span><span class="reason">{esc(r.reason)}</span></p>'
            f'<table class="evidence">{table}</table></section>')


def _chart(d: ReportData, figures: dict[str, Any]) -> str:
    fig = memory_figure(d)
    if fig is None:
        return ""
    figures[MEMORY_CHART_ID] = fig
    note = ""
    if d.trend is not None and len(d.trend.data) > CHART_POINTS:
        note = (f'<p class="note">{len(d.trend.data)} samples; the chart draws the lowest '
                "and highest of each time slice.</p>")
    return (f'<section id="memory"><h2>Memory over time</h2>'
            f'<div id="{MEMORY_CHART_ID}"></div>{note}</section>')


def _split(d: ReportData, figures: dict[str, Any]) -> str:
    """The kind of growth, its evidence and the stacked chart of the split."""
    if d.trend is None or d.trend.kind is None:
        return ""
    c = d.trend.kind
    rows = [("kind", str(c.kind)), ("why", c.reason)]
    if c.advice:
        rows.append(("what to do", c.advice.replace("PID", str(d.pid))))
    rows += [("mapping that grew", f"{m.label} +{human_bytes(m.growth)}")
             for m in c.mappings[:5]]
    table = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in rows)
    fig = split_figure(d)
    chart = ""
    if fig is not None:
        figures[SPLIT_CHART_ID] = fig
        chart = f'<div id="{SPLIT_CHART_ID}"></div>'
    return (f'<section id="split"><h2>Where the rss goes</h2><table class="evidence">{table}'
            f"</table>{chart}</section>")


def _stack_html(stack: Sequence[StackFrame]) -> str:
    items = []
    for f in stack:
        extra = "".join(f' <span class="inl">(inlined into {esc(i)})</span>' for i in f.inlined)
        obj = f' <span class="obj">in {esc(f.object)}</span>' if f.object else ""
        items.append(f"<li>{esc(f.text)}{extra}{obj}</li>")
    return f'<ol class="stack" start="0">{"".join(items)}</ol>'


def _site_cell(d: ReportData, site: int, open_: bool = False) -> str:
    stack = d.stacks.get(site) or []
    where = f'<span class="where">{esc(d.where(site))}</span>'
    if len(stack) <= 1 and not (stack and (stack[0].object or stack[0].inlined)):
        return where
    return (f"<details{' open' if open_ else ''}><summary>{where}</summary>"
            f"{_stack_html(stack)}</details>")


def _growing(d: ReportData) -> str:
    if d.trend is None or not d.trend.sites:
        return ""
    rows = []
    for i, s in enumerate(d.trend.sites):
        rows.append(
            f'<tr><td class="n">{i + 1}</td><td class="n">{esc(human_rate(s.slope * 60))}</td>'
            f'<td class="n">{esc(human_bytes(s.first_bytes))}</td>'
            f'<td class="n">{esc(human_bytes(s.last_bytes))}</td>'
            f'<td class="n">{s.last_blocks}</td><td class="n">{s.snapshots}</td>'
            f"<td>{_site_cell(d, s.site, open_=i == 0)}</td></tr>")
    head = ('<tr><th class="n">#</th><th class="n">rate</th><th class="n">first live</th>'
            '<th class="n">last live</th><th class="n">blocks</th><th class="n">snapshots</th>'
            "<th>site (call chain, allocating call first)</th></tr>")
    return (f'<section id="growing"><h2>Sites whose live bytes grow fastest</h2>'
            f"<table>{head}{''.join(rows)}</table>"
            '<p class="note">From pmd\'s site snapshots: each site\'s rate is the Theil-Sen '
            "slope of its live bytes over time.</p></section>")


def _flame(d: ReportData, figures: dict[str, Any]) -> str:
    fig = flame_figure(d)
    if fig is None:
        return ""
    figures[FLAME_ID] = fig
    return (f'<section id="flame"><h2>Live bytes by call chain</h2><div id="{FLAME_ID}">'
            f'</div><p class="note">From {esc(d.live_from)}: all live bytes at the bottom, '
            "each call above its caller, the allocating calls on top; the width is the live "
            "bytes. Click a box to zoom into it.</p></section>")


def _ages(d: ReportData) -> str:
    if not d.leaks:
        return ""
    shown = d.leaks[:AGE_TABLE_ROWS]
    head = ('<tr><th class="n">bytes</th><th class="n">blocks</th><th class="n">oldest</th>'
            + "".join(f'<th class="n">{esc(lbl)}</th>' for lbl in AGE_LABELS)
            + "<th>site</th></tr>")
    rows = []
    for g in shown:
        hist = "".join(f'<td class="n">{v}</td>' for v in g.histogram)
        rows.append(f'<tr><td class="n">{esc(human_bytes(g.bytes))}</td>'
                    f'<td class="n">{g.blocks}</td>'
                    f'<td class="n">{esc(human_age(g.oldest_age_s))}</td>{hist}'
                    f"<td>{_site_cell(d, g.site)}</td></tr>")
    total_bytes = sum(g.bytes for g in d.leaks)
    total_blocks = sum(g.blocks for g in d.leaks)
    more = len(d.leaks) - len(shown)
    note = f" The {len(shown)} largest of {len(d.leaks)} sites." if more > 0 else ""
    at_exit = "; ages as of the exit, from pmd's record of it" if d.leaks_at_exit else ""
    return (f'<section id="ages"><h2>Live blocks by site, with their ages</h2>'
            f"<p>{esc(human_bytes(total_bytes))} in {total_blocks} live blocks, "
            f"{len(d.leaks)} site{'' if len(d.leaks) == 1 else 's'}.{esc(note)}</p>"
            f"<table>{head}{''.join(rows)}</table>"
            '<p class="note">Blocks per age: younger than 1 s, 10 s, 100 s, 1000 s, and older '
            f"(as `pmctl leaks` shows them){at_exit}.</p></section>")


def _unreachable(d: ReportData) -> str:
    sc = d.scan
    if sc is None:
        return ""
    when = _when(d, sc.time)
    if sc.error is not None:
        return (f'<section id="unreachable"><h2>Unreachable blocks</h2><p>pmd\'s scan at '
                f"the LEAK alert ({esc(when)}) failed: {esc(sc.error)}</p></section>")
    head = ('<tr><th class="n">lost</th><th class="n">blocks</th><th class="n">indirectly</th>'
            '<th class="n">blocks</th><th>site</th></tr>')
    rows = [f'<tr><td class="n">{esc(human_bytes(x.definite_bytes))}</td>'
            f'<td class="n">{x.definite_blocks}</td>'
            f'<td class="n">{esc(human_bytes(x.indirect_bytes))}</td>'
            f'<td class="n">{x.indirect_blocks}</td>'
            f'<td><span class="where">{esc(x.where or d.where(x.site))}</span></td></tr>'
            for x in sc.sites]
    table = f"<table>{head}{''.join(rows)}</table>" if rows else ""
    return (f'<section id="unreachable"><h2>Unreachable blocks</h2>'
            f"<p>At the LEAK alert ({esc(when)}) pmd scanned the process: "
            f"{esc(human_bytes(sc.definite_bytes))} in {sc.definite_blocks} blocks nothing "
            f"reaches (definitely lost), {esc(human_bytes(sc.indirect_bytes))} in "
            f"{sc.indirect_blocks} reached only from those (indirectly lost).</p>{table}"
            '<p class="note">As `pmctl unreachable` finds them: a conservative mark of the '
            "process's copy from its registers, stacks and data. Its threads were stopped "
            f"{esc(short_duration(sc.longest_stop_us / 1e6))} at most; blocks younger than "
            "the age gate and memory the table does not know are never called lost."
            "</p></section>")


def _sizes(d: ReportData) -> str:
    if d.stats is None:
        return ""
    st = d.stats
    head = "<tr>" + "".join(f'<th{"" if i == 0 else " class=n"}>{esc(h)}</th>'
                            for i, h in enumerate(SIZE_HEADERS)) + "</tr>"
    rows = []
    for r in (*st.rows, st.totals):
        label = r.label if r.label == "Totals" or not r.max_size else f"{r.label} bytes"
        cells = [r.malloc, r.calloc, r.realloc, r.free, r.alloc_bytes, r.freed_bytes,
                 r.inuse_bytes]
        cls = ' class="total"' if r is st.totals else ""
        rows.append(f"<tr{cls}><td>{esc(label)}</td>"
                    + "".join(f'<td class="n">{c}</td>' for c in cells) + "</tr>")
    return (f'<section id="sizes"><h2>Allocations by size</h2>'
            f"<table>{head}{''.join(rows)}</table>"
            f'<p class="note">Exact bytes. Failed allocations: {st.failed_allocs}; '
            f"unmatched frees: {st.unmatched_frees}; frees of blocks older than "
            f"monitoring: {st.older_frees}.</p></section>")


def render(d: ReportData) -> str:
    """The report as one HTML page: no file or address it needs beyond itself."""
    figures: dict[str, Any] = {}
    body = "".join([
        _header(d), _missing(d), _verdict(d), _chart(d, figures), _split(d, figures),
        _growing(d),
        _unreachable(d), _flame(d, figures), _ages(d), _sizes(d),
    ])
    # plotly only when there is something to draw
    scripts = [plotly_js(), BOOT_JS] if figures else []
    csp = ("default-src 'none'; script-src " + (" ".join(_csp_hash(s) for s in scripts)
                                               or "'none'")
           + "; style-src 'unsafe-inline'; img-src data: blob:")
    title = f"pmm report: pid {d.pid} ({d.comm or '?'})"
    verdict = f": {d.trend.trend.verdict}" if d.trend is not None else ""
    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title + verdict)}</title><style>{CSS}</style></head><body><main>",
        body,
        f"<footer>pmm {esc(pmm.__version__)}; charts by plotly.js {PLOTLY_VERSION} "
        "(MIT licence, Plotly, Inc.), included in this file.</footer></main>",
        f'<script type="application/json" id="pmm-figures">{_json_for_script(figures)}'
        "</script>" if figures else "",
        *(f"<script>{s}</script>" for s in scripts),
        "</body></html>\n",
    ]
    return "".join(parts)


def verdict_of(d: ReportData) -> Verdict | None:
    """The verdict the report gives (None without samples)."""
    return d.trend.trend.verdict if d.trend is not None else None


def write_report(text: str, path: Path) -> None:
    """Writes the page to path whole or not at all (created as any new file,
    0666 less the umask: pmm.files.replace_file)."""
    replace_file(path, text)
