"""Writing a file whole or not at all."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def replace_file(path: str | os.PathLike[str], data: bytes | str, mode: int = 0o666,
                 sync: bool = False) -> None:
    """Writes data to path so that a reader sees the old file or the whole new
    one: a new file beside it (O_EXCL, so never through someone's symlink),
    created with `mode` less the umask, then renamed over path (which replaces
    a symlink at path rather than writing through it); with `sync`, flushed
    to disk before the rename. Raises OSError; nothing is left behind then."""
    target = Path(path)
    tmp = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
