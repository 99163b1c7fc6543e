"""pmd's metrics endpoint without the module: a real Prometheus scrapes pmd
while a leaking and a healthy program run and finds the leak verdict, the
growth and the leak alert for the leaker only; the exposition's names,
labels and state set; OpenMetrics on request; the node_exporter textfile
(atomic, and what pmd leaves at exit); bad --metrics values; who may read a
heap profile (403 for user nobody); the service discovery JSON."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pwd
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from as_user import as_user
from prometheus_client.parser import text_string_to_metric_families

from pmm.analysis.samplesource import mem_available
from pmm.daemon import metrics
from pmm.daemon.metrics import Exporter, ProcessFigures, Snapshot, profiles, routes
from pmm.daemon.metrics.access import peer_uid, process_owner
from pmm.daemon.metrics.profiles import ProfileError, heap_profile, targets
from pmm.daemon.metrics.routes import _Handler
from pmm.daemon.metrics.server import MAX_CONNECTIONS
from pmm.kernel.model import ConfigInfo
from pmm.kernel.sampler import read_stat

TOP = Path(__file__).resolve().parents[2]
RULES = TOP / "examples" / "prometheus" / "pmm-alerts.yml"
NOBODY = pwd.getpwnam("nobody")

PROCESS_METRICS = {
    "pmm_process_rss_bytes", "pmm_process_vm_bytes", "pmm_process_heap_live_bytes",
    "pmm_process_heap_live_blocks", "pmm_process_verdict",
    "pmm_process_rss_growth_bytes_per_second", "pmm_process_rss_growth_low_bytes_per_second",
    "pmm_process_rss_growth_high_bytes_per_second", "pmm_process_exhaustion_seconds",
    "pmm_process_start_time_seconds", "pmm_process_unreachable_bytes", "pmm_process_alert",
    "pmm_process_rss_anon_bytes", "pmm_process_rss_file_bytes", "pmm_process_rss_shmem_bytes",
    "pmm_process_heap_free_bytes", "pmm_process_anon_other_bytes", "pmm_process_growth_kind"}
MODULE_METRICS = {
    "pmm_module_monitored_processes", "pmm_module_records_accepted_total",
    "pmm_module_records_dropped_total", "pmm_module_unmatched_frees_total",
    "pmm_module_older_frees_total", "pmm_module_kernel_memory_bytes",
    "pmm_module_records_queued"}
PMD_METRICS = {
    "pmm_pmd_up", "pmm_pmd_events_total", "pmm_pmd_malformed_events_total",
    "pmm_pmd_failed_events_total", "pmm_pmd_lost_events_total", "pmm_pmd_module_connected",
    "pmm_pmd_samples_written_total", "pmm_pmd_pending_rows", "pmm_pmd_dropped_rows_total",
    "pmm_pmd_write_failures", "pmm_pmd_last_commit_timestamp_seconds",
    "pmm_pmd_harvests_total", "pmm_pmd_harvest_failures_total", "pmm_pmd_processes"}

# rss grows 256 KiB (written, so resident) every 50 ms
LEAKER = ("import time\nkept = []\nprint('ready', flush=True)\nwhile True:\n"
          "    kept.append(bytes(range(256)) * 1024)\n    time.sleep(0.05)\n")


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Each sample name's (labels, value) pairs, as Prometheus's parser reads them."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def wait_for(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out: {what}")


class Pmd:
    """pmd --no-genl with --metrics on a free port; its log in a file."""

    def __init__(self, tmp: Path, pids: list[int], *args: str) -> None:
        self.log = tmp / "pmd.log"
        self.f = open(self.log, "w")  # noqa: SIM115
        pid_args = [a for p in pids for a in ("--pid", str(p))]
        self.p = subprocess.Popen(
            [sys.executable, "-m", "pmd.main", "--no-genl", "--db", str(tmp / "pmm.db"),
             "--interval", "50ms", "--detect-every", "10", "--window", "60", "--min-span", "0",
             *pid_args,
             *args], stderr=self.f, cwd=TOP, env=dict(os.environ, PMM_DEVICE=str(tmp / "no")))
        self.url = ""

    def text(self) -> str:
        return self.log.read_text()

    def wait_url(self) -> str:
        m = wait_for(lambda: re.search(r"metrics on (http://\S+)/metrics", self.text())
                     or self.p.poll() is not None, 30, "pmd's endpoint")
        assert m is not True, self.text()
        self.url = m.group(1)
        return self.url

    def stop(self) -> int:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(timeout=30)
        self.f.close()
        return rc


@pytest.fixture()
def programs() -> Iterator[tuple[int, int]]:
    """(leaker's pid, healthy program's pid)."""
    leak = subprocess.Popen([sys.executable, "-c", LEAKER], stdout=subprocess.PIPE, text=True)
    healthy = subprocess.Popen(["sleep", "300"])
    try:
        assert leak.stdout is not None and leak.stdout.readline() == "ready\n"
        yield leak.pid, healthy.pid
    finally:
        for p in (leak, healthy):
            p.kill()
            p.wait()


def get(url: str, headers: dict[str, str] | None = None, method: str = "GET",
        ) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- a real Prometheus -------------------------------------------------------------


@contextlib.contextmanager
def prometheus(tmp: Path, target: str) -> Iterator[str]:
    port = free_port()
    rules = f"rule_files: [{json.dumps(str(RULES))}]\n" if RULES.exists() else ""
    (tmp / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n" + rules +
        f"scrape_configs:\n  - job_name: pmd\n    static_configs: [{{targets: ['{target}']}}]\n")
    log = open(tmp / "prometheus.log", "w")  # noqa: SIM115
    p = subprocess.Popen(["prometheus", f"--config.file={tmp / 'prometheus.yml'}",
                          f"--storage.tsdb.path={tmp / 'tsdb'}",
                          f"--web.listen-address=127.0.0.1:{port}"],
                         stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            assert p.poll() is None, (tmp / "prometheus.log").read_text()
            with contextlib.suppress(OSError):
                return get(f"{base}/-/ready")[0] == 200
            return False
        wait_for(ready, 60, "Prometheus ready")
        yield base
    finally:
        p.terminate()
        p.wait(timeout=30)
        log.close()


def query(base: str, q: str) -> list[dict[str, Any]]:
    status, _, body = get(f"{base}/api/v1/query?query={urllib.parse.quote(q)}")
    assert status == 200, body
    result: list[dict[str, Any]] = json.loads(body)["data"]["result"]
    return result


def pids_of(result: list[dict[str, Any]]) -> set[str]:
    return {r["metric"]["pid"] for r in result}


def test_prometheus_finds_the_leak_for_the_leaker_only(
        tmp_path: Path, programs: tuple[int, int]) -> None:
    leaker, healthy = programs
    pmd = Pmd(tmp_path, [leaker, healthy], "--metrics", "127.0.0.1:0")
    try:
        target = pmd.wait_url().removeprefix("http://")
        with prometheus(tmp_path, target) as base:
            wait_for(lambda: pids_of(query(base, 'pmm_process_verdict{verdict="leak"} == 1')),
                     60, f"a leak verdict in Prometheus; pmd: {pmd.text()}")
            assert pids_of(query(base, 'pmm_process_verdict{verdict="leak"} == 1')) == \
                {str(leaker)}
            assert pids_of(query(base, "pmm_process_rss_growth_bytes_per_second > 0")) == \
                {str(leaker)}
            # seconds of a sleeper's unmoving rss rule nothing out: inconclusive
            assert pids_of(query(base, 'pmm_process_verdict{verdict="inconclusive"} == 1')) \
                == {str(healthy)}
            assert pids_of(query(base, "pmm_process_exhaustion_seconds > 0")) == {str(leaker)}
            up = query(base, "pmm_pmd_up")
            assert [r["value"][1] for r in up] == ["1"]
            if RULES.exists():
                def leak_alerts() -> list[dict[str, Any]]:
                    body = json.loads(get(f"{base}/api/v1/alerts")[2])
                    return [a for a in body["data"]["alerts"]
                            if a["labels"]["alertname"] == "PmmProcessLeaking"]
                alerts = wait_for(leak_alerts, 30, "the leak alert")
                assert {a["labels"]["pid"] for a in alerts} == {str(leaker)}
                assert {a["state"] for a in alerts} <= {"pending", "firing"}
    finally:
        assert pmd.stop() == 0, pmd.text()


# -- the exposition ----------------------------------------------------------------


def figures(pid: int, verdict: str, slope: float | None, live: int | None) -> ProcessFigures:
    return ProcessFigures(pid=pid, start_time=pid * 10_000_000, comm=f"prog{pid}",
                          unit="app.service" if live else "", start_unix=1.7e9 + pid,
                          rss=pid * 4096, vm=pid * 8192, live_bytes=live,
                          live_blocks=live and live // 16, verdict=verdict, slope=slope,
                          slope_low=slope and slope / 2, slope_high=slope and slope * 2,
                          lost_bytes=560 if verdict == "LEAK" else None,
                          indirect_bytes=1280 if verdict == "LEAK" else None,
                          rss_anon=(10 << 20) if verdict else None,
                          rss_file=(1 << 20) if verdict else None,
                          rss_shmem=4096 if verdict else None,
                          heap_free=(3 << 20) if live else None,
                          kind="RETENTION" if verdict == "LEAK" else "")


CONFIG = ConfigInfo(interval_ms=1000, scan=0, start_pid=0, stop_pid=0, max_pids=64,
                    max_blocks_per_pid=1, max_sites_per_pid=1, max_samples_per_pid=1,
                    max_pids_per_uid=1, exited_ttl_s=1, abi_version=3, monitored_pids=2,
                    records_accepted=1001, records_dropped=3, unmatched_frees=4,
                    kmem_bytes=65536, records_queued=5, older_frees=6)


def exposition(snap: Snapshot, read_config: Callable[[], ConfigInfo] | None) -> str:
    from prometheus_client import generate_latest

    ex = Exporter(read_config=read_config)
    ex.publish(snap)
    return generate_latest(ex.registry).decode()


def test_exposition_names_labels_and_state_set(monkeypatch: pytest.MonkeyPatch) -> None:
    snap = Snapshot((figures(11, "LEAK", 2048.0, 4096), figures(12, "STABLE", 0.0, None),
                     figures(13, "", None, None)))
    text = exposition(snap, lambda: CONFIG)
    got = samples(text)
    pmm_names = {n for n in got if n.startswith("pmm_")}
    assert pmm_names == (PROCESS_METRICS | MODULE_METRICS | PMD_METRICS | {"pmm_module_loaded"})
    assert "process_resident_memory_bytes" in got  # pmd's own, from prometheus_client
    # the last scan's lost bytes: of the process pmd scanned at its LEAK alone
    assert sorted((lab["pid"], lab["kind"], v) for lab, v in
                  got["pmm_process_unreachable_bytes"]) == \
        [("11", "definite", 560.0), ("11", "indirect", 1280.0)]
    rss = {lab["pid"]: (lab, v) for lab, v in got["pmm_process_rss_bytes"]}
    assert rss["11"] == ({"pid": "11", "comm": "prog11", "start_time": "110000000",
                          "unit": "app.service"}, 11 * 4096)
    assert rss["12"][0]["unit"] == ""
    # the state set: one verdict at 1 per process, every verdict listed
    by_pid: dict[str, dict[str, float]] = {}
    for lab, v in got["pmm_process_verdict"]:
        by_pid.setdefault(lab["pid"], {})[lab["verdict"]] = v
    assert by_pid == {
        "11": {"leak": 1, "growing": 0, "stable": 0, "inconclusive": 0, "not_enough_data": 0},
        "12": {"leak": 0, "growing": 0, "stable": 1, "inconclusive": 0, "not_enough_data": 0},
        "13": {"leak": 0, "growing": 0, "stable": 0, "inconclusive": 0, "not_enough_data": 1}}
    # live heap only where the module tracks it; growth only once detected
    assert [lab["pid"] for lab, _ in got["pmm_process_heap_live_bytes"]] == ["11"]
    assert got["pmm_process_heap_live_blocks"][0][1] == 256
    assert {lab["pid"]: v for lab, v in got["pmm_process_rss_growth_bytes_per_second"]} == \
        {"11": 2048.0, "12": 0.0}
    assert got["pmm_process_rss_growth_low_bytes_per_second"][0][1] == 1024.0
    assert got["pmm_process_rss_growth_high_bytes_per_second"][0][1] == 4096.0
    # exhaustion: MemAvailable / slope, for the leak only
    [(lab, left)] = got["pmm_process_exhaustion_seconds"]
    avail = mem_available()
    assert lab["pid"] == "11" and avail is not None
    assert abs(left * 2048.0 - avail) / avail < 0.1
    assert got["pmm_process_start_time_seconds"][0][1] == 1.7e9 + 11
    # the split: anon, file and shmem where sampled; the allocator's free
    # bytes and the rest of anon only where the heap is known
    assert {lab["pid"]: v for lab, v in got["pmm_process_rss_anon_bytes"]} == \
        {"11": 10 << 20, "12": 10 << 20}
    assert {lab["pid"]: v for lab, v in got["pmm_process_rss_file_bytes"]} == \
        {"11": 1 << 20, "12": 1 << 20}
    assert {lab["pid"]: v for lab, v in got["pmm_process_rss_shmem_bytes"]} == \
        {"11": 4096, "12": 4096}
    assert got["pmm_process_heap_free_bytes"] == [(rss["11"][0], 3 << 20)]
    assert got["pmm_process_anon_other_bytes"] == [(rss["11"][0], (10 << 20) - 4096 - (3 << 20))]
    kinds: dict[str, dict[str, float]] = {}
    for lab, v in got["pmm_process_growth_kind"]:
        kinds.setdefault(lab["pid"], {})[lab["kind"]] = v
    assert {pid: [k for k, v in ks.items() if v] for pid, ks in kinds.items()} == \
        {"11": ["retention"], "12": ["none"], "13": ["none"]}
    assert len(kinds["11"]) == 8
    assert got["pmm_module_loaded"] == [({}, 1.0)]
    assert got["pmm_module_records_accepted_total"] == [({}, 1001.0)]
    assert got["pmm_module_older_frees_total"] == [({}, 6.0)]
    assert got["pmm_module_kernel_memory_bytes"] == [({}, 65536.0)]
    assert got["pmm_pmd_processes"] == [({}, 3.0)]
    assert got["pmm_pmd_up"] == [({}, 1.0)]


def test_module_not_loaded_leaves_its_metrics_out(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PMM_DEVICE", str(tmp_path / "pmm"))  # no such device
    got = samples(exposition(Snapshot(), None))
    assert got["pmm_module_loaded"] == [({}, 0.0)]
    assert not [n for n in got if n.startswith("pmm_module_") and n != "pmm_module_loaded"]


def test_endpoint_negotiates_targets_and_refuses(tmp_path: Path,
                                                programs: tuple[int, int]) -> None:
    leaker, healthy = programs
    pmd = Pmd(tmp_path, [leaker, healthy], "--metrics", "127.0.0.1:0")
    try:
        url = pmd.wait_url()
        host = url.removeprefix("http://")
        wait_for(lambda: len(samples(get(f"{url}/metrics")[2].decode())
                             .get("pmm_process_rss_bytes", [])) == 2, 20, "both processes")
        status, headers, body = get(f"{url}/metrics")
        assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
        status, headers, body = get(f"{url}/metrics", {
            "Accept": "application/openmetrics-text; version=1.0.0; charset=utf-8"})
        assert headers["Content-Type"].startswith("application/openmetrics-text")
        assert body.endswith(b"# EOF\n") and b"pmm_process_verdict{" in body
        status, headers, body = get(f"{url}/debug/pprof/targets")
        assert status == 200 and headers["Content-Type"] == "application/json"
        # sampled from /proc, no hook in them: no heap profile, so no target
        assert json.loads(body) == [], host
        assert get(f"{url}/nothing")[0] == 404
        assert get(f"{url}/metrics", method="POST")[0] == 405
        # the profile: 400 without a pid, 404 for one pmd does not watch, 503 for
        # root (allowed) with no module, 403 for user nobody
        assert get(f"{url}/debug/pprof/heap")[0] == 400
        assert get(f"{url}/debug/pprof/heap?pid=x")[0] == 400
        assert get(f"{url}/debug/pprof/heap?pid=1")[0] == 404
        status, _, body = get(f"{url}/debug/pprof/heap?pid={healthy}")
        assert status == 503 and b"not loaded" in body
        status, body_text = as_nobody_get(f"{url}/debug/pprof/heap?pid={healthy}")
        assert status == 403, body_text
        assert "--pprof-allow-user" in body_text and body_text.count("\n") == 1
        # /metrics is open to anyone who can connect
        assert as_nobody_get(f"{url}/metrics")[0] == 200
    finally:
        assert pmd.stop() == 0, pmd.text()


def as_nobody_get(url: str) -> tuple[int, str]:
    def fetch() -> list[Any]:
        status, _, body = get(url)
        return [status, body.decode(errors="replace")]
    out = as_user(NOBODY.pw_uid, NOBODY.pw_gid, fetch)
    return int(out[0]), str(out[1])


def test_profile_served_to_allowed_user_and_owner(tmp_path: Path) -> None:
    mine = subprocess.Popen(["setpriv", f"--reuid={NOBODY.pw_uid}",
                             f"--regid={NOBODY.pw_gid}", "--clear-groups", "sleep", "300"])
    roots = subprocess.Popen(["sleep", "300"])
    try:
        wait_for(lambda: process_owner(mine.pid) == NOBODY.pw_uid, 10, "setpriv")
        assert process_owner(roots.pid) is None  # root's: permitted capabilities
        pmd = Pmd(tmp_path, [mine.pid, roots.pid], "--metrics", "127.0.0.1:0")
        try:
            url = pmd.wait_url()
            wait_for(lambda: b"sleep" in get(f"{url}/metrics")[2], 20, "the processes")
            # the owner passes the check (503: no module here), root's is refused
            assert as_nobody_get(f"{url}/debug/pprof/heap?pid={mine.pid}")[0] == 503
            assert as_nobody_get(f"{url}/debug/pprof/heap?pid={roots.pid}")[0] == 403
        finally:
            assert pmd.stop() == 0
        pmd = Pmd(tmp_path, [roots.pid], "--metrics", "127.0.0.1:0",
                  "--pprof-allow-user", "nobody")
        try:
            url = pmd.wait_url()
            wait_for(lambda: b"sleep" in get(f"{url}/metrics")[2], 20, "the process")
            assert as_nobody_get(f"{url}/debug/pprof/heap?pid={roots.pid}")[0] == 503
        finally:
            assert pmd.stop() == 0
    finally:
        for p in (mine, roots):
            p.kill()
            p.wait()


def test_peer_uid_comes_from_the_socket_table() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        addr = srv.getsockname()
        seen: list[int | None] = []

        def accept() -> None:
            conn, peer = srv.accept()
            with conn:
                seen.append(peer_uid(conn.getsockname(), peer))
                conn.recv(1)

        t = threading.Thread(target=accept)
        t.start()

        def connect() -> bool:
            with socket.create_connection(addr) as c:
                time.sleep(0.3)
                c.send(b"x")
            return True

        assert as_user(NOBODY.pw_uid, NOBODY.pw_gid, connect) is True
        t.join()
    assert seen == [NOBODY.pw_uid]


# -- the textfile and the command line -----------------------------------------------


def test_textfile_atomic_and_left_at_exit(tmp_path: Path, programs: tuple[int, int]) -> None:
    _, healthy = programs
    prom = tmp_path / "pmd.prom"
    pmd = Pmd(tmp_path, [healthy], "--metrics-textfile", str(prom))
    try:
        wait_for(lambda: prom.exists(), 30, f"the textfile; pmd: {pmd.text()}")
        got = samples(prom.read_text())
        assert got["pmm_pmd_up"] == [({}, 1.0)]
        assert not [n for n in got if n.startswith("process_")]  # node_exporter has its own
    finally:
        assert pmd.stop() == 0, pmd.text()
    got = samples(prom.read_text())
    assert got["pmm_pmd_up"] == [({}, 0.0)]
    assert "pmm_process_rss_bytes" not in got
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("pmd.prom")) == \
        ["pmd.prom"]
    # a reader never sees part of a file: each write replaces it whole
    before = prom.read_text()
    ex = Exporter(textfile=prom)
    ex.publish(Snapshot(tuple(figures(i, "STABLE", 0.0, i) for i in range(1, 400))))
    stop = threading.Event()
    reads: list[str] = []

    def read() -> None:
        while not stop.is_set():
            reads.append(prom.read_text())

    t = threading.Thread(target=read)
    t.start()
    try:
        for _ in range(30):
            assert ex.write_textfile()
    finally:
        stop.set()
        t.join()
    full = prom.read_text()
    assert len(full) > 100_000 and len(reads) > 30
    assert all(r in (before, full) for r in reads)


@pytest.mark.parametrize("value", ["9466", "localhost", "127.0.0.1:65536", "127.0.0.1:x",
                                   "::1:9466", ":9466"])
def test_bad_metrics_address_is_a_usage_error(value: str) -> None:
    r = subprocess.run([sys.executable, "-m", "pmd.main", "--no-genl", "--pid", "1",
                        "--metrics", value], capture_output=True, text=True, cwd=TOP)
    assert r.returncode == 2, r
    assert r.stderr.startswith("pmd: --metrics: ") and r.stderr.count("\n") == 1, r.stderr


def test_port_in_use_and_unwritable_textfile_fail_at_start(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for args, says in (
                (["--metrics", f"127.0.0.1:{port}"], f"127.0.0.1:{port}: cannot listen: the "
                 "port is in use"),
                (["--metrics", "no-such-host.invalid:9466"], "no such address"),
                (["--metrics-textfile", str(tmp_path / "none" / "pmd.prom")],
                 "no such directory"),
                (["--metrics-textfile", "/proc/pmd.prom"], "cannot write in /proc")):
            r = subprocess.run([sys.executable, "-m", "pmd.main", "--no-genl", "--pid", "1",
                                "--db", str(tmp_path / "pmm.db"), *args],
                               capture_output=True, text=True, cwd=TOP, timeout=60)
            assert r.returncode == 1, r
            assert says in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "pmm.db").exists()  # said before the database was opened


def test_ready_once_before_the_loop_then_status(tmp_path: Path) -> None:
    from pmm.daemon import Daemon, Options
    from pmm.store import Store

    sleeper = subprocess.Popen(["sleep", "60"])
    store = Store.open(tmp_path / "pmm.db")
    try:
        d = Daemon(store, Options(db=tmp_path / "pmm.db", pids=[sleeper.pid], interval=0.05,
                                  genl=False))
        calls: list[tuple[str, str]] = []
        d.notify_ready = lambda: calls.append(("ready", f"{len(d.procs)} processes"))
        d.notify_status = lambda line: calls.append(("status", line))
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
        assert d.run() == 0
    finally:
        store.close()
        sleeper.kill()
        sleeper.wait()
    # ready before the first sample; a status line from the loop
    assert calls[0] == ("ready", "0 processes")
    assert calls[1] == ("status", "1 process, 0 leaking; module not connected; "
                        "0 samples written")
    assert [c for c, _ in calls].count("ready") == 1


# -- the endpoint's defences (review fixes) ---------------------------------------------


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_idle_connections_are_capped_and_dropped_at_the_deadline() -> None:
    ex = Exporter(address=("127.0.0.1", 0))
    assert ex.server is not None
    server = ex.server
    server.request_deadline = 1.0
    ex.start()
    url = f"http://{server.url_host()}"
    addr = ("127.0.0.1", int(server.server_address[1]))
    idle: list[socket.socket] = []
    try:
        before = fd_count()
        for _ in range(MAX_CONNECTIONS + 8):
            c = socket.create_connection(addr, timeout=5)
            idle.append(c)
        # one sends a byte now and then, under the old per-recv timeout
        idle[0].send(b"G")
        wait_for(lambda: server.active == MAX_CONNECTIONS, 5, "the cap reached")
        time.sleep(0.3)
        assert server.active == MAX_CONNECTIONS
        # 8 own sockets each side at most beyond the clients' + the cap's
        assert fd_count() - before <= len(idle) + MAX_CONNECTIONS + 4
        # the ones beyond the cap were closed at once
        refused = 0
        for c in idle:
            c.settimeout(0.05)
            try:
                if c.recv(1) == b"":
                    refused += 1
            except (TimeoutError, ConnectionResetError):
                pass
        assert refused >= 8
        idle[0].send(b"E")
        # past the deadline every idle one is dropped (the trickler too)
        start = time.monotonic()
        for c in idle:
            c.settimeout(5)
            with contextlib.suppress(ConnectionResetError):
                assert c.recv(1) == b""
        assert time.monotonic() - start < 3
        wait_for(lambda: server.active == 0, 5, "the slots freed")
        t0 = time.monotonic()
        status, _, body = get(f"{url}/metrics")
        assert status == 200 and b"pmm_pmd_up" in body
        assert time.monotonic() - t0 < 2
    finally:
        for c in idle:
            c.close()
        ex.close()


class FakeServer:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.allowed_uids: frozenset[int] = frozenset()
        self.profile_lock = threading.Lock()

    def snapshot(self) -> Snapshot:
        return self.snap


class FakeConn:
    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", 9466)


def fake_handler(snap: Snapshot, peer: str) -> tuple[Any, list[tuple[int, str]]]:
    """A _Handler without a socket: what it answers is recorded."""
    h: Any = _Handler.__new__(_Handler)
    h.server = FakeServer(snap)
    h.client_address = (peer, 40000)
    h.connection = FakeConn()
    sent: list[tuple[int, str]] = []
    h._text = lambda status, line, headers=None: sent.append((status, line))
    h._send = lambda status, body, ctype, headers=None: sent.append((status, "<profile>"))
    return h, sent


def own_figures(pid: int, start_time: int) -> Snapshot:
    return Snapshot((ProcessFigures(pid=pid, start_time=start_time, comm="x", unit="",
                                    start_unix=0.0, rss=0, vm=0, live_bytes=4096,
                                    live_blocks=1),))


def test_targets_are_the_processes_with_a_heap_profile() -> None:
    """/debug/pprof/targets lists the processes whose heap the module tracks
    (a profile to serve), not those pmd samples from /proc only, nor a
    monitored one without the hook (no live block)."""
    snap = Snapshot((figures(30, "LEAK", 1.0, 4096), figures(10, "STABLE", 0.0, None),
                     figures(20, "STABLE", 0.0, 0)))
    got = targets(snap, "h:1")
    assert got == [{"targets": ["h:1"], "labels": {
        "__param_pid": "30", "pid": "30", "comm": "prog30", "start_time": "300000000"}}]


def test_the_alert_state_is_1_while_it_stands() -> None:
    snap = Snapshot((dataclasses.replace(figures(3, "LEAK", 1.0, 4096), alert=True),
                     figures(4, "STABLE", 0.0, 4096)))
    got = samples(exposition(snap, None))
    assert sorted((d["pid"], v) for d, v in got["pmm_process_alert"]) == [("3", 1.0),
                                                                         ("4", 0.0)]


def test_remote_peer_refused_before_proc_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    def no(*_: object, **__: object) -> None:
        raise AssertionError("/proc read for a remote peer")

    for name in ("peer_uid", "process_owner", "live_start_time"):
        monkeypatch.setattr(routes, name, no)
    pid = os.getpid()
    h, sent = fake_handler(own_figures(pid, read_stat(pid).start_time), "192.0.2.7")
    h._heap({"pid": [str(pid)]})
    assert sent and sent[0][0] == 403 and "local clients only" in sent[0][1]


def test_one_profile_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(routes, "peer_uid", lambda *_: 0)
    monkeypatch.setattr(routes, "heap_profile", lambda *_: b"profile")
    pid = os.getpid()
    h, sent = fake_handler(own_figures(pid, read_stat(pid).start_time), "127.0.0.1")
    h.server.profile_lock.acquire()
    h._heap({"pid": [str(pid)]})
    assert sent == [(503, "busy: one profile at a time")]
    h.server.profile_lock.release()
    h._heap({"pid": [str(pid)]})
    assert sent[1] == (200, "<profile>")


def test_peer_uid_finds_an_ipv6_socket_connected_to_a_mapped_address() -> None:
    for family, bind in ((socket.AF_INET6, "::"), (socket.AF_INET, "127.0.0.1")):
        with socket.socket(family) as srv:
            if family == socket.AF_INET6:
                srv.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            srv.bind((bind, 0))
            srv.listen()
            port = srv.getsockname()[1]
            seen: list[int | None] = []

            def accept(srv: socket.socket = srv, seen: list[int | None] = seen) -> None:
                conn, peer = srv.accept()
                with conn:
                    seen.append(peer_uid(conn.getsockname()[:2], peer[:2]))
                    conn.recv(1)

            t = threading.Thread(target=accept)
            t.start()

            def connect(port: int = port) -> bool:
                with socket.socket(socket.AF_INET6) as c:
                    c.connect(("::ffff:127.0.0.1", port))
                    time.sleep(0.3)
                    c.send(b"x")
                return True

            assert as_user(NOBODY.pw_uid, NOBODY.pw_gid, connect) is True
            t.join()
        assert seen == [NOBODY.pw_uid], family


def test_owner_with_capabilities_is_no_owner(tmp_path: Path) -> None:
    d = tmp_path / "4242"
    d.mkdir()
    uid = NOBODY.pw_uid
    status = (f"Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t7\t7\t7\t7\n"
              "CapInh:\t0000000000000000\nCapPrm:\t{}\nCapEff:\t0000000000000000\n")
    os.chown(d, uid, 7)
    (d / "status").write_text(status.replace("{}", "0000000000000000"))
    assert process_owner(4242, str(tmp_path)) == uid
    (d / "status").write_text(status.replace("{}", "0000000000002000"))
    assert process_owner(4242, str(tmp_path)) is None


def test_profile_bound_to_the_process_start_time(monkeypatch: pytest.MonkeyPatch) -> None:
    pid = os.getpid()
    start = read_stat(pid).start_time
    # the snapshot's process is not the one now at that pid: 404 before any access check
    monkeypatch.setattr(routes, "peer_uid", lambda *_: 0)
    h, sent = fake_handler(own_figures(pid, start + 10_000_000), "127.0.0.1")
    h._heap({"pid": [str(pid)]})
    assert sent and sent[0][0] == 404 and "no longer" in sent[0][1]

    built: list[int] = []

    class Info:
        start_time_ns = start + 1  # within the tick: the same process

    class Dev:
        def __enter__(self) -> Dev:
            return self

        def __exit__(self, *_: object) -> None:
            pass

        def require_monitored(self, _pid: int) -> Info:
            return Info()

    import pmm.analysis.leakview
    import pmm.kernel.device
    import pmm.pprof

    monkeypatch.setattr(pmm.kernel.device.Device, "open", staticmethod(lambda *a, **k: Dev()))
    def from_module(*_: object, **__: object) -> SimpleNamespace:
        built.append(1)
        return SimpleNamespace(comm="x", state="R", source="module")

    monkeypatch.setattr(pmm.analysis.leakview, "from_module", from_module)
    monkeypatch.setattr(pmm.analysis.leakview, "pprof_samples", lambda r: [])
    monkeypatch.setattr(pmm.pprof, "build_profile", lambda *a, **k: b"profile")
    snap = own_figures(pid, start)
    assert heap_profile(pid, snap) == b"profile"
    # the module's entry is an older process of that pid: nothing is built
    Info.start_time_ns = start - 10_000_000
    with pytest.raises(ProfileError) as e:
        heap_profile(pid, snap)
    assert e.value.status == 404 and built == [1]
    # the pid changed hands while the profile was built: it is discarded
    Info.start_time_ns = start
    looks = iter([start, start + 10_000_000])
    monkeypatch.setattr(profiles, "live_start_time", lambda _pid: next(looks))
    with pytest.raises(ProfileError) as e:
        heap_profile(pid, snap)
    assert e.value.status == 404 and built == [1, 1]


# -- which Host pmd answers (DNS rebinding) ----------------------------------------------


def raw_get(addr: str, port: int, path: str, hosts: list[str],
            request_line: str | None = None) -> tuple[int, bytes]:
    """GET over a new connection, with one Host line per item of `hosts`:
    (status, body). A plain connect: no name resolution (as_user's
    children cannot import encodings.idna from a root-only interpreter)."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with socket.socket(family) as c:
        c.settimeout(10)
        c.connect((addr, port))
        head = (request_line or f"GET {path} HTTP/1.1") + "\r\n" + \
            "".join(f"Host: {h}\r\n" for h in hosts) + "Connection: close\r\n\r\n"
        c.sendall(head.encode())
        data = b""
        while chunk := c.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def test_foreign_host_is_misdirected_before_anything_is_read(tmp_path: Path) -> None:
    reads: list[str] = []

    def read_config() -> ConfigInfo:
        reads.append("module")
        return CONFIG

    ex = Exporter(address=("127.0.0.1", 0), read_config=read_config,
                  host_names=frozenset({("pmd.example", None), ("proxy.example", 8443)}))
    assert ex.server is not None
    server = ex.server

    def snapshot() -> Snapshot:
        reads.append("snapshot")
        return own_figures(os.getpid(), read_stat(os.getpid()).start_time)

    server.snapshot = snapshot
    ex.start()
    port = server.port
    pid = os.getpid()
    try:
        for path in ("/metrics", "/debug/pprof/targets", f"/debug/pprof/heap?pid={pid}",
                     "/nothing"):
            for host in (f"evil.example:{port}", "evil.example", f"localhost:{port + 1}",
                         f"192.0.2.7:{port}", f"pmd.example:{port + 1}", "proxy.example",
                         f"127.0.0.1.evil.example:{port}"):
                status, body = raw_get("127.0.0.1", port, path, [host])
                assert status == 421, (path, host, body)
                assert body.decode().count("\n") == 1 and "--metrics-host" in body.decode()
            assert raw_get("127.0.0.1", port, path, [])[0] == 400
            assert raw_get("127.0.0.1", port, path, [f"127.0.0.1:{port}"] * 2)[0] == 400
            assert raw_get("127.0.0.1", port, path, ["bad host"])[0] == 400
        # an absolute URL in the request line names its own host: refused
        status, _ = raw_get("127.0.0.1", port, "", [f"127.0.0.1:{port}"],
                            f"GET http://evil.example:{port}/metrics HTTP/1.1")
        assert status == 400
        assert raw_get("127.0.0.1", port, "/metrics", [f"evil.example:{port}"],
                       "POST /metrics HTTP/1.1")[0] == 421
        assert reads == []  # nothing of the snapshot, the module or /proc was read
        # pmd's own names: its address, localhost over loopback, the configured ones
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LocalHost:{port}",
                     f"[::1]:{port}", f"pmd.example:{port}", f"PMD.example:{port}",
                     "proxy.example:8443"):
            status, body = raw_get("127.0.0.1", port, "/metrics", [host])
            assert status == 200 and b"pmm_pmd_up" in body, (host, body)
        assert "module" in reads
        status, body = raw_get("127.0.0.1", port, "/debug/pprof/targets",
                               [f"pmd.example:{port}"])
        assert status == 200
        assert [t["targets"] for t in json.loads(body)] == [[f"pmd.example:{port}"]]
    finally:
        ex.close()


def global_address(family: int) -> str | None:
    """An address of this machine beyond loopback, if it has one."""
    flag = "-4" if family == socket.AF_INET else "-6"
    out = subprocess.run(["ip", flag, "-o", "addr", "show", "scope", "global"],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        fields = line.split()
        if "tentative" not in fields:
            return fields[3].split("/")[0]
    return None


@pytest.mark.parametrize("bind", ["0.0.0.0", "::"])
def test_every_address_binding_answers_the_address_connected_to(bind: str) -> None:
    ex = Exporter(address=(bind, 0))
    assert ex.server is not None
    ex.start()
    port = ex.server.port
    try:
        assert raw_get("127.0.0.1", port, "/metrics", [f"127.0.0.1:{port}"])[0] == 200
        assert raw_get("127.0.0.1", port, "/metrics", [f"localhost:{port}"])[0] == 200
        assert raw_get("127.0.0.1", port, "/metrics", [f"0.0.0.0:{port}"])[0] == 421
        address = global_address(socket.AF_INET)
        if address is None:
            pytest.skip("no address beyond loopback here")
        # scraped by IP: the address the connection came to
        assert raw_get(address, port, "/metrics", [f"{address}:{port}"])[0] == 200
        # another address, or localhost from beyond loopback: not pmd's
        assert raw_get(address, port, "/metrics", [f"192.0.2.254:{port}"])[0] == 421
        assert raw_get(address, port, "/metrics", [f"localhost:{port}"])[0] == 421
        assert raw_get(address, port, "/metrics", [f"127.0.0.1:{port}"])[0] == 421
    finally:
        ex.close()


@pytest.mark.parametrize("value", ["bad name", "a..b", "-a", "a:0", "a:x", "::1", "[::1",
                                   "[pmd]:80", "a:1:2", "a/b", ""])
def test_bad_metrics_host_is_a_usage_error(value: str) -> None:
    r = subprocess.run([sys.executable, "-m", "pmd.main", "--no-genl", "--pid", "1",
                        "--metrics", "127.0.0.1:0", "--metrics-host", value],
                       capture_output=True, text=True, cwd=TOP)
    assert r.returncode == 2, r
    assert r.stderr.startswith("pmd: --metrics-host: ") and r.stderr.count("\n") == 1, r.stderr


def test_parse_host_forms() -> None:
    assert metrics.parse_host("Pmd.Example") == ("pmd.example", None)
    assert metrics.parse_host("pmd.example:9466") == ("pmd.example", 9466)
    assert metrics.parse_host("192.0.2.10:80") == ("192.0.2.10", 80)
    assert metrics.parse_host("[::1]:9466") == ("::1", 9466)
    assert metrics.parse_host("[FD00:0::2]") == ("fd00::2", None)


def test_metrics_host_reaches_the_endpoint(tmp_path: Path) -> None:
    # pmd's command line: --metrics-host names answered, others not
    pmd = Pmd(tmp_path, [os.getpid()], "--metrics", "127.0.0.1:0", "--metrics-host",
              "pmd.example", "--metrics-host", "[fd00::9]:8443")
    try:
        port = int(pmd.wait_url().rpartition(":")[2])
        assert raw_get("127.0.0.1", port, "/metrics", [f"pmd.example:{port}"])[0] == 200
        assert raw_get("127.0.0.1", port, "/metrics", ["[fd00::9]:8443"])[0] == 200
        assert raw_get("127.0.0.1", port, "/metrics", ["pmd.example:8443"])[0] == 421
        assert raw_get("127.0.0.1", port, "/metrics", [f"other.example:{port}"])[0] == 421
    finally:
        assert pmd.stop() == 0, pmd.text()


# -- connection slots per user ------------------------------------------------------------

ALLOWED_UID = 65020  # named as --pprof-allow-user
PROMETHEUS_UID = 65030  # a local Prometheus's user: neither root nor allowed


class Holders:
    """Users holding idle connections to the endpoint until `release()`:
    each `hold(uid, n)` is a forked child of that uid opening n connections
    (those the endpoint closes at once stay closed)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.release_r, self.release_w = os.pipe()
        self.threads: list[threading.Thread] = []
        self.opened: list[Any] = []

    def hold(self, uid: int, n: int) -> None:
        ready_r, ready_w = os.pipe()

        def child() -> int:
            os.close(self.release_w)  # so that release() ends the wait below
            socks = []
            for _ in range(n):
                c = socket.socket()
                c.connect(("127.0.0.1", self.port))
                socks.append(c)
            os.write(ready_w, b"x")
            os.read(self.release_r, 1)
            return len(socks)

        t = threading.Thread(target=lambda: self.opened.append(as_user(uid, uid, child)))
        t.start()
        self.threads.append(t)
        try:
            ready = select.select([ready_r], [], [], 30)[0]
            assert ready and os.read(ready_r, 1) == b"x", f"uid {uid} could not connect"
        finally:
            os.close(ready_r)
            os.close(ready_w)

    def release(self) -> None:
        os.close(self.release_w)
        for t in self.threads:
            t.join(timeout=30)
        os.close(self.release_r)


def answered(uid: int, port: int) -> bool:
    """Whether a GET /metrics by that user gets 200 (not a connection closed unanswered)."""
    def fetch() -> bool:
        try:
            return raw_get("127.0.0.1", port, "/metrics", [f"127.0.0.1:{port}"])[0] == 200
        except (OSError, IndexError, ValueError):
            return False
    return bool(fetch() if uid == 0 else as_user(uid, uid, fetch))


@contextlib.contextmanager
def prometheus_as(uid: int, target: str) -> Iterator[str]:
    """A real Prometheus run by `uid`, in a directory of its own."""
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="pmm-prometheus-"))
    try:
        os.chown(d, uid, uid)
        port = free_port()
        (d / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, scrape_timeout: 1s}\nscrape_configs:\n"
            f"  - job_name: pmd\n    static_configs: [{{targets: ['{target}']}}]\n")
        log = open(d / "prometheus.log", "w")  # noqa: SIM115
        p = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                              "prometheus", f"--config.file={d / 'prometheus.yml'}",
                              f"--storage.tsdb.path={d / 'tsdb'}",
                              f"--web.listen-address=127.0.0.1:{port}"],
                             stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            def ready() -> bool:
                assert p.poll() is None, (d / "prometheus.log").read_text()
                with contextlib.suppress(OSError):
                    return get(f"{base}/-/ready")[0] == 200
                return False
            wait_for(ready, 60, "Prometheus ready")
            yield base
        finally:
            p.terminate()
            p.wait(timeout=30)
            log.close()
    finally:
        shutil.rmtree(d)


def test_one_user_cannot_take_every_slot() -> None:
    from pmm.daemon.metrics.server import PEER_CONNECTIONS, RESERVED_CONNECTIONS

    ex = Exporter(address=("127.0.0.1", 0), allowed_uids=frozenset({ALLOWED_UID}))
    assert ex.server is not None
    server = ex.server
    server.request_deadline = 300  # the idle connections stay until released
    ex.start()
    port = server.port
    holders = Holders(port)
    try:
        # one user opens more connections than there are slots, and keeps them
        holders.hold(NOBODY.pw_uid, MAX_CONNECTIONS + 8)
        wait_for(lambda: server.active == PEER_CONNECTIONS, 10, "the user's connections")
        time.sleep(0.5)
        assert server.active == PEER_CONNECTIONS
        assert server.by_peer == {f"uid {NOBODY.pw_uid}": PEER_CONNECTIONS}
        # root, an allowed user and another user are answered
        assert answered(0, port)
        assert answered(ALLOWED_UID, port)
        assert answered(PROMETHEUS_UID, port)
        # a real Prometheus, run by another user, scrapes pmd
        with prometheus_as(PROMETHEUS_UID, f"127.0.0.1:{port}") as base:
            wait_for(lambda: [r["value"][1] for r in query(base, "pmm_pmd_up")] == ["1"], 30,
                     "a scrape")
            assert [r["value"][1] for r in query(base, 'up{job="pmd"}')] == ["1"]
        # users enough to fill every slot but the reserved ones: a further
        # user is refused, root and the allowed user are still answered
        others = range(65011, 65011 + (MAX_CONNECTIONS - RESERVED_CONNECTIONS) //
                       PEER_CONNECTIONS - 1)
        for uid in others:
            holders.hold(uid, MAX_CONNECTIONS)
        wait_for(lambda: server.active == MAX_CONNECTIONS - RESERVED_CONNECTIONS, 10,
                 "the shared slots taken")
        assert not answered(65019, port)
        assert answered(0, port)
        assert answered(ALLOWED_UID, port)
    finally:
        holders.release()
        ex.close()
    assert sorted(holders.opened) == [MAX_CONNECTIONS] * len(others) + [MAX_CONNECTIONS + 8]


def test_remote_addresses_have_their_own_caps() -> None:
    from pmm.daemon.metrics.server import PEER_CONNECTIONS, REMOTE_CONNECTIONS

    ex = Exporter(address=("127.0.0.1", 0))
    assert ex.server is not None
    server = ex.server
    taken: list[socket.socket] = []

    def connect(peer: tuple[str, int]) -> bool:
        s = socket.socket()  # unconnected: the kernel's table has no such peer
        if server.verify_request(s, peer):
            taken.append(s)
            return True
        s.close()
        return False

    try:
        # each remote address at most PEER_CONNECTIONS, all of them REMOTE_CONNECTIONS
        got = [connect(("192.0.2.7", 40000 + i)) for i in range(PEER_CONNECTIONS + 2)]
        assert got == [True] * PEER_CONNECTIONS + [False, False]
        assert server.by_peer == {"address 192.0.2.7": PEER_CONNECTIONS}
        for i in range(REMOTE_CONNECTIONS):
            connect((f"2001:db8::{i + 1}", 40000))
        assert server.remote == REMOTE_CONNECTIONS == server.active
        assert not connect(("192.0.2.99", 40000))
        # a local user is not counted with them; a peer that went away from
        # loopback is one class of its own
        assert [connect(("127.0.0.1", 1)) for _ in range(PEER_CONNECTIONS + 1)] == \
            [True] * PEER_CONNECTIONS + [False]
        assert server.by_peer["uid unknown"] == PEER_CONNECTIONS
        for s in taken:
            server._release(s)
        assert (server.active, server.remote, server.by_peer) == (0, 0, {})
    finally:
        for s in taken:
            s.close()
        ex.close()
