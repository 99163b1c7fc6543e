"""The endpoint's pages (`_Handler`): GET /metrics, /debug/pprof/heap?pid=N
(only to a loopback peer that may read the process's call sites) and
/debug/pprof/targets; every other method is refused. A request whose
request line and headers do not all arrive within the server's deadline is
cut off; one whose Host is not pmd's is answered before anything is read."""

from __future__ import annotations

import contextlib
import http.server
import json
import logging
import socket
import threading
import urllib.parse
from typing import TYPE_CHECKING

from prometheus_client.exposition import choose_encoder

from pmm.daemon.metrics.access import peer_uid, process_owner, refusal
from pmm.daemon.metrics.addresses import is_loopback
from pmm.daemon.metrics.profiles import (
    ProfileError,
    heap_profile,
    live_start_time,
    replaced,
    targets,
)

if TYPE_CHECKING:
    from pmm.daemon.metrics.server import MetricsServer

log = logging.getLogger("pmd")

REQUEST_TIMEOUT_S = 30.0  # a client that sends nothing is let go


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
            self._text(404, str(replaced(pid)))
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
