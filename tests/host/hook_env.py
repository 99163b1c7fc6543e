"""The environment the host's hook tests start programs with, and what the
fake-device build logs of what they send."""

from __future__ import annotations

import ctypes
import os
import struct
from pathlib import Path

from pmctl import uapi


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without PMM_* and LD_PRELOAD, plus extra."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PMM_") and k != "LD_PRELOAD"}
    env.update(extra)
    return env


def fake_log_batches(log: Path) -> list[tuple[int, list[uapi.Record]]]:
    """The batches in a PMM_FAKE_LOG file, in order: the sending thread's id
    and the records of each."""
    data, off, size = log.read_bytes(), 0, ctypes.sizeof(uapi.Record)
    batches: list[tuple[int, list[uapi.Record]]] = []
    while off < len(data):
        tid, count = struct.unpack_from("II", data, off)
        off += 8
        batches.append((tid, [uapi.Record.from_buffer_copy(data, off + i * size)
                              for i in range(count)]))
        off += count * size
    assert off == len(data)
    return batches
