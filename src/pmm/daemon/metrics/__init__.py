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

The modules: figures (the snapshot), families (the pmm_* metrics), server
(connections, Host), routes (the pages), access (who may read a profile),
profiles (the profile and targets), addresses (parsing), exporter (the
whole, and the textfile).
"""

from pmm.daemon.metrics.addresses import parse_address, parse_host
from pmm.daemon.metrics.exporter import Exporter
from pmm.daemon.metrics.figures import DaemonFigures, ProcessFigures, Snapshot
from pmm.daemon.metrics.server import MetricsError

__all__ = ["DaemonFigures", "Exporter", "MetricsError", "ProcessFigures", "Snapshot",
           "parse_address", "parse_host"]
