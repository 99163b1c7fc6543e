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

/* g_fast.mode (mode.h): what the hooks do. */
enum {
	MODE_BOOT = 0,		/* real functions not resolved yet: bootstrap arena */
	MODE_PASS = 1,		/* straight to libc (not monitored, or disabled) */
	MODE_EXACT = 2,		/* monitored, every event recorded */
	MODE_SAMPLED = 3,	/* monitored, sampled (PMM_SAMPLE) */
	MODE_MONITORED = MODE_EXACT,	/* mode >= MODE_MONITORED: records flow */
};

PMM_HIDDEN_BEGIN

extern unsigned int g_epoch;	/* bumped each time monitoring (re)starts */

/* libpmmhook.c */
int pmm_dev_ioctl(unsigned long cmd, void *arg);	/* errno-preserving; -errno */
#ifdef PMM_FAKE_DEV
/* The fake device's PMM_FAKE_RAISE: SIGUSR1 at the Nth pass at this point. */
enum { FAKE_AT_BATCH = 1, FAKE_AT_CLAIM = 2 };
void pmm_fake_point(int at);
#endif
int pmm_mine(void);	/* 0 in a vfork child, which must not send */
void pmm_dev_refused(int err, const char *what);

/* site.c: site id for a call site: 1, 2, 3... in order of first use (a
 * number may be skipped when threads race to give one); 0 when the table is
 * full, and in a vfork child for a site not registered in this epoch. */
uint32_t pmm_site_addr(void *ra, void *frame, int alone);
uint32_t pmm_site_source(void *caller, const char *file, const char *func, int line);
void pmm_site_extent(uintptr_t *lo, uintptr_t *hi);

PMM_HIDDEN_END

/* hooklib/bench/unwind_bench.c takes the walkers' declarations from here. */
#include "unwind.h"

#endif /* PMM_HOOK_H */
