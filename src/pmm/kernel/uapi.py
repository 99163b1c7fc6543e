"""Python mirror of the pmm ABI header, kmod/uapi/pmm.h.

Every struct, constant and ioctl number here must match the header;
tests/host/test_abi.py compiles a C program against the header and compares
each size, field offset and ioctl number with this module.
"""

from __future__ import annotations

import ctypes
from enum import IntEnum

from ioctl_opt import IO, IOW, IOWR

DEVICE_NAME = "pmm"
DEVICE_PATH = "/dev/pmm"
ABI_VERSION = 4

COMM_LEN = 16
MAX_FRAMES = 32
SITE_FILE_LEN = 128
SITE_FUNC_LEN = 64
MAX_BATCH = 4096
MAX_READ = 4096


class Op(IntEnum):
    """enum pmm_op: the allocator call a record or a block stands for."""

    NONE = 0
    MALLOC = 1
    CALLOC = 2
    REALLOC = 3
    FREE = 4
    POSIX_MEMALIGN = 5
    ALIGNED_ALLOC = 6
    MEMALIGN = 7
    VALLOC = 8
    PVALLOC = 9
    MMAP = 10
    MUNMAP = 11
    MREMAP = 12


OP_NR = 13

REC_F_FAILED = 1 << 0
REC_F_FREED = 1 << 1
REC_F_TAGGED = 1 << 2
REC_F_PREV_FREED = 1 << 3
REC_F_OLDER = 1 << 4
REC_F_ALL = REC_F_FAILED | REC_F_FREED | REC_F_TAGGED | REC_F_PREV_FREED | REC_F_OLDER
ALLOC_TAG_BITS = 24

SITE_F_SOURCE = 1 << 0
SITE_F_ALL = SITE_F_SOURCE

CFG_INTERVAL = 1 << 0
CFG_SCAN = 1 << 1
CFG_START_PID = 1 << 2
CFG_STOP_PID = 1 << 3
CFG_MAX_PIDS = 1 << 4
CFG_MAX_BLOCKS = 1 << 5
CFG_MAX_SITES = 1 << 6
CFG_MAX_SAMPLES = 1 << 7
CFG_MAX_PIDS_PER_UID = 1 << 8
CFG_EXITED_TTL = 1 << 9
CFG_ALL = (1 << 10) - 1

INTERVAL_MIN_MS = 10
INTERVAL_MAX_MS = 3600000
MAX_PIDS_LIMIT = 1024
MAX_BLOCKS_LIMIT = 16 << 20
MAX_SITES_LIMIT = 1 << 20
MAX_SAMPLES_LIMIT = 1 << 20
EXITED_TTL_MIN_S = 1
EXITED_TTL_MAX_S = 604800

STATE_RUNNING = 1
STATE_EXITED = 2

SIZE_BUCKETS = 7
# Upper bounds of the size buckets of Stats (None: unbounded).
SIZE_BUCKET_LIMITS: tuple[int | None, ...] = (16, 256, 1024, 4096, 16384, 65536, None)

u16 = ctypes.c_uint16
u32 = ctypes.c_uint32
s32 = ctypes.c_int32
u64 = ctypes.c_uint64


class Record(ctypes.Structure):
    """struct pmm_record: one allocation event the hook sends (the pid is the sender's)."""

    _fields_ = [
        ("ptr", u64),
        ("prev_ptr", u64),
        ("size", u64),
        ("time_ns", u64),
        ("site", u32),
        ("weight", u32),
        ("op", u16),
        ("flags", u16),
        ("alloc_tag", u32),
    ]


class RecordBatch(ctypes.Structure):
    """struct pmm_record_batch: PMM_RECORD_LOG's argument, a pointer to `count`
    records; the module sets `accepted`."""

    _fields_ = [
        ("records", u64),
        ("count", u32),
        ("flags", u32),
        ("accepted", u32),
        ("reserved", u32),
    ]


class Site(ctypes.Structure):
    """struct pmm_site: an allocation site a process registers once
    (PMM_REGISTER_SITE): its call chain and, when known, function, file and line."""

    _fields_ = [
        ("site", u32),
        ("flags", u32),
        ("depth", u32),
        ("line", u32),
        ("frames", u64 * MAX_FRAMES),
        ("file", ctypes.c_char * SITE_FILE_LEN),
        ("func", ctypes.c_char * SITE_FUNC_LEN),
    ]


class Config(ctypes.Structure):
    """struct pmm_config: PMM_SET_CONFIG's argument (the fields whose `set` bit is
    on) and what PMM_GET_CONFIG fills: the settings, limits and counters."""

    _fields_ = [
        ("size", u32),
        ("set", u32),
        ("interval_ms", u32),
        ("scan", u32),
        ("start_pid", s32),
        ("stop_pid", s32),
        ("max_pids", u32),
        ("max_blocks_per_pid", u32),
        ("max_sites_per_pid", u32),
        ("max_samples_per_pid", u32),
        ("abi_version", u32),
        ("max_pids_per_uid", u32),
        ("exited_ttl_s", u32),
        ("reserved", u32),
        ("monitored_pids", u64),
        ("records_accepted", u64),
        ("records_dropped", u64),
        ("unmatched_frees", u64),
        ("kmem_bytes", u64),
        ("records_queued", u64),
        ("older_frees", u64),
        ("reserved2", u64 * 1),
    ]


class PidInfo(ctypes.Structure):
    """struct pmm_pid_info: one process the module holds (PMM_MONITORED_PIDS)."""

    _fields_ = [
        ("pid", s32),
        ("ppid", s32),
        ("state", u32),
        ("reserved", u32),
        ("comm", ctypes.c_char * COMM_LEN),
        ("start_time_ns", u64),
        ("monitor_start_ns", u64),
        ("exit_time_ns", u64),
        ("live_blocks", u64),
        ("live_bytes", u64),
        ("records", u64),
        ("dropped_records", u64),
        ("unmatched_frees", u64),
        ("pending_frees", u64),
        ("samples", u64),
        ("vm_bytes", u64),
        ("rss_bytes", u64),
        ("older_frees", u64),
        ("reserved2", u64 * 1),
    ]


class Block(ctypes.Structure):
    """struct pmm_block: one live block (PMM_READ_BLOCKS)."""

    _fields_ = [
        ("ptr", u64),
        ("prev_ptr", u64),
        ("size", u64),
        ("time_ns", u64),
        ("site", u32),
        ("weight", u32),
        ("op", u16),
        ("reserved", u16 * 3),
    ]


class SiteStats(ctypes.Structure):
    """struct pmm_site_stats: a site's description and its weighted counters
    (PMM_READ_SITES)."""

    _fields_ = [
        ("desc", Site),
        ("live_bytes", u64),
        ("live_blocks", u64),
        ("alloc_bytes", u64),
        ("free_bytes", u64),
        ("alloc_count", u64 * OP_NR),
        ("loc", u64 * MAX_FRAMES),
        ("reserved", u64 * 3),
    ]


# pmm_site_stats.loc: object number << LOC_OBJ_SHIFT | file offset; 0: none
LOC_OBJ_SHIFT = 48
MAX_OBJECTS = 4096
BUILD_ID_MAX = 20
OBJ_PATH_LEN = 256
OBJ_F_BUILD_ID = 1 << 0
OBJ_F_PATH_CUT = 1 << 1
OBJ_F_DELETED = 1 << 2
OBJ_F_ALL = (1 << 3) - 1


def loc_obj(loc: int) -> int:
    """The object number of a pmm_site_stats.loc (0: the frame has none)."""
    return loc >> LOC_OBJ_SHIFT


def loc_offset(loc: int) -> int:
    """The file offset of a pmm_site_stats.loc."""
    return loc & ((1 << LOC_OBJ_SHIFT) - 1)


class Object(ctypes.Structure):
    """struct pmm_object: a file a site's frames are in (PMM_READ_OBJECTS)."""

    _fields_ = [
        ("obj", u32),
        ("flags", u32),
        ("build_id_len", u32),
        ("reserved", u32),
        ("dev", u64),
        ("ino", u64),
        ("size", u64),
        ("build_id", ctypes.c_uint8 * BUILD_ID_MAX),
        ("reserved2", u32),
        ("path", ctypes.c_char * OBJ_PATH_LEN),
    ]


ALLOC_NONE = 0
ALLOC_GLIBC = 1
ALLOC_JEMALLOC = 2
ALLOC_NR = 3
HEAP_MAX_BYTES = 1 << 57
SAMPLE_F_MEMCG = 1 << 0
SAMPLE_F_ALL = SAMPLE_F_MEMCG


class Heap(ctypes.Structure):
    """struct pmm_heap: the allocator's own report of its heap (PMM_HEAP_REPORT),
    and the last one in each sample; the header says what each field holds for
    each allocator."""

    _fields_ = [
        ("size", u32),
        ("allocator", u32),
        ("time_ns", u64),
        ("mapped", u64),
        ("in_use", u64),
        ("free", u64),
        ("top", u64),
        ("retained", u64),
        ("reserved", u64),
    ]


class Sample(ctypes.Structure):
    """struct pmm_sample: one memory sample the module took, sizes in bytes
    (PMM_READ_SAMPLES)."""

    _fields_ = [
        ("time_ns", u64),
        ("vm", u64),
        ("rss", u64),
        ("rss_anon", u64),
        ("rss_file", u64),
        ("rss_shmem", u64),
        ("live_bytes", u64),
        ("live_blocks", u64),
        ("cgroup_usage", u64),
        ("flags", u32),
        ("reserved", u32),
        ("heap", Heap),
    ]


class BucketStats(ctypes.Structure):
    """struct pmm_bucket_stats: the calls and bytes of one allocation size range."""

    _fields_ = [
        ("malloc_count", u64),
        ("calloc_count", u64),
        ("realloc_count", u64),
        ("free_count", u64),
        ("alloc_bytes", u64),
        ("free_bytes", u64),
    ]


class Stats(ctypes.Structure):
    """struct pmm_stats: a process's allocation statistics per size range
    (PMM_GET_STATS)."""

    _fields_ = [
        ("pid", s32),
        ("reserved", u32),
        ("buckets", BucketStats * SIZE_BUCKETS),
        ("failed_allocs", u64),
        ("unmatched_frees", u64),
        ("older_frees", u64),
        ("reserved2", u64 * 3),
    ]


class Read(ctypes.Structure):
    """struct pmm_read: the cursor of the read-back ioctls (PMM_MONITORED_PIDS,
    PMM_READ_BLOCKS, PMM_READ_SITES, PMM_READ_SAMPLES, PMM_READ_OBJECTS)."""

    _fields_ = [
        ("pid", s32),
        ("capacity", u32),
        ("buf", u64),
        ("cursor", u64),
        ("count", u32),
        ("done", u32),
        ("total", u64),
        ("flags", u32),
        ("reserved", u32),
    ]


IOC_MAGIC = 0xB7

RECORD_LOG = IOWR(IOC_MAGIC, 1, RecordBatch)
SET_CONFIG = IOW(IOC_MAGIC, 2, Config)
GET_CONFIG = IOWR(IOC_MAGIC, 3, Config)
MONITORED_PIDS = IOWR(IOC_MAGIC, 4, Read)
REGISTER_SITE = IOW(IOC_MAGIC, 5, Site)
READ_BLOCKS = IOWR(IOC_MAGIC, 6, Read)
READ_SITES = IOWR(IOC_MAGIC, 12, Read)  # 7: ABI 2's, with a smaller SiteStats
READ_SAMPLES = IOWR(IOC_MAGIC, 13, Read)  # 8: ABI 3's, with a smaller Sample
GET_STATS = IOWR(IOC_MAGIC, 9, Stats)
QUERY_SELF = IO(IOC_MAGIC, 10)
READ_OBJECTS = IOWR(IOC_MAGIC, 11, Read)
HEAP_REPORT = IOW(IOC_MAGIC, 14, Heap)

# The clock page: mmap(CLOCK_SIZE, PROT_READ, MAP_SHARED, fd, CLOCK_OFFSET).
CLOCK_OFFSET = 0
CLOCK_SIZE = 4096


class Clock(ctypes.Structure):
    """struct pmm_clock: the device's read-only clock page (CLOCK_MONOTONIC_COARSE, ns)."""

    _fields_ = [("mono_ns", u64)]


# errno of RECORD_LOG / REGISTER_SITE from a process that is not monitored.
ENOTMONITORED = 67  # ENOLINK

GENL_NAME = "pmm"
GENL_VERSION = 1
GENL_MCGRP_EVENTS = "events"


class Cmd(IntEnum):
    """enum pmm_genl_cmd: the generic-netlink commands (the module's events, and the
    dump of the processes it monitors)."""

    UNSPEC = 0
    SAMPLE = 1
    EXITED = 2
    STARTED = 3
    STOPPED = 4
    DROPPED = 5
    GET_PIDS = 6
    SITES = 7


class Attr(IntEnum):
    """enum pmm_genl_attr: the attributes of the generic-netlink messages."""

    UNSPEC = 0
    PID = 1
    START_TIME = 2
    TIME = 3
    VM = 4
    RSS = 5
    RSS_ANON = 6
    RSS_FILE = 7
    RSS_SHMEM = 8
    COMM = 9
    LIVE_BYTES = 10
    LIVE_BLOCKS = 11
    DROPPED = 12
    STATE = 13
    PPID = 14
    SITE = 15
    SITE_ID = 16
    PAD = 17
    CGROUP_USAGE = 18
    ALLOCATOR = 19
    HEAP_TIME = 20
    HEAP_MAPPED = 21
    HEAP_IN_USE = 22
    HEAP_FREE = 23
    HEAP_TOP = 24
    HEAP_RETAINED = 25


STRUCTS: dict[str, type[ctypes.Structure]] = {
    "pmm_record": Record,
    "pmm_record_batch": RecordBatch,
    "pmm_site": Site,
    "pmm_config": Config,
    "pmm_pid_info": PidInfo,
    "pmm_block": Block,
    "pmm_site_stats": SiteStats,
    "pmm_heap": Heap,
    "pmm_sample": Sample,
    "pmm_bucket_stats": BucketStats,
    "pmm_stats": Stats,
    "pmm_read": Read,
    "pmm_object": Object,
    "pmm_clock": Clock,
}

IOCTLS: dict[str, int] = {
    "PMM_RECORD_LOG": RECORD_LOG,
    "PMM_SET_CONFIG": SET_CONFIG,
    "PMM_GET_CONFIG": GET_CONFIG,
    "PMM_MONITORED_PIDS": MONITORED_PIDS,
    "PMM_REGISTER_SITE": REGISTER_SITE,
    "PMM_READ_BLOCKS": READ_BLOCKS,
    "PMM_READ_SITES": READ_SITES,
    "PMM_READ_SAMPLES": READ_SAMPLES,
    "PMM_GET_STATS": GET_STATS,
    "PMM_QUERY_SELF": QUERY_SELF,
    "PMM_READ_OBJECTS": READ_OBJECTS,
    "PMM_HEAP_REPORT": HEAP_REPORT,
}
