// SPDX-License-Identifier: GPL-2.0
/*
 * The mode and the entry points' jump targets (mode.h). free() is one jump
 * through g_fast.free and a spent malloc budget one through
 * g_fast.malloc_spent: a mode change stores new targets, so that no entry
 * point tests the mode on every call.
 *
 * Owns: g_fast, g_epoch, g_exact_key.
 */
#include "mode.h"
#include "real.h"

struct fast g_fast __attribute__((aligned(4096))) = {
	.free = hook_free,
	.malloc_spent = malloc_spent,
};

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "mode_no_arena: mode in the low half");

_Static_assert(sizeof(g_fast) <= 4096, "g_fast fits one page");

unsigned int g_epoch = 1;
unsigned int g_exact_key = EXACT_OFF;

/* free()'s target for the mode and arena (see g_fast.free). */
static void (*free_for(uint32_t mode_no_arena))(void *)
{
	switch (mode_no_arena) {
	case MODE_PASS:
		return real.free ? real.free : hook_free;
	case MODE_SAMPLED:
		return free_sampled;
	case MODE_EXACT:
		return free_exact;
	default:
		return hook_free;
	}
}

/*
 * Sets g_fast.free and g_fast.malloc_spent for g_fast's current mode and
 * arena. Mode changes may race (a stop and a start from two threads): each
 * writer reads the state again after its stores and repeats until the
 * state it stored for is still the state, so the last stores are always
 * for the last state.
 */
void entries_follow_mode(void)
{
	uint32_t now = __atomic_load_n(&g_fast.mode_no_arena, __ATOMIC_SEQ_CST), was;

	do {
		was = now;
		__atomic_store_n(&g_fast.free, free_for(was), __ATOMIC_SEQ_CST);
		__atomic_store_n(&g_fast.malloc_spent,
				 (uint16_t)was == MODE_EXACT ? malloc_exact : malloc_spent,
				 __ATOMIC_SEQ_CST);
		now = __atomic_load_n(&g_fast.mode_no_arena, __ATOMIC_SEQ_CST);
	} while (now != was);
}

void set_mode(uint16_t mode)
{
	__atomic_store_n(&g_fast.mode, mode, __ATOMIC_SEQ_CST);
	entries_follow_mode();
}
