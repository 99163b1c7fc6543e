/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What every file of libpmmhook.so shares: the ABI header, the modes, a few
 * macros and limits. Each file's own header says what that file offers.
 *
 * Rules for everything reachable from a hook: no malloc, no stdio, no lock
 * that another hook could hold; fixed-size storage only.
 */
#ifndef PMM_HOOK_H
#define PMM_HOOK_H

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../kmod/uapi/pmm.h"

#define PMM_EXPORT	__attribute__((visibility("default")))
#define likely(x)	__builtin_expect(!!(x), 1)
#define unlikely(x)	__builtin_expect(!!(x), 0)

/*
 * Around each header's declarations: hidden, so that a global of another
 * file is one PC-relative access, as a static is, not a load of its GOT
 * entry first (-fvisibility=hidden applies to definitions only).
 */
#define PMM_HIDDEN_BEGIN	_Pragma("GCC visibility push(hidden)")
#define PMM_HIDDEN_END		_Pragma("GCC visibility pop")

#define NSEC_PER_SEC	1000000000ULL
#define NSEC_PER_MSEC	1000000ULL

#define FLUSH_NS	(100 * NSEC_PER_MSEC)	/* oldest record waits at most */
#define QUERY_NS	NSEC_PER_SEC		/* unmonitored: PMM_QUERY_SELF period */
#define POLL_EVERY	16			/* hook calls between clock reads */
#define POLL_BYTES	(16 * 1024)		/* malloc: bytes between clock reads */

/* madvise(advice) on the pages of [lo, hi); advice only, errno kept. */
static inline void advise(uintptr_t lo, uintptr_t hi, int advice)
{
	int saved = errno;

	lo &= ~4095UL;
	hi = (hi + 4095) & ~4095UL;
	madvise((void *)lo, hi - lo, advice);
	errno = saved;
}

/* g_fast.mode (mode.h): what the hooks do. */
enum {
	MODE_BOOT = 0,		/* real functions not resolved yet: bootstrap arena */
	MODE_PASS = 1,		/* straight to libc (not monitored, or disabled) */
	MODE_EXACT = 2,		/* monitored, every event recorded */
	MODE_SAMPLED = 3,	/* monitored, sampled (PMM_SAMPLE) */
	MODE_MONITORED = MODE_EXACT,	/* mode >= MODE_MONITORED: records flow */
};

#endif /* PMM_HOOK_H */
