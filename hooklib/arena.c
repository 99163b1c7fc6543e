// SPDX-License-Identifier: GPL-2.0
/*
 * The bootstrap arena (arena.h): a static bump allocator, lock-free, never
 * reused. Its first block points free() at the general code (mode.c),
 * which knows arena blocks; until then free need not check.
 *
 * Owns: g_arena, g_arena_used.
 */
#include "arena.h"
#include "mode.h"

char g_arena[ARENA_SIZE] __attribute__((aligned(4096)));
static size_t g_arena_used;

void *arena_alloc(size_t size, size_t align)
{
	size_t off, start, end;

	if (align < 16)
		align = 16;
	off = __atomic_load_n(&g_arena_used, __ATOMIC_RELAXED);
	do {
		start = (off + 16 + align - 1) & ~(align - 1);
		if (size > ARENA_SIZE || start + size > ARENA_SIZE) {
			errno = ENOMEM;
			return NULL;
		}
		end = (start + size + 15) & ~(size_t)15;
	} while (!__atomic_compare_exchange_n(&g_arena_used, &off, end, 0,
					      __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	*(size_t *)(g_arena + start - 16) = size;
	if (!__atomic_load_n(&g_fast.arena, __ATOMIC_RELAXED)) {
		__atomic_store_n(&g_fast.arena, 1, __ATOMIC_SEQ_CST);
		entries_follow_mode();	/* its blocks need the general free */
	}
	return g_arena + start;	/* zeroed: the arena is never reused */
}
