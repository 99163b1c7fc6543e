"""pmd's metrics endpoint on the real module: a leak under the hook shows its
live heap growing in /metrics with the module's counters; `go tool pprof`
fetches /debug/pprof/heap?pid=N itself and names the leaking line; user
nobody gets 403 for the same URL."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import kmod_dev
import pytest
from helpers import TOP, as_nobody
from prometheus_client.parser import text_string_to_metric_families
from test_pmd_e2e import Pmd
from test_postmortem import go_pprof

from pmm.kernel.device import Device

pytestmark = pytest.mark.usefixtures("pmm")
LEAK = TOP / "examples" / "bin" / "leak"
HOOKLIB = TOP / "hooklib" / "libpmmhook.so"


@pytest.fixture()
def tmp() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fleet-") as d:
        yield Path(d)


def scrape(url: str) -> dict[str, dict[str, float]]:
    """Each sample's value by name, then by pid label ('' without one)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, dict[str, float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[s.labels.get("pid", "")] = s.value
    return out


def test_metrics_and_heap_profile_of_a_leak(tmp: Path) -> None:
    with Device.open() as dev:
        dev.set_config(interval_ms=100)
    pmd = Pmd(tmp / "pmm.db", "--metrics", "127.0.0.1:0")
    leak = None
    try:
        assert pmd.wait_log("metrics on http://", 120), pmd.text()
        m = re.search(r"metrics on (http://\S+)/metrics", pmd.text())
        assert m, pmd.text()
        url = m.group(1)
        env = dict(os.environ, LD_PRELOAD=str(HOOKLIB), PMM_START="1")
        leak = subprocess.Popen([str(LEAK), "-n", "100000000", "-b", "4096", "-s", "10"],
                                env=env, stdout=subprocess.PIPE, text=True)
        assert leak.stdout is not None
        said = re.match(r"leak: pid (\d+) line (\d+)", leak.stdout.readline())
        assert said, "the leak says its line"
        pid, line = said.group(1), said.group(2)

        def live() -> float:
            return scrape(url).get("pmm_process_heap_live_bytes", {}).get(pid, 0.0)

        assert kmod_dev.wait_for(lambda: live() > 0, 30), pmd.text()
        first = live()
        assert kmod_dev.wait_for(lambda: live() > first + 64 * 1024, 30), (first, live())
        got = scrape(url)
        assert got["pmm_module_loaded"][""] == 1
        assert got["pmm_module_records_accepted_total"][""] > 0
        assert got["pmm_module_monitored_processes"][""] >= 1
        assert got["pmm_pmd_module_connected"][""] == 1
        assert got["pmm_pmd_events_total"][""] > 0
        assert got["pmm_process_heap_live_blocks"][pid] > 0

        heap = f"{url}/debug/pprof/heap?pid={pid}"
        out = go_pprof(tmp, "-raw", heap)  # pprof fetches the URL itself
        assert f"leak.c:{line}" in out and "leak_here" in out, out

        # curl: a Python start as nobody costs seconds under TCG
        refused = as_nobody(["curl", "-s", "-w", "\n%{http_code}", heap], timeout=60)
        body, _, code = refused.stdout.rpartition("\n")
        assert code == "403" and "--pprof-allow-user" in body, refused
    finally:
        if leak is not None:
            leak.kill()
            leak.wait()
        assert pmd.stop() == 0, pmd.text()
