"""What an admin puts into Prometheus and Grafana (examples/prometheus,
examples/grafana), checked by the real tools: promtool checks and unit-tests
the alert rules and checks the scrape config; a real Prometheus, started here
on a free localhost port with the example config, loads the rules and accepts
every PromQL expression of the rules and the dashboard; and every expression
names only metrics pmd exports (the agreed list, docs/fleet.md)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

TOP = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = TOP / "examples" / "prometheus"
RULES = PROMETHEUS_DIR / "pmm-alerts.yml"
RULE_TESTS = PROMETHEUS_DIR / "pmm-alerts.test.yml"
CONFIG = PROMETHEUS_DIR / "prometheus.yml"
DASHBOARD = TOP / "examples" / "grafana" / "pmm-dashboard.json"
PARCA = TOP / "examples" / "parca" / "parca.yaml"
ALLOY = TOP / "examples" / "pyroscope" / "config.alloy"
FLEET_DOC = TOP / "docs" / "fleet.md"

# the metrics pmd exports, as agreed for issue 29 (docs/fleet.md's table)
PROCESS_METRICS = frozenset({
    "pmm_process_rss_bytes", "pmm_process_vm_bytes",
    "pmm_process_heap_live_bytes", "pmm_process_heap_live_blocks",
    "pmm_process_verdict",
    "pmm_process_rss_growth_bytes_per_second",
    "pmm_process_rss_growth_low_bytes_per_second",
    "pmm_process_rss_growth_high_bytes_per_second",
    "pmm_process_exhaustion_seconds", "pmm_process_start_time_seconds",
    "pmm_process_unreachable_bytes", "pmm_process_alert",
    "pmm_process_rss_anon_bytes", "pmm_process_rss_file_bytes", "pmm_process_rss_shmem_bytes",
    "pmm_process_heap_free_bytes", "pmm_process_anon_other_bytes", "pmm_process_growth_kind",
})
MODULE_METRICS = frozenset({
    "pmm_module_loaded", "pmm_module_monitored_processes",
    "pmm_module_records_accepted_total", "pmm_module_records_dropped_total",
    "pmm_module_unmatched_frees_total", "pmm_module_older_frees_total",
    "pmm_module_kernel_memory_bytes", "pmm_module_records_queued",
})
PMD_METRICS = frozenset({
    "pmm_pmd_up", "pmm_pmd_events_total", "pmm_pmd_malformed_events_total",
    "pmm_pmd_failed_events_total", "pmm_pmd_lost_events_total",
    "pmm_pmd_module_connected", "pmm_pmd_samples_written_total",
    "pmm_pmd_pending_rows", "pmm_pmd_dropped_rows_total", "pmm_pmd_write_failures",
    "pmm_pmd_last_commit_timestamp_seconds", "pmm_pmd_harvests_total",
    "pmm_pmd_harvest_failures_total", "pmm_pmd_processes",
})
AGREED_METRICS = PROCESS_METRICS | MODULE_METRICS | PMD_METRICS
# prometheus_client's own metrics of pmd's process
CLIENT_PROCESS_METRICS = frozenset({
    "process_cpu_seconds_total", "process_resident_memory_bytes",
    "process_virtual_memory_bytes", "process_start_time_seconds",
    "process_open_fds", "process_max_fds",
})
# Prometheus's own series, and node_exporter's textfile collector's mtime
# (how a stale pmd textfile shows)
OTHER_METRICS = frozenset({"up", "node_textfile_mtime_seconds"})

ALERTS = frozenset({
    "PmmProcessLeaking", "PmmMemoryExhaustedWithinAnHour", "PmmModuleDroppingRecords",
    "PmmPmdDown", "PmmPmdAbsent", "PmmTextfileStale", "PmmPmdWriteFailing",
    "PmmPmdDroppingRows", "PmmPmdLosingEvents", "PmmModuleNotConnected",
})

# what Grafana puts in place of the dashboard's variables
DASHBOARD_VARIABLES = {"$__rate_interval": "1m", "$instance": ".*", "$process": ".*"}

PROMQL_KEYWORDS = frozenset({
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
    "group_right", "bool", "offset", "inf", "nan",
})


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (not its functions,
    keywords, labels, label values or durations)."""
    text = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)   # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery durations
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for m in re.finditer(r"(?<![\w:.])([A-Za-z_:][\w:]*)(\s*\()?", text):
        if m.group(2) is None and m.group(1) not in PROMQL_KEYWORDS:
            names.add(m.group(1))
    return names


def recording_rule_names(groups: list[dict[str, Any]]) -> set[str]:
    return {r["name"] for g in groups for r in g["rules"] if r["type"] == "recording"}


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel that shows data (rows' nested panels too, rows themselves not)."""
    out: list[dict[str, Any]] = []
    for p in board["panels"]:
        if p["type"] == "row":
            out.extend(p.get("panels", []))
        else:
            out.append(p)
    return out


def dashboard_expressions(board: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard: its panels' targets and, from
    the template variables' label_values(SELECTOR, label), the selector."""
    exprs = [t["expr"] for p in panels(board) for t in p["targets"]]
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = re.fullmatch(r"label_values\((.*),\s*\w+\)", query)
            assert m, query
            exprs.append(m.group(1))
    return exprs


def with_variables(expr: str) -> str:
    for name, value in DASHBOARD_VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60,
                          cwd=TOP)


def start_prometheus(config: Path, storage: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A real Prometheus on a free localhost port, ready; its log in storage/log."""
    port = free_port()
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={storage / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=(storage / "log").open("w"))
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError((storage / "log").read_text())
        try:
            with urllib.request.urlopen(f"{base}/-/ready", timeout=1) as resp:
                if resp.status == 200:
                    return proc, base
        except OSError:
            pass
        time.sleep(0.1)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


class Prometheus:
    def __init__(self, base: str, fleet_time: int) -> None:
        self.base = base
        self.fleet_time = fleet_time  # a moment inside the backfilled fleet

    def query(self, expr: str, at: int | None = None) -> tuple[int, Any]:
        params = {"query": expr} | ({"time": str(at)} if at is not None else {})
        return get(f"{self.base}/api/v1/query?" + urllib.parse.urlencode(params))

    def fleet_query(self, expr: str) -> list[dict[str, Any]]:
        """The samples of expr at the fleet's moment."""
        status, body = self.query(expr, self.fleet_time)
        assert status == 200 and body["status"] == "success", (expr, body)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def rule_groups(self) -> list[dict[str, Any]]:
        status, body = get(f"{self.base}/api/v1/rules")
        assert status == 200, body
        groups: list[dict[str, Any]] = body["data"]["groups"]
        return groups


# A host's half hour as pmd exports it: comm -> (pid, verdict, growth in B/s,
# seconds to exhaustion)
FLEET = {
    "leaky": ("100", "leak", 4096.0, 1800.0),
    "grower": ("200", "growing", 1024.0, 7200.0),
    "healthy": ("300", "stable", 0.0, None),
    "newbie": ("400", "not_enough_data", None, None),
}
VERDICTS = ("leak", "growing", "stable", "not_enough_data")
FLEET_STEP = 15
FLEET_SAMPLES = 121


def fleet_openmetrics(start: int) -> str:
    """FLEET as OpenMetrics text with timestamps, for promtool's backfill."""
    host = 'instance="web1:9466",job="pmd"'
    series: list[tuple[str, Any]] = []  # (name{labels}, value at sample i)
    for comm, (pid, verdict, growth, exhaustion) in FLEET.items():
        proc = f'{host},pid="{pid}",comm="{comm}",start_time="{pid}000"'
        if comm == "leaky":
            proc += ',unit="leaky.service"'
        rate = growth or 0.0
        series += [
            (f"pmm_process_rss_bytes{{{proc}}}", lambda i, r=rate: 50e6 + r * FLEET_STEP * i),
            (f"pmm_process_vm_bytes{{{proc}}}", lambda i: 200e6),
            (f"pmm_process_heap_live_bytes{{{proc}}}", lambda i, r=rate: 1e6 + r * FLEET_STEP * i),
            (f"pmm_process_heap_live_blocks{{{proc}}}", lambda i: 1000 + i),
            (f"pmm_process_start_time_seconds{{{proc}}}", lambda i: start - 600),
        ]
        series += [(f'pmm_process_verdict{{{proc},verdict="{v}"}}',
                    lambda i, one=(v == verdict): int(one)) for v in VERDICTS]
        if growth is not None:
            series += [
                (f"pmm_process_rss_growth_bytes_per_second{{{proc}}}", lambda i, g=growth: g),
                (f"pmm_process_rss_growth_low_bytes_per_second{{{proc}}}",
                 lambda i, g=growth: g * 0.8),
                (f"pmm_process_rss_growth_high_bytes_per_second{{{proc}}}",
                 lambda i, g=growth: g * 1.2 + 10),
            ]
        if exhaustion is not None:
            series.append((f"pmm_process_exhaustion_seconds{{{proc}}}",
                           lambda i, e=exhaustion: e))
    gauges: dict[str, float] = {
        name: 1 for name in ("pmm_pmd_up", "pmm_pmd_module_connected", "pmm_module_loaded", "up")}
    gauges |= {"pmm_module_monitored_processes": 4, "pmm_module_kernel_memory_bytes": 4e6,
               "pmm_module_records_queued": 3, "pmm_pmd_pending_rows": 10,
               "pmm_pmd_write_failures": 0, "pmm_pmd_processes": 4,
               "process_resident_memory_bytes": 30e6}
    series += [(f"{name}{{{host}}}", lambda i, v=v: v) for name, v in gauges.items()]
    series.append((f"pmm_pmd_last_commit_timestamp_seconds{{{host}}}",
                   lambda i: start + FLEET_STEP * i))
    counters = [n for n in AGREED_METRICS if n.endswith("_total")]
    counters.append("process_cpu_seconds_total")
    series += [(f"{name}{{{host}}}", lambda i: 10 * i) for name in sorted(counters)]
    lines = [f"{s} {value(i)} {start + FLEET_STEP * i}"
             for s, value in series for i in range(FLEET_SAMPLES)]
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A real Prometheus running the example config (and so its rule file),
    its storage holding FLEET's half hour, backfilled by promtool."""
    storage = tmp_path_factory.mktemp("prometheus")
    fleet_start = int(time.time()) - 3600
    (storage / "fleet.om").write_text(fleet_openmetrics(fleet_start))
    r = promtool("tsdb", "create-blocks-from", "openmetrics", str(storage / "fleet.om"),
                 str(storage / "data"))
    assert r.returncode == 0, r.stdout + r.stderr
    proc, base = start_prometheus(CONFIG, storage)
    try:
        yield Prometheus(base, fleet_start + FLEET_STEP * (FLEET_SAMPLES - 1))
    finally:
        stop(proc)
        shutil.rmtree(storage, ignore_errors=True)


def test_promtool_checks_the_rules() -> None:
    r = promtool("check", "rules", str(RULES))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: 11 rules found" in r.stdout


def test_promtool_unit_tests_of_the_rules_pass() -> None:
    """Each alert firing and not firing (pmm-alerts.test.yml)."""
    r = promtool("test", "rules", str(RULE_TESTS))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_every_alert_is_unit_tested() -> None:
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert tested == ALERTS


def test_the_unit_tests_fail_on_a_wrong_rule(tmp_path: Path) -> None:
    """The unit tests can fail: with the leak alert's `for:` cut to a minute,
    the case of a leak that has not lasted `for:` yet fails."""
    text = RULES.read_text()
    assert text.count("for: 10m") >= 1
    (tmp_path / "pmm-alerts.yml").write_text(text.replace("for: 10m", "for: 1m", 1))
    shutil.copy(RULE_TESTS, tmp_path / "pmm-alerts.test.yml")
    r = promtool("test", "rules", str(tmp_path / "pmm-alerts.test.yml"))
    assert r.returncode != 0
    assert "alertname: PmmProcessLeaking, time: 5m" in r.stdout + r.stderr


def test_promtool_checks_the_scrape_config() -> None:
    """The example config is valid and its rule_files path resolves."""
    r = promtool("check", "config", str(CONFIG))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: 1 rule files found" in r.stdout


def test_prometheus_loads_every_rule(prometheus: Prometheus) -> None:
    groups = prometheus.rule_groups()
    rules = [r for g in groups for r in g["rules"]]
    alerts = {r["name"]: r for r in rules if r["type"] == "alerting"}
    assert set(alerts) == ALERTS
    assert recording_rule_names(groups) == {"pmm:module_records_dropped:rate5m"}
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["duration"] > 0, name  # a `for:`
        assert {"summary", "description"} <= set(rule["annotations"]), name
        assert "$labels.instance" in rule["annotations"]["summary"] or name == "PmmPmdAbsent"
    # the per-process alerts say which process, and its unit where it has one
    for name in ("PmmProcessLeaking", "PmmMemoryExhaustedWithinAnHour"):
        text = " ".join(alerts[name]["annotations"].values())
        for label in ("$labels.pid", "$labels.comm", "$labels.unit"):
            assert label in text, (name, label)
        assert "$value | humanize" in text, name


def test_prometheus_accepts_every_rule_expression(prometheus: Prometheus) -> None:
    for group in prometheus.rule_groups():
        for rule in group["rules"]:
            status, body = prometheus.query(rule["query"])
            assert status == 200 and body["status"] == "success", (rule["name"], body)


def test_rule_expressions_name_only_exported_metrics(prometheus: Prometheus) -> None:
    groups = prometheus.rule_groups()
    allowed = AGREED_METRICS | OTHER_METRICS | recording_rule_names(groups)
    for group in groups:
        for rule in group["rules"]:
            names = metric_names(rule["query"])
            assert names, rule["query"]
            assert names <= allowed, (rule["name"], names - allowed)


def test_the_dashboard_is_importable() -> None:
    board = dashboard()
    assert 36 <= board["schemaVersion"] <= 41
    assert board["uid"] and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert {"instance", "process"} <= set(variables)
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for p in panels(board):
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"], p["title"]
            # every panel follows the host picker
            assert "$instance" in t["expr"], (p["title"], t["expr"])


def test_the_dashboard_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for p in dashboard()["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, (p["title"], cells.get((x, y)))
                cells[(x, y)] = p["title"]


def test_the_dashboard_shows_what_an_admin_needs() -> None:
    """rss, growth with its band, verdicts, time to exhaustion, live heap, the
    module's counters and pmd's health."""
    used = set().union(*(metric_names(e) for e in dashboard_expressions(dashboard())))
    assert {
        "pmm_process_rss_bytes", "pmm_process_verdict", "pmm_process_exhaustion_seconds",
        "pmm_process_rss_growth_bytes_per_second",
        "pmm_process_rss_growth_low_bytes_per_second",
        "pmm_process_rss_growth_high_bytes_per_second",
        "pmm_process_heap_live_bytes", "pmm_module_records_accepted_total",
        "pmm_module_records_dropped_total", "pmm_pmd_up", "pmm_pmd_write_failures",
        "pmm_pmd_lost_events_total",
    } <= used
    types = {p["type"] for p in panels(dashboard())}
    assert {"timeseries", "table", "state-timeline", "stat"} <= types


def test_dashboard_expressions_name_only_exported_metrics() -> None:
    allowed = AGREED_METRICS | CLIENT_PROCESS_METRICS | {"up"}
    for expr in dashboard_expressions(dashboard()):
        names = metric_names(expr)
        assert names, expr
        assert names <= allowed, (expr, names - allowed)


def test_prometheus_accepts_every_dashboard_expression(prometheus: Prometheus) -> None:
    exprs = dashboard_expressions(dashboard())
    assert len(exprs) > 20
    for expr in exprs:
        status, body = prometheus.query(with_variables(expr))
        assert status == 200 and body["status"] == "success", (expr, body)


def test_a_bad_expression_is_caught(prometheus: Prometheus) -> None:
    """The checks can fail: Prometheus refuses a parse error with 400, and a
    metric outside the agreed list is named."""
    status, body = prometheus.query('rate(pmm_pmd_events_total{instance=~".*"}[1m]')
    assert status == 400 and body["errorType"] == "bad_data"
    names = metric_names('sum by (comm) (rate(pmm_bogus_total{job="pmd"}[5m])) '
                         '/ on (instance) group_left pmm_pmd_up > 1e3')
    assert names == {"pmm_bogus_total", "pmm_pmd_up"}
    assert names - AGREED_METRICS == {"pmm_bogus_total"}


def test_the_fleet_doc_lists_every_metric() -> None:
    doc = FLEET_DOC.read_text()
    listed = set(re.findall(r"^\| `(pmm_\w+)`", doc, re.M))
    assert listed == AGREED_METRICS


def panel_by_title(title: str) -> dict[str, Any]:
    (found,) = [p for p in panels(dashboard()) if p["title"] == title]
    return found


def test_every_dashboard_query_shows_the_fleet(prometheus: Prometheus) -> None:
    """On a host's half hour of pmd's metrics, every panel's query and every
    picker's selector returns series (its metric and label names are the ones
    pmd exports)."""
    for expr in dashboard_expressions(dashboard()):
        assert prometheus.fleet_query(with_variables(expr)), expr


def test_the_verdict_timeline_shows_each_verdict(prometheus: Prometheus) -> None:
    (target,) = panel_by_title("Verdict over time")["targets"]
    result = prometheus.fleet_query(with_variables(target["expr"]))
    codes = {s["metric"]["comm"]: s["value"][1] for s in result}
    assert codes == {"leaky": "3", "grower": "2", "healthy": "1", "newbie": "0"}
    mappings = panel_by_title("Verdict over time")["fieldConfig"]["defaults"]["mappings"]
    texts = {code: m["text"] for code, m in mappings[0]["options"].items()}
    assert texts == {"3": "leak", "2": "growing", "1": "stable", "0": "not enough data"}


def test_the_verdicts_table_has_a_row_per_process(prometheus: Prometheus) -> None:
    (target,) = panel_by_title("Verdicts")["targets"]
    result = prometheus.fleet_query(with_variables(target["expr"]))
    assert {s["metric"]["comm"]: s["metric"]["verdict"] for s in result} == {
        comm: verdict for comm, (_, verdict, _, _) in FLEET.items()}


def test_the_exhaustion_table_lists_the_soonest_first(prometheus: Prometheus) -> None:
    (target,) = panel_by_title("Time to memory exhaustion")["targets"]
    result = prometheus.fleet_query(with_variables(target["expr"]))
    assert [(s["metric"]["comm"], s["value"][1]) for s in result] == [
        ("leaky", "1800"), ("grower", "7200")]


def test_the_growth_band_surrounds_the_growth(prometheus: Prometheus) -> None:
    growth, low, high = (prometheus.fleet_query(with_variables(t["expr"]))
                         for t in panel_by_title(
                             "Growth of the memory floor, with its 95% interval")["targets"])
    for comm in ("leaky", "grower", "healthy"):
        def value(result: list[dict[str, Any]], comm: str = comm) -> float:
            (v,) = [float(s["value"][1]) for s in result if s["metric"]["comm"] == comm]
            return v
        assert value(low) <= value(growth) < value(high), comm


def test_the_process_picker_filters(prometheus: Prometheus) -> None:
    (target,) = panel_by_title("Resident memory (rss)")["targets"]
    expr = target["expr"].replace("$process", "leaky|healthy")
    result = prometheus.fleet_query(with_variables(expr))
    assert sorted(s["metric"]["comm"] for s in result) == ["healthy", "leaky"]


def test_the_leak_alert_on_the_fleet(prometheus: Prometheus) -> None:
    """The leak alert's expression picks the leaking process only, valued at
    its growth rate."""
    (rule,) = [r for g in prometheus.rule_groups() for r in g["rules"]
               if r["name"] == "PmmProcessLeaking"]
    result = prometheus.fleet_query(rule["query"])
    assert [(s["metric"]["comm"], s["metric"]["unit"], s["value"][1]) for s in result] == [
        ("leaky", "leaky.service", "4096")]


def profile_source(path: Path, url_pattern: str, path_pattern: str) -> tuple[str, str]:
    """(discovery url, profile path) as an example file gives them."""
    text = path.read_text()
    url = re.search(url_pattern, text, re.M)
    profile = re.search(path_pattern, text, re.M)
    assert url and profile, path
    return url.group(1), profile.group(1)


def test_parca_and_alloy_examples_agree() -> None:
    parca = profile_source(PARCA, r"^\s+- url: (\S+)$", r"^\s+path: (\S+)$")
    alloy = profile_source(ALLOY, r'^\s+url\s+= "(http://\S+/debug/pprof/targets)"$',
                           r'^\s+path = "(\S+)"$')
    assert parca == alloy == ("http://127.0.0.1:9466/debug/pprof/targets", "/debug/pprof/heap")
    # the Go profile types both enable by default are off
    assert PARCA.read_text().count("enabled: false") == 4
    assert ALLOY.read_text().count("enabled = false") == 4


def test_discovery_from_a_real_pmd_gives_one_heap_url_per_process(
        tmp_path: Path) -> None:
    """A real Prometheus, discovering targets from pmd's endpoint as the Parca
    and Alloy examples do (the same service discovery and __param_ handling),
    scrapes /debug/pprof/heap?pid=N for the process whose heap pmd tracks
    (without the kernel module here, the endpoint is given that process as
    the loop would publish it, and answers that URL 503: a process it knows,
    no module). A real pmd lists no target for a process it samples from
    /proc only (no profile), and its /metrics names only metrics of the
    agreed list."""
    from pmm.daemon.metrics import Exporter, ProcessFigures, Snapshot
    from pmm.kernel.sampler import read_stat

    discovery_url, profile_path = profile_source(PARCA, r"^\s+- url: (\S+)$",
                                                 r"^\s+path: (\S+)$")
    port = free_port()
    sleeper = subprocess.Popen(["sleep", "60"])
    pmd_log = (tmp_path / "pmd.log").open("w")
    pmd = subprocess.Popen(
        [sys.executable, "-m", "pmd.main", "--no-genl", "--db", str(tmp_path / "pmm.db"),
         "--pid", str(sleeper.pid), "--metrics", f"127.0.0.1:{port}"],
        stderr=pmd_log, cwd=TOP, env=dict(os.environ, PMM_DEVICE=str(tmp_path / "no-device")))
    config = tmp_path / "prometheus.yml"
    # JSON is YAML
    ex = Exporter(address=("127.0.0.1", 0))
    assert ex.server is not None
    start = read_stat(sleeper.pid).start_time
    tracked = Snapshot((ProcessFigures(pid=sleeper.pid, start_time=start, comm="sleep",
                                       unit="", start_unix=0.0, rss=4096, vm=8192,
                                       live_bytes=4096, live_blocks=1),))
    ex.server.snapshot = lambda: tracked
    ex.start()
    config.write_text(json.dumps({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{
            "job_name": "heap", "metrics_path": profile_path,
            "http_sd_configs": [{"url": discovery_url.replace(":9466", f":{ex.server.port}"),
                                 "refresh_interval": "1s"}]}]}))
    proc = None
    try:
        proc, base = start_prometheus(config, tmp_path)
        deadline = time.monotonic() + 30
        while True:
            status, body = get(f"{base}/api/v1/targets?state=active")
            assert status == 200, body
            scraped = [t for t in body["data"]["activeTargets"] if t["health"] != "unknown"]
            if scraped:
                break
            assert time.monotonic() < deadline, ((tmp_path / "pmd.log").read_text(), body)
            time.sleep(0.2)
        (target,) = scraped
        assert target["scrapeUrl"] == (
            f"http://127.0.0.1:{ex.server.port}/debug/pprof/heap?pid={sleeper.pid}")
        labels = target["labels"]
        assert (labels["pid"], labels["comm"]) == (str(sleeper.pid), "sleep")
        assert labels["start_time"].isdigit()
        assert "503" in target["lastError"], target["lastError"]
        # the real pmd samples the sleeper from /proc: no profile, no target
        for _ in range(100):
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/debug/pprof/targets",
                                            timeout=10) as r:
                    assert json.loads(r.read()) == []
                    break
            time.sleep(0.1)
        else:
            raise AssertionError((tmp_path / "pmd.log").read_text())
        # and what it serves at /metrics is named as the rules and dashboard expect
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            exposition = r.read().decode()
        served = {sample.name for family in text_string_to_metric_families(exposition)
                  for sample in family.samples}
        assert {n for n in served if n.startswith("pmm_")} <= AGREED_METRICS
        assert {"pmm_process_rss_bytes", "pmm_process_verdict", "pmm_pmd_up",
                "pmm_pmd_lost_events_total", "pmm_module_loaded"} <= served
        assert {"process_cpu_seconds_total", "process_resident_memory_bytes"} <= served
    finally:
        if proc is not None:
            stop(proc)
        ex.close()
        pmd.send_signal(signal.SIGTERM)
        assert pmd.wait(timeout=30) == 0, (tmp_path / "pmd.log").read_text()
        pmd_log.close()
        sleeper.kill()
        sleeper.wait()
