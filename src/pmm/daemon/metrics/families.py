"""The pmm_* metric families (`PmmCollector`), from the latest snapshot, the
module's counters (`ModuleConfig`, PMM_GET_CONFIG read at most once a
second) and MemAvailable. Their names and labels are pmd's interface:
dashboards and alert rules name them (docs/fleet.md)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pmm.analysis.samplesource import mem_available
from pmm.analysis.trend import seconds_until_exhausted
from pmm.daemon.metrics.figures import Snapshot
from pmm.errors import ModuleNotLoaded, PmmError

if TYPE_CHECKING:
    from pmm.kernel.model import ConfigInfo

log = logging.getLogger("pmd")

CONFIG_CACHE_S = 1.0  # the module's counters are read at most this often

# the detector's verdicts (pmm.analysis.trend.Verdict values) as label values
VERDICT_LABELS = {"LEAK": "leak", "GROWING": "growing", "STABLE": "stable",
                  "INCONCLUSIVE": "inconclusive", "NOT ENOUGH DATA": "not_enough_data"}
PROCESS_LABELS = ["pid", "comm", "start_time", "unit"]

class ModuleConfig:
    """The module's counters (PMM_GET_CONFIG), read at most once a second:
    `read()` gives (loaded, config), config None when it cannot be read."""

    def __init__(self, read_config: Callable[[], ConfigInfo] | None = None) -> None:
        self.read_config = read_config or _device_config
        self.lock = threading.Lock()
        self.at = -CONFIG_CACHE_S
        self.value: tuple[bool, ConfigInfo | None] = (False, None)

    def read(self) -> tuple[bool, ConfigInfo | None]:
        """(whether the module is loaded, its configuration and counters)."""
        with self.lock:
            now = time.monotonic()
            if now - self.at >= CONFIG_CACHE_S:
                self.at = now
                try:
                    self.value = (True, self.read_config())
                except ModuleNotLoaded:
                    self.value = (False, None)
                except (PmmError, OSError) as e:
                    log.debug("the module's counters cannot be read: %s", e)
                    self.value = (True, None)
            return self.value


def _device_config() -> ConfigInfo:
    from pmm.kernel.device import Device

    with Device.open() as dev:
        return dev.get_config()


def _gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


class PmmCollector(Collector):
    """The pmm_* metrics from the latest snapshot (see the module's docstring)."""

    def __init__(self, snapshot: Callable[[], Snapshot], module: ModuleConfig,
                 available: Callable[[], int | None] = mem_available) -> None:
        self.snapshot = snapshot
        self.module = module
        self.available = available

    def collect(self) -> Iterator[Metric]:
        """Every pmm_* metric family, from one snapshot."""
        snap = self.snapshot()
        yield from self._processes(snap)
        yield from self._module()
        yield from self._daemon(snap)

    def _processes(self, snap: Snapshot) -> Iterator[Metric]:
        rss = _gauge("pmm_process_rss_bytes", "Resident set size, latest sample.",
                     PROCESS_LABELS)
        vm = _gauge("pmm_process_vm_bytes", "Virtual memory size, latest sample.",
                    PROCESS_LABELS)
        live = _gauge("pmm_process_heap_live_bytes", "Bytes in live heap blocks (processes "
                      "whose allocations the module tracks).", PROCESS_LABELS)
        blocks = _gauge("pmm_process_heap_live_blocks", "Live heap blocks (processes whose "
                        "allocations the module tracks).", PROCESS_LABELS)
        verdict = _gauge("pmm_process_verdict", "The leak detector's verdict: 1 for the "
                         "current one, 0 for the others.", [*PROCESS_LABELS, "verdict"])
        slope = _gauge("pmm_process_rss_growth_bytes_per_second", "Growth of the rss floor "
                       "(the detector's slope).", PROCESS_LABELS)
        low = _gauge("pmm_process_rss_growth_low_bytes_per_second", "Lower bound of the "
                     "growth's 95% interval.", PROCESS_LABELS)
        high = _gauge("pmm_process_rss_growth_high_bytes_per_second", "Upper bound of the "
                      "growth's 95% interval.", PROCESS_LABELS)
        exhaustion = _gauge("pmm_process_exhaustion_seconds", "MemAvailable divided by the "
                            "growth, while the verdict is leak or growing.", PROCESS_LABELS)
        started = _gauge("pmm_process_start_time_seconds", "Unix time the process started.",
                         PROCESS_LABELS)
        alert = _gauge("pmm_process_alert", "1 while pmd's LEAK alert for the process "
                       "stands, 0 once its verdict cleared (resolved) or before any.",
                       PROCESS_LABELS)
        lost = _gauge("pmm_process_unreachable_bytes", "Bytes in blocks nothing reaches, "
                      "definitely or indirectly lost, at pmd's last scan (--scan-on-leak).",
                      [*PROCESS_LABELS, "kind"])
        available = None
        for p in snap.processes:
            labels = [str(p.pid), p.comm, str(p.start_time), p.unit]
            rss.add_metric(labels, p.rss)
            vm.add_metric(labels, p.vm)
            started.add_metric(labels, p.start_unix)
            alert.add_metric(labels, 1.0 if p.alert else 0.0)
            if p.lost_bytes is not None:
                lost.add_metric([*labels, "definite"], p.lost_bytes)
                lost.add_metric([*labels, "indirect"], p.indirect_bytes or 0)
            if p.live_bytes is not None:
                live.add_metric(labels, p.live_bytes)
            if p.live_blocks is not None:
                blocks.add_metric(labels, p.live_blocks)
            current = VERDICT_LABELS.get(p.verdict, "not_enough_data")
            for v in VERDICT_LABELS.values():
                verdict.add_metric([*labels, v], 1.0 if v == current else 0.0)
            if p.slope is None:
                continue
            slope.add_metric(labels, p.slope)
            low.add_metric(labels, p.slope_low or 0.0)
            high.add_metric(labels, p.slope_high or 0.0)
            if current in ("leak", "growing"):
                if available is None:
                    available = self.available() or 0
                left = seconds_until_exhausted(p.slope, float(available))
                if left is not None:
                    exhaustion.add_metric(labels, left)
        yield from (rss, vm, live, blocks, verdict, slope, low, high, exhaustion, started, lost,
                    alert)
        yield from self._split(snap)

    def _split(self, snap: Snapshot) -> Iterator[Metric]:
        """Where each process's rss is (the split pmm.analysis.growthkind names the kind
        of growth from) and the kind of its growth."""
        from pmm.analysis.growthkind import KIND_LABELS, split_point

        anon = _gauge("pmm_process_rss_anon_bytes", "Anonymous resident memory, latest "
                      "sample.", PROCESS_LABELS)
        file = _gauge("pmm_process_rss_file_bytes", "File-backed resident memory, latest "
                      "sample.", PROCESS_LABELS)
        shmem = _gauge("pmm_process_rss_shmem_bytes", "Resident shared memory, latest "
                       "sample.", PROCESS_LABELS)
        held = _gauge("pmm_process_heap_free_bytes", "Resident memory the allocator holds "
                      "free (when the hook reports it): what RETENTION grows.", PROCESS_LABELS)
        other = _gauge("pmm_process_anon_other_bytes", "Anonymous memory neither in live "
                       "blocks nor held free by the allocator (processes whose heap the "
                       "module tracks).", PROCESS_LABELS)
        kind = _gauge("pmm_process_growth_kind", "The kind of the rss growth while the "
                      "verdict is leak or growing (none otherwise): 1 for the current one, "
                      "0 for the others.", [*PROCESS_LABELS, "kind"])
        for p in snap.processes:
            labels = [str(p.pid), p.comm, str(p.start_time), p.unit]
            current = {str(k): v for k, v in KIND_LABELS.items()}.get(p.kind, "none")
            for v in KIND_LABELS.values():
                kind.add_metric([*labels, v], 1.0 if v == current else 0.0)
            if p.rss_anon is None or p.rss_file is None or p.rss_shmem is None:
                continue
            pt = split_point(p.rss_anon, p.rss_file, p.rss_shmem, p.live_bytes, p.heap_free)
            anon.add_metric(labels, p.rss_anon)
            file.add_metric(labels, pt.file)
            shmem.add_metric(labels, pt.shmem)
            if pt.heap_free is not None:
                held.add_metric(labels, pt.heap_free)
            if pt.live is not None:
                other.add_metric(labels, pt.anon_other)
        yield from (anon, file, shmem, held, other, kind)

    def _module(self) -> Iterator[Metric]:
        loaded, c = self.module.read()
        yield GaugeMetricFamily("pmm_module_loaded", "Whether the pmm module is loaded.",
                                value=1 if loaded else 0)
        if c is None:
            return
        yield GaugeMetricFamily("pmm_module_monitored_processes",
                                "Processes the module monitors.", value=c.monitored_pids)
        for name, doc, value in (
                ("pmm_module_records_accepted", "Allocation records the module accepted.",
                 c.records_accepted),
                ("pmm_module_records_dropped", "Allocation records the module dropped.",
                 c.records_dropped),
                ("pmm_module_unmatched_frees", "Frees of blocks the module did not know.",
                 c.unmatched_frees),
                ("pmm_module_older_frees", "Frees of blocks allocated before monitoring "
                 "began.", c.older_frees)):
            yield CounterMetricFamily(name, doc, value=value)
        yield GaugeMetricFamily("pmm_module_kernel_memory_bytes",
                                "Kernel memory the module uses.", value=c.kmem_bytes)
        yield GaugeMetricFamily("pmm_module_records_queued",
                                "Records waiting in the module's queues.",
                                value=c.records_queued)

    def _daemon(self, snap: Snapshot) -> Iterator[Metric]:
        d = snap.daemon
        yield GaugeMetricFamily("pmm_pmd_up", "1 while pmd runs (0 in the textfile it "
                                "leaves at exit).", value=1 if snap.up else 0)
        for name, doc, n in (
                ("pmm_pmd_events", "Module events pmd received.", d.events),
                ("pmm_pmd_malformed_events", "Module events pmd could not parse.",
                 d.malformed_events),
                ("pmm_pmd_failed_events", "Module events whose handling failed.",
                 d.failed_events),
                ("pmm_pmd_lost_events", "Receive-buffer overruns (events lost).",
                 d.lost_events),
                ("pmm_pmd_samples_written", "Samples written to the database.",
                 d.samples_written),
                ("pmm_pmd_dropped_rows", "Rows dropped while the database was not "
                 "writable.", d.dropped_rows),
                ("pmm_pmd_harvests", "Exited processes whose sites pmd kept.", d.harvests),
                ("pmm_pmd_harvest_failures", "Exited processes whose sites could not be "
                 "kept.", d.harvest_failures)):
            yield CounterMetricFamily(name, doc, value=n)
        for name, doc, v in (
                ("pmm_pmd_module_connected", "Whether pmd receives the module's events.",
                 1.0 if d.module_connected else 0.0),
                ("pmm_pmd_pending_rows", "Rows waiting to be written.", d.pending_rows),
                ("pmm_pmd_write_failures", "Consecutive failed database writes (0 when "
                 "healthy).", d.write_failures),
                ("pmm_pmd_last_commit_timestamp_seconds", "Unix time the database last "
                 "held every row pmd had (its start, before the first write).",
                 d.last_commit_unix),
                ("pmm_pmd_processes", "Processes pmd holds a window for.",
                 len(snap.processes))):
            yield GaugeMetricFamily(name, doc, value=v)
