/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What a hook does while monitored, the guard held: note_alloc after an
 * allocation, note_free before a free, in either mode (exact records every
 * one, sampled those of the sample and of blocks it holds), with the site
 * from the thread's cache or site.c. Inline: the entry points' general
 * code (slowpath.c, mapping.c) and exact's misses (exact.c) are built on it.
 */
#ifndef PMM_MONITORED_H
#define PMM_MONITORED_H

#include <string.h>

#include "aset.h"
#include "buffer.h"
#include "env.h"
#include "hook.h"
#include "sampled_mode.h"
#include "site.h"
#include "thread_state.h"

PMM_HIDDEN_BEGIN

/*
 * A site id. For one-frame sites a per-thread cache of return addresses
 * skips the process-wide table; it is emptied when the epoch changes, so a
 * new epoch still registers each site once. t NULL (a record made alone):
 * the table only, and no stack walk that could lock or allocate.
 */
static inline uint32_t site_of(struct tstate *t, const struct src *s)
{
	unsigned int e = __atomic_load_n(&g_epoch, __ATOMIC_RELAXED);
	unsigned int i = ((uintptr_t)s->ra >> 2) % SITE_CACHE;
	uint32_t id;

	if (s->file)
		return pmm_site_source(s->ra, s->file, s->func, s->line);
	if (!t || g_depth > 1)
		return pmm_site_addr(s->ra, s->frame, !t);
	if (unlikely(t->site_gen != e)) {
		memset(t->site_cache, 0, sizeof(t->site_cache));
		t->site_gen = e;
	}
	if (likely(t->site_cache[i].ra == s->ra))
		return t->site_cache[i].id;
	id = pmm_site_addr(s->ra, s->frame, 0);
	if (id) {	/* a cached entry's id is never 0: the table is tried again */
		/* never a new ra with the old id, should a longjmp stop this */
		t->site_cache[i].ra = NULL;
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		t->site_cache[i].id = id;
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		t->site_cache[i].ra = s->ra;
	}
	return id;
}

/* Sampled: counts a call without a record (sampled_poll). t NULL: an
 * allocation made alone, which buffers nothing. */
static inline void sampled_tick(struct tstate *t)
{
	if (t && poll_due(t))
		sampled_poll(t);
}

/* After an allocation returned p (NULL: failed). mset: also track p as a
 * recorded anonymous mapping. t NULL: made alone (record_alone). */
static inline __attribute__((always_inline)) void
note_alloc(struct tstate *t, uint16_t op, void *p, uint64_t size,
		       const struct src *s, struct aset *mset)
{
	uint32_t weight = 1;

	if (g_sample) {
		if (!p || !sample(t, size, &weight)) {
			sampled_tick(t);
			return;
		}
		if (!set_add(mset ? mset : &g_sampled, p))
			return;
	} else if (mset && p && !set_add(mset, p)) {
		return;
	}
	record(t, op, p, NULL, size, site_of(t, s), weight, 0);
}

/* Before p is freed. t NULL: made alone (record_alone). */
static inline __attribute__((always_inline)) void
note_free(struct tstate *t, uint16_t op, void *p, uint64_t size, struct aset *mset)
{
	if (!p)
		return;
	if (mset || g_sample) {
		if (!set_del(mset ? mset : &g_sampled, p)) {
			if (g_sample)
				sampled_tick(t);
			return;
		}
	}
	record(t, op, p, NULL, size, 0, 1, 0);	/* stamped in record(), unless cancelled */
	if (g_sample)
		sampled_wait(t);
}

PMM_HIDDEN_END

#endif /* PMM_MONITORED_H */
