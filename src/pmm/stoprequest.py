"""SIGINT and SIGTERM as a request to end a loop early (a `pmctl trend
--watch`), so that it ends with what it has instead of the process dying
without a result."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any


class StopRequest:
    """Called, says whether SIGINT or SIGTERM came while installed()."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __call__(self) -> bool:
        """Whether a signal asked to stop."""
        return self.signum is not None

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """The handler: records the signal and returns."""
        self.signum = signum

    @contextmanager
    def installed(self) -> Iterator[StopRequest]:
        """The handler on SIGINT and SIGTERM while in the block, then the old ones."""
        old: dict[int, Any] = {}
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                # a signal ignored on purpose (a background job's SIGINT) stays ignored
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    old[sig] = signal.signal(sig, self.handle)
        except ValueError:  # not the main thread: no handlers there
            pass
        try:
            yield self
        finally:
            for signum, handler in old.items():
                signal.signal(signum, handler)
