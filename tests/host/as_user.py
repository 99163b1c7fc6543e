"""Running a function as another user, in a forked child (tests run as root)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any


def as_user(uid: int, gid: int, fn: Callable[[], Any],
            env: dict[str, str | None] | None = None, groups: Sequence[int] = ()) -> Any:
    """fn() run by a forked child with only that uid and gid (and the
    supplementary `groups`; no capabilities) and env applied (None removes a
    variable); its JSON-able result, or ["error", message] if it raised."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            for k, v in (env or {}).items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            os.setgroups(list(groups))
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            try:
                out: Any = fn()
            except Exception as e:  # noqa: BLE001 - reported to the parent
                out = ["error", f"{type(e).__name__}: {e}"]
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)
