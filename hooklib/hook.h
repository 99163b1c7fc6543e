/* SPDX-License-Identifier: GPL-2.0 */
/*
 * libpmmhook.so internals shared by libpmmhook.c (hooks, buffers, device),
 * site.c (site table, registration) and unwind.c (stack walkers).
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

#define NSEC_PER_SEC	1000000000ULL
#define NSEC_PER_MSEC	1000000ULL

/* g_fast.mode: what the hooks do. */
enum {
	MODE_BOOT = 0,		/* real functions not resolved yet: bootstrap arena */
	MODE_PASS = 1,		/* straight to libc (not monitored, or disabled) */
	MODE_EXACT = 2,		/* monitored, every event recorded */
	MODE_SAMPLED = 3,	/* monitored, sampled (PMM_SAMPLE) */
	MODE_MONITORED = MODE_EXACT,	/* mode >= MODE_MONITORED: records flow */
};

extern unsigned int g_epoch;	/* bumped each time monitoring (re)starts */
extern int g_depth;		/* frames per site, 1..PMM_MAX_FRAMES */
extern int g_unwind;		/* UNWIND_*: stack walker for depth > 1 */

enum { UNWIND_AUTO = 0, UNWIND_FP = 1, UNWIND_EH = 2 };

/* libpmmhook.c */
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
 */
static inline uint64_t pmm_internal_begin(void)
{
	uint64_t all = ~0ULL, old = 0;
	int saved = errno;

	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, sizeof(all));
	pmm_internal++;
	errno = saved;
	return old;
}

static inline void pmm_internal_end(uint64_t old)
{
	int saved = errno;

	pmm_internal--;
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, sizeof(old));
	errno = saved;
}
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

/* unwind.c: up to max return addresses, starting at the frame whose return
 * address is ra0 (the hook's caller). Returns the count (>= 1: ra0 itself
 * when nothing better is found). alone: in a signal handler that interrupted
 * the hook, where the fp walk stops at once if the thread's stack bounds are
 * not known yet (finding them allocates). */
int pmm_unwind_fp(uint64_t *out, int max, void *ra0, void *frame, int alone);
int pmm_unwind_eh(uint64_t *out, int max, void *ra0);

#endif /* PMM_HOOK_H */
