"""pmd's metrics as a whole (`Exporter`): the registry over the snapshot the
loop publishes, served over HTTP (pmm.daemon.metrics.server) and/or written
to a node_exporter textfile."""

from __future__ import annotations

import logging
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector, write_to_textfile

from pmm.daemon.metrics.families import ModuleConfig, PmmCollector
from pmm.daemon.metrics.figures import Snapshot
from pmm.daemon.metrics.server import MetricsError, MetricsServer

if TYPE_CHECKING:
    from pmm.kernel.model import ConfigInfo

log = logging.getLogger("pmd")

TEXTFILE_PERIOD = 15.0  # seconds between textfile writes


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
