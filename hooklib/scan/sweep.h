/* SPDX-License-Identifier: GPL-2.0 */
/*
 * sweep.c: the conservative mark of the copy and its sweep, in valgrind's
 * categories.
 */
#ifndef PMM_SCAN_SWEEP_H
#define PMM_SCAN_SWEEP_H

#include <stddef.h>
#include <stdint.h>

#include "result.h"
#include "snapmem.h"
#include "snapshot.h"
#include "table.h"

void sweep(struct snapmem *m, struct obj *objs, size_t n, const struct snapshot *s,
	   const struct ranges *excluded, uint64_t age_ns, struct result *res);

#endif /* PMM_SCAN_SWEEP_H */
