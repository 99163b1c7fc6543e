/* SPDX-License-Identifier: GPL-2.0 */
/*
 * thread_state.c: each thread's hook state (this_thread) and the
 * reentrancy guard that protects it. A hook that finds the guard held was called by the hook's
 * own calls of others' code (pmm_internal), or by a signal handler that
 * interrupted the hook, whose call is recorded alone (record_alone), or
 * the guard was left held by a handler that left the hook with longjmp
 * (guard_stale). While it is held, malloc's budget waits in parked and
 * budget is 0, so that a handler's malloc never passes on the budget:
 * every one reaches the hook, which decides it on its own (sampled mode:
 * sample_alone).
 */
#ifndef PMM_THREAD_STATE_H
#define PMM_THREAD_STATE_H

#include <linux/futex.h>
#include <sys/types.h>

#include "env.h"
#include "hook.h"

#define SITE_CACHE	16	/* per-thread return address -> site id */

PMM_HIDDEN_BEGIN

struct tstate {
	/*
	 * malloc's budget: the bytes the entry point passes straight to libc
	 * (one subtraction) before its slow path runs. Not monitored: until
	 * the next poll. Sampled: until the next sample point, or sooner
	 * while records wait (their deadline is checked). 0 while exact and
	 * before the thread's first call: every call takes the slow path.
	 */
	uint64_t budget;
	int64_t beyond;		/* sampled: the sample gap's bytes after the budget */
	int sampling;		/* budget + beyond is a sample gap */
	/*
	 * The reentrancy guard: 0 when free; held, the stack pointer where it
	 * was taken (guard_hold), so that a guard that a longjmp left held
	 * can be told from a hook that a signal handler interrupted
	 * (guard_stale). nest counts the takes inside the held guard.
	 */
	uintptr_t guard;
	int nest;
	int poll;		/* hook calls until the next clock read */
	unsigned int gen;	/* epoch the buffered records belong to */
	unsigned int n;		/* records in buf */
	int exiting;		/* key destructor ran: no buffer any more */
	int in_map;		/* in a mapping hook: no heap report (heap.h) */
	int keyed;		/* pthread_setspecific done */
	uint64_t first_ns;	/* time of buf[0] */
	uint64_t rng;		/* xorshift64* state, 0: unseeded */
	struct pmm_record *buf;	/* TBUF_RECORDS, mmap'd on first use */
	unsigned int site_gen;	/* epoch of site_cache */
	uint64_t clock;		/* this thread's last stamp (address clock) */
	unsigned int merge_skip;	/* batches to send without merging */
	unsigned int full;	/* n at which buf is sent (see CROSS_MAX) */
	unsigned int cross;	/* frees in buf of other threads' blocks */
	uint32_t id;		/* this thread's, in struct tag_slot.owner; 0: none yet */
	unsigned int exact_key;	/* g_exact_key when this thread's buffer and
				 * site cache are ready for the fast paths */
	struct {		/* recent return addresses and their site ids */
		void *ra;
		uint32_t id;
	} site_cache[SITE_CACHE];
	uint64_t parked;	/* malloc's budget while the guard is held */
	/*
	 * A vfork child that found this buffer full (vfork_pin): the child's
	 * robust futex list holds word, which the kernel marks when the child
	 * exits or execs; pid, the child's, is non-zero while it may run.
	 */
	struct {
		struct robust_list_head head;
		struct robust_list entry;
		uint32_t word;
		pid_t pid;
	} pin;
};

extern __thread struct tstate this_thread __attribute__((tls_model("initial-exec")));

/*
 * Non-zero while the hook calls code of others that may allocate (dlsym,
 * dlopen, pthread_setspecific, pthread_getattr_np, libgcc's unwinder): an
 * allocation that reaches the hook while its guard is held is then that
 * code's, and goes straight to libc; otherwise it is a signal handler's.
 */
extern __thread int pmm_internal __attribute__((tls_model("initial-exec")));

/*
 * Around those calls: pmm_internal, with every signal blocked, so that
 * every allocation made meanwhile is theirs and no handler's call lands
 * there (it would pass unrecorded); a handler runs when the mask is
 * restored, still in the hook, and is recorded alone. Raw rt_sigprocmask,
 * which blocks glibc's own signals too (cancellation, setxid: deferred);
 * errno kept. pmm_internal_begin returns the mask pmm_internal_end puts
 * back.
 *
 * The compiler barriers keep pmm_internal's stores where they are: glibc
 * declares most of its functions leaf (__THROW: they never call back into
 * the caller's unit), which an interposed malloc makes untrue, and with
 * the library one LTO unit gcc 16 took pmm_internal, which nothing outside
 * it can name, for unread across pthread_getattr_np and dropped the
 * increment: that call's allocations were taken for a signal handler's.
 */
static inline uint64_t pmm_internal_begin(void)
{
	uint64_t all = ~0ULL, old = 0;
	int saved = errno;

	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, sizeof(all));
	pmm_internal++;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	errno = saved;
	return old;
}

static inline void pmm_internal_end(uint64_t old)
{
	int saved = errno;

	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	pmm_internal--;
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, sizeof(old));
	errno = saved;
}

/* t->guard = the stack pointer: one store. */
static inline __attribute__((always_inline)) void guard_hold(struct tstate *t)
{
#ifdef __x86_64__
	asm volatile("movq %%rsp, %0" : "=m"(t->guard));
#else
	t->guard = (uintptr_t)__builtin_frame_address(0);
#endif
}

static inline void guard_take(struct tstate *t)
{
	if (t->guard) {
		t->nest++;
		return;
	}
	guard_hold(t);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	/* one instruction: a handler's malloc finds the budget whole or parked,
	 * never read here and not yet parked (it would pass on it) */
	t->parked = __atomic_exchange_n(&t->budget, 0, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

static inline void guard_drop(struct tstate *t)
{
	if (t->nest) {
		t->nest--;
		return;
	}
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	t->budget = t->parked;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	t->guard = 0;
}

/* 1 if a longjmp left the guard held and it is given up now (thread_state.c). */
int guard_stale(struct tstate *t, uintptr_t cfa);

/*
 * A hook while monitored. The guard free: it is taken. The guard held by
 * the hook's own calls of others' code (pmm_internal): the call is theirs
 * and goes straight to libc. The guard held otherwise: a signal handler
 * interrupted the hook, and its call is recorded alone (record_alone: t
 * NULL all the way down), unless the guard is stale (guard_stale).
 */
enum { ENTER_TAKEN, ENTER_PASS, ENTER_ALONE };

static inline int enter(struct tstate *t)
{
	if (likely(!t->guard)) {
		guard_take(t);
		return ENTER_TAKEN;
	}
	if (pmm_internal)
		return ENTER_PASS;
	/* the caller's stack pointer: the entry points reach here by tail calls */
	if (unlikely(guard_stale(t, (uintptr_t)__builtin_dwarf_cfa()))) {
		guard_take(t);
		return ENTER_TAKEN;
	}
	return ENTER_ALONE;
}

/* Counts a call; 1 every POLL_EVERY calls, when the caller polls. */
static inline int poll_due(struct tstate *t)
{
	return unlikely(--t->poll < 0);
}

/* Empties the thread's buffer (the slots' positions in it go stale: the
 * records they name are checked before a cancel). */
static inline void tbuf_reset(struct tstate *t)
{
	t->n = 0;
	t->cross = 0;
	t->full = g_tbuf_records;
}

PMM_HIDDEN_END

#endif /* PMM_THREAD_STATE_H */
