/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the scan finds: the objects at the copy (the table's blocks and
 * memory in use it does not know), how each was reached, and the figures
 * report.c prints. table.c, glibc.c and sweep.c fill them.
 */
#ifndef PMM_SCAN_RESULT_H
#define PMM_SCAN_RESULT_H

#include <stdint.h>
#include <sys/types.h>

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

#endif /* PMM_SCAN_RESULT_H */
