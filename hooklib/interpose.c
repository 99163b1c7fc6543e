// SPDX-License-Identifier: GPL-2.0
/*
 * libpmmhook.so: the pmm LD_PRELOAD interposer.
 *
 *   LD_PRELOAD=/path/to/libpmmhook.so program ...
 *
 * This file is the library's export surface: each entry point's common
 * case (a few instructions, then libc) and a tail call to the code for the
 * rest. Below it: slowpath.c and mapping.c (the general code), exact.c
 * (exact mode's fast paths), monitored.h (what a monitored call records),
 * buffer.c (each thread's records and their batches), site.c and
 * unwind.c (call sites), control.c and device.c (the module), init.c,
 * and the state they share: mode.c, thread_state.c, clock.c, tags.c, aset.c,
 * sampled_mode.c, arena.c, real.c, env.c, notice.c. Each header says what its
 * file offers; hook.h what they all share.
 *
 * Interposes malloc, free, calloc, realloc, reallocarray, posix_memalign,
 * aligned_alloc, memalign, valloc, pvalloc, malloc_usable_size (passthrough)
 * and mmap/mmap64/munmap/mremap (anonymous mappings only). C++ new/delete
 * reach malloc/free through libstdc++.
 *
 * While the process is monitored by pmm.ko, every allocation event becomes a
 * struct pmm_record in a per-thread buffer that reaches the kernel in one
 * PMM_RECORD_LOG batch when it fills, when the thread exits, at process exit
 * and no later than FLUSH_NS after its first record (checked on the thread's
 * next hook call: the library never starts a thread or a timer of its own).
 *
 * While it is not monitored, a hook is the libc call plus a per-thread
 * countdown: malloc's in bytes (POLL_BYTES), the others' in calls
 * (POLL_EVERY). When one runs out the hook reads the vDSO's coarse
 * CLOCK_MONOTONIC, and once a second (process-wide) it asks the module
 * with PMM_QUERY_SELF whether monitoring has started. No other system call.
 * Each thread sees a start when its countdown runs out.
 *
 * Environment:
 *   PMM_QUIET=1        no line on stderr, ever
 *   PMM_START=1        ask the module to monitor this process (START_PID 0)
 *   PMM_FOLLOW_FORK=1  forked children ask the same
 *   PMM_DEPTH=N        frames per site, 1..32 (default 1: the caller)
 *   PMM_UNWIND=fp|eh   stack walker for N > 1 (default auto: fp, eh when fp
 *                      stops before 3 frames)
 *   PMM_SAMPLE=BYTES   sampled tracking, one sample per BYTES on average
 *   PMM_CLOCK=mono     stamp records with CLOCK_MONOTONIC (default: the
 *                      address clock, see next_stamp(); for tests)
 *   PMM_FASTPATH=0     exact mode without its fast paths (malloc_exact,
 *                      free_exact, realloc_exact): tests compare them with
 *                      the general path
 * They are read once, at init, from the initial environment if init comes
 * before libc has set environ (init_env), and ignored in secure-execution
 * mode (AT_SECURE: set-user-ID and the like).
 *
 * Fork policy (pthread_atfork): the child starts with empty buffers and is
 * not monitored (the parent's buffered records are the parent's to send);
 * it polls like any unmonitored process, and with PMM_FOLLOW_FORK=1 asks to
 * be monitored at once. A vfork child sends nothing and leaves the parent's
 * state as it is (pmm_mine); a child made without fork handlers (_Fork, a
 * raw clone) becomes a forked child where it first sends or polls. exec: the library leaves the environment
 * alone, so LD_PRELOAD (and the PMM_* variables) pass on to the new
 * program, which loads the library afresh; the device is opened O_CLOEXEC,
 * at fd 3 or above.
 *
 * Signal handlers: a hook called by a handler that interrupted the hook
 * records alone (record_alone), without touching the thread's state.
 *
 * Failure policy: /dev/pmm absent, not permitted, or failing mid-run (module
 * unloaded: ENODEV, EBADF, ...): every call passes straight to libc from
 * then on, with at most one "pmm: ..." line on stderr (none with PMM_QUIET);
 * the same, silently, once the program has closed the device's fd
 * (dev_ours). errno is the program's after every hook.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "arena.h"
#include "aset.h"
#include "buffer.h"
#include "exact.h"
#include "heap.h"
#include "init.h"
#include "interpose.h"
#include "mapping.h"
#include "mode.h"
#include "real.h"
#include "site.h"
#include "slowpath.h"
#include "thread_state.h"

/*
 * t->budget -= n; 1 if it was more than n (unsigned: a size of 2^63 or more
 * spends it too) and what is left is below 2^63, as every budget is. A
 * spent budget has wrapped to 2^63 or more until the slow path sets it
 * again, and a signal handler's malloc that comes in between must find it
 * spent too: in exact mode it would otherwise pass unrecorded. On x86-64
 * one instruction on the thread's variable and two branches: a compiler
 * loads, compares, subtracts and stores.
 */
static inline __attribute__((always_inline)) int budget_take(size_t n)
{
#ifdef __x86_64__
	asm goto("subq %1, %0\n\t"
		 "jbe %l[spent]\n\t"
		 "js %l[spent]"
		 : : "m"(this_thread.budget), "r"(n) : "cc", "memory" : spent);
	return 1;
spent:
	return 0;
#else
	uint64_t left = this_thread.budget;

	this_thread.budget = left - n;
	return left > n && left - n < (1ULL << 63);
#endif
}

/* Not monitored, or sampled with no sample point in these n bytes:
 * nothing to record until the budget is spent; then the mode's code
 * (g_fast.malloc_spent). */
PMM_EXPORT void *malloc(size_t n)
{
	if (likely(budget_take(n)))
		return real.malloc(n);
	return __atomic_load_n(&g_fast.malloc_spent, __ATOMIC_RELAXED)(n,
								__builtin_return_address(0));
}

/*
 * One jump: to libc's free when not monitored, to the mode's checks
 * otherwise (g_fast.free). A jump through memory the hook writes only when
 * the mode changes, rather than a test of the mode on every call.
 */
PMM_EXPORT void free(void *p)
{
	__atomic_load_n(&g_fast.free, __ATOMIC_RELAXED)(p);
}

PMM_EXPORT void *calloc(size_t n, size_t m)
{
	if (likely(g_fast.mode == MODE_PASS)) {
		if (poll_due(&this_thread))
			return calloc_poll(n, m);
		return real.calloc(n, m);
	}
	return calloc_slow(n, m, __builtin_return_address(0));
}

/*
 * Not monitored: libc's call and the poll's countdown. Sampled, a block
 * that the sampled set's filter says was not sampled (most, and NULL):
 * malloc's budget pays for the n bytes, as a malloc of n would (the
 * general path samples n bytes too), and there is nothing to record.
 * Exact: realloc_exact, the fast path. The rest (the arena has blocks,
 * before init, mid-change): the general code.
 */
PMM_EXPORT void *realloc(void *p, size_t n)
{
	uint32_t mode = g_fast.mode_no_arena;

	if (likely(mode == MODE_PASS)) {
		if (poll_due(&this_thread))
			return realloc_poll(p, n);
		return real.realloc(p, n);
	}
	if (mode == MODE_SAMPLED &&
	    !__atomic_load_n(set_filter(&g_sampled, p), __ATOMIC_RELAXED)) {
		if (likely(budget_take(n)))
			return real.realloc(p, n);
		return realloc_spent(p, n, __builtin_return_address(0));
	}
	if (mode == MODE_EXACT)
		return realloc_exact(p, n, __builtin_return_address(0));
	return realloc_slow(p, n, __builtin_return_address(0));
}

PMM_EXPORT void *reallocarray(void *p, size_t n, size_t m)
{
	struct src s = CALLER_SRC(__builtin_return_address(0), __builtin_frame_address(0));

	return hook_reallocarray(p, n, m, &s);
}

PMM_EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
	struct src s = CALLER_SRC(__builtin_return_address(0), __builtin_frame_address(0));

	return hook_posix_memalign(out, align, n, &s);
}

PMM_EXPORT void *aligned_alloc(size_t align, size_t n)
{
	struct src s = CALLER_SRC(__builtin_return_address(0), __builtin_frame_address(0));

	return hook_aligned(PMM_OP_ALIGNED_ALLOC, align, n, &s);
}

PMM_EXPORT void *memalign(size_t align, size_t n)
{
	struct src s = CALLER_SRC(__builtin_return_address(0), __builtin_frame_address(0));

	return hook_aligned(PMM_OP_MEMALIGN, align, n, &s);
}

PMM_EXPORT void *valloc(size_t n)
{
	struct src s = CALLER_SRC(__builtin_return_address(0), __builtin_frame_address(0));

	return hook_aligned(PMM_OP_VALLOC, 0, n, &s);
}

PMM_EXPORT void *pvalloc(size_t n)
{
	struct src s = CALLER_SRC(__builtin_return_address(0), __builtin_frame_address(0));

	return hook_aligned(PMM_OP_PVALLOC, 0, n, &s);
}

PMM_EXPORT size_t malloc_usable_size(void *p)
{
	if (in_arena(p))
		return arena_size(p);
	if (g_fast.mode == MODE_BOOT && booting())
		return 0;
	return real.malloc_usable_size(p);
}

PMM_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	struct src s = CALLER_SRC(__builtin_return_address(0), __builtin_frame_address(0));

	return hook_mmap(real.mmap, addr, len, prot, flags, fd, off, &s);
}

PMM_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	struct src s = CALLER_SRC(__builtin_return_address(0), __builtin_frame_address(0));

	return hook_mmap(real.mmap64, addr, len, prot, flags, fd, off, &s);
}

PMM_EXPORT int munmap(void *addr, size_t len)
{
	return hook_munmap(addr, len);
}

PMM_EXPORT void *mremap(void *old, size_t old_len, size_t len, int flags, ...)
{
	struct src s = CALLER_SRC(__builtin_return_address(0), __builtin_frame_address(0));
	void *want = NULL;
	va_list ap;

	if (flags & MREMAP_FIXED) {
		va_start(ap, flags);
		want = va_arg(ap, void *);
		va_end(ap);
	}
	return hook_mremap(old, old_len, len, flags, want, &s);
}

PMM_EXPORT void *pmm_src_malloc(size_t n, void *caller, const char *file, const char *func,
				int line)
{
	struct src s = { .ra = caller, .file = file, .func = func, .line = line };

	return hook_malloc(n, &s);
}

PMM_EXPORT void *pmm_src_calloc(size_t n, size_t m, void *caller, const char *file,
				const char *func, int line)
{
	struct src s = { .ra = caller, .file = file, .func = func, .line = line };

	return hook_calloc(n, m, &s);
}

PMM_EXPORT void *pmm_src_realloc(void *p, size_t n, void *caller, const char *file,
				 const char *func, int line)
{
	struct src s = { .ra = caller, .file = file, .func = func, .line = line };

	return hook_realloc(p, n, &s);
}

PMM_EXPORT void pmm_src_free(void *p, void *caller, const char *file, const char *func,
			     int line)
{
	(void)caller;
	(void)file;
	(void)func;
	(void)line;
	hook_free(p);
}

#ifdef PMM_FAKE_DEV
/* Tests: a block of the bootstrap arena, such as dlsym may get while the
 * hook starts, for a program to free or reallocate later in any mode. */
PMM_EXPORT void *pmm_fake_arena_alloc(size_t n)
{
	return arena_alloc(n, 16);
}

#endif

/* For tests and tools: flushes the calling thread's buffer now, and sends
 * the allocator's report if one is due (heap.h). */
PMM_EXPORT void pmm_flush(void)
{
	struct tstate *t = &this_thread;

	if (g_fast.mode < MODE_MONITORED || enter(t) != ENTER_TAKEN)
		return;
	flush(t);
	heap_report_maybe();
	guard_drop(t);
}

/* interpose.h's names */
#define ENTRY_ALIAS(fn) \
	extern __typeof(fn) entry_##fn __attribute__((alias(#fn), copy(fn), visibility("hidden")))
ENTRY_ALIAS(malloc);
ENTRY_ALIAS(free);
ENTRY_ALIAS(calloc);
ENTRY_ALIAS(realloc);
ENTRY_ALIAS(reallocarray);
ENTRY_ALIAS(posix_memalign);
ENTRY_ALIAS(aligned_alloc);
ENTRY_ALIAS(memalign);
ENTRY_ALIAS(valloc);
ENTRY_ALIAS(pvalloc);
ENTRY_ALIAS(malloc_usable_size);
ENTRY_ALIAS(mmap);
ENTRY_ALIAS(mmap64);
ENTRY_ALIAS(munmap);
ENTRY_ALIAS(mremap);
