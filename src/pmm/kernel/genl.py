"""The module's generic-netlink events, received with pyroute2.

- `PmmMsg` is the pyroute2 message class of family "pmm" (attributes as in
  kmod/uapi/pmm.h, mirrored by pmm.kernel.uapi.Attr).
- `decode_datagram(data, family_id)` turns a whole datagram into `Event`s
  with `parse_message`, which checks every attribute's size and type as it
  reads the bytes with struct (pyroute2's generic decoder was 3/4 of pmd's
  cost per sample event); anything wrong gives a `MalformedEvent` (pmd logs
  it and goes on). A dump's replies, which pyroute2 receives, are read by
  the same parser (`from_pyroute2`).
- `Listener` resolves the family, joins the "events" group and reads
  datagrams without blocking from a select loop. It also listens to nlctrl's
  "notify" group: when the module is unloaded (CTRL_CMD_DELFAMILY) it drops
  the event socket, and when it is loaded again (CTRL_CMD_NEWFAMILY) it
  resolves the (possibly new) family and group ids and joins again. While
  disconnected it also retries every `retry_s` seconds, in case a
  notification was lost.

Values SQLite cannot hold: the module sends u64s, SQLite stores signed 64-bit
integers (a value >= 2^63 made the insert raise OverflowError). Sizes and
counters (vm, rss*, live_bytes, live_blocks, dropped, a site's live bytes and
blocks) that large are not real, and live_bytes sums what the process itself
reported: they are clamped to 2^63-1 (logged once per process and
attribute) so that the process's other values still count. A start time or
sample time that large would be a key that names nothing: that message is
malformed. `_event`, where parse_message ends, does this.

pyroute2 only resolves, joins and parses here: datagrams are read with
recv(MSG_DONTWAIT) on its socket so that the select loop sees every one
(pyroute2's own asyncio reader would queue them out of select's sight).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyroute2.netlink import (
    CTRL_CMD_DELFAMILY,
    CTRL_CMD_NEWFAMILY,
    GENL_ID_CTRL,
    NLM_F_DUMP,
    NLM_F_REQUEST,
    ctrlmsg,
    genlmsg,
    nla,
)
from pyroute2.netlink.generic import GenericNetlinkSocket

from pmm.kernel import uapi
from pmm.kernel.model import heap_figures
from pmm.units import format_duration

log = logging.getLogger("pmd")

_NLA_TYPES = {
    uapi.Attr.PID: "uint32", uapi.Attr.START_TIME: "uint64", uapi.Attr.TIME: "uint64",
    uapi.Attr.VM: "uint64", uapi.Attr.RSS: "uint64", uapi.Attr.RSS_ANON: "uint64",
    uapi.Attr.RSS_FILE: "uint64", uapi.Attr.RSS_SHMEM: "uint64", uapi.Attr.COMM: "asciiz",
    uapi.Attr.LIVE_BYTES: "uint64", uapi.Attr.LIVE_BLOCKS: "uint64",
    uapi.Attr.DROPPED: "uint64", uapi.Attr.STATE: "uint32", uapi.Attr.PPID: "uint32",
    uapi.Attr.SITE: "site", uapi.Attr.SITE_ID: "uint32", uapi.Attr.PAD: "none",
    uapi.Attr.CGROUP_USAGE: "uint64", uapi.Attr.ALLOCATOR: "uint32",
    uapi.Attr.HEAP_TIME: "uint64", uapi.Attr.HEAP_MAPPED: "uint64",
    uapi.Attr.HEAP_IN_USE: "uint64", uapi.Attr.HEAP_FREE: "uint64",
    uapi.Attr.HEAP_TOP: "uint64", uapi.Attr.HEAP_RETAINED: "uint64",
}


def _nla_map(nested: bool) -> tuple[tuple[str, str], ...]:
    out = [("PMM_A_UNSPEC", "none")]
    for a in sorted(_NLA_TYPES):
        t = _NLA_TYPES[a]
        if nested and t == "site":
            t = "none"  # no nesting inside a site
        out.append((f"PMM_A_{uapi.Attr(a).name}", t))
    return tuple(out)


class PmmMsg(genlmsg):  # type: ignore[misc]
    """A message of genl family "pmm"."""

    nla_map = _nla_map(False)

    class site(nla):  # type: ignore[misc]  # noqa: N801 - pyroute2 names the class by its type
        """The nested attribute of one site in a PMM_CMD_SITES message."""

        nla_map = _nla_map(True)


class MalformedEvent(ValueError):
    """A message that does not match the ABI (missing or mistyped attribute)."""


@dataclass(frozen=True)
class SiteLive:
    """One site's live bytes and blocks, as a SITES event carries them."""

    site: int
    live_bytes: int
    live_blocks: int


@dataclass(frozen=True)
class Event:
    """One decoded message. Absent attributes are None."""

    cmd: int
    pid: int
    start_time: int | None = None
    time: int | None = None
    vm: int | None = None
    rss: int | None = None
    rss_anon: int | None = None
    rss_file: int | None = None
    rss_shmem: int | None = None
    comm: str | None = None
    live_bytes: int | None = None
    live_blocks: int | None = None
    dropped: int | None = None
    state: int | None = None
    ppid: int | None = None
    # SAMPLE: the memory cgroup's usage, and the allocator's last report
    # (struct pmm_heap; allocator PMM_ALLOC_*), when the process has them
    cgroup_usage: int | None = None
    allocator: int | None = None
    heap_time: int | None = None
    heap_mapped: int | None = None
    heap_in_use: int | None = None
    heap_free: int | None = None
    heap_top: int | None = None
    heap_retained: int | None = None
    sites: tuple[SiteLive, ...] = field(default=())

    def heap_figures(self) -> tuple[int | None, int | None, str | None]:
        """(heap_free, heap_trimmable, allocator) as model.Sample has them."""
        if self.allocator is None or self.heap_free is None or self.heap_top is None:
            return None, None, None
        return heap_figures(self.allocator, self.heap_free, self.heap_top)


I64_MAX = (1 << 63) - 1
_KEYS = ("start_time", "time")  # keys of stored rows: never clamped
_clamped: set[tuple[int, str]] = set()  # (pid, attribute) already logged


def _clamp(pid: int, name: str, value: int) -> int:
    if value <= I64_MAX:
        return value
    if (pid, name) not in _clamped:
        if len(_clamped) >= 4096:  # bounded; a process may be said again after this
            _clamped.clear()
        _clamped.add((pid, name))
        log.warning("pid %d: PMM_A_%s %d is beyond 2^63-1: stored as 2^63-1 (said once per "
                    "process and attribute)", pid, name.upper(), value)
    return I64_MAX


# attributes each command must carry (besides PID)
_REQUIRED: dict[int, tuple[str, ...]] = {
    uapi.Cmd.SAMPLE: ("start_time", "time", "vm", "rss"),
    uapi.Cmd.EXITED: ("start_time",),
    uapi.Cmd.STARTED: ("start_time",),
    uapi.Cmd.STOPPED: ("start_time",),
    uapi.Cmd.DROPPED: ("start_time", "dropped"),
    uapi.Cmd.GET_PIDS: ("start_time",),
    uapi.Cmd.SITES: ("start_time", "time"),
}


def _event(cmd: int, values: dict[str, Any], sites: list[SiteLive]) -> Event:
    """The Event of a known command, once its PID and required attributes are there."""
    if "pid" not in values or values["pid"] <= 0:
        raise MalformedEvent(f"command {cmd}: no valid PMM_A_PID")
    pid = values["pid"]
    missing = [k for k in _REQUIRED[cmd] if k not in values]
    if missing:
        raise MalformedEvent(
            f"command {cmd} (pid {pid}): missing "
            + ", ".join("PMM_A_" + m.upper() for m in missing))
    for k in _KEYS:
        if values.get(k, 0) > I64_MAX:
            raise MalformedEvent(f"command {cmd} (pid {pid}): PMM_A_{k.upper()} "
                                 f"{values[k]} is beyond 2^63-1")
    for k, v in values.items():
        if isinstance(v, int):
            values[k] = _clamp(pid, k, v)
    sites = [SiteLive(s.site, _clamp(pid, "live_bytes", s.live_bytes),
                      _clamp(pid, "live_blocks", s.live_blocks)) for s in sites]
    return Event(cmd=cmd, sites=tuple(sites), **values)


_NLMSGHDR = struct.Struct("=IHHII")
_NLA = struct.Struct("=HH")
NLMSG_ERROR = 2
NLMSG_DONE = 3
_SIZES = {"uint32": 4, "uint64": 8, "none": 0}
# attribute number -> its exact payload size, for the fixed-size attributes
# (PAD's length is the kernel's alignment business)
_ATTR_SIZES = {int(a): _SIZES[k] for a, k in _NLA_TYPES.items()
               if k in _SIZES and a != uapi.Attr.PAD}


def check_attrs(buf: bytes, start: int, end: int, nested: bool = False) -> None:
    """The kernel's policy, checked before pyroute2 decodes: every known
    attribute has its exact size (pyroute2 would read past a short one), the
    comm is NUL-terminated, a site is a well-formed nest."""
    off = start
    while off < end:
        if off + _NLA.size > end:
            raise MalformedEvent(f"{end - off} stray bytes after the attributes")
        n, t = _NLA.unpack_from(buf, off)
        t &= 0x3FFF
        if n < _NLA.size or off + n > end:
            raise MalformedEvent(f"attribute {t} has a bad length {n}")
        kind = _NLA_TYPES.get(t)
        if kind is not None:
            size = n - _NLA.size
            want = _ATTR_SIZES.get(t)
            if want is not None and size != want:
                raise MalformedEvent(f"attribute PMM_A_{uapi.Attr(t).name} has {size} bytes, "
                                     f"not {want}")
            if kind == "asciiz" and (size == 0 or buf[off + n - 1] != 0):
                raise MalformedEvent(f"attribute PMM_A_{uapi.Attr(t).name} is not a "
                                     "NUL-terminated string")
            if kind == "site":
                if nested:
                    raise MalformedEvent("PMM_A_SITE nested in a site")
                check_attrs(buf, off + _NLA.size, off + n, nested=True)
        off += (n + 3) & ~3


_U32 = struct.Struct("=I")
_U64 = struct.Struct("=Q")
_GENLHDR = struct.Struct("=BBH")
_INT = {"uint32": _U32, "uint64": _U64}
# attribute number -> (Event field, struct) for the flat integer attributes
_FLAT = {a: (a.name.lower(), _INT[k]) for a, k in _NLA_TYPES.items()
         if k in _INT and a != uapi.Attr.SITE_ID}


def _site(buf: bytes, off: int, end: int) -> SiteLive:
    got: dict[int, int] = {}
    while off < end:
        n, t = _NLA.unpack_from(buf, off)
        t &= 0x3FFF
        if t in (uapi.Attr.SITE_ID, uapi.Attr.LIVE_BYTES, uapi.Attr.LIVE_BLOCKS):
            got[t] = _INT[_NLA_TYPES[uapi.Attr(t)]].unpack_from(buf, off + 4)[0]
        off += (n + 3) & ~3
    for a in (uapi.Attr.SITE_ID, uapi.Attr.LIVE_BYTES):
        if a not in got:
            raise MalformedEvent(f"attribute PMM_A_{a.name} is not an integer: None")
    return SiteLive(got[uapi.Attr.SITE_ID], got[uapi.Attr.LIVE_BYTES],
                    got.get(uapi.Attr.LIVE_BLOCKS, 0))


def parse_message(buf: bytes) -> Event:
    """One message of family "pmm" (netlink header included) to an Event: one
    walk that checks each attribute as `check_attrs` does and reads the values
    with struct. It gives what pyroute2's PmmMsg reads from the same bytes
    (a host test holds the two to the same results) at a fraction of the
    cost (pmd decodes every sample event)."""
    start = _NLMSGHDR.size + _GENLHDR.size
    if len(buf) < start:
        raise MalformedEvent(f"message of {len(buf)} bytes has no genl header")
    cmd = _GENLHDR.unpack_from(buf, _NLMSGHDR.size)[0]
    values: dict[str, Any] = {}
    site_spans: list[tuple[int, int]] = []  # read after the walk has checked all
    off, end = start, len(buf)
    while off < end:
        if off + _NLA.size > end:
            raise MalformedEvent(f"{end - off} stray bytes after the attributes")
        n, t = _NLA.unpack_from(buf, off)
        t &= 0x3FFF
        if n < _NLA.size or off + n > end:
            raise MalformedEvent(f"attribute {t} has a bad length {n}")
        flat = _FLAT.get(t)
        if flat is not None:
            if n - _NLA.size != flat[1].size:
                check_attrs(buf, off, off + n)  # raises, naming the attribute
            values[flat[0]] = flat[1].unpack_from(buf, off + 4)[0]
        elif t == uapi.Attr.COMM:
            if n == _NLA.size or buf[off + n - 1] != 0:
                check_attrs(buf, off, off + n)
            values["comm"] = buf[off + 4 : off + n - 1].split(b"\0", 1)[0].decode(
                "utf-8", "replace")
        elif t == uapi.Attr.SITE:
            check_attrs(buf, off + _NLA.size, off + n, nested=True)
            site_spans.append((off + 4, off + n))
        elif t == uapi.Attr.SITE_ID:
            check_attrs(buf, off, off + n)
        off += (n + 3) & ~3
    if cmd not in _REQUIRED:
        raise MalformedEvent(f"unknown command {cmd!r}")
    return _event(cmd, values, [_site(buf, a, b) for a, b in site_spans])


def decode_datagram(data: bytes, family_id: int) -> list[Event | MalformedEvent]:
    """Every message of one datagram: Events, and MalformedEvent for the bad
    ones (a truncated datagram ends the walk with one MalformedEvent)."""
    out: list[Event | MalformedEvent] = []
    off = 0
    while off + _NLMSGHDR.size <= len(data):
        length, mtype, _flags, _seq, _pid = _NLMSGHDR.unpack_from(data, off)
        if length < _NLMSGHDR.size or off + length > len(data):
            out.append(MalformedEvent(f"truncated netlink message ({length} bytes at {off})"))
            return out
        chunk = data[off : off + length]
        off += (length + 3) & ~3
        if mtype == family_id:
            try:
                out.append(parse_message(chunk))
            except MalformedEvent as e:
                out.append(e)
            except Exception as e:  # noqa: BLE001 - a message must never stop pmd
                out.append(MalformedEvent(f"undecodable message: {type(e).__name__}: {e}"))
        elif mtype in (NLMSG_ERROR, NLMSG_DONE) or mtype < 16:
            continue
        else:
            out.append(MalformedEvent(f"message of unexpected type {mtype}"))
    if off < len(data):
        out.append(MalformedEvent(f"{len(data) - off} trailing bytes"))
    return out


def from_pyroute2(msg: Any) -> Event:
    """The Event of a PmmMsg that pyroute2 parsed from a datagram (a dump's
    reply), read from the message's own bytes by parse_message: one decoder
    for everything the module sends."""
    length = msg["header"]["length"]
    return parse_message(bytes(msg.data[msg.offset : msg.offset + length]))


def _ctrl_changes(data: bytes) -> list[tuple[int, str]]:
    """(CTRL_CMD_NEWFAMILY | DELFAMILY, family name) of an nlctrl datagram."""
    out: list[tuple[int, str]] = []
    off = 0
    while off + _NLMSGHDR.size <= len(data):
        length, mtype, _f, _s, _p = _NLMSGHDR.unpack_from(data, off)
        if length < _NLMSGHDR.size or off + length > len(data):
            break
        if mtype == GENL_ID_CTRL:
            try:
                m = ctrlmsg(data[off : off + length])
                m.decode()
                name = m.get_attr("CTRL_ATTR_FAMILY_NAME")
                if m["cmd"] in (CTRL_CMD_NEWFAMILY, CTRL_CMD_DELFAMILY) and name:
                    out.append((int(m["cmd"]), str(name)))
            except Exception:  # noqa: BLE001
                log.debug("undecodable nlctrl message")
        off += (length + 3) & ~3
    return out


RCVBUF = 8 << 20


def _big_rcvbuf(sk: socket.socket) -> None:
    """Room for bursts while pmd is busy (a commit, the detector's first
    import): 8 MiB, beyond rmem_max when root (SO_RCVBUFFORCE)."""
    try:
        sk.setsockopt(socket.SOL_SOCKET, 33, RCVBUF)  # SO_RCVBUFFORCE
    except OSError:
        with contextlib.suppress(OSError):
            sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)


def _quiet(sock: Any) -> None:
    # pyroute2 logs "protocol not found" at error level on every failed bind
    sock.asyncore.module_err_level = "debug"


class Listener:
    """Events of family "pmm", across module reloads. Not thread-safe."""

    def __init__(self, retry_s: float = 5.0,
                 clock: Callable[[], float] | None = None) -> None:
        import time

        self.retry_s = retry_s
        self.clock = clock or time.monotonic
        self.family_id = 0
        self.sock: Any = None
        self.ctrl: Any = None
        self.next_retry = 0.0
        self.connected_once = False
        self.lost = 0  # datagrams lost to ENOBUFS (kernel buffer overrun)
        self.connects = 0  # successful joins: more than one means events may be lost
        try:
            ctrl = GenericNetlinkSocket()
            ctrl.bind("nlctrl", ctrlmsg)
            ctrl.add_membership("notify")
            ctrl.asyncore.socket.setblocking(False)
            self.ctrl = ctrl
        except Exception as e:  # noqa: BLE001
            log.warning("cannot watch generic netlink families (%s): polling every %s",
                        e, format_duration(retry_s))

    @property
    def connected(self) -> bool:
        """Whether the listener has joined the module's event group."""
        return self.sock is not None

    def fds(self) -> list[int]:
        """The sockets to wait on for reading: the one that watches generic-netlink
        families and, when connected, the event socket."""
        out = []
        if self.ctrl is not None:
            out.append(self.ctrl.asyncore.socket.fileno())
        if self.sock is not None:
            out.append(self.sock.asyncore.socket.fileno())
        return out

    def connect(self) -> bool:
        """Resolves "pmm" and joins "events". False (quietly) if absent."""
        if self.sock is not None:
            return True
        self.next_retry = self.clock() + self.retry_s
        sock = GenericNetlinkSocket()
        _quiet(sock)
        try:
            sock.bind(uapi.GENL_NAME, PmmMsg)
            sock.add_membership(uapi.GENL_MCGRP_EVENTS)
            sock.asyncore.socket.setblocking(False)
            _big_rcvbuf(sock.asyncore.socket)
        except Exception as e:  # noqa: BLE001
            sock.close()
            if getattr(e, "code", None) not in (errno.ENOENT, errno.ENOTSUP):
                log.warning("cannot join genl family %s (its events group needs "
                            "CAP_NET_ADMIN): %s", uapi.GENL_NAME, e)
            return False
        self.sock = sock
        self.family_id = int(sock.prid)
        log.info("%s genl family %s (id %d), group %s",
                 "reconnected to" if self.connected_once else "connected to",
                 uapi.GENL_NAME, self.family_id, uapi.GENL_MCGRP_EVENTS)
        self.connected_once = True
        self.connects += 1
        return True

    def disconnect(self, why: str) -> None:
        """Leaves the event group, logging why, and tries to connect again after
        `retry_s`; does nothing when not connected."""
        if self.sock is not None:
            log.warning("lost genl family %s (%s): waiting for it to come back",
                        uapi.GENL_NAME, why)
            self.sock.close()
            self.sock = None
            self.family_id = 0
            self.next_retry = self.clock() + self.retry_s

    def timeout(self) -> float | None:
        """Seconds until poll() wants to retry connecting (None: not needed)."""
        if self.sock is not None:
            return None
        return max(0.0, self.next_retry - self.clock())

    def poll(self) -> list[Event | MalformedEvent]:
        """Handles family changes, retries, and returns the pending events."""
        if self.ctrl is not None:
            changes = [c for d in self._drain(self.ctrl) for c in _ctrl_changes(d)]
            for cmd, name in changes:
                if name != uapi.GENL_NAME:
                    continue
                if cmd == CTRL_CMD_DELFAMILY:
                    self.disconnect("module unloaded")
                elif cmd == CTRL_CMD_NEWFAMILY:
                    self.disconnect("family re-registered")
                    self.connect()
        if self.sock is None and self.clock() >= self.next_retry:
            self.connect()
        if self.sock is None:
            return []
        out: list[Event | MalformedEvent] = []
        while True:
            try:
                data = self.sock.asyncore.socket.recv(1 << 16, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.ENOBUFS:
                    self.lost += 1
                    log.warning("receive buffer overrun: the module's events were lost")
                    continue
                self.disconnect(str(e))
                break
            if not data:
                break
            out.extend(decode_datagram(data, self.family_id))
        return out

    @staticmethod
    def _drain(sock: Any) -> list[bytes]:
        chunks: list[bytes] = []
        while True:
            try:
                d = sock.asyncore.socket.recv(1 << 16, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            if not d:
                break
            chunks.append(d)
        return chunks

    def dump_pids(self) -> list[Event]:
        """The processes the module monitors now (PMM_CMD_GET_PIDS on a separate
        socket; needs CAP_NET_ADMIN)."""
        sock = GenericNetlinkSocket()
        _quiet(sock)
        try:
            sock.bind(uapi.GENL_NAME, PmmMsg)
            req = PmmMsg()
            req["cmd"] = uapi.Cmd.GET_PIDS
            req["version"] = uapi.GENL_VERSION
            out = []
            for m in sock.nlm_request(req, msg_type=sock.prid,
                                      msg_flags=NLM_F_REQUEST | NLM_F_DUMP):
                try:
                    out.append(from_pyroute2(m))
                except MalformedEvent as e:
                    log.warning("malformed entry of the list of monitored processes skipped: %s", e)
            return out
        except Exception as e:  # noqa: BLE001
            log.info("cannot ask the module which processes it monitors (needs "
                     "CAP_NET_ADMIN): %s", e)
            return []
        finally:
            sock.close()

    def close(self) -> None:
        """Closes its sockets (the event socket and the family watcher)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.ctrl is not None:
            self.ctrl.close()
            self.ctrl = None
