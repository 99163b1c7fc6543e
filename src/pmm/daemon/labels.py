"""What names a process in pmd's metrics besides its pid and comm: its
systemd unit and the unix time it started (cheap reads of /proc, made once
per process)."""

from __future__ import annotations

import time
from pathlib import Path


def systemd_unit(pid: int, proc: str = "/proc") -> str:
    """The systemd unit pid runs in: the last component of its cgroup path
    that ends in .service or .scope ('' when none, or unreadable)."""
    try:
        text = Path(f"{proc}/{pid}/cgroup").read_text(errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        for part in reversed(path.split("/")):
            if part.endswith((".service", ".scope")):
                return part
    return ""


def boot_unix_time() -> float:
    """The unix time the machine booted (CLOCK_BOOTTIME's zero)."""
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
