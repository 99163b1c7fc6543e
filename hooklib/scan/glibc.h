/* SPDX-License-Identifier: GPL-2.0 */
/*
 * glibc.c: glibc's heaps in the copy, walked chunk by chunk.
 */
#ifndef PMM_SCAN_GLIBC_H
#define PMM_SCAN_GLIBC_H

#include <stddef.h>

#include "result.h"
#include "snapmem.h"
#include "table.h"

/*
 * glibc's heaps in the copy ([heap], other arenas' heaps), walked chunk by
 * chunk: a heap that walks is USE_HEAP, its chunks in use that are no
 * block added to *objs as unknown, blocks on no chunk in use demoted to
 * unknown; a heap that does not walk stays a root. *objs stays sorted.
 */
void glibc_walk(struct snapmem *m, struct obj **objs, size_t *n, struct ranges *walked,
		struct result *res);

#endif /* PMM_SCAN_GLIBC_H */
