/* SPDX-License-Identifier: GPL-2.0 */
/*
 * heap.c: the allocator's own report of its heap (glibc's mallinfo2,
 * jemalloc's stats), sent to the module (PMM_HEAP_REPORT) about once per
 * sampling interval, after a batch was sent.
 */
#ifndef PMM_HEAP_H
#define PMM_HEAP_H

#include "hook.h"

PMM_HIDDEN_BEGIN

/* At init, real.* resolved, inside pmm_internal: which allocator it is. */
void heap_init(void);

/*
 * Reports if the last report is an interval old; one thread at a time.
 * Only where the calling thread holds nothing an allocator needs: after a
 * batch was sent from a malloc-family hook (after libc's call), a thread's
 * or the process's exit, never from a mapping hook (an allocator maps
 * memory with its own locks held) nor a hook a signal handler entered.
 */
void heap_report_maybe(void);

/* The report as the allocator gives it now; 0, or -1 when there is none. */
int heap_read(struct pmm_heap *h);

PMM_HIDDEN_END

#endif /* PMM_HEAP_H */
