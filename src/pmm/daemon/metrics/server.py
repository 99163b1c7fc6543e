"""The HTTP endpoint (`MetricsServer`): bound at construction, one thread per
connection. Every request must name pmd in its Host header (its address,
localhost over loopback, or a --metrics-host name; else 421), so a web page
whose DNS name was rebound to pmd's address reads nothing. Connections are
capped per peer: its uid, from the kernel's socket table, or its address
when remote (see verify_request)."""

from __future__ import annotations

import contextlib
import errno
import http.server
import logging
import socket
import threading
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from pmm.daemon.metrics.access import ALLOW_OPTION, peer_uid
from pmm.daemon.metrics.addresses import LOCALHOST, is_address, is_loopback, parse_host, plain
from pmm.daemon.metrics.figures import Snapshot
from pmm.daemon.metrics.routes import _Handler
from pmm.errors import PmmError

log = logging.getLogger("pmd")

HEADER_DEADLINE_S = 10.0  # the request line and headers must all arrive within this
MAX_CONNECTIONS = 16  # connections served at once; more are closed at once
RESERVED_CONNECTIONS = 4  # of those, the last free ones: root's and allowed users' only
PEER_CONNECTIONS = 4  # at once from one other user, or from one remote address
REMOTE_CONNECTIONS = 8  # at once from all remote addresses together
HOST_OPTION = "--metrics-host"


class MetricsError(PmmError):
    """The metrics endpoint or textfile cannot be set up (one line: why)."""


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
        self.bound = plain(str(self.server_address[0]))
        # a name --metrics gave (it resolved to the bound address) is pmd's too
        with contextlib.suppress(ValueError):
            name = parse_host(host)[0]
            if not is_address(name):
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
        arrived = plain(local)
        try:
            ip = plain(host)
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
        return f"address {plain(peer[0])}", False

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
