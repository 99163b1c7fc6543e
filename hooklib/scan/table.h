/* SPDX-License-Identifier: GPL-2.0 */
/*
 * table.c: the module's block table, the hook's unsent records, and the
 * objects at the copy built from them.
 */
#ifndef PMM_SCAN_TABLE_H
#define PMM_SCAN_TABLE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../../kmod/uapi/pmm.h"
#include "result.h"
#include "snapmem.h"

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

#endif /* PMM_SCAN_TABLE_H */
