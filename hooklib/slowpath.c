// SPDX-License-Identifier: GPL-2.0
/*
 * The entry points' general code (slowpath.h): what each allocation entry
 * point of interpose.c does when its few-instruction common case does not
 * apply. Before init, the bootstrap arena (booting); not monitored, libc's
 * call and the poll that asks the module once a second (pass_poll);
 * monitored, libc's call noted under the guard (monitored.h), or noted alone
 * for a signal handler's call that interrupted the hook.
 *
 * The *_slow functions are noinline and reached by tail calls: the
 * library is built without frame pointers, so a *_slow function's frame
 * stands where its entry point's would (saved frame pointer, then the
 * caller's return address), which is where a frame-pointer walk starts.
 *
 * Owns nothing: the state is thread_state.c's, buffer.c's and control.c's.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "arena.h"
#include "control.h"
#include "device.h"
#include "init.h"
#include "monitored.h"
#include "real.h"
#include "slowpath.h"

/* Not monitored: every POLL_EVERY calls, see whether it is time to ask. */
__attribute__((noinline)) static void pass_poll(struct tstate *t)
{
	uint64_t now, next;
	int r;

	t->poll = POLL_EVERY;
	if (g_fast.mode >= MODE_MONITORED)
		return;	/* a nested call while monitored */
	if (__atomic_load_n(&g_init, __ATOMIC_ACQUIRE) != 2)
		return;	/* called from inside init: the device is not open yet */
	t->sampling = 0;
	if (!g_dev_usable) {
		t->poll = INT_MAX;	/* no device: nothing to poll, ever */
		t->budget = UINT64_MAX / 2;
		return;
	}
	t->budget = POLL_BYTES;
	now = poll_ns();
	next = __atomic_load_n(&g_next_query, __ATOMIC_RELAXED);
	if ((int64_t)(now - next) < 0 || !pmm_mine() ||	/* a vfork child: the parent asks */
	    !__atomic_compare_exchange_n(&g_next_query, &next, now + QUERY_NS, 0,
					 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return;
	r = pmm_dev_ioctl(PMM_QUERY_SELF, NULL);
	if (r == 1)
		start_monitoring();
	else if (r < 0)
		pmm_dev_refused(-r, "PMM_QUERY_SELF");
}

static inline void pass_tick(void)
{
	if (poll_due(&this_thread))
		pass_poll(&this_thread);
}

/* A signal handler's allocation (enter: ENTER_ALONE). */
__attribute__((noinline)) static void note_alloc_alone(uint16_t op, void *p, uint64_t size,
							const struct src *s)
{
	note_alloc(NULL, op, p, size, s, NULL);
}

static inline __attribute__((always_inline)) void *do_malloc(size_t n, const struct src *s)
{
	struct tstate *t = &this_thread;
	void *p;
	int how;

	if (g_fast.mode == MODE_BOOT && booting())
		return arena_alloc(n, 16);
	if (g_fast.mode < MODE_MONITORED || (how = enter(t)) == ENTER_PASS) {
		pass_tick();
		return real.malloc(n);
	}
	p = real.malloc(n);
	if (unlikely(how == ENTER_ALONE)) {
		note_alloc_alone(PMM_OP_MALLOC, p, n, s);
		return p;
	}
	note_alloc(t, PMM_OP_MALLOC, p, n, s, NULL);
	guard_drop(t);
	return p;
}

/*
 * malloc's budget is spent, and this call records: exact, a
 * sample point in these n bytes, or starting. The caller has set the budget.
 */
__attribute__((noinline)) void *malloc_slow(size_t n, void *ra)
{
	struct src s = CALLER_SRC(ra, __builtin_frame_address(0));

	return do_malloc(n, &s);
}

/*
 * malloc's budget is spent, and not in exact mode (or mid-change: exact
 * takes the general path here). Not monitored: poll,
 * which grants the next. Sampled with no sample point in these n bytes:
 * the budget stopped short of it because records wait; check their
 * deadline, and go on to the sample point.
 */
__attribute__((noinline)) void *malloc_spent(size_t n, void *ra)
{
	struct tstate *t = &this_thread;
	int mode = g_fast.mode;
	int64_t rest;

	if (mode == MODE_PASS) {
		t->budget = 0;
		pass_poll(t);
		return real.malloc(n);
	}
	if (mode != MODE_SAMPLED) {
		t->budget = 0;	/* exact, or starting: every call comes here */
		return malloc_slow(n, ra);
	}
	if (unlikely(t->guard || t->budget + n >= 1ULL << 63)) {
		/*
		 * Not this call's gap to update: a signal handler's call in
		 * the hook (or the hook's own), or one that interrupted a
		 * malloc that had spent the budget before this call took n
		 * (gap_busy). do_malloc decides it.
		 */
		t->budget += n;
		return malloc_slow(n, ra);
	}
	rest = sample_gap_left(t);	/* after these n bytes */
	if (t->sampling && rest > 0 && n <= INT64_MAX) {
		sample_budget(t, rest, t->n != 0);
		if (t->n)
			sampled_poll(t);
		return real.malloc(n);
	}
	t->budget += n;	/* part of the sample gap: sample() takes n */
	return malloc_slow(n, ra);
}

/* A signal handler's free (enter: ENTER_ALONE), before the block is. */
__attribute__((noinline)) static void note_free_alone(void *p)
{
	note_free(NULL, PMM_OP_FREE, p, 0, NULL);
}

void hook_free(void *p)
{
	struct tstate *t = &this_thread;
	int how;

	if (in_arena(p))
		return;
	if (g_fast.mode == MODE_BOOT && booting())
		return;	/* cannot be ours, cannot be freed yet: leak it */
	if (g_fast.mode < MODE_MONITORED || (how = enter(t)) == ENTER_PASS) {
		real.free(p);
		return;
	}
	if (unlikely(how == ENTER_ALONE)) {
		note_free_alone(p);
		real.free(p);
		return;
	}
	note_free(t, PMM_OP_FREE, p, 0, NULL);
	real.free(p);
	guard_drop(t);
}

/* free() while sampled with no block of the arena. */
void free_sampled(void *p)
{
	if (!__atomic_load_n(set_filter(&g_sampled, p), __ATOMIC_RELAXED)) {
		real.free(p);	/* surely not a sampled block */
		return;
	}
	hook_free(p);
}

static void *do_calloc(size_t n, size_t m, const struct src *s)
{
	struct tstate *t = &this_thread;
	size_t bytes;
	void *p;
	int how;

	if (g_fast.mode == MODE_BOOT && booting()) {
		if (__builtin_mul_overflow(n, m, &bytes)) {
			errno = ENOMEM;
			return NULL;
		}
		return arena_alloc(bytes, 16);
	}
	if (g_fast.mode < MODE_MONITORED || (how = enter(t)) == ENTER_PASS) {
		pass_tick();
		return real.calloc(n, m);
	}
	p = real.calloc(n, m);
	if (__builtin_mul_overflow(n, m, &bytes))
		bytes = SIZE_MAX;
	if (unlikely(how == ENTER_ALONE)) {
		note_alloc_alone(PMM_OP_CALLOC, p, bytes, s);
		return p;
	}
	note_alloc(t, PMM_OP_CALLOC, p, bytes, s, NULL);
	guard_drop(t);
	return p;
}

__attribute__((noinline, cold)) void *calloc_poll(size_t n, size_t m)
{
	pass_poll(&this_thread);
	return real.calloc(n, m);
}

__attribute__((noinline)) void *calloc_slow(size_t n, size_t m, void *ra)
{
	struct src s = CALLER_SRC(ra, __builtin_frame_address(0));

	return do_calloc(n, m, &s);
}

/* realloc of a bootstrap-arena block: move it to the real heap. */
static void *arena_realloc(void *p, size_t n, const struct src *s)
{
	size_t old = arena_size(p);
	void *q;

	if (n == 0)
		return NULL;	/* glibc's realloc(p, 0): frees, returns NULL */
	q = do_malloc(n, s);
	if (q)
		memcpy(q, p, old < n ? old : n);
	return q;
}

/*
 * realloc while monitored. Exact: one REALLOC record (prev_ptr: the old
 * block), time taken after the call; realloc(p, 0) that frees is a FREE
 * (time taken before); a failure is a REALLOC with PMM_REC_F_FAILED and
 * prev_ptr 0 (the old block stays). Sampled: the old block's record goes
 * only if it was sampled; the new block is sampled afresh. The old block's
 * slot is read before the call (old_block_of). t NULL: a signal handler's
 * call, recorded alone.
 */
static void *monitored_realloc(struct tstate *t, void *p, size_t n, const struct src *s,
			       void *(*fn)(void *, size_t, size_t), size_t m)
{
	struct old_block old = { .tag = -1 };
	uint64_t before = 0;
	int was = 0, saved;
	uint32_t weight = 1;
	size_t bytes = n;
	void *q;

	if (g_sample && p)
		was = set_del(&g_sampled, p);
	if (p && (!g_sample || was)) {
		old = old_block_of((uintptr_t)p);
		/* the old block's free: before the call */
		before = stamp_slot(t, tag_slot_of((uintptr_t)p));
	}
	if (fn) {
		if (__builtin_mul_overflow(n, m, &bytes))
			bytes = SIZE_MAX;
		q = fn(p, n, m);
	} else {
		q = real.realloc(p, n);
	}
	saved = errno;
	if (!q) {
		if (bytes == 0 && p) {		/* freed */
			if (!g_sample || was)
				record_old(t, PMM_OP_FREE, p, NULL, 0, 0, 1, before, &old);
			if (was)
				sampled_wait(t);
		} else if (!g_sample) {		/* failed, p intact */
			record(t, PMM_OP_REALLOC, NULL, NULL, bytes, site_of(t, s), 1, 0);
		} else if (was) {
			set_add(&g_sampled, p);
		}
		errno = saved;
		return q;
	}
	if (!g_sample) {
		record_old(t, PMM_OP_REALLOC, q, p, bytes, site_of(t, s), 1, 0, &old);
	} else if (sample(t, bytes, &weight) && set_add(&g_sampled, q)) {
		record_old(t, PMM_OP_REALLOC, q, was ? p : NULL, bytes, site_of(t, s), weight, 0,
			   &old);
	} else {
		if (was) {
			record_old(t, PMM_OP_FREE, p, NULL, 0, 0, 1, before, &old);
			sampled_wait(t);
		}
		sampled_tick(t);
	}
	errno = saved;
	return q;
}

static void *do_realloc(void *p, size_t n, const struct src *s)
{
	struct tstate *t = &this_thread;
	void *q;
	int how;

	if (in_arena(p))
		return arena_realloc(p, n, s);
	if (g_fast.mode == MODE_BOOT && booting())
		return p ? NULL : arena_alloc(n, 16);
	if (g_fast.mode < MODE_MONITORED || (how = enter(t)) == ENTER_PASS) {
		pass_tick();
		return real.realloc(p, n);
	}
	if (unlikely(how == ENTER_ALONE))
		return monitored_realloc(NULL, p, n, s, NULL, 0);
	q = monitored_realloc(t, p, n, s, NULL, 0);
	guard_drop(t);
	return q;
}

__attribute__((noinline, cold)) void *realloc_poll(void *p, size_t n)
{
	pass_poll(&this_thread);
	return real.realloc(p, n);
}

__attribute__((noinline)) void *realloc_slow(void *p, size_t n, void *ra)
{
	struct src s = CALLER_SRC(ra, __builtin_frame_address(0));

	return do_realloc(p, n, &s);
}

/*
 * realloc() while sampled, of a block that cannot be a sampled one (the
 * set's filter says so; NULL too), took n bytes off malloc's budget and
 * spent it. As malloc_spent: no sample point in these n bytes (the budget
 * stopped short of it because records wait), libc's call; else the
 * general path, which samples.
 */
__attribute__((noinline)) void *realloc_spent(void *p, size_t n, void *ra)
{
	struct tstate *t = &this_thread;
	int64_t rest;

	if (likely(!t->guard && t->budget + n < 1ULL << 63 && g_fast.mode == MODE_SAMPLED)) {
		rest = sample_gap_left(t);	/* after these n bytes */
		if (t->sampling && rest > 0 && n <= INT64_MAX) {
			sample_budget(t, rest, t->n != 0);
			if (t->n)
				sampled_poll(t);
			return real.realloc(p, n);
		}
	}
	t->budget += n;	/* part of the sample gap: sample() takes n */
	return realloc_slow(p, n, ra);
}

/* reallocarray: as realloc, n * m bytes; libc's own where it has one. */
void *hook_reallocarray(void *p, size_t n, size_t m, const struct src *s)
{
	struct tstate *t = &this_thread;
	size_t bytes;
	void *q;
	int how;

	if (in_arena(p) || (g_fast.mode == MODE_BOOT && booting()) || !real.reallocarray) {
		if (__builtin_mul_overflow(n, m, &bytes)) {
			errno = ENOMEM;
			return NULL;
		}
		return do_realloc(p, bytes, s);
	}
	if (g_fast.mode < MODE_MONITORED || (how = enter(t)) == ENTER_PASS) {
		pass_tick();
		return real.reallocarray(p, n, m);
	}
	if (unlikely(how == ENTER_ALONE))
		return monitored_realloc(NULL, p, n, s, real.reallocarray, m);
	q = monitored_realloc(t, p, n, s, real.reallocarray, m);
	guard_drop(t);
	return q;
}

/* The aligned family: op, alignment, size; boot: from the arena. */
void *hook_aligned(uint16_t op, size_t align, size_t n, const struct src *s)
{
	struct tstate *t = &this_thread;
	void *p;
	int how;

	if (g_fast.mode == MODE_BOOT && booting())
		return arena_alloc(n, align ? align : 4096);
	if (g_fast.mode >= MODE_MONITORED && (how = enter(t)) != ENTER_PASS) {
		switch (op) {
		case PMM_OP_ALIGNED_ALLOC: p = real.aligned_alloc(align, n); break;
		case PMM_OP_MEMALIGN: p = real.memalign(align, n); break;
		case PMM_OP_VALLOC: p = real.valloc(n); break;
		default: p = real.pvalloc(n); break;
		}
		if (unlikely(how == ENTER_ALONE)) {
			note_alloc_alone(op, p, n, s);
			return p;
		}
		note_alloc(t, op, p, n, s, NULL);
		guard_drop(t);
		return p;
	}
	pass_tick();
	switch (op) {
	case PMM_OP_ALIGNED_ALLOC: return real.aligned_alloc(align, n);
	case PMM_OP_MEMALIGN: return real.memalign(align, n);
	case PMM_OP_VALLOC: return real.valloc(n);
	default: return real.pvalloc(n);
	}
}

int hook_posix_memalign(void **out, size_t align, size_t n, const struct src *s)
{
	struct tstate *t = &this_thread;
	int r, how;

	if (g_fast.mode == MODE_BOOT && booting()) {
		void *p;

		if (align < sizeof(void *) || (align & (align - 1)))
			return EINVAL;
		p = arena_alloc(n, align);
		if (!p)
			return ENOMEM;
		*out = p;
		return 0;
	}
	if (g_fast.mode < MODE_MONITORED || (how = enter(t)) == ENTER_PASS) {
		pass_tick();
		return real.posix_memalign(out, align, n);
	}
	r = real.posix_memalign(out, align, n);
	if (unlikely(how == ENTER_ALONE)) {
		note_alloc_alone(PMM_OP_POSIX_MEMALIGN, r ? NULL : *out, n, s);
		return r;
	}
	note_alloc(t, PMM_OP_POSIX_MEMALIGN, r ? NULL : *out, n, s, NULL);
	guard_drop(t);
	return r;
}

/* pmm_hooks.h's entry points: the general code with a source of file,
 * function and line. */
void *hook_malloc(size_t n, const struct src *s)
{
	return do_malloc(n, s);
}

void *hook_calloc(size_t n, size_t m, const struct src *s)
{
	return do_calloc(n, m, s);
}

void *hook_realloc(void *p, size_t n, const struct src *s)
{
	return do_realloc(p, n, s);
}
