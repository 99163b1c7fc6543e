"""pmd's metrics and heap profiles over HTTP, and its node_exporter textfile.

The daemon's loop publishes an immutable `Snapshot` of what it holds (per
process: the latest sample and the detector's last trend; its own counters)
with `Exporter.publish`; everything here reads only that snapshot, so the
loop and the HTTP thread share no mutable state. Per scrape the HTTP thread
also reads MemAvailable and the module's counters (PMM_GET_CONFIG, cached
for a second).

Endpoints (`MetricsServer`, one thread per connection). Every request must
name pmd in its Host header (its address, localhost over loopback, or a
--metrics-host name; else 421), so a web page whose DNS name was rebound to
pmd's address reads nothing. Connections are capped per peer: its uid, from
the kernel's socket table, or its address when remote (see verify_request).

- GET /metrics: Prometheus text, or OpenMetrics when the Accept header asks
  (prometheus_client's content negotiation). Open to whoever can connect:
  it holds per-process memory figures but no call sites.
- GET /debug/pprof/heap?pid=N: pid N's live heap as gzipped profile.proto,
  built as `pmctl leaks N --pprof FILE` builds it. Call sites are what the
  module shows only to those who may ptrace-read the process, so pmd (root)
  serves them only to a loopback peer whose uid (found from the kernel's
  socket table, never from the request) is 0, the process's owner, or one
  of the allowed uids (`--pprof-allow-user`).
- GET /debug/pprof/targets: the monitored processes that have a heap
  profile (the module tracks their heap) as Prometheus HTTP service
  discovery JSON, one target per process (`__param_pid`), for Parca's and
  Pyroscope's scrape configurations.
"""

from __future__ import annotations

import contextlib
import errno
import http.server
import ipaddress
import json
import logging
import os
import re
import socket
import struct
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from pmm import procsampler
from pmm.errors import ModuleNotLoaded, NoSuchPid, NotMonitored, PmmError
from pmm.store import start_key
from pmm.trend import seconds_until_exhausted
from pmm.trendsource import mem_available

if TYPE_CHECKING:
    from pmm.model import ConfigInfo

log = logging.getLogger("pmd")

TEXTFILE_PERIOD = 15.0  # seconds between textfile writes
CONFIG_CACHE_S = 1.0  # the module's counters are read at most this often
REQUEST_TIMEOUT_S = 30.0  # a client that sends nothing is let go
HEADER_DEADLINE_S = 10.0  # the request line and headers must all arrive within this
MAX_CONNECTIONS = 16  # connections served at once; more are closed at once
RESERVED_CONNECTIONS = 4  # of those, the last free ones: root's and allowed users' only
PEER_CONNECTIONS = 4  # at once from one other user, or from one remote address
REMOTE_CONNECTIONS = 8  # at once from all remote addresses together
ALLOW_OPTION = "--pprof-allow-user"
HOST_OPTION = "--metrics-host"

# the detector's verdicts (pmm.trend.Verdict values) as label values
VERDICT_LABELS = {"LEAK": "leak", "GROWING": "growing", "STABLE": "stable",
                  "INCONCLUSIVE": "inconclusive", "NOT ENOUGH DATA": "not_enough_data"}
PROCESS_LABELS = ["pid", "comm", "start_time", "unit"]


class MetricsError(PmmError):
    """The metrics endpoint or textfile cannot be set up (one line: why)."""


@dataclass(frozen=True)
class ProcessFigures:
    """One monitored process as the loop last saw it. live_* are None for a
    process whose allocations the module does not track; verdict is "" and
    the slopes None before the detector's first run."""

    pid: int
    start_time: int  # pmd's key: ns since boot, tick resolution
    comm: str
    unit: str
    start_unix: float
    rss: int
    vm: int
    live_bytes: int | None
    live_blocks: int | None
    verdict: str = ""
    slope: float | None = None
    slope_low: float | None = None
    slope_high: float | None = None
    lost_bytes: int | None = None  # the last scan's (pmd --scan-on-leak), None: none
    indirect_bytes: int | None = None
    alert: bool = False  # pmd's LEAK alert stands (raised, not resolved)
    # the latest sample's split (pmm.growthkind; None: unknown) and the kind
    # of growth at the detector's last run ("" none)
    rss_anon: int | None = None
    rss_file: int | None = None
    rss_shmem: int | None = None
    heap_free: int | None = None
    kind: str = ""


@dataclass(frozen=True)
class DaemonFigures:
    """pmd's own counters and health."""

    events: int = 0
    malformed_events: int = 0
    failed_events: int = 0
    lost_events: int = 0
    module_connected: bool = False
    samples_written: int = 0
    pending_rows: int = 0
    dropped_rows: int = 0
    write_failures: int = 0
    last_commit_unix: float = 0.0
    harvests: int = 0
    harvest_failures: int = 0


@dataclass(frozen=True)
class Snapshot:
    """What the loop publishes: its processes and its counters. `up` is
    False only in the textfile written as pmd exits."""

    processes: tuple[ProcessFigures, ...] = ()
    daemon: DaemonFigures = DaemonFigures()
    up: bool = True

    def process(self, pid: int) -> ProcessFigures | None:
        """The process with that pid, if pmd holds it."""
        for p in self.processes:
            if p.pid == pid:
                return p
        return None


# -- what the kernel tells of processes ----------------------------------------


def process_owner(pid: int, proc: str = "/proc") -> int | None:
    """The uid that may ptrace-read pid without privilege: its uid when its
    real, effective and saved uids are one, its gids are one too, and it is
    dumpable (/proc/PID is owned by it; the kernel gives a non-dumpable
    process's files to root), and it has no permitted capabilities (the
    kernel refuses to let a same-uid process with more capabilities be
    ptraced). None otherwise, or when it is gone."""
    try:
        owner = os.stat(f"{proc}/{pid}").st_uid
        status = Path(f"{proc}/{pid}/status").read_text(errors="replace")
    except OSError:
        return None
    ids: dict[str, set[int]] = {}
    cap_prm: int | None = None
    for line in status.splitlines():
        key, _, rest = line.partition(":")
        if key in ("Uid", "Gid"):
            ids[key] = {int(x) for x in rest.split()[:3]}
        elif key == "CapPrm":
            with contextlib.suppress(ValueError):
                cap_prm = int(rest.strip(), 16)
    if ids.get("Uid") != {owner} or len(ids.get("Gid", ())) != 1 or cap_prm != 0:
        return None
    return owner


NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
INET_DIAG_NOCOOKIE = 0xFFFFFFFF
TCP_LIVE_STATES = {1, 4, 5}  # established, fin-wait 1 and 2 (not time-wait: uid 0)
DIAG_TIMEOUT_S = 1.0  # the kernel answers at once; this only bounds a surprise
_diag_failed = False


def _plain(addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address, an IPv4-mapped IPv6 one as IPv4."""
    ip = ipaddress.ip_address(addr.partition("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def peer_uid(local: tuple[str, int], peer: tuple[str, int]) -> int | None:
    """The uid owning the other end of a local TCP connection: the socket
    whose local address is `peer` and remote `local`, found by the kernel's
    exact lookup in its socket table (sock_diag; one hash lookup, where
    reading /proc/net/tcp walks every bucket: 20 ms here), when it is live
    (established or closing, with an inode; not time-wait, whose uid reads
    0). None when there is no such socket (a remote peer) or it cannot be
    asked."""
    peer_ip, local_ip = _plain(peer[0]), _plain(local[0])
    if peer_ip.version != local_ip.version:  # no TCP connection joins them
        return None
    family = socket.AF_INET if peer_ip.version == 4 else socket.AF_INET6
    # inet_diag_sockid: ports and addresses in network order (IPv4 in the
    # first word), no interface, no cookie
    sockid = struct.pack("!HH", peer[1], local[1]) + peer_ip.packed.ljust(16, b"\0") + \
        local_ip.packed.ljust(16, b"\0") + struct.pack("=III", 0, INET_DIAG_NOCOOKIE,
                                                         INET_DIAG_NOCOOKIE)
    request = struct.pack("=BBBxI", family, socket.IPPROTO_TCP, 0, 0xFFFFFFFF) + sockid
    header = struct.pack("=IHHII", 16 + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0)
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as s:
            s.settimeout(DIAG_TIMEOUT_S)
            s.sendto(header + request, (0, 0))
            reply = s.recv(8192)
    except OSError as e:
        global _diag_failed
        if not _diag_failed:  # once: every connection would say it
            log.warning("metrics endpoint: the kernel's socket table cannot be asked "
                        "(sock_diag: %s): local users are not told apart, and profiles are "
                        "refused", e.strerror or e)
        _diag_failed = True
        return None
    # nlmsghdr, then inet_diag_msg: family, state, timer, retrans, the
    # sockid (48 bytes), expires, rqueue, wqueue, uid, inode
    if len(reply) < 16 + 72 or struct.unpack_from("=H", reply, 4)[0] != SOCK_DIAG_BY_FAMILY:
        return None  # NLMSG_ERROR: no such socket (ENOENT)
    state = reply[16 + 1]
    sport, dport = struct.unpack_from("!HH", reply, 16 + 4)
    uid, inode = struct.unpack_from("=II", reply, 16 + 4 + 48 + 12)
    if (sport, dport) != (peer[1], local[1]) or state not in TCP_LIVE_STATES or inode == 0:
        return None
    return int(uid)


def is_loopback(addr: str) -> bool:
    """Whether the address is a loopback one (IPv4-mapped included)."""
    return _plain(addr).is_loopback


def refusal(uid: int | None, peer_addr: str, owner: int | None,
            allowed: frozenset[int]) -> str | None:
    """Why a peer may not read a process's profile (None: it may). Allowed:
    a loopback peer whose uid is 0, the process's owner (see process_owner)
    or one of `allowed`."""
    if not is_loopback(peer_addr):
        return (f"profiles are served to local clients only (connect to pmd over "
                f"loopback); {peer_addr} is not one")
    if uid is None:
        return "the connecting user could not be found in the kernel's socket table"
    if uid == 0 or uid == owner or uid in allowed:
        return None
    return (f"uid {uid} may not read this process's call sites: only root, the process's "
            f"owner, or a user named with pmd's {ALLOW_OPTION} may")


# -- the exposition --------------------------------------------------------------


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
    from pmm.device import Device

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
        """Where each process's rss is (the split pmm.growthkind names the kind
        of growth from) and the kind of its growth."""
        from pmm.growthkind import KIND_LABELS, split_point

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


# -- profiles and targets ---------------------------------------------------------


class ProfileError(Exception):
    """A profile request that fails: the HTTP status and a one-line reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def live_start_time(pid: int) -> int | None:
    """pid's start time as /proc/PID/stat gives it now (pmd's key), or None
    when it is gone."""
    try:
        return procsampler.read_stat(pid).start_time
    except (procsampler.ProcessGone, OSError):
        return None


def _replaced(pid: int) -> ProfileError:
    return ProfileError(404, f"pid {pid} is no longer the process pmd monitors "
                        "(it exited; the pid may be another process's now)")


def heap_profile(pid: int, snapshot: Snapshot) -> bytes:
    """pid's live heap as gzipped profile.proto, built as `pmctl leaks PID
    --pprof FILE` builds it (every site, symbolized without the disk cache).
    The module's entry and /proc/PID (before and after) must be the process
    the snapshot holds (same start time). ProfileError 404 when pmd does not
    monitor pid, the module has no entry of it or the pid is another
    process's, 503 when the module is not loaded."""
    from pmm import leakreport
    from pmm.device import Device
    from pmm.pprof import build_profile

    fig = snapshot.process(pid)
    if fig is None:
        raise ProfileError(404, f"pid {pid} is not monitored by pmd")
    if live_start_time(pid) != fig.start_time:
        raise _replaced(pid)
    try:
        with Device.open() as dev:
            info = dev.require_monitored(pid)
            if start_key(info.start_time_ns) != fig.start_time:
                raise _replaced(pid)
            report = leakreport.from_module(dev, pid, time.monotonic_ns(), 0,
                                            disk_cache=False)
    except ModuleNotLoaded as e:
        raise ProfileError(503, str(e)) from None
    except (NotMonitored, NoSuchPid) as e:
        raise ProfileError(404, str(e)) from None
    if live_start_time(pid) != fig.start_time:
        raise _replaced(pid)  # the report may be another process's: discarded
    return build_profile(leakreport.pprof_samples(report), period=1, time_ns=time.time_ns(),
                         comments=[f"pmd /debug/pprof/heap?pid={pid} ({report.comm}, "
                                   f"{report.state}), from the {report.source}"])


def targets(snapshot: Snapshot, host: str) -> list[dict[str, object]]:
    """Prometheus HTTP service discovery: one target per monitored process
    that has a heap profile (the module tracks its heap: the hook is in it;
    not a process pmd samples from /proc only), at `host` (host:port), with
    its pid as the `pid` URL parameter."""
    return [{"targets": [host],
             "labels": {"__param_pid": str(p.pid), "pid": str(p.pid), "comm": p.comm,
                        "start_time": str(p.start_time)}}
            for p in sorted(snapshot.processes, key=lambda p: (p.pid, p.start_time))
            if p.live_bytes is not None and p.live_blocks]


# -- the server --------------------------------------------------------------------


def parse_address(text: str) -> tuple[str, int]:
    """'HOST:PORT' or '[IPV6]:PORT' as (host, port); port 0 takes a free
    one. ValueError says what is wrong."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{text!r}: give ADDRESS:PORT, e.g. 127.0.0.1:9466")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"{text!r}: put an IPv6 address in brackets, e.g. [::1]:9466")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{text!r}: the port is a number from 0 to 65535")
    if not host or any(c.isspace() or c == "/" for c in host):
        raise ValueError(f"{text!r}: not an address")
    return host, int(port_text)


HOST_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")
LOCALHOST = "localhost"


def parse_host(text: str) -> tuple[str, int | None]:
    """'NAME', 'NAME:PORT', an IP address, or '[IPV6]' with or without
    ':PORT' (a Host header's forms) as (name lowercased or the address in
    its normal form, port or None). ValueError says what is wrong."""
    rest = text.strip().lower()
    port: int | None = None
    if rest.startswith("["):
        address, bracket, tail = rest[1:].partition("]")
        if not bracket or (tail and not tail.startswith(":")):
            raise ValueError(f"{text!r}: an IPv6 address goes in brackets, e.g. [::1]:9466")
        rest, port_text = address, tail[1:] if tail else None
    elif rest.count(":") == 1:
        rest, _, port_text = rest.partition(":")
    elif ":" in rest:
        raise ValueError(f"{text!r}: put an IPv6 address in brackets, e.g. [::1]:9466")
    else:
        port_text = None
    if port_text is not None:
        if not port_text.isdigit() or not 0 < int(port_text) <= 65535:
            raise ValueError(f"{text!r}: the port is a number from 1 to 65535")
        port = int(port_text)
    try:
        return str(ipaddress.ip_address(rest)), port
    except ValueError:
        pass
    if text.strip().startswith("[") or len(rest) > 253 or not HOST_NAME.fullmatch(rest):
        raise ValueError(f"{text!r}: not a host name or an IP address")
    return rest, port


class _Handler(http.server.BaseHTTPRequestHandler):
    server: MetricsServer
    timeout = REQUEST_TIMEOUT_S
    server_version = "pmd"

    def setup(self) -> None:
        super().setup()
        # the request line and headers must all arrive within the deadline, however
        # slowly they trickle in: past it the connection is shut (its reads end)
        self.headers_read = threading.Event()
        self.deadline = threading.Timer(self.server.request_deadline, self._too_slow)
        self.deadline.daemon = True
        self.deadline.start()

    def _too_slow(self) -> None:
        if not self.headers_read.is_set():
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    def parse_request(self) -> bool:
        ok = super().parse_request()
        self.headers_read.set()
        self.deadline.cancel()
        if not ok:
            return False
        # before anything is read for the request: its Host must be pmd's
        if not self.path.startswith("/"):  # an absolute URL names its own host
            self._text(400, "give the path alone, e.g. GET /metrics")
            return False
        why = self.server.host_refusal(self.headers.get_all("Host") or [],
                                       str(self.connection.getsockname()[0]))
        if why is not None:
            self._text(*why)
            return False
        return True

    def finish(self) -> None:
        self.deadline.cancel()
        super().finish()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - its name
        log.debug("metrics endpoint: %s: %s", self.client_address[0], format % args)

    def _send(self, status: int, body: bytes, content_type: str,
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _text(self, status: int, line: str, headers: dict[str, str] | None = None) -> None:
        self._send(status, f"{line}\n".encode(), "text/plain; charset=utf-8", headers)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urllib.parse.urlsplit(self.path)
        try:
            if url.path == "/metrics":
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                self._send(200, encoder(self.server.registry), content_type)
            elif url.path == "/debug/pprof/heap":
                self._heap(urllib.parse.parse_qs(url.query))
            elif url.path == "/debug/pprof/targets":
                host = self.headers.get("Host") or self.server.url_host()
                body = json.dumps(targets(self.server.snapshot(), host)).encode()
                self._send(200, body, "application/json")
            else:
                self._text(404, f"no such page: {url.path} (pmd serves /metrics, "
                           "/debug/pprof/heap?pid=N and /debug/pprof/targets)")
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as e:  # noqa: BLE001 - one request fails, not the server
            log.error("metrics endpoint: %s failed: %s: %s", url.path, type(e).__name__, e)
            with contextlib.suppress(OSError):
                self._text(500, f"internal error: {type(e).__name__}: {e}")

    def _not_get(self) -> None:
        self._text(405, f"{self.command} is not served: pmd's endpoint takes GET only",
                   {"Allow": "GET"})

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _not_get  # noqa: N815

    def _heap(self, query: dict[str, list[str]]) -> None:
        values = query.get("pid", [])
        if len(values) != 1 or not values[0].isdigit() or int(values[0]) < 1:
            self._text(400, "give one process: /debug/pprof/heap?pid=N")
            return
        pid = int(values[0])
        peer = self.client_address[:2]
        if not is_loopback(peer[0]):  # before reading anything of /proc
            self._text(403, refusal(None, peer[0], None, frozenset()) or "not loopback")
            return
        snap = self.server.snapshot()
        fig = snap.process(pid)
        if fig is None:
            self._text(404, f"pid {pid} is not monitored by pmd")
            return
        # the owner is read between two looks at the start time: the same process
        if live_start_time(pid) != fig.start_time:
            self._text(404, str(_replaced(pid)))
            return
        local = self.connection.getsockname()[:2]
        why = refusal(peer_uid(local, peer), peer[0], process_owner(pid),
                      self.server.allowed_uids)
        if why is not None:
            self._text(403, why)
            return
        if not self.server.profile_lock.acquire(blocking=False):
            self._text(503, "busy: one profile at a time")
            return
        try:
            data = heap_profile(pid, snap)
        except ProfileError as e:
            self._text(e.status, str(e))
            return
        finally:
            self.server.profile_lock.release()
        self._send(200, data, "application/octet-stream",
                   {"Content-Disposition": f'attachment; filename="heap-{pid}.pb.gz"'})


class MetricsServer(http.server.ThreadingHTTPServer):
    """The HTTP endpoint, bound at construction (MetricsError when it cannot
    be), serving from `start()` on in its own thread."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64  # the listen backlog: connections beyond the cap are
    # accepted to be closed, not left in the kernel's queue

    def __init__(self, host: str, port: int, registry: CollectorRegistry,
                 snapshot: Callable[[], Snapshot], allowed_uids: frozenset[int],
                 host_names: frozenset[tuple[str, int | None]] = frozenset()) -> None:
        self.registry = registry
        self.snapshot = snapshot
        self.allowed_uids = allowed_uids
        self.request_deadline = HEADER_DEADLINE_S
        self.active = 0  # connections being served (at most MAX_CONNECTIONS)
        self.remote = 0  # of those, from remote addresses
        self.by_peer: dict[str, int] = {}  # connections of each peer (peer_key)
        self.peer_of: dict[socket.socket, str] = {}
        self.active_lock = threading.Lock()
        self.profile_lock = threading.Lock()  # one heap profile built at a time
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                      flags=socket.AI_PASSIVE)
        except socket.gaierror as e:
            raise MetricsError(f"--metrics {shown}: no such address ({e.strerror})") from None
        family, _, _, _, sockaddr = info[0]
        self.address_family = family
        try:
            super().__init__((str(sockaddr[0]), int(sockaddr[1])), _Handler)
        except OSError as e:
            why = {errno.EADDRINUSE: "the port is in use",
                   errno.EADDRNOTAVAIL: "no such address on this machine",
                   errno.EACCES: "permission denied"}.get(e.errno or 0, e.strerror)
            raise MetricsError(f"--metrics {shown}: cannot listen: {why}") from None
        self.port = int(self.server_address[1])
        self.bound = _plain(str(self.server_address[0]))
        # a name --metrics gave (it resolved to the bound address) is pmd's too
        with contextlib.suppress(ValueError):
            name = parse_host(host)[0]
            if not _is_address(name):
                host_names |= {(name, None)}
        self.host_names = host_names
        self.thread: threading.Thread | None = None

    # -- which Host a request may name (DNS rebinding) --

    def host_refusal(self, values: list[str], local: str) -> tuple[int, str] | None:
        """Why a request whose Host headers are `values`, received on the
        local address `local`, is not answered: (status, one line); None
        when its Host is pmd's: the bound address and port (when bound to
        every address, the one the connection came to), localhost,
        127.0.0.1 or [::1] with the port over loopback, or a --metrics-host
        name. A web page whose DNS name was rebound to pmd's address sends
        that name, and is refused before anything is read."""
        if len(values) != 1:
            return 400, "give one Host header: pmd's address, e.g. Host: 127.0.0.1:9466"
        try:
            host, port = parse_host(values[0])
        except ValueError:
            return 400, "the Host header is not HOST or HOST:PORT"
        if port is None:
            port = 80  # what a client that leaves the port out connects to
        if (host, port) in self.host_names or \
                (port == self.port and (host, None) in self.host_names):
            return None
        arrived = _plain(local)
        try:
            ip = _plain(host)
        except ValueError:
            ip = None
        if port == self.port:
            if ip is None and host == LOCALHOST and arrived.is_loopback:
                return None
            # bound to every address (0.0.0.0, [::]): the one the connection came to
            if ip is not None and ip == (arrived if self.bound.is_unspecified else self.bound):
                return None
            if ip is not None and arrived.is_loopback and ip.is_loopback:
                return None
        return 421, (f"this Host is not pmd's: pmd answers requests for its address "
                     f"({self.url_host()}), localhost over loopback, and names given with "
                     f"{HOST_OPTION}")

    # -- connection slots --

    def peer_key(self, request: socket.socket, peer: tuple[str, int]) -> tuple[str, bool]:
        """Whose connection it is, for the caps: ("uid N", whether N is root
        or an allowed user) for a local peer (found in the kernel's socket
        table, whatever address it came to), ("address A", False) for a
        remote one."""
        with contextlib.suppress(OSError):
            uid = peer_uid(request.getsockname()[:2], peer)
            if uid is not None:
                return f"uid {uid}", uid == 0 or uid in self.allowed_uids
        if is_loopback(peer[0]):
            return "uid unknown", False  # gone already, or not found
        return f"address {_plain(peer[0])}", False

    def _no_slot(self, key: str, privileged: bool) -> str | None:
        """Why a new connection of `key` gets no slot now (None: it does)."""
        if self.active >= MAX_CONNECTIONS:
            return f"{MAX_CONNECTIONS} connections already"
        if privileged:
            return None
        if self.active >= MAX_CONNECTIONS - RESERVED_CONNECTIONS:
            return (f"{self.active} connections: the last {RESERVED_CONNECTIONS} are kept "
                    f"for root and {ALLOW_OPTION} users")
        if self.by_peer.get(key, 0) >= PEER_CONNECTIONS:
            return f"{PEER_CONNECTIONS} connections of this peer already"
        if key.startswith("address ") and self.remote >= REMOTE_CONNECTIONS:
            return f"{REMOTE_CONNECTIONS} remote connections already"
        return None

    def verify_request(self, request: socket.socket | tuple[bytes, socket.socket],
                       client_address: tuple[str, int] | str) -> bool:
        """Whether the connection gets a slot (taken here; else socketserver
        closes it at once): at most MAX_CONNECTIONS in all, the last
        RESERVED_CONNECTIONS for root and the allowed users only, and at
        most PEER_CONNECTIONS of any other user or remote address, and
        REMOTE_CONNECTIONS of all remote ones: one user cannot take every
        slot."""
        assert isinstance(request, socket.socket) and isinstance(client_address, tuple)
        key, privileged = self.peer_key(request, client_address[:2])
        with self.active_lock:
            why = self._no_slot(key, privileged)
            if why is None:
                self.active += 1
                self.remote += key.startswith("address ")
                self.by_peer[key] = self.by_peer.get(key, 0) + 1
                self.peer_of[request] = key
        if why is not None:
            log.debug("metrics endpoint: %s refused (%s): %s", client_address[0], key, why)
        return why is None

    def _release(self, request: socket.socket | tuple[bytes, socket.socket]) -> None:
        assert isinstance(request, socket.socket)
        with self.active_lock:
            key = self.peer_of.pop(request)
            self.active -= 1
            self.remote -= key.startswith("address ")
            self.by_peer[key] -= 1
            if not self.by_peer[key]:
                del self.by_peer[key]

    def process_request(self, request: socket.socket | tuple[bytes, socket.socket],
                        client_address: tuple[str, int] | str) -> None:
        """Serves the connection in a thread (its slot freed if none starts)."""
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request)  # no thread started: its slot is free again
            raise

    def process_request_thread(self, request: socket.socket | tuple[bytes, socket.socket],
                               client_address: tuple[str, int] | str) -> None:
        """Serves the connection in a thread (its slot freed if none starts)."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def url_host(self) -> str:
        """host:port it listens on, as a URL names it."""
        host, port = str(self.server_address[0]), self.server_address[1]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def start(self) -> None:
        """Serves in a thread until close()."""
        self.thread = threading.Thread(target=self.serve_forever, name="pmd-metrics",
                                       kwargs={"poll_interval": 0.5}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Stops serving and closes the socket."""
        if self.thread is not None:
            self.shutdown()
            self.thread.join(timeout=5)
        self.server_close()


def check_textfile(path: Path) -> None:
    """MetricsError unless a file can be created in path's directory."""
    parent = path.parent
    if not parent.is_dir():
        raise MetricsError(f"--metrics-textfile {path}: no such directory {parent}")
    if path.is_dir():
        raise MetricsError(f"--metrics-textfile {path}: is a directory")
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{path.name}."):
            pass
    except OSError as e:
        raise MetricsError(f"--metrics-textfile {path}: cannot write in {parent}: "
                           f"{e.strerror}") from None


class Exporter:
    """pmd's metrics: the registry over the published snapshot, served over
    HTTP (`address`, answering requests for its address and `host_names`,
    parse_host's (name, port or None: pmd's)) and/or written to a textfile
    every TEXTFILE_PERIOD seconds and at close (`textfile`). Binding and the
    textfile's directory are checked at construction (MetricsError)."""

    def __init__(self, address: tuple[str, int] | None = None, textfile: Path | None = None,
                 allowed_uids: frozenset[int] = frozenset(),
                 read_config: Callable[[], ConfigInfo] | None = None,
                 host_names: frozenset[tuple[str, int | None]] = frozenset()) -> None:
        self.latest = Snapshot()
        self.module = ModuleConfig(read_config)
        collector = PmmCollector(lambda: self.latest, self.module)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        # the textfile leaves out process_*: node_exporter has its own
        self.textfile_registry = CollectorRegistry(auto_describe=False)
        self.textfile_registry.register(collector)
        ProcessCollector(registry=self.registry)
        self.textfile = textfile
        if textfile is not None:
            check_textfile(textfile)
        self.server = None if address is None else \
            MetricsServer(*address, self.registry, lambda: self.latest, allowed_uids,
                          host_names)
        self.stopping = threading.Event()
        self.writer: threading.Thread | None = None
        self.write_error = ""

    def publish(self, snapshot: Snapshot) -> None:
        """Makes `snapshot` the one every reader sees (one reference swap)."""
        self.latest = snapshot

    def start(self) -> None:
        """Starts serving and writing."""
        if self.server is not None:
            self.server.start()
            log.info("metrics on http://%s/metrics", self.server.url_host())
        if self.textfile is not None:
            self.write_textfile()
            self.writer = threading.Thread(target=self._write_every, name="pmd-textfile",
                                           daemon=True)
            self.writer.start()

    def write_textfile(self) -> bool:
        """Writes the textfile now (atomic rename); a failure is logged once
        per kind, and False."""
        assert self.textfile is not None
        try:
            write_to_textfile(str(self.textfile), self.textfile_registry)
        except OSError as e:
            why = f"{type(e).__name__}: {e}"
            if why != self.write_error:
                log.error("cannot write the metrics textfile %s: %s", self.textfile, e)
            self.write_error = why
            return False
        if self.write_error:
            log.info("wrote the metrics textfile %s again", self.textfile)
            self.write_error = ""
        return True

    def _write_every(self) -> None:
        while not self.stopping.wait(TEXTFILE_PERIOD):
            self.write_textfile()

    def close(self) -> None:
        """Stops serving; writes the textfile a last time: pmm_pmd_up 0 and no
        processes."""
        self.stopping.set()
        if self.server is not None:
            self.server.close()
        if self.writer is not None:
            self.writer.join(timeout=5)
        if self.textfile is not None:
            # no processes: a stale file must not keep their alerts firing
            self.latest = Snapshot((), self.latest.daemon, up=False)
            self.write_textfile()
