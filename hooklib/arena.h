/* SPDX-License-Identifier: GPL-2.0 */
/*
 * arena.c: the bootstrap arena, which serves the allocations made while
 * pmm_init resolves the real functions (dlsym's own). Its blocks are never
 * freed: free ignores them, realloc moves them to the real heap.
 */
#ifndef PMM_ARENA_H
#define PMM_ARENA_H

#include "hook.h"

#define ARENA_SIZE	(256 * 1024)

PMM_HIDDEN_BEGIN

extern char g_arena[ARENA_SIZE];

static inline int in_arena(const void *p)
{
	return (uintptr_t)p - (uintptr_t)g_arena < ARENA_SIZE;
}

/* A block's size, kept in the 16 bytes before it. */
static inline size_t arena_size(const void *p)
{
	return *(const size_t *)((const char *)p - 16);
}

/* A zeroed block (align: at least 16), or NULL and ENOMEM once full. */
void *arena_alloc(size_t size, size_t align);

PMM_HIDDEN_END

#endif /* PMM_ARENA_H */
