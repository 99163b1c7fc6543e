"""What the hostile-user tests run in other processes too (as other users,
inside a pid namespace): light imports only, so that a fresh interpreter
starts quickly on a slow guest."""

from __future__ import annotations

import ctypes
import select
import socket
import struct
import time

from kmod_dev import Dev
from pyroute2.netlink import NLM_F_DUMP, NLM_F_REQUEST
from pyroute2.netlink.generic import GenericNetlinkSocket

from pmm.kernel import uapi
from pmm.kernel.genl import PmmMsg, from_pyroute2


def genl_join(listen: float = 0.0) -> dict[str, object]:
    """Joins the events group; with listen, also whether an event of the
    family arrives within that many seconds."""
    s = GenericNetlinkSocket()
    try:
        s.bind(uapi.GENL_NAME, PmmMsg)
        s.add_membership(uapi.GENL_MCGRP_EVENTS)
        if not listen:
            return {"joined": True}
        raw = s.asyncore.socket
        end = time.monotonic() + listen
        while time.monotonic() < end:
            if select.select([raw], [], [], 0.1)[0]:
                data = raw.recv(1 << 16, socket.MSG_DONTWAIT)
                if len(data) >= 16 and struct.unpack_from("=IH", data)[1] == s.prid:
                    return {"joined": True, "events": True}
        return {"joined": True, "events": False}
    except Exception as e:  # noqa: BLE001 - the errno is the answer
        return {"joined": False, "errno": getattr(e, "code", None) or getattr(e, "errno", None)}
    finally:
        s.close()


def genl_dump() -> dict[str, object]:
    s = GenericNetlinkSocket()
    try:
        s.bind(uapi.GENL_NAME, PmmMsg)
        req = PmmMsg()
        req["cmd"] = uapi.Cmd.GET_PIDS
        req["version"] = uapi.GENL_VERSION
        msgs = list(s.nlm_request(req, msg_type=s.prid, msg_flags=NLM_F_REQUEST | NLM_F_DUMP))
        return {"pids": sorted(from_pyroute2(m).pid for m in msgs)}
    except Exception as e:  # noqa: BLE001 - the errno is the answer
        return {"errno": getattr(e, "code", None) or getattr(e, "errno", None)}
    finally:
        s.close()


def read_err(d: Dev, req: int, pid: int) -> int:
    """The errno of a read-back call of 4 entries (any kind), 0 on success."""
    buf = ctypes.create_string_buffer(4 * ctypes.sizeof(uapi.SiteStats))
    return d.err(req, uapi.Read(pid=pid, capacity=4, buf=ctypes.addressof(buf)))
