/* SPDX-License-Identifier: GPL-2.0 */
/*
 * exact.c: exact mode's fast paths. malloc_exact and free_exact are
 * mode.h's jump targets; realloc_exact is called by realloc() itself.
 */
#ifndef PMM_EXACT_H
#define PMM_EXACT_H

#include <stddef.h>

#include "hook.h"

PMM_HIDDEN_BEGIN

/* realloc() calls it directly while exact (it tests the mode itself). */
void *realloc_exact(void *p, size_t n, void *ra);

PMM_HIDDEN_END

#endif /* PMM_EXACT_H */
