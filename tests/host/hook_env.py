"""The environment the host's hook tests start programs with, and what the
fake-device build logs of what they send."""

from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from pmm.kernel import uapi

# the ioctl numbers (_IOC_NR) the fake device logs
NR_RECORD_LOG = 1
NR_SET_CONFIG = 2
NR_REGISTER_SITE = 5
NR_QUERY_SELF = 10
NR_HEAP_REPORT = 14


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without PMM_* and LD_PRELOAD, plus extra."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PMM_") and k != "LD_PRELOAD"}
    env.update(extra)
    return env


@dataclass
class FakeCall:
    """One call the hook made to the fake device: who made it, which ioctl,
    what the fake module answered (0, 1 or -errno) and what it carried."""
    pid: int
    tid: int
    nr: int
    result: int
    records: list[uapi.Record] = field(default_factory=list)
    site: uapi.Site | None = None
    config: uapi.Config | None = None
    heap: uapi.Heap | None = None


def fake_log_calls(log: Path) -> list[FakeCall]:
    """Every call in a PMM_FAKE_LOG file, in order."""
    data, off, size = log.read_bytes(), 0, ctypes.sizeof(uapi.Record)
    calls: list[FakeCall] = []
    while off < len(data):
        pid, tid, nr, result, count, nbytes = struct.unpack_from("IIIiII", data, off)
        off += 24
        call = FakeCall(pid, tid, nr, result)
        if nr == NR_RECORD_LOG:
            assert nbytes == count * size
            call.records = [uapi.Record.from_buffer_copy(data, off + i * size)
                            for i in range(count)]
        elif nr == NR_REGISTER_SITE:
            assert nbytes == ctypes.sizeof(uapi.Site)
            call.site = uapi.Site.from_buffer_copy(data, off)
        elif nr == NR_SET_CONFIG:
            assert nbytes == ctypes.sizeof(uapi.Config)
            call.config = uapi.Config.from_buffer_copy(data, off)
        elif nr == NR_HEAP_REPORT:
            assert nbytes == ctypes.sizeof(uapi.Heap)
            call.heap = uapi.Heap.from_buffer_copy(data, off)
        else:
            assert nbytes == 0
        off += nbytes
        calls.append(call)
    assert off == len(data)
    return calls


def fake_log_batches(log: Path) -> list[tuple[int, list[uapi.Record]]]:
    """The batches the fake module accepted, in order: the sending thread's
    id and the records of each."""
    return [(c.tid, c.records) for c in fake_log_calls(log)
            if c.nr == NR_RECORD_LOG and c.result == 0]


def fake_log_sites(log: Path) -> dict[int, uapi.Site]:
    """The sites the fake module accepted, by id (the last description)."""
    return {c.site.site: c.site for c in fake_log_calls(log)
            if c.nr == NR_REGISTER_SITE and c.result == 0 and c.site is not None}
