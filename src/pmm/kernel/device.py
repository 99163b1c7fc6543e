"""Access to /dev/pmm: typed wrappers around each ioctl.

    with Device.open() as dev:
        cfg = dev.get_config()
        dev.start(pid, interval_ms=1000)
        for info in dev.monitored_pids(): ...
        for page in dev.block_pages(pid): ...  # or dev.blocks(pid): all at once

- The device path is $PMM_DEVICE, else /dev/pmm (tests point it at a regular
  file, /dev/null or a chmod 000 file to provoke each error).
- Every errno becomes a typed error from pmm.errors (ModuleNotLoaded,
  PermissionDenied, NoSuchPid, NotMonitored, InvalidValue, NotPmmDevice, ...)
  whose message says what happened and what to do.
- The read-back ioctls (MONITORED_PIDS, READ_BLOCKS, READ_SITES,
  READ_SAMPLES) are cursor loops that read everything in chunks.
- Results are the plain dataclasses of pmm.kernel.model, not ctypes objects.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from pmm.errors import (
    NoSuchPid,
    NotMonitored,
    PermissionDenied,
    PmmError,
    from_errno,
    module_not_loaded,
)
from pmm.kernel import uapi
from pmm.kernel.blockstream import BlockPage
from pmm.kernel.model import (
    Block,
    Bucket,
    ConfigInfo,
    ObjectFile,
    PidInfo,
    Sample,
    Site,
    StatsInfo,
    heap_figures,
)

DEFAULT_DEVICE = uapi.DEVICE_PATH
READ_CHUNK = 1024  # entries per read-back call (<= uapi.MAX_READ)
BLOCK_CHUNK = uapi.MAX_READ  # blocks per PMM_READ_BLOCKS call (196 KiB)
# where struct pmm_block's fields are, for pmm.kernel.blockstream.BlockPage.from_raw
BLOCK_OFFSETS = {name: getattr(uapi.Block, name).offset
                 for name in ("ptr", "prev_ptr", "size", "time_ns", "site", "weight", "op")}


def device_path() -> str:
    """$PMM_DEVICE, else /dev/pmm."""
    return os.environ.get("PMM_DEVICE") or DEFAULT_DEVICE


def pid_exists(pid: int) -> bool:
    """Whether a process with this pid exists (in /proc), monitored or not."""
    return pid > 0 and Path(f"/proc/{pid}").exists()


C = TypeVar("C", bound=ctypes.Structure)
T = TypeVar("T")


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _copy_fields(cls: type[T], c: ctypes.Structure) -> T:
    """The dataclass cls from c's fields of the same names (char arrays as str):
    the model classes name their fields as the uapi structs do."""
    values: dict[str, object] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        v = getattr(c, f.name)
        values[f.name] = _cstr(v) if isinstance(v, bytes) else v
    return cls(**values)


def config_from_c(c: uapi.Config) -> ConfigInfo:
    """The model of a struct pmm_config."""
    return _copy_fields(ConfigInfo, c)


def pid_info_from_c(p: uapi.PidInfo) -> PidInfo:
    """The model of a struct pmm_pid_info."""
    return _copy_fields(PidInfo, p)


def block_from_c(b: uapi.Block) -> Block:
    """The model of a struct pmm_block."""
    return _copy_fields(Block, b)


def site_from_c(s: uapi.SiteStats) -> Site:
    """The model of a struct pmm_site_stats (its call chain cut at MAX_FRAMES)."""
    d = s.desc
    depth = min(int(d.depth), uapi.MAX_FRAMES)
    return Site(
        site=d.site,
        flags=d.flags,
        frames=tuple(int(d.frames[i]) for i in range(depth)),
        file=_cstr(bytes(d.file)),
        func=_cstr(bytes(d.func)),
        line=d.line,
        live_bytes=s.live_bytes,
        live_blocks=s.live_blocks,
        alloc_bytes=s.alloc_bytes,
        free_bytes=s.free_bytes,
        alloc_count=tuple(int(x) for x in s.alloc_count),
        locs=tuple(
            (uapi.loc_obj(loc), uapi.loc_offset(loc)) if loc else None
            for loc in (int(s.loc[i]) for i in range(depth))
        ),
    )


def object_from_c(o: uapi.Object) -> ObjectFile:
    """The model of a struct pmm_object."""
    n = min(int(o.build_id_len), uapi.BUILD_ID_MAX)
    return ObjectFile(
        obj=o.obj,
        path=_cstr(bytes(o.path)),
        build_id=bytes(o.build_id[:n]).hex() if o.flags & uapi.OBJ_F_BUILD_ID and n else None,
        dev=o.dev,
        ino=o.ino,
        size=o.size,
        path_cut=bool(o.flags & uapi.OBJ_F_PATH_CUT),
        deleted=bool(o.flags & uapi.OBJ_F_DELETED),
    )


def sample_from_c(s: uapi.Sample) -> Sample:
    """The model of a struct pmm_sample."""
    heap_free, trimmable, allocator = heap_figures(s.heap.allocator, s.heap.free, s.heap.top)
    return Sample(s.time_ns, s.vm, s.rss, s.rss_anon, s.rss_file, s.rss_shmem,
                  live_bytes=s.live_bytes, live_blocks=s.live_blocks, heap_free=heap_free,
                  heap_trimmable=trimmable, allocator=allocator,
                  cgroup_usage=s.cgroup_usage if s.flags & uapi.SAMPLE_F_MEMCG else None)


def stats_from_c(s: uapi.Stats) -> StatsInfo:
    """The model of a struct pmm_stats."""
    return StatsInfo(
        pid=s.pid,
        buckets=tuple(
            _copy_fields(Bucket, b)
            for b in s.buckets
        ),
        failed_allocs=s.failed_allocs,
        unmatched_frees=s.unmatched_frees,
        older_frees=s.older_frees,
    )


# struct pmm_config's settable fields and their PMM_CFG_* bits
CFG_BITS = {
    "interval_ms": uapi.CFG_INTERVAL,
    "scan": uapi.CFG_SCAN,
    "start_pid": uapi.CFG_START_PID,
    "stop_pid": uapi.CFG_STOP_PID,
    "max_pids": uapi.CFG_MAX_PIDS,
    "max_blocks_per_pid": uapi.CFG_MAX_BLOCKS,
    "max_sites_per_pid": uapi.CFG_MAX_SITES,
    "max_samples_per_pid": uapi.CFG_MAX_SAMPLES,
    "max_pids_per_uid": uapi.CFG_MAX_PIDS_PER_UID,
    "exited_ttl_s": uapi.CFG_EXITED_TTL,
}


class Device:
    """An open /dev/pmm. Use `Device.open()` as a context manager."""

    def __init__(self, fd: int, path: str) -> None:
        self.fd = fd
        self.path = path

    @classmethod
    def open(cls, path: str | None = None) -> Device:
        """Opens the device read-write; raises ModuleNotLoaded/PermissionDenied/..."""
        path = path or device_path()
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            raise module_not_loaded(path) from None
        except PermissionError as e:
            name = errno.errorcode.get(e.errno or errno.EACCES, "EACCES")
            raise PermissionDenied(
                f"opening {path}: permission denied ({name}): the device is root-only by "
                "default; run as root, or have a udev rule grant your group access",
                e.errno,
            ) from None
        except OSError as e:
            raise from_errno(e.errno or errno.EIO, f"opening {path}", path=path) from None
        return cls(fd, path)

    def close(self) -> None:
        """Closes the device; closing it again does nothing."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Device:
        return self

    def __exit__(
        self,
        t: type[BaseException] | None,
        v: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- raw ---------------------------------------------------------------

    def ioctl(self, request: int, arg: ctypes.Structure | None, what: str,
              pid: int | None = None) -> int:
        """One ioctl; an errno becomes the matching PmmError."""
        try:
            if arg is None:
                return fcntl.ioctl(self.fd, request)
            return fcntl.ioctl(self.fd, request, arg, True)  # type: ignore[no-any-return]
        except OSError as e:
            raise from_errno(e.errno or errno.EIO, what, pid=pid, path=self.path) from None

    # -- configuration -----------------------------------------------------

    def get_config(self) -> ConfigInfo:
        """The module's settings, limits and counters (PMM_GET_CONFIG)."""
        c = uapi.Config()
        c.size = ctypes.sizeof(uapi.Config)
        self.ioctl(uapi.GET_CONFIG, c, "reading the configuration")
        return config_from_c(c)

    def set_config(
        self,
        *,
        interval_ms: int | None = None,
        scan: bool | None = None,
        start_pid: int | None = None,
        stop_pid: int | None = None,
        max_pids: int | None = None,
        max_blocks_per_pid: int | None = None,
        max_sites_per_pid: int | None = None,
        max_samples_per_pid: int | None = None,
        max_pids_per_uid: int | None = None,
        exited_ttl_s: int | None = None,
        what: str = "changing the configuration",
    ) -> None:
        """PMM_SET_CONFIG with the `set` bits of the fields given (not None)."""
        c = uapi.Config()
        c.size = ctypes.sizeof(uapi.Config)
        values = {
            "interval_ms": interval_ms,
            "scan": None if scan is None else int(scan),
            "start_pid": start_pid,
            "stop_pid": stop_pid,
            "max_pids": max_pids,
            "max_blocks_per_pid": max_blocks_per_pid,
            "max_sites_per_pid": max_sites_per_pid,
            "max_samples_per_pid": max_samples_per_pid,
            "max_pids_per_uid": max_pids_per_uid,
            "exited_ttl_s": exited_ttl_s,
        }
        for name, value in values.items():
            if value is not None:
                c.set |= CFG_BITS[name]
                setattr(c, name, value)
        # the pid an error names (the module does STOP before START)
        pid = stop_pid if stop_pid is not None else start_pid
        if c.set:
            self.ioctl(uapi.SET_CONFIG, c, what, pid=pid)

    def start(self, pid: int, interval_ms: int | None = None) -> None:
        """Starts monitoring pid, optionally setting the sampling interval too."""
        # one PMM_SET_CONFIG: the module starts the pid first and changes the
        # interval only if that worked, so a refusal changes nothing
        self.set_config(start_pid=pid, interval_ms=interval_ms, what=f"starting pid {pid}")

    def stop(self, pid: int) -> None:
        """Stops monitoring pid; the module drops its blocks, sites and samples."""
        self.set_config(stop_pid=pid, what=f"stopping pid {pid}")

    # -- read-back ---------------------------------------------------------

    def _read_pages(
        self, request: int, buf: ctypes.Array[Any], pid: int, what: str, cursor: int = 0
    ) -> Iterator[int]:
        """Cursor loop over one read-back ioctl until `done`: fills buf a page
        at a time and yields how many entries each page holds."""
        rd = uapi.Read()
        rd.cursor = cursor
        while True:
            rd.pid = pid
            rd.capacity = len(buf)
            rd.buf = ctypes.addressof(buf)
            rd.count = 0
            rd.done = 0
            rd.flags = 0
            rd.reserved = 0
            self.ioctl(request, rd, what, pid=pid if pid else None)
            n = min(int(rd.count), len(buf))
            if n:
                yield n
            if rd.done or n == 0:
                return

    def _read_all(
        self,
        request: int,
        ctype: type[C],
        pid: int,
        convert: Callable[[C], T],
        what: str,
        cursor: int = 0,
    ) -> list[T]:
        """Every entry of one read-back ioctl, converted."""
        buf = (ctype * READ_CHUNK)()
        out: list[T] = []
        for n in self._read_pages(request, buf, pid, what, cursor):
            out.extend(convert(buf[i]) for i in range(n))
        return out

    def monitored_pids(self) -> list[PidInfo]:
        """The processes the module holds (running, or exited and kept) that the
        caller may read, in the order monitoring started; pids as the caller's
        pid namespace numbers them."""
        return self._read_all(
            uapi.MONITORED_PIDS, uapi.PidInfo, 0, pid_info_from_c, "listing monitored pids"
        )

    def pid_info(self, pid: int) -> PidInfo | None:
        """pid's entry among monitored_pids(), or None."""
        for p in self.monitored_pids():
            if p.pid == pid:
                return p
        return None

    def require_monitored(self, pid: int) -> PidInfo:
        """The pid's info, or NoSuchPid/NotMonitored with a helpful message."""
        info = self.pid_info(pid)
        if info is not None:
            return info
        if not pid_exists(pid):
            raise NoSuchPid(
                f"no such process: pid {pid} does not exist and pmm holds nothing for it"
            )
        raise NotMonitored(f"pid {pid} is not monitored (start with `pmctl start {pid}`)")

    def blocks(self, pid: int) -> list[Block]:
        """pid's live blocks (PMM_READ_BLOCKS), in no particular order; NotMonitored
        or NoSuchPid when the module holds nothing for pid. All of them in one
        list: for a process that may hold millions, use `block_pages`."""
        return [b for page in self.block_pages(pid) for b in page.blocks()]

    def block_pages(self, pid: int) -> Iterator[BlockPage]:
        """pid's live blocks (PMM_READ_BLOCKS) a page (one read, up to
        BLOCK_CHUNK blocks) at a time, in no particular order, with no Python
        object per block (pmm.kernel.blockstream). NotMonitored or NoSuchPid when
        the module holds nothing for pid (at the first page). The device
        must stay open while the pages are taken."""
        buf = (uapi.Block * BLOCK_CHUNK)()
        esize = ctypes.sizeof(uapi.Block)
        what = f"reading the blocks of pid {pid}"
        for n in self._read_pages(uapi.READ_BLOCKS, buf, pid, what):
            raw = ctypes.string_at(ctypes.addressof(buf), n * esize)
            yield BlockPage.from_raw(raw, n, BLOCK_OFFSETS, esize)

    def sites(self, pid: int) -> list[Site]:
        """pid's allocation sites with their counters (PMM_READ_SITES), in no
        particular order; NotMonitored or NoSuchPid when the module holds nothing
        for pid."""
        return self._read_all(
            uapi.READ_SITES, uapi.SiteStats, pid, site_from_c, f"reading the sites of pid {pid}"
        )

    def objects(self, pid: int) -> list[ObjectFile]:
        """The files pid's sites' frames are in (PMM_READ_OBJECTS), by number;
        NotMonitored or NoSuchPid when the module holds nothing for pid."""
        return self._read_all(
            uapi.READ_OBJECTS, uapi.Object, pid, object_from_c,
            f"reading the objects of pid {pid}",
        )

    def samples(self, pid: int, cursor: int = 0) -> list[Sample]:
        """Samples from sequence number `cursor` on (0: all the ring holds)."""
        return self._read_all(
            uapi.READ_SAMPLES,
            uapi.Sample,
            pid,
            sample_from_c,
            f"reading the samples of pid {pid}",
            cursor=cursor,
        )

    def stats(self, pid: int) -> StatsInfo:
        """pid's allocation statistics per size range (PMM_GET_STATS);
        NotMonitored or NoSuchPid when the module holds nothing for pid."""
        s = uapi.Stats()
        s.pid = pid
        self.ioctl(uapi.GET_STATS, s, f"reading the statistics of pid {pid}", pid=pid)
        return stats_from_c(s)


__all__ = ["CFG_BITS", "DEFAULT_DEVICE", "Device", "PmmError", "device_path", "pid_exists"]
