/* SPDX-License-Identifier: GPL-2.0 */
/*
 * slowpath.c: what the entry points (interpose.c) call when
 * their common case does not apply, and exact's fast paths (exact.c) when
 * theirs does not. free's general code (hook_free) and malloc's once its
 * budget is spent (malloc_spent) are mode.h's jump targets.
 */
#ifndef PMM_SLOWPATH_H
#define PMM_SLOWPATH_H

#include <sys/types.h>

#include "hook.h"
#include "site.h"

PMM_HIDDEN_BEGIN

/* malloc's budget is spent and this call records (the caller set the
 * budget); ra: malloc's caller. */
void *malloc_slow(size_t n, void *ra);
void *calloc_poll(size_t n, size_t m);
void *calloc_slow(size_t n, size_t m, void *ra);
void *realloc_poll(void *p, size_t n);
void *realloc_slow(void *p, size_t n, void *ra);
void *hook_reallocarray(void *p, size_t n, size_t m, const struct src *s);
int hook_posix_memalign(void **out, size_t align, size_t n, const struct src *s);
/* aligned_alloc, memalign, valloc, pvalloc: op says which. */
void *hook_aligned(uint16_t op, size_t align, size_t n, const struct src *s);
void *hook_malloc(size_t n, const struct src *s);
void *hook_calloc(size_t n, size_t m, const struct src *s);
void *hook_realloc(void *p, size_t n, const struct src *s);
/* realloc() calls it directly (it tests the mode itself): sampled mode's
 * realloc once malloc's budget is spent. */
void *realloc_spent(void *p, size_t n, void *ra);

PMM_HIDDEN_END

#endif /* PMM_SLOWPATH_H */
