"""The service manager's notification protocol (sd_notify), without libsystemd.

A service of Type=notify tells systemd it is ready, what it is doing and
that it is stopping by sending newline-separated "KEY=value" assignments in
one datagram to the AF_UNIX socket named by $NOTIFY_SOCKET: a path, or an
abstract name written with a leading '@'. Outside systemd (no
$NOTIFY_SOCKET) every call is a silent no-op, so a daemon calls these
unconditionally.

    ready("3 processes, module connected")   # READY=1 and a STATUS= line
    status("5 processes, 120 samples written, module connected")
    stopping()                               # STOPPING=1
"""

from __future__ import annotations

import os
import socket

__all__ = ["notify", "ready", "status", "stopping"]


def _address(name: str) -> str | bytes:
    # an abstract socket: '@' stands for the leading NUL byte
    if name.startswith("@"):
        return b"\0" + name[1:].encode()
    return name


def notify(state: str) -> bool:
    """Sends `state` (one or more "KEY=value" lines) to $NOTIFY_SOCKET. True
    when it was sent; False when there is no such socket (not started by
    systemd, or by a unit that is not Type=notify) or it could not be
    reached: a daemon carries on either way."""
    name = os.environ.get("NOTIFY_SOCKET", "")
    if not name or not (name.startswith("/") or name.startswith("@")):
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(state.encode(), _address(name))
    except OSError:
        return False
    return True


def _one_line(text: str) -> str:
    # a newline would start another assignment: STATUS is one line
    return " ".join(text.splitlines())


def ready(status_text: str = "") -> bool:
    """READY=1, with a STATUS= line when status_text is given: the service
    has started (systemctl start returns, units ordered after it start)."""
    return notify("READY=1" + (f"\nSTATUS={_one_line(status_text)}" if status_text else ""))


def status(text: str) -> bool:
    """STATUS=text: the line `systemctl status` shows under the unit."""
    return notify(f"STATUS={_one_line(text)}")


def stopping() -> bool:
    """STOPPING=1: the service is shutting down (after SIGTERM)."""
    return notify("STOPPING=1")
