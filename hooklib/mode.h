/* SPDX-License-Identifier: GPL-2.0 */
/*
 * mode.c: the mode the hook is in (g_fast.mode, MODE_* in hook.h), the
 * monitoring epoch, exact mode's key, and where the entry points jump for
 * each mode (g_fast.free, g_fast.malloc_spent).
 */
#ifndef PMM_MODE_H
#define PMM_MODE_H

#include <limits.h>

#include "hook.h"

/* aset.h's SET_FILTER: the sampled set's filter lives in g_fast. */
#define SAMPLED_FILTER	2048

PMM_HIDDEN_BEGIN

/*
 * What the unmonitored and sampled fast paths read, in one page: a free in
 * sampled mode reads the sampled set's filter, and a filter of its own page
 * costs a TLB miss whenever the program's heap has pushed that page out
 * (which QEMU's TCG, with its small direct-mapped TLB, makes dear).
 */
struct fast {
	union {
		struct {
			uint16_t mode;	/* MODE_*: what the hooks do */
			uint16_t arena;	/* 1 once the bootstrap arena gave a block */
		};
		/*
		 * Both in one load: equal to a MODE_* value only while no block
		 * of the arena exists, so free's pointer (entries_follow_mode)
		 * and an unmonitored realloc need not check whether a pointer
		 * is one (nor will in most processes: the arena serves only
		 * what dlsym allocates, often nothing).
		 */
		uint32_t mode_no_arena;
	};
	/*
	 * What free() jumps to, set with mode (set_mode): not monitored, libc's
	 * free itself; sampled and exact, their own checks without a mode
	 * test; the general code (hook_free) while the arena has blocks, before
	 * init, and for the instant a mode change leaves it behind.
	 */
	void (*free)(void *);
	/* What malloc() jumps to once its budget is spent: exact mode's fast
	 * path while exact, else the general code (set_mode, as free). */
	void *(*malloc_spent)(size_t, void *);
	uint8_t sampled_filter[SAMPLED_FILTER];
};

extern struct fast g_fast;

extern unsigned int g_epoch;	/* bumped each time monitoring (re)starts */

/*
 * Exact mode's fast paths (malloc_exact, free_exact) run while a thread's
 * exact_key equals this: the epoch, while monitoring is exact with one-frame
 * sites, stamps from the clock page and no PMM_CLOCK=mono; EXACT_OFF (which
 * no thread's key ever is) otherwise. A thread takes the key once its buffer
 * and site cache belong to the epoch (exact_ready), so one compare stands
 * for the general path's checks of epoch, buffer, mode and site depth.
 */
#define EXACT_OFF	UINT_MAX
extern unsigned int g_exact_key;

/* Every mode change: the entry points' targets follow. */
void set_mode(uint16_t mode);
/* The targets for g_fast's current mode and arena (the arena's first block). */
void entries_follow_mode(void);

/*
 * The targets, defined above this file: free's general code and malloc's
 * when its budget is spent (slowpath.c), free's in sampled mode, and exact
 * mode's fast paths (exact.c). mode.c only stores their addresses: g_fast
 * must point at them before the library's constructor runs (a hook can come
 * first), so it is initialised with them, not told them at run time.
 * Declared here, the contract mode.c dispatches to, not in their files'
 * headers: mode.c including those would close a circle through every file
 * the general code uses (scripts/include-graph.py allows these alone).
 */
void hook_free(void *p);
void *malloc_spent(size_t n, void *ra);
void free_sampled(void *p);
void free_exact(void *p);
void *malloc_exact(size_t n, void *ra);

PMM_HIDDEN_END

#endif /* PMM_MODE_H */
