// SPDX-License-Identifier: GPL-2.0
/*
 * Stack walkers for PMM_DEPTH > 1. Both return up to max return addresses,
 * innermost first, starting with ra0 (the hook's caller), and never fewer
 * than one (ra0 itself).
 *
 * pmm_unwind_fp: follows saved frame pointers. Every step is bounds-checked
 * against the thread's stack (read once per thread with pthread_getattr_np,
 * under the hook's reentrancy guard), must move strictly up the stack, by
 * less than 1 MiB, to an 8-byte aligned address; it never reads outside the
 * stack, so a frame without a frame pointer ends the walk instead of
 * crashing. Code built without frame pointers (most of Debian) is cut short.
 *
 * pmm_unwind_eh: libgcc's _Unwind_Backtrace, which reads .eh_frame and so
 * walks code built without frame pointers too. It is slower and it takes
 * the loader's lock (dl_iterate_phdr).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <unwind.h>

#include "thread_state.h"
#include "unwind.h"

static __thread uintptr_t t_stack_lo
	__attribute__((tls_model("initial-exec")));
static __thread uintptr_t t_stack_hi
	__attribute__((tls_model("initial-exec")));

/* pthread_getattr_np reads /proc/self/maps for the main thread (malloc,
 * stdio): the hook's own call (pmm_internal_begin), errno kept. */
static void stack_bounds(uintptr_t sp)
{
	uint64_t mask = pmm_internal_begin();
	pthread_attr_t attr;
	void *addr;
	size_t size;

	if (pthread_getattr_np(pthread_self(), &attr) == 0) {
		if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
			t_stack_lo = (uintptr_t)addr;
			t_stack_hi = (uintptr_t)addr + size;
		}
		pthread_attr_destroy(&attr);
	}
	pmm_internal_end(mask);
	if (t_stack_hi <= sp || t_stack_lo > sp) {
		/* unknown stack: allow only the page-rounded 64 KiB above sp */
		t_stack_lo = sp;
		t_stack_hi = (sp + 65536) & ~(uintptr_t)4095;
	}
}

__attribute__((noinline))
int pmm_unwind_fp(uint64_t *out, int max, void *ra0, void *frame, int alone)
{
	uintptr_t fp = frame ? (uintptr_t)frame : (uintptr_t)__builtin_frame_address(0);
	uintptr_t lo, hi;
	int n = 0, found = 0, steps;

	if (unlikely(t_stack_hi == 0)) {
		if (alone) {
			out[0] = (uintptr_t)ra0;
			return 1;
		}
		stack_bounds((uintptr_t)__builtin_frame_address(0));
	}
	lo = t_stack_lo;
	hi = t_stack_hi;
	for (steps = 0; steps < max + 16; steps++) {
		uintptr_t next, ret;

		if (fp < lo || fp > hi - 16 || (fp & 7))
			break;
		next = ((const uintptr_t *)fp)[0];
		ret = ((const uintptr_t *)fp)[1];
		if (!found && ret == (uintptr_t)ra0)
			found = 1;
		if (found) {
			out[n++] = ret;
			if (n == max)
				break;
		}
		if (next <= fp || next - fp > (1U << 20))
			break;
		fp = next;
	}
	if (n == 0) {
		out[0] = (uintptr_t)ra0;
		n = 1;
	}
	return n;
}

struct eh_walk {
	uint64_t *out;
	uintptr_t ra0;
	int max;
	int n;
	int skipped;
};

static _Unwind_Reason_Code eh_step(struct _Unwind_Context *ctx, void *arg)
{
	struct eh_walk *w = arg;
	uintptr_t ip = _Unwind_GetIP(ctx);

	if (w->n == 0 && ip != w->ra0) {
		/* still inside the hook's own frames */
		return ++w->skipped > 16 ? _URC_END_OF_STACK : _URC_NO_REASON;
	}
	if (ip == 0)
		return _URC_END_OF_STACK;
	w->out[w->n++] = ip;
	return w->n == w->max ? _URC_END_OF_STACK : _URC_NO_REASON;
}

__attribute__((noinline))
int pmm_unwind_eh(uint64_t *out, int max, void *ra0)
{
	struct eh_walk w = { .out = out, .ra0 = (uintptr_t)ra0, .max = max };
	uint64_t mask = pmm_internal_begin();	/* libgcc may malloc (its FDE tables) */

	_Unwind_Backtrace(eh_step, &w);
	pmm_internal_end(mask);
	if (w.n == 0) {
		out[0] = (uintptr_t)ra0;
		w.n = 1;
	}
	return w.n;
}
