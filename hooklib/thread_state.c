// SPDX-License-Identifier: GPL-2.0
/*
 * Each thread's hook state and its reentrancy guard (thread_state.h), and what
 * undoes a guard that a signal handler's longjmp out of the hook left held.
 *
 * Owns: this_thread, pmm_internal.
 */
#include <signal.h>

#include "thread_state.h"

__thread struct tstate this_thread __attribute__((tls_model("initial-exec")));
__thread int pmm_internal __attribute__((tls_model("initial-exec")));

/*
 * The guard is held, and not by the hook's own calls of others' code: 1 if
 * no hook is running under it any more (a signal handler left the hook with
 * longjmp, which never dropped it), and then it is given up; 0 if this call
 * is a handler's that interrupted the hook, or comes from what the hook
 * calls (an allocator that maps inside malloc). cfa is the stack pointer of
 * this hook's caller (or lower). While the guard is held, the hook runs
 * below the stack pointer it holds, and so does all it calls; a handler
 * runs below the code it interrupted, by a signal frame (over 1 KiB on
 * x86-64; the hook's stack pointer may have climbed a few words above the
 * guard's by then), or on the alternate signal stack. So a call from above
 * that stack pointer that is not on the alternate stack (or is on it, where
 * the guard was taken) is the program's own after a longjmp: the guard,
 * pmm_internal and malloc's parked budget (sampled; exact and not
 * monitored set theirs on the next slow path) are reset, and it goes on.
 * A call from deeper down is taken for a handler's: after a longjmp, the
 * thread's calls are recorded alone until one comes from no deeper than
 * the hook the handler left.
 */
__attribute__((noinline, cold)) int guard_stale(struct tstate *t, uintptr_t cfa)
{
	uintptr_t at = t->guard;
	stack_t ss;
	int saved;

	if (cfa <= at)
		return 0;
	saved = errno;
	if (syscall(SYS_sigaltstack, NULL, &ss) == 0 && (ss.ss_flags & SS_ONSTACK) &&
	    at - (uintptr_t)ss.ss_sp >= ss.ss_size) {
		errno = saved;
		return 0;	/* a handler on the alternate stack */
	}
	errno = saved;
	t->budget = g_sample ? t->parked : 0;
	t->nest = 0;
	pmm_internal = 0;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	t->guard = 0;
	return 1;
}
