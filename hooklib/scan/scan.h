/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pmm-scan's parts: main.c (options, checks, the order of things),
 * target.c (the running process: its objects, the hook's registry, a
 * syscall instruction), snapshot.c (every thread stopped, a copy made by
 * a clone system call, the threads let go), table.c (the module's block
 * table, the hook's unsent records), snapmem.c (the copy's maps and
 * memory, read through /proc/PID/mem), glibc.c (glibc's heaps walked chunk
 * by chunk), sweep.c (mark and sweep, valgrind's categories), report.c
 * (the JSON that pmctl reads). tracee.c and elfmem.c come from ../inject/.
 */
#ifndef PMM_SCAN_H
#define PMM_SCAN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

#include "../../kmod/uapi/pmm.h"
#include "../inject/elfmem.h"
#include "../inject/tracee.h"
#include "../scanreg.h"

enum {
	EXIT_SCANNED = 0,
	EXIT_FAILED = 1,	/* the scan itself failed (its message says why) */
	EXIT_USAGE = 2,
	EXIT_NO_PROCESS = 3,
	EXIT_PERMISSION = 4,	/* ptrace refused: permission, Yama */
	EXIT_TRACED = 5,	/* traced already: a debugger, an attach */
	EXIT_STATIC = 6,	/* statically linked: no hook can be in it */
	EXIT_NOT_MONITORED = 7,	/* the module has no entry for it */
	EXIT_NOT_EXACT = 8,	/* not in exact mode, or a hook without the registry */
	EXIT_SECCOMP = 9,	/* a seccomp filter could refuse or kill the clone */
	EXIT_NO_FORK = 10,	/* the copy could not be made: the clone failed, pid 1 */
	EXIT_NOT_STOPPED = 11,	/* a thread did not stop in time */
	EXIT_GONE = 12,		/* it exited meanwhile */
	EXIT_UNSUPPORTED = 13,	/* the kernel or the module lacks what the scan needs */
};

#define AGE_MIN_MS	50		/* records' stamps run up to a few jiffies off */
#define STOP_TIMEOUT_MS	2000		/* a thread in D state: give up */
#define MAX_THREADS	65536
#define SWEEP_TIMEOUT_S	600
#define WINDOWS_CAP	(8UL << 20)	/* the copy's memory kept: heaps are walked in order */

/* -- the snapshot's maps (snapmem.c) ------------------------------------ */

enum vma_use {
	USE_ROOT,	/* its words are references (minus objects and exclusions) */
	USE_HEAP,	/* a heap walked chunk by chunk: only objects in it */
	USE_NONE,	/* never scanned: not writable, special, device, empty */
};

struct vma {
	uint64_t lo, hi;
	uint64_t offset;
	char perms[5];
	int anon;		/* no file behind it */
	int named;		/* [heap], [stack], [vdso]...: bracketed name */
	int is_heap;		/* [heap] */
	int is_stack;		/* [stack] */
	int shared;		/* MAP_SHARED */
	int wiped;		/* VmFlags wf: zeros in the copy */
	int io;			/* VmFlags io or pf: no pages to read */
	uint64_t resident;	/* Rss + Swap, bytes */
	uint64_t dev, ino;
	enum vma_use use;
	uint64_t root_lo;	/* a thread stack: roots from here (sp - red zone) */
	int hook;		/* libpmmhook.so's file */
};

struct snapmem {
	int fd;			/* /proc/CHILD/mem */
	int pagemap;		/* /proc/CHILD/pagemap, -1: none */
	struct vma *vmas;
	size_t nvmas;
	/* windows of memory read once and kept, up to cap bytes */
	size_t cap, nwin_max, nwin;
	struct window *win;
	int32_t *bucket;
	size_t nbucket, hand;
	struct window *last;	/* the last window snap_at gave, valid [last_lo, last_hi) */
	uint64_t last_lo, last_hi;
	uint64_t bytes_read, reads, evictions;
};

/* Reads /proc/CHILD/maps and smaps into m (m->fd, m->pagemap opened by
 * the caller); 0, or -1 with errno. */
int snapmem_maps(struct snapmem *m, pid_t child);
void snapmem_init_cache(struct snapmem *m, size_t cap);
struct vma *vma_of(const struct snapmem *m, uint64_t addr);
/*
 * The copy's bytes from addr on, kept in a window: a pointer and how many
 * follow (*avail > 0), or NULL if addr is in no readable mapping (*avail:
 * bytes to skip to the next page).
 */
const uint8_t *snap_at(struct snapmem *m, uint64_t addr, uint64_t *avail);
/* len bytes at addr read now, past the windows; what cannot be read is zeros. */
void snap_pread(struct snapmem *m, uint64_t addr, uint8_t *buf, size_t len);
/* len bytes at addr through the windows; 0, or -1 if any is not there. */
int snap_read(struct snapmem *m, uint64_t addr, void *buf, size_t len);
/*
 * Calls fn on [lo, hi)'s pages that hold anything (present or swapped in
 * the copy; everything where there is no page map), read in pieces past
 * the windows. fn gets the address of the bytes and how many.
 */
void snap_stream(struct snapmem *m, uint64_t lo, uint64_t hi,
		 void (*fn)(void *arg, uint64_t addr, const uint8_t *p, size_t len), void *arg);

/* -- blocks and objects (table.c, glibc.c, sweep.c) ---------------------- */

enum obj_kind {
	OBJ_BLOCK,	/* a block of the table: it may be lost */
	OBJ_UNKNOWN,	/* memory in use that the table does not know: traced, never lost */
};

/* state: how it was reached */
enum obj_state {
	ST_UNREACHED = 0,
	ST_REACHED,		/* from the roots through blocks */
	ST_VIA_UNKNOWN,		/* only through unknown objects */
	ST_YOUNG,		/* not reached, younger than the age gate */
	ST_HELD_BY_YOUNG,	/* reached only from young unreached blocks */
	ST_INDIRECT,		/* lost, pointed to by another lost block */
	ST_DEFINITE,		/* lost, a clique's leader */
};

struct obj {
	uint64_t lo, hi;	/* [lo, hi), hi > lo */
	uint64_t time_ns;
	uint64_t size;		/* the block's size (hi - lo may be 1 for size 0) */
	uint32_t site;
	uint8_t kind;
	uint8_t state;
	uint8_t pad[2];
};

/* What the scan found, for the report. */
struct counts {
	uint64_t n, bytes;
};

struct result {
	pid_t pid;
	uint64_t snapshot_ns, age_ns;
	/* the stop */
	int threads;
	uint64_t longest_stop_us, fork_us, stop_all_us;
	/* the table */
	struct counts table;		/* blocks the table had at the snapshot */
	uint64_t pending_allocs, pending_frees;	/* applied from the hook's buffers */
	uint64_t after_snapshot;	/* table blocks allocated after it */
	uint64_t freed_meanwhile;	/* in the table before, gone after: unknown */
	uint64_t unmapped;		/* blocks in no mapping of the copy: dropped */
	uint64_t demoted;		/* blocks the heap walk did not find in use: unknown */
	uint64_t overlapping;		/* older blocks under a newer one: dropped */
	uint64_t buffers_unlisted;	/* hook buffers not in the registry (full) */
	/* the heap */
	const char *allocator;		/* "glibc", or "unknown" */
	uint64_t heaps_walked, heaps_unwalkable;
	uint64_t free_chunks, cached_chunks;	/* free; free in a tcache or fastbin */
	uint64_t freed_in_heap;		/* blocks on a free chunk: dropped */
	struct counts unknown;		/* objects in use the table does not know */
	uint64_t uncopied_bytes;	/* not copied by fork: MADV_DONTFORK, WIPEONFORK */
	/* the sweep */
	struct counts reachable, via_unknown, young, held_by_young, definite, indirect;
	uint64_t roots_bytes, objects_bytes_scanned, scan_us, read_bytes;
	uint64_t table_us, walk_us, graph_us, mark_us;	/* the scan's parts */
};

/* -- snapshot.c --------------------------------------------------------- */

struct thread_regs {
	pid_t tid;
	struct user_regs_struct regs;
	uint8_t *xstate;	/* NT_X86_XSTATE, xlen bytes */
	size_t xlen;
	uint64_t stopped_us, released_us;
};

struct snapshot {
	pid_t pid, child;
	struct thread_regs *t;
	int n;
	uint64_t t1_ns;			/* CLOCK_MONOTONIC with every thread stopped */
	uint64_t longest_stop_us, fork_us, stop_all_us;
};

/* Stops every thread, copies their registers, makes the copy (clone from
 * one of them at syscall_insn) and lets them go; dies on a refusal. */
void snapshot_take(struct snapshot *s, uint64_t syscall_insn);
void snapshot_drop(struct snapshot *s);

/* -- target.c ----------------------------------------------------------- */

struct target_info {
	pid_t pid;
	int pidfd;
	uint64_t registry;		/* pmm_scan_registry's address, 0: no hook */
	uint64_t syscall_insn;		/* a syscall instruction in its code */
	uint64_t hook_dev, hook_ino;	/* libpmmhook.so's file */
	int dynamic;			/* has a dynamic loader */
	int is_init;			/* pid 1 of its pid namespace */
	uint16_t mode;			/* the hook's, read live before the stop */
};

void target_inspect(struct target_info *t);

/* -- table.c ------------------------------------------------------------ */

struct table {
	struct pmm_block *b;
	size_t n, cap;
};

/* Every block the module holds for pid (through dev_fd), or dies. */
void table_read(int dev_fd, pid_t pid, struct table *t);
/* Blocks from a file of struct pmm_block (tests, benchmarks), or dies. */
void table_load(const char *path, struct table *t);

struct records {
	struct pmm_record *r;
	size_t n, cap;
};

/*
 * The objects at the snapshot, sorted and without overlaps: t2's blocks
 * allocated before it, with the hook's unsent records applied, as blocks;
 * t0's blocks gone from t2 and t2's allocated after it, as unknown.
 */
struct obj *objects_build(const struct table *t0, const struct table *t2,
			  const struct records *pending, uint64_t t1_ns, struct snapmem *m,
			  size_t *n, struct result *res);

/* Sorts objects by address and settles overlaps (of two blocks the newer
 * stays, unknown gives way to a block, two unknown become one): the count. */
size_t objects_normalize(struct obj *o, size_t n, struct result *res);

/* The hook's registry in the copy: its unsent records and the ranges that
 * are no references (buffers, tables). */
struct ranges {
	struct { uint64_t lo, hi; } *r;
	size_t n, cap;
};
void ranges_add(struct ranges *r, uint64_t lo, uint64_t hi);
void registry_read(struct snapmem *m, uint64_t registry, struct records *pending,
		   struct ranges *excluded, struct result *res);

/* -- glibc.c ------------------------------------------------------------ */

/*
 * glibc's heaps in the copy ([heap], other arenas' heaps), walked chunk by
 * chunk: a heap that walks is USE_HEAP, its chunks in use that are no
 * block added to *objs as unknown, blocks on no chunk in use demoted to
 * unknown; a heap that does not walk stays a root. *objs stays sorted.
 */
void glibc_walk(struct snapmem *m, struct obj **objs, size_t *n, struct ranges *walked,
		struct result *res);

/* -- sweep.c ------------------------------------------------------------ */

void sweep(struct snapmem *m, struct obj *objs, size_t n, const struct snapshot *s,
	   const struct ranges *excluded, uint64_t age_ns, struct result *res);

/* -- report.c ----------------------------------------------------------- */

void report(const struct result *res, const struct obj *objs, size_t n, struct snapmem *m);

/* -- util --------------------------------------------------------------- */
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n, size_t size);
uint64_t mono_ns(void);

#endif /* PMM_SCAN_H */
