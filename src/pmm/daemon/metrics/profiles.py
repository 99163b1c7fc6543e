"""The endpoint's profiles: a monitored process's live heap as gzipped
profile.proto (`heap_profile`, as `pmctl leaks PID --pprof FILE` builds it),
and the processes that have one as Prometheus HTTP service discovery
(`targets`)."""

from __future__ import annotations

import time

from pmm.daemon.metrics.figures import Snapshot
from pmm.errors import ModuleNotLoaded, NoSuchPid, NotMonitored
from pmm.kernel import sampler


class ProfileError(Exception):
    """A profile request that fails: the HTTP status and a one-line reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def live_start_time(pid: int) -> int | None:
    """pid's start time as /proc/PID/stat gives it now (pmd's key), or None
    when it is gone."""
    try:
        return sampler.read_stat(pid).start_time
    except (sampler.ProcessGone, OSError):
        return None


def replaced(pid: int) -> ProfileError:
    """The 404 for a pid that is no longer the process the snapshot holds."""
    return ProfileError(404, f"pid {pid} is no longer the process pmd monitors "
                        "(it exited; the pid may be another process's now)")


def heap_profile(pid: int, snapshot: Snapshot) -> bytes:
    """pid's live heap as gzipped profile.proto, built as `pmctl leaks PID
    --pprof FILE` builds it (every site, symbolized without the disk cache).
    The module's entry and /proc/PID (before and after) must be the process
    the snapshot holds (same start time). ProfileError 404 when pmd does not
    monitor pid, the module has no entry of it or the pid is another
    process's, 503 when the module is not loaded."""
    from pmm.analysis import leakview
    from pmm.kernel.device import Device
    from pmm.pprof import build_profile
    from pmm.procview import InModule

    fig = snapshot.process(pid)
    if fig is None:
        raise ProfileError(404, f"pid {pid} is not monitored by pmd")
    if live_start_time(pid) != fig.start_time:
        raise replaced(pid)
    try:
        with Device.open() as dev:
            if InModule.require(dev, pid).start_time != fig.start_time:
                raise replaced(pid)
            report = leakview.from_module(dev, pid, time.monotonic_ns(), 0,
                                            disk_cache=False)
    except ModuleNotLoaded as e:
        raise ProfileError(503, str(e)) from None
    except (NotMonitored, NoSuchPid) as e:
        raise ProfileError(404, str(e)) from None
    if live_start_time(pid) != fig.start_time:
        raise replaced(pid)  # the report may be another process's: discarded
    return build_profile(leakview.pprof_samples(report), period=1, time_ns=time.time_ns(),
                         comments=[f"pmd /debug/pprof/heap?pid={pid} ({report.comm}, "
                                   f"{report.state}), from the {report.source}"])


def targets(snapshot: Snapshot, host: str) -> list[dict[str, object]]:
    """Prometheus HTTP service discovery: one target per monitored process
    that has a heap profile (the module tracks its heap: the hook is in it;
    not a process pmd samples from /proc only), at `host` (host:port), with
    its pid as the `pid` URL parameter."""
    return [{"targets": [host],
             "labels": {"__param_pid": str(p.pid), "pid": str(p.pid), "comm": p.comm,
                        "start_time": str(p.start_time)}}
            for p in sorted(snapshot.processes, key=lambda p: (p.pid, p.start_time))
            if p.live_bytes is not None and p.live_blocks]
