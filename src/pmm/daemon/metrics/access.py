"""Who may read a process's heap profile: the peer's uid from the kernel's
socket table (sock_diag, never from the request), the process's owner from
/proc, and the rule that joins them (`refusal`)."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
from pathlib import Path

from pmm.daemon.metrics.addresses import is_loopback, plain

log = logging.getLogger("pmd")

ALLOW_OPTION = "--pprof-allow-user"


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


def peer_uid(local: tuple[str, int], peer: tuple[str, int]) -> int | None:
    """The uid owning the other end of a local TCP connection: the socket
    whose local address is `peer` and remote `local`, found by the kernel's
    exact lookup in its socket table (sock_diag; one hash lookup, where
    reading /proc/net/tcp walks every bucket: 20 ms here), when it is live
    (established or closing, with an inode; not time-wait, whose uid reads
    0). None when there is no such socket (a remote peer) or it cannot be
    asked."""
    peer_ip, local_ip = plain(peer[0]), plain(local[0])
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
