/* SPDX-License-Identifier: GPL-2.0 */
/*
 * unwind.c: the stack walkers for PMM_DEPTH > 1. Both return up to max
 * return addresses, innermost first, starting at the frame whose return
 * address is ra0 (the hook's caller), and never fewer than one (ra0 itself
 * when nothing better is found).
 */
#ifndef PMM_UNWIND_H
#define PMM_UNWIND_H

#include <stdint.h>

#pragma GCC visibility push(hidden)

/* Frame pointers from frame. alone: in a signal handler that interrupted
 * the hook, where the walk stops at once if the thread's stack bounds are
 * not known yet (finding them allocates). */
int pmm_unwind_fp(uint64_t *out, int max, void *ra0, void *frame, int alone);
/* libgcc's unwinder (.eh_frame): takes the loader's lock, may allocate. */
int pmm_unwind_eh(uint64_t *out, int max, void *ra0);

#pragma GCC visibility pop

#endif /* PMM_UNWIND_H */
