// SPDX-License-Identifier: GPL-2.0
/*
 * Exact mode's fast paths (mode.h's targets malloc_exact and free_exact,
 * and realloc_exact, which realloc() calls while exact), for a thread that
 * holds exact's key (exact_ready) and not the guard. They do what
 * note_alloc, note_free and the general realloc do in the commonest cases,
 * with every test that the key answers left out: a malloc or realloc whose
 * return address is in the site cache, and a free that cancels against its
 * allocation in the thread's buffer (most frees). Other cases take the
 * general code (slowpath.c) from where the fast path stands. The guard is
 * held while they touch the buffer, as the general path holds it.
 *
 * Owns nothing: the buffer and the site cache are the thread's.
 */
#include "exact.h"
#include "mode.h"
#include "monitored.h"
#include "real.h"
#include "slowpath.h"

static inline int exact_fast(const struct tstate *t)
{
	return !t->guard && t->exact_key == __atomic_load_n(&g_exact_key, __ATOMIC_RELAXED);
}

/* next_stamp, where the clock page is known to be mapped (exact's key). */
static inline uint64_t exact_stamp(struct tstate *t, uint64_t at)
{
	const struct pmm_clock *k = __atomic_load_n(&g_kclock, __ATOMIC_RELAXED);

	return stamp_from(t, __atomic_load_n(&k->mono_ns, __ATOMIC_RELAXED), at);
}

/* malloc_exact's call whose site is not in the cache: the general path
 * (malloc_exact took the guard). */
__attribute__((noinline)) static void *exact_malloc_miss(size_t n, void *ra)
{
	struct tstate *t = &this_thread;
	struct src s = CALLER_SRC(ra, NULL);	/* one-frame sites: no walk */
	void *p;

	/* malloc_exact's frame is gone: what this calls must run below the
	 * guard's stack pointer (guard_stale) */
	guard_hold(t);
	p = real.malloc(n);
	note_alloc(t, PMM_OP_MALLOC, p, n, &s, NULL);
	t->guard = 0;
	return p;
}

/* malloc_exact's failed call: the record it began is the general path's. */
__attribute__((noinline, cold)) static void exact_malloc_failed(struct tstate *t)
{
	const struct pmm_record *r = &t->buf[t->n];

	record(t, PMM_OP_MALLOC, NULL, NULL, r->size, r->site, 1, 0);
}

/*
 * The record is begun before libc's call (size and site are known) and
 * finished after it from the thread's state, so nothing of the caller's
 * has to outlive the call in a saved register.
 */
__attribute__((noinline)) void *malloc_exact(size_t n, void *ra)
{
	struct tstate *t = &this_thread;
	unsigned int i = ((uintptr_t)ra >> 2) % SITE_CACHE;
	struct pmm_record *r;
	struct tag_slot *slot;
	uint64_t now;
	uint32_t at;
	void *p;

	t->budget = 0;	/* exact: every call records */
	if (unlikely(!exact_fast(t)))
		return malloc_slow(n, ra);
	/* before the cache is read: a handler's malloc could replace the entry */
	guard_hold(t);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (unlikely(t->site_cache[i].ra != ra))
		return exact_malloc_miss(n, ra);
	r = &t->buf[t->n];
	r->prev_ptr = 0;
	r->size = n;
	r->site = t->site_cache[i].id;
	r->weight = 1;
	r->op = PMM_OP_MALLOC;
	r->flags = 0;
	r->alloc_tag = 0;
	p = real.malloc(n);
	t = &this_thread;
	if (unlikely(!p)) {
		exact_malloc_failed(t);
		t->guard = 0;
		return p;
	}
	at = t->n;
	r = &t->buf[at];
	slot = tag_slot_of((uintptr_t)p);
	now = exact_stamp(t, __atomic_load_n(&slot->stamp, __ATOMIC_RELAXED));
	__atomic_store_n(&slot->stamp, now, __ATOMIC_RELAXED);
	r->ptr = (uintptr_t)p;
	r->time_ns = now;
	slot_note(slot, (uintptr_t)p, now, at, t->id);
	tbuf_append(t, at, now);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	t->guard = 0;
	return p;
}

/* free_exact's free that does not cancel: the general path. */
__attribute__((noinline)) static void exact_free_miss(void *p)
{
	struct tstate *t = &this_thread;

	guard_hold(t);
	note_free(t, PMM_OP_FREE, p, 0, NULL);
	t->guard = 0;
	real.free(p);
}

/*
 * free() while exact with no block of the arena: a free that cancels
 * against its allocation in the buffer (free(NULL) has no tag: the general
 * path, which records nothing), where the thread holds exact's key.
 */
void free_exact(void *p)
{
	struct tstate *t = &this_thread;
	struct tag_slot *slot;
	int cancelled;

	if (unlikely(!exact_fast(t))) {
		hook_free(p);
		return;
	}
	slot = tag_slot_of((uintptr_t)p);
	guard_hold(t);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);	/* a handler's malloc sees it */
	cancelled = cancel_buffered(t, slot, (uintptr_t)p, slot_tag(slot, (uintptr_t)p));
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	t->guard = 0;
	if (unlikely(!cancelled)) {
		exact_free_miss(p);
		return;
	}
	real.free(p);
}

/*
 * realloc_exact's old block p, before libc's call: the REALLOC record r
 * (at t->n) frees it as record() would have it. Its allocation still live
 * in this buffer: PREV_FREED, and r->ptr holds that record's index until
 * the call has succeeded and the allocation is flagged FREED. Else its tag
 * (TAGGED), or none (OLDER if no allocation since the start was there).
 * Read before the call, as the general path's old_block_of is: once libc
 * has released the block, another thread may allocate at its address and
 * write its slot.
 */
static inline __attribute__((always_inline)) void exact_prev(struct tstate *t,
							     struct pmm_record *r, uint64_t p)
{
	struct tag_slot *slot = tag_slot_of(p);
	int64_t tag = slot_tag(slot, p);
	uint32_t i;

	if (tag < 0) {
		r->flags = older_flag(p);
		return;
	}
	i = buffered_alloc(t, slot, p, tag);
	if (i != NOT_BUFFERED) {
		r->flags = PMM_REC_F_PREV_FREED;
		r->ptr = i;
		return;
	}
	r->flags = PMM_REC_F_TAGGED;
	r->alloc_tag = (uint32_t)tag;
	/* as record(); should the call fail, the buffer only goes sooner */
	if (__atomic_load_n(&slot->owner, __ATOMIC_RELAXED) != t->id && ++t->cross >= CROSS_MAX)
		t->full = t->n + 1;
}

/* realloc_exact's failed call (p intact): the general path's record of it. */
__attribute__((noinline, cold)) static void exact_realloc_failed(struct tstate *t)
{
	const struct pmm_record *r = &t->buf[t->n];

	record(t, PMM_OP_REALLOC, NULL, NULL, r->size, r->site, 1, 0);
}

/*
 * realloc() while exact with no block of the arena: a call of n > 0 bytes
 * whose return address is in the site cache is one REALLOC record, the
 * general path's (monitored_realloc): prev_ptr p, stamped after the call
 * from the new block's slot; the old block's free carried as PREV_FREED,
 * TAGGED or OLDER (exact_prev). Whether libc grew the block in place or
 * moved it makes no difference to the record. realloc(p, 0) (a free) and
 * the cache's misses take the general path.
 */
__attribute__((noinline)) void *realloc_exact(void *p, size_t n, void *ra)
{
	struct tstate *t = &this_thread;
	unsigned int i = ((uintptr_t)ra >> 2) % SITE_CACHE;
	struct pmm_record *r;
	struct tag_slot *slot;
	uint64_t now;
	uint32_t at;
	void *q;

	t->budget = 0;	/* exact: every call records */
	if (unlikely(!exact_fast(t) || !n))
		return realloc_slow(p, n, ra);
	/* before the cache is read: a handler's malloc could replace the entry */
	guard_hold(t);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (unlikely(t->site_cache[i].ra != ra)) {
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		t->guard = 0;
		return realloc_slow(p, n, ra);
	}
	r = &t->buf[t->n];
	r->ptr = NOT_BUFFERED;
	r->prev_ptr = (uintptr_t)p;
	r->size = n;
	r->site = t->site_cache[i].id;
	r->weight = 1;
	r->op = PMM_OP_REALLOC;
	r->flags = 0;
	r->alloc_tag = 0;
	if (p)
		exact_prev(t, r, (uintptr_t)p);
	q = real.realloc(p, n);
	t = &this_thread;
	if (unlikely(!q)) {
		exact_realloc_failed(t);
		t->guard = 0;
		return q;
	}
	at = t->n;
	r = &t->buf[at];
	if (r->flags & PMM_REC_F_PREV_FREED)
		t->buf[r->ptr].flags |= PMM_REC_F_FREED;
	slot = tag_slot_of((uintptr_t)q);
	now = exact_stamp(t, __atomic_load_n(&slot->stamp, __ATOMIC_RELAXED));
	__atomic_store_n(&slot->stamp, now, __ATOMIC_RELAXED);
	r->ptr = (uintptr_t)q;
	r->time_ns = now;
	slot_note(slot, (uintptr_t)q, now, at, t->id);
	tbuf_append(t, at, now);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	t->guard = 0;
	return q;
}
