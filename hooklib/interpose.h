/* SPDX-License-Identifier: GPL-2.0 */
/*
 * interpose.c's entry points under names of their own (hidden aliases),
 * for got.c's entries: loaded into a running process, this library is not
 * first in the lookup order, and even its own references to "malloc" bind
 * to the program's.
 */
#ifndef PMM_INTERPOSE_H
#define PMM_INTERPOSE_H

#include <malloc.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "hook.h"

PMM_HIDDEN_BEGIN

extern __typeof(malloc) entry_malloc;
extern __typeof(free) entry_free;
extern __typeof(calloc) entry_calloc;
extern __typeof(realloc) entry_realloc;
extern __typeof(reallocarray) entry_reallocarray;
extern __typeof(posix_memalign) entry_posix_memalign;
extern __typeof(aligned_alloc) entry_aligned_alloc;
extern __typeof(memalign) entry_memalign;
extern __typeof(valloc) entry_valloc;
extern __typeof(pvalloc) entry_pvalloc;
extern __typeof(malloc_usable_size) entry_malloc_usable_size;
extern __typeof(mmap) entry_mmap;
extern __typeof(mmap64) entry_mmap64;
extern __typeof(munmap) entry_munmap;
extern __typeof(mremap) entry_mremap;

PMM_HIDDEN_END

#endif /* PMM_INTERPOSE_H */
