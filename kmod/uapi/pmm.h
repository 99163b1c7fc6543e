/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * pmm: process memory monitor, user/kernel ABI.
 *
 * The one ABI header: the module, libpmmhook.so and the tests include it;
 * src/pmm/kernel/uapi.py mirrors it and tests/host/test_abi.py checks the mirror.
 *
 * Rules: fixed-width types, explicit padding (reserved fields must be zero),
 * user pointers as __u64, every flags field has a ..._F_ALL mask, structs that
 * may grow carry their own size.
 */
#ifndef _UAPI_LINUX_PMM_H
#define _UAPI_LINUX_PMM_H

#include <linux/types.h>
#include <linux/ioctl.h>

#define PMM_DEVICE_NAME		"pmm"		/* /dev/pmm */
#define PMM_ABI_VERSION		4

#define PMM_COMM_LEN		16
#define PMM_MAX_FRAMES		32
#define PMM_SITE_FILE_LEN	128
#define PMM_SITE_FUNC_LEN	64

/* Upper bound on records in one PMM_RECORD_LOG batch. */
#define PMM_MAX_BATCH		4096
/* Upper bound on entries in one read-back call. */
#define PMM_MAX_READ		4096

/* Operations carried by a record. */
enum pmm_op {
	PMM_OP_NONE = 0,
	PMM_OP_MALLOC = 1,
	PMM_OP_CALLOC = 2,
	PMM_OP_REALLOC = 3,	/* prev_ptr: the block it replaces (0: like malloc) */
	PMM_OP_FREE = 4,
	PMM_OP_POSIX_MEMALIGN = 5,
	PMM_OP_ALIGNED_ALLOC = 6,
	PMM_OP_MEMALIGN = 7,
	PMM_OP_VALLOC = 8,
	PMM_OP_PVALLOC = 9,
	PMM_OP_MMAP = 10,	/* anonymous mappings only */
	PMM_OP_MUNMAP = 11,	/* size: length unmapped */
	PMM_OP_MREMAP = 12,	/* prev_ptr: old address */
	PMM_OP_NR = 13,
};

/* A record of an anonymous mapping: not a heap block, it carries no tag. */
static inline int pmm_op_is_map(__u16 op)
{
	return op == PMM_OP_MMAP || op == PMM_OP_MUNMAP || op == PMM_OP_MREMAP;
}

/* pmm_record.flags */
#define PMM_REC_F_FAILED	(1U << 0)	/* allocation returned NULL; ptr is 0 */
/*
 * A heap allocation that was freed again before the sender's batch left:
 * counts the allocation and its free at the site, and leaves no block (the
 * hook cancels a free against its allocation in its own unsent buffer, so
 * short-lived blocks cost the kernel one record and no table work).
 * Not with FREE, MUNMAP, MMAP, MREMAP or FAILED.
 */
#define PMM_REC_F_FREED		(1U << 1)
/*
 * FREE, or REALLOC with prev_ptr: alloc_tag holds the low PMM_ALLOC_TAG_BITS
 * bits of the freed block's allocation time_ns, and the free pairs only with
 * a block whose time matches. Without it the free takes the newest block at
 * that address older than itself, which is wrong when another thread freed
 * and reused the address in between and its records are still in flight.
 */
#define PMM_REC_F_TAGGED	(1U << 2)
/*
 * REALLOC with prev_ptr whose old block's allocation the same thread sent
 * FREED before it (earlier in this batch, or in one of its earlier ones):
 * that record counted the old block's free already, so none is applied for
 * prev_ptr, which is kept for display ("Prev Pointer"). A block grown by
 * steps then costs the kernel no table work until its last step. Only with
 * REALLOC, a non-zero ptr and prev_ptr; not with TAGGED or FAILED.
 */
#define PMM_REC_F_PREV_FREED	(1U << 3)
/*
 * FREE, or REALLOC with prev_ptr: the block freed was allocated before
 * monitoring began (the sender recorded no allocation at that address since
 * it began; a hook attached to a running process, or started late, sees
 * many). Counted as a free of an older block (older_frees), with no table
 * lookup and no pending free. Not with TAGGED, PREV_FREED or FAILED.
 */
#define PMM_REC_F_OLDER		(1U << 4)
#define PMM_REC_F_ALL		(PMM_REC_F_FAILED | PMM_REC_F_FREED | PMM_REC_F_TAGGED | \
				 PMM_REC_F_PREV_FREED | PMM_REC_F_OLDER)
#define PMM_ALLOC_TAG_BITS	24

/*
 * One allocation event. 48 bytes.
 * The pid is never in the record: the kernel uses current->tgid.
 * time_ns is on CLOCK_MONOTONIC's scale, taken by the hook at the call; the
 * kernel orders records of different threads at the same address by it (and
 * mappings by it), so a free that reaches the kernel before its allocation
 * still pairs. Only that order is relied on: the hook's address clock keeps
 * stamps within about a jiffy of CLOCK_MONOTONIC and ordered per address.
 */
struct pmm_record {
	__u64 ptr;
	__u64 prev_ptr;		/* REALLOC, MREMAP: old pointer; else 0 */
	__u64 size;		/* bytes requested (FREE: 0, MUNMAP: length) */
	__u64 time_ns;		/* CLOCK_MONOTONIC */
	__u32 site;		/* site id from PMM_REGISTER_SITE, 0: unknown */
	__u32 weight;		/* 1: exact; sampling weight when sampled (>= 1) */
	__u16 op;		/* enum pmm_op */
	__u16 flags;		/* PMM_REC_F_* */
	__u32 alloc_tag;	/* PMM_REC_F_TAGGED: see there; else 0 */
};

/*
 * PMM_RECORD_LOG argument. accepted: the valid records taken, including any
 * dropped for a limit (counted in dropped_records); on EINVAL it is the
 * index of the first bad record (the records before it were applied).
 */
struct pmm_record_batch {
	__u64 records;		/* user pointer to struct pmm_record[count] */
	__u32 count;		/* 1..PMM_MAX_BATCH */
	__u32 flags;		/* must be 0 */
	__u32 accepted;		/* out: records taken */
	__u32 reserved;		/* must be 0 */
};

/* pmm_site.flags */
#define PMM_SITE_F_SOURCE	(1U << 0)	/* file, func and line are set */
#define PMM_SITE_F_ALL		(PMM_SITE_F_SOURCE)

/*
 * A site (allocation source) of the calling process, registered once.
 * Site ids are chosen by the process (1..max_sites_per_pid is not
 * required; any non-zero __u32; the hook numbers them in order of first
 * use, so that an id says nothing of where the code is loaded). A record
 * may name a site before it is registered: the kernel counts it under an
 * undescribed site.
 */
struct pmm_site {
	__u32 site;		/* non-zero */
	__u32 flags;		/* PMM_SITE_F_* */
	__u32 depth;		/* frames used, 0..PMM_MAX_FRAMES */
	__u32 line;
	__u64 frames[PMM_MAX_FRAMES];	/* return addresses, innermost first */
	char file[PMM_SITE_FILE_LEN];	/* NUL-terminated */
	char func[PMM_SITE_FUNC_LEN];	/* NUL-terminated */
};

/* pmm_config.set: which fields PMM_SET_CONFIG applies. */
#define PMM_CFG_INTERVAL	(1U << 0)
#define PMM_CFG_SCAN		(1U << 1)
#define PMM_CFG_START_PID	(1U << 2)	/* start_pid; 0 means the caller */
#define PMM_CFG_STOP_PID	(1U << 3)	/* stop_pid; 0 means the caller */
#define PMM_CFG_MAX_PIDS	(1U << 4)
#define PMM_CFG_MAX_BLOCKS	(1U << 5)
#define PMM_CFG_MAX_SITES	(1U << 6)
#define PMM_CFG_MAX_SAMPLES	(1U << 7)
#define PMM_CFG_MAX_PIDS_PER_UID	(1U << 8)
#define PMM_CFG_EXITED_TTL	(1U << 9)
#define PMM_CFG_ALL		((1U << 10) - 1)

/* Bounds on configurable values (inclusive). */
#define PMM_INTERVAL_MIN_MS	10
#define PMM_INTERVAL_MAX_MS	3600000
#define PMM_MAX_PIDS_LIMIT	1024
#define PMM_MAX_BLOCKS_LIMIT	(16U << 20)
#define PMM_MAX_SITES_LIMIT	(1U << 20)
#define PMM_MAX_SAMPLES_LIMIT	(1U << 20)
#define PMM_EXITED_TTL_MIN_S	1
#define PMM_EXITED_TTL_MAX_S	604800		/* a week */

/*
 * PMM_SET_CONFIG in, PMM_GET_CONFIG out. size must be sizeof(struct
 * pmm_config) (so the struct can grow). On GET the counters are filled and
 * set is 0; on SET the counters and reserved fields must be 0.
 *
 * Pid numbers, here and in every ioctl, are in the caller's pid namespace;
 * a process outside it does not exist for the caller. Changing interval,
 * scan or a limit needs CAP_SYS_ADMIN. Starting, stopping or reading a pid
 * needs ptrace-read access to it (the kernel's own check, LSMs included),
 * both for the caller and for whoever opened the file descriptor; an
 * exited process is judged by its last credentials.
 *
 * Errors: START of a process that is already monitored: EEXIST (an exited
 * entry with the same number does not count: that is another process);
 * no such process: ESRCH; a kernel thread: EINVAL; max_pids reached:
 * ENOSPC; the caller's user already monitors max_pids_per_uid processes
 * (CAP_SYS_ADMIN is exempt): EDQUOT. STOP, and the per-pid reads, of a pid
 * with no entry the caller may read: ENOENT if the process exists, ESRCH if
 * not; of a running process the caller may not read: EPERM. STOP is done
 * before START; a failing START/STOP leaves the other values unchanged.
 * Lowered limits apply to what comes next (nothing is evicted); the sample
 * ring grows up to max_samples_per_pid and never shrinks. An exited entry
 * is removed exited_ttl_s seconds after the exit or after the last per-pid
 * read of it (READ_BLOCKS, READ_SITES, READ_SAMPLES, GET_STATS), whichever
 * is later; a new exited_ttl_s applies from the next exit or read.
 */
struct pmm_config {
	__u32 size;
	__u32 set;		/* PMM_CFG_* (SET only) */
	__u32 interval_ms;	/* sampler period */
	__u32 scan;		/* 1: sampler on, 0: off (exits are still noticed) */
	__s32 start_pid;	/* GET: last started; SET: pid to start */
	__s32 stop_pid;		/* GET: last stopped; SET: pid to stop */
	__u32 max_pids;
	__u32 max_blocks_per_pid;
	__u32 max_sites_per_pid;
	__u32 max_samples_per_pid;
	__u32 abi_version;	/* GET: PMM_ABI_VERSION */
	__u32 max_pids_per_uid;	/* monitored pids one user may start */
	__u32 exited_ttl_s;	/* seconds an exited entry is kept */
	__u32 reserved;
	/* GET only, global counters since load */
	__u64 monitored_pids;
	__u64 records_accepted;
	__u64 records_dropped;
	__u64 unmatched_frees;
	__u64 kmem_bytes;	/* kernel memory held by pmm now */
	__u64 records_queued;	/* applied by another thread (contention) */
	__u64 older_frees;	/* frees of blocks older than monitoring */
	__u64 reserved2[1];
};

/* pmm_pid_info.state, as /proc/pmm/pid prints it ("State: 1") */
#define PMM_STATE_RUNNING	1
#define PMM_STATE_EXITED	2

struct pmm_pid_info {
	__s32 pid;
	__s32 ppid;
	__u32 state;		/* PMM_STATE_* */
	__u32 reserved;
	char comm[PMM_COMM_LEN];
	__u64 start_time_ns;	/* task start, CLOCK_BOOTTIME: (pid, start) is unique */
	__u64 monitor_start_ns;	/* CLOCK_BOOTTIME */
	__u64 exit_time_ns;	/* CLOCK_BOOTTIME, 0 while running */
	__u64 live_blocks;	/* "Log count" */
	__u64 live_bytes;
	__u64 records;		/* records accepted */
	__u64 dropped_records;	/* refused for a limit (blocks, sites, pending) */
	__u64 unmatched_frees;
	__u64 pending_frees;	/* frees waiting for their allocation */
	__u64 samples;		/* samples taken (ring may hold fewer) */
	__u64 vm_bytes;		/* latest sample, 0 before the first */
	__u64 rss_bytes;
	__u64 older_frees;	/* frees of blocks older than monitoring */
	__u64 reserved2[1];
};

/* One live block. */
struct pmm_block {
	__u64 ptr;
	__u64 prev_ptr;		/* REALLOC/MREMAP: the pointer it replaced */
	__u64 size;
	__u64 time_ns;		/* CLOCK_MONOTONIC from the record */
	__u32 site;
	__u32 weight;
	__u16 op;
	__u16 reserved[3];
};

/*
 * Per-site counters. Every figure is weighted: a record of weight w counts
 * as w events of w x size bytes (live_blocks too). Frees (and munmaps, and
 * the old block of a realloc/mremap) count at the site of the block freed.
 * pmm_pid_info.live_bytes is weighted; its live_blocks counts table entries.
 */
struct pmm_site_stats {
	struct pmm_site desc;	/* depth 0 and no flags: not registered */
	__u64 live_bytes;
	__u64 live_blocks;
	__u64 alloc_bytes;
	__u64 free_bytes;
	__u64 alloc_count[PMM_OP_NR];	/* by op (FREE, MUNMAP: frees) */
	/*
	 * desc.frames[i] as (object, file offset): PMM_LOC_OBJ(loc) is the
	 * pmm_object.obj of the file it is in, PMM_LOC_OFFSET(loc) the offset
	 * in that file; 0 when the frame was in no regular file's mapping when
	 * the site was registered (or past PMM_MAX_OBJECTS). The kernel finds
	 * them at PMM_REGISTER_SITE, while the frames' code is mapped, so they
	 * outlive the process; they carry no load address.
	 */
	__u64 loc[PMM_MAX_FRAMES];
	__u64 reserved[3];
};

#define PMM_LOC_OBJ_SHIFT	48
#define PMM_LOC_OBJ(loc)	((__u32)((loc) >> PMM_LOC_OBJ_SHIFT))
#define PMM_LOC_OFFSET(loc)	((loc) & ((1ULL << PMM_LOC_OBJ_SHIFT) - 1))

/* Objects (mapped files) a process's sites point into, at most this many. */
#define PMM_MAX_OBJECTS		4096
#define PMM_BUILD_ID_MAX	20
#define PMM_OBJ_PATH_LEN	256

/* pmm_object.flags */
#define PMM_OBJ_F_BUILD_ID	(1U << 0)	/* build_id holds its GNU build-id */
#define PMM_OBJ_F_PATH_CUT	(1U << 1)	/* path is the start of a longer one */
#define PMM_OBJ_F_DELETED	(1U << 2)	/* unlinked when first seen */
#define PMM_OBJ_F_ALL		((1U << 3) - 1)

/*
 * A file a site's frame was in (PMM_READ_OBJECTS), numbered from 1 in the
 * order the kernel first saw it. Objects are only added, each before the
 * first site that names it: read the sites first, then the objects. path is as the process saw it (its root),
 * at that time; dev (major:minor as the kernel encodes it in stat's
 * st_dev), ino and size identify the file that was mapped.
 */
struct pmm_object {
	__u32 obj;
	__u32 flags;		/* PMM_OBJ_F_* */
	__u32 build_id_len;	/* 0..PMM_BUILD_ID_MAX */
	__u32 reserved;
	__u64 dev;
	__u64 ino;
	__u64 size;
	__u8 build_id[PMM_BUILD_ID_MAX];
	__u32 reserved2;
	char path[PMM_OBJ_PATH_LEN];	/* NUL-terminated */
};

/* pmm_heap.allocator: who made a heap report. */
#define PMM_ALLOC_NONE		0	/* no report yet */
#define PMM_ALLOC_GLIBC		1	/* mallinfo2() */
#define PMM_ALLOC_JEMALLOC	2	/* mallctl("stats.*") */
#define PMM_ALLOC_NR		3

/* Upper bound on each figure of a heap report (a 57-bit address space). */
#define PMM_HEAP_MAX_BYTES	(1ULL << 57)

/*
 * PMM_HEAP_REPORT: what the calling process's allocator says of its heap,
 * read by the hook off the hot path about once per sampling interval. The
 * figures are the process's own claims, kept for display only: the kernel
 * checks their form and copies the last report into each sample.
 *   glibc (mallinfo2):  mapped = arena + hblkhd, in_use = uordblks +
 *       hblkhd, free = fordblks (free chunks and the top, in every arena:
 *       in_use + free == mapped), top = keepcost (the main arena's top
 *       chunk, which malloc_trim(0) gives back; the free chunks below it
 *       give back only their whole pages, which mallinfo2 cannot tell).
 *   jemalloc (epoch, then stats.*): mapped = mapped, in_use = allocated
 *       (<= active <= mapped), free = resident - allocated when resident
 *       is larger, else 0 (dirty pages, page slack, metadata),
 *       retained = retained (virtual only), top = 0.
 * Fields another allocator does not fill must be 0; size must be
 * sizeof(struct pmm_heap); time_ns must be 0 (in samples: the
 * CLOCK_BOOTTIME at which the kernel took the report). Every figure at
 * most PMM_HEAP_MAX_BYTES. Returns the sampling interval in ms (the hook
 * reports again after it). Not monitored: ENOLINK; bad form: EINVAL.
 */
struct pmm_heap {
	__u32 size;
	__u32 allocator;	/* PMM_ALLOC_* */
	__u64 time_ns;
	__u64 mapped;
	__u64 in_use;
	__u64 free;
	__u64 top;
	__u64 retained;
	__u64 reserved;		/* must be 0 */
};

/* pmm_sample.flags */
#define PMM_SAMPLE_F_MEMCG	(1U << 0)	/* cgroup_usage is set */
#define PMM_SAMPLE_F_ALL	(PMM_SAMPLE_F_MEMCG)

/*
 * One sample taken by the sampler thread, bytes. live_bytes and
 * live_blocks are the process's as pmm_pid_info has them at that instant;
 * cgroup_usage is its memory cgroup's usage (cgroup v2 memory.current, v1
 * memory.usage_in_bytes) when it is in one other than the root;
 * heap is its last PMM_HEAP_REPORT (allocator 0: none yet).
 */
struct pmm_sample {
	__u64 time_ns;		/* CLOCK_BOOTTIME */
	__u64 vm;
	__u64 rss;
	__u64 rss_anon;
	__u64 rss_file;
	__u64 rss_shmem;
	__u64 live_bytes;	/* weighted */
	__u64 live_blocks;	/* table entries */
	__u64 cgroup_usage;	/* PMM_SAMPLE_F_MEMCG */
	__u32 flags;		/* PMM_SAMPLE_F_* */
	__u32 reserved;
	struct pmm_heap heap;
};

/* Size buckets of struct pmm_stats: <=16 ... >65536 */
#define PMM_SIZE_BUCKETS	7
/* upper bounds: 16, 256, 1024, 4096, 16384, 65536, unbounded */

struct pmm_bucket_stats {
	__u64 malloc_count;	/* malloc and the aligned family, mmap */
	__u64 calloc_count;
	__u64 realloc_count;
	__u64 free_count;	/* matched frees of blocks in this bucket */
	__u64 alloc_bytes;
	__u64 free_bytes;
};

/* Per-pid size statistics (PMM_GET_STATS). */
struct pmm_stats {
	__s32 pid;		/* in */
	__u32 reserved;		/* must be 0 */
	struct pmm_bucket_stats buckets[PMM_SIZE_BUCKETS];
	__u64 failed_allocs;
	__u64 unmatched_frees;
	__u64 older_frees;	/* PMM_REC_F_OLDER: not looked up, not pending */
	__u64 reserved2[3];
};

/*
 * Cursor-based read-back for PMM_MONITORED_PIDS, PMM_READ_BLOCKS,
 * PMM_READ_SITES, PMM_READ_SAMPLES and PMM_READ_OBJECTS. Start with cursor
 * 0; each call fills up to capacity entries into buf and sets count and the
 * cursor for the next call; done is 1 when nothing is left. The cursor is
 * opaque (samples: the sequence number of the next sample). Entries are
 * struct pmm_pid_info, pmm_block, pmm_site_stats, pmm_sample and pmm_object
 * respectively. pid 0 means the caller. Blocks and sites come in hash-table
 * order; objects in obj order; pids in start order (only those the caller
 * may read, numbered in its pid namespace). A read never fails for
 * concurrent changes but may then skip or repeat entries (blocks and sites
 * when their table is resized meanwhile).
 */
struct pmm_read {
	__s32 pid;		/* ignored (must be 0) for PMM_MONITORED_PIDS */
	__u32 capacity;		/* entries buf can hold, 1..PMM_MAX_READ */
	__u64 buf;		/* user pointer */
	__u64 cursor;		/* in/out */
	__u32 count;		/* out */
	__u32 done;		/* out */
	__u64 total;		/* out: entries in all (at the time of the call) */
	__u32 flags;		/* must be 0 */
	__u32 reserved;		/* must be 0 */
};

#define PMM_IOC_MAGIC		0xB7

#define PMM_RECORD_LOG		_IOWR(PMM_IOC_MAGIC, 1, struct pmm_record_batch)
#define PMM_SET_CONFIG		_IOW(PMM_IOC_MAGIC, 2, struct pmm_config)
#define PMM_GET_CONFIG		_IOWR(PMM_IOC_MAGIC, 3, struct pmm_config)
#define PMM_MONITORED_PIDS	_IOWR(PMM_IOC_MAGIC, 4, struct pmm_read)
#define PMM_REGISTER_SITE	_IOW(PMM_IOC_MAGIC, 5, struct pmm_site)
#define PMM_READ_BLOCKS		_IOWR(PMM_IOC_MAGIC, 6, struct pmm_read)
/* 7 was READ_SITES of ABI 2 (a smaller pmm_site_stats): now ENOTTY */
#define PMM_READ_SITES		_IOWR(PMM_IOC_MAGIC, 12, struct pmm_read)
/* 8 was READ_SAMPLES of ABI 3 (a 48-byte pmm_sample): now ENOTTY */
#define PMM_READ_SAMPLES	_IOWR(PMM_IOC_MAGIC, 13, struct pmm_read)
#define PMM_GET_STATS		_IOWR(PMM_IOC_MAGIC, 9, struct pmm_stats)
/* Returns 1 if the caller is monitored, 0 if not (cheap; for the hook). */
#define PMM_QUERY_SELF		_IO(PMM_IOC_MAGIC, 10)
#define PMM_READ_OBJECTS	_IOWR(PMM_IOC_MAGIC, 11, struct pmm_read)
#define PMM_HEAP_REPORT		_IOW(PMM_IOC_MAGIC, 14, struct pmm_heap)

/*
 * PMM_RECORD_LOG, PMM_REGISTER_SITE and PMM_HEAP_REPORT from a process that is not monitored
 * fail with ENOLINK: the hook stops sending until PMM_QUERY_SELF says 1.
 */
#define PMM_ENOTMONITORED_ERRNO	ENOLINK

/*
 * The clock page: mmap(NULL, PMM_CLOCK_SIZE, PROT_READ, MAP_SHARED, fd,
 * PMM_CLOCK_OFFSET) on /dev/pmm maps one read-only page whose mono_ns is
 * CLOCK_MONOTONIC_COARSE, refreshed every jiffy while anything maps it. Where
 * the clocksource cannot be read from user space (hpet, acpi_pm), the hook
 * keeps its logical record clock from falling behind it with one load
 * instead of a vDSO call per record. A writable or executable mapping is
 * refused (EPERM), another offset or size too (EINVAL).
 */
#define PMM_CLOCK_OFFSET	0
#define PMM_CLOCK_SIZE		4096

struct pmm_clock {
	__u64 mono_ns;		/* CLOCK_MONOTONIC_COARSE, ns */
};

/*
 * Generic netlink: family "pmm", multicast group "events". Joining the
 * group needs CAP_SYS_ADMIN, and its events carry pids of the initial pid
 * namespace. PMM_CMD_GET_PIDS needs CAP_NET_ADMIN and lists only the
 * processes the requester may read, numbered in its pid namespace.
 */
#define PMM_GENL_NAME		"pmm"
#define PMM_GENL_VERSION	1
#define PMM_GENL_MCGRP_EVENTS	"events"

enum pmm_genl_cmd {
	PMM_CMD_UNSPEC,
	PMM_CMD_SAMPLE,		/* event: a sample was taken */
	PMM_CMD_EXITED,		/* event: a monitored process exited */
	PMM_CMD_STARTED,	/* event: monitoring started */
	PMM_CMD_STOPPED,	/* event: monitoring stopped */
	PMM_CMD_DROPPED,	/* event: records were dropped (rate-limited) */
	PMM_CMD_GET_PIDS,	/* dump: one PMM_CMD_GET_PIDS message per pid */
	PMM_CMD_SITES,		/* event: per-site live figures, every N samples */
	__PMM_CMD_MAX,
};
#define PMM_CMD_MAX (__PMM_CMD_MAX - 1)

enum pmm_genl_attr {
	PMM_A_UNSPEC,
	PMM_A_PID,		/* u32 */
	PMM_A_START_TIME,	/* u64 ns, CLOCK_BOOTTIME */
	PMM_A_TIME,		/* u64 ns, CLOCK_BOOTTIME */
	PMM_A_VM,		/* u64 bytes */
	PMM_A_RSS,		/* u64 bytes */
	PMM_A_RSS_ANON,		/* u64 bytes */
	PMM_A_RSS_FILE,		/* u64 bytes */
	PMM_A_RSS_SHMEM,	/* u64 bytes */
	PMM_A_COMM,		/* string */
	PMM_A_LIVE_BYTES,	/* u64 */
	PMM_A_LIVE_BLOCKS,	/* u64 */
	PMM_A_DROPPED,		/* u64 */
	PMM_A_STATE,		/* u32 PMM_STATE_* */
	PMM_A_PPID,		/* u32 */
	PMM_A_SITE,		/* nested: one site of PMM_CMD_SITES */
	PMM_A_SITE_ID,		/* u32, inside PMM_A_SITE */
	PMM_A_PAD,
	PMM_A_CGROUP_USAGE,	/* u64 bytes; SAMPLE, when in a memory cgroup */
	PMM_A_ALLOCATOR,	/* u32 PMM_ALLOC_*; SAMPLE, after a heap report, */
	PMM_A_HEAP_TIME,	/* u64 ns; with the pmm_heap fields below */
	PMM_A_HEAP_MAPPED,	/* u64 bytes */
	PMM_A_HEAP_IN_USE,	/* u64 bytes */
	PMM_A_HEAP_FREE,	/* u64 bytes */
	PMM_A_HEAP_TOP,		/* u64 bytes */
	PMM_A_HEAP_RETAINED,	/* u64 bytes */
	__PMM_A_MAX,
};
#define PMM_A_MAX (__PMM_A_MAX - 1)

#endif /* _UAPI_LINUX_PMM_H */
