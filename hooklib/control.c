// SPDX-License-Identifier: GPL-2.0
/*
 * Monitoring, as the module decides it: starting (the tables, the clock
 * page, a new epoch, exact's key and the mode), stopping when the module
 * refuses records (ENOLINK), giving up on other refusals, asking to be
 * monitored (START_PID 0), and whose state the hook's is when another
 * process runs it: a forked child, a copy made without fork handlers, a
 * vfork child.
 *
 * The process the hook's state belongs to (set at init and in a forked
 * child). A vfork child runs on its parent's memory and calling thread,
 * TLS included, and no pthread_atfork handler runs for it: the module
 * would take what it sends for the child's (not monitored: ENOLINK), and
 * the hook's reaction (stop, disable) would be written into the parent's
 * state. So whatever sends, or reacts to a refusal, first checks that the
 * caller is this process (one getpid system call, on those paths only:
 * never per record).
 *
 * A child made without fork handlers (glibc's _Fork, a raw clone or fork
 * system call) has another pid too, but a copy of the memory: it must
 * become a forked child (at_fork_child), not keep the parent's state as a
 * vfork child does. g_fork_marker points into a page mapped with
 * MADV_WIPEONFORK, set to 1 in this process: a copied child finds it 0, a
 * vfork (or CLONE_VM) child, sharing the memory, finds it 1. NULL if the
 * kernel has no MADV_WIPEONFORK (before 4.14): every child with another
 * pid is then taken for a vfork child.
 *
 * Owns: g_pid, g_fork_marker, g_next_query, g_errors.
 */
#include <string.h>
#include <sys/mman.h>

#include "aset.h"
#include "clock.h"
#include "control.h"
#include "device.h"
#include "env.h"
#include "mode.h"
#include "real.h"
#include "sampled_mode.h"
#include "scanreg.h"
#include "tags.h"
#include "thread_state.h"

#define MAX_ERRORS	8	/* consecutive refusals before giving up */

pid_t g_pid;
volatile uint8_t *g_fork_marker;
uint64_t g_next_query;
int g_errors;

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK	18
#endif

void fork_marker_map(void)
{
	int saved = errno;
	void *p = real.mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			    -1, 0);

	if (p != MAP_FAILED && madvise(p, 4096, MADV_WIPEONFORK) == 0) {
		*(volatile uint8_t *)p = 1;
		g_fork_marker = p;
	} else if (p != MAP_FAILED) {
		real.munmap(p, 4096);
	}
	errno = saved;
}

/* A vfork child pinned the buffer and has not exited or exec'd yet. */
static inline int vfork_child_runs(struct tstate *t)
{
	if (likely(!t->pin.pid))
		return 0;
	if (__atomic_load_n(&t->pin.word, __ATOMIC_ACQUIRE) == (uint32_t)t->pin.pid)
		return 1;
	t->pin.pid = 0;	/* it has: this is the parent again */
	return 0;
}

int pmm_mine(void)
{
	pid_t me;

	if (vfork_child_runs(&this_thread))
		return 0;
	me = (pid_t)syscall(SYS_getpid);
	if (likely(me == __atomic_load_n(&g_pid, __ATOMIC_RELAXED)))
		return 1;
	if (!g_fork_marker || *g_fork_marker)
		return 0;	/* a vfork or CLONE_VM child: the parent's state */
	at_fork_child();	/* a copy made without fork handlers */
	return 1;
}

/*
 * The clock page, for the address clock (it reads the coarse time on every
 * record). Mapped when monitoring first starts, not at init: the module's
 * timer runs while any process maps the page, and most preloaded processes
 * are never monitored. Kept until exit (a later start needs it again).
 */
static void map_kernel_clock(void)
{
	int saved = errno, fd;
	const struct pmm_clock *none = NULL;
	void *p;

	if (__atomic_load_n(&g_clock_mono, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&g_kclock, __ATOMIC_RELAXED))
		return;
#ifdef PMM_FAKE_DEV
	(void)p;
	(void)fd;
	fake_clock_refresh();
	__atomic_compare_exchange_n(&g_kclock, &none, &g_fake_clock, 0, __ATOMIC_RELEASE,
				    __ATOMIC_RELAXED);
#else
	fd = __atomic_load_n(&g_fd, __ATOMIC_RELAXED);
	if (!dev_ours(fd)) {
		errno = saved;
		return;	/* the next ioctl finds out */
	}
	p = real.mmap(NULL, PMM_CLOCK_SIZE, PROT_READ, MAP_SHARED, fd, PMM_CLOCK_OFFSET);
	if (p != MAP_FAILED &&
	    !__atomic_compare_exchange_n(&g_kclock, &none, p, 0, __ATOMIC_RELEASE,
					 __ATOMIC_RELAXED))
		real.munmap(p, PMM_CLOCK_SIZE);	/* another thread's start won */
#endif
	errno = saved;
}

/*
 * Maps [p, p + len) writable now, content kept. A table that is read before
 * it is written (a free looks a block up before any allocation stored it)
 * first maps the shared zero page, and the first store then takes a second
 * fault that copies it and flushes the old entry from every cpu running
 * another thread of the process (an IPI each). Advice only: failure
 * (before Linux 5.14) is harmless.
 */
static void populate(const void *p, size_t len)
{
	advise((uintptr_t)p, (uintptr_t)p + len, MADV_POPULATE_WRITE);
}

/* Monitoring starts: the table that every record of the mode reads first. */
static void populate_tables(void)
{
	if (g_sample)
		populate(&g_sampled, sizeof(g_sampled));
	else
		populate(g_tags, sizeof(g_tags));
}

/* a start in progress (start_monitoring), 0 again in a forked child */
static int g_starting;

/*
 * One start at a time, and none while monitored: two threads that learn of
 * the same start (a poll and an attach) would each clear g_seen, the second
 * after records of the first had set bytes of blocks the module holds, whose
 * frees would then go as older (their blocks live for ever).
 */
void start_monitoring(void)
{
	unsigned int e;

	if (__atomic_exchange_n(&g_starting, 1, __ATOMIC_ACQUIRE))
		return;
	if (__atomic_load_n(&g_fast.mode, __ATOMIC_ACQUIRE) >= MODE_MONITORED) {
		__atomic_store_n(&g_starting, 0, __ATOMIC_RELEASE);
		return;
	}
	this_thread.budget = 0;	/* this thread's malloc: the others' see it when their budget is spent */
	this_thread.sampling = 0;
	/*
	 * The module's table starts empty: every block now live is older. Zero
	 * pages, and the memory given back; before the mode lets any record
	 * set a byte (a byte left set only sends its free the ordinary way).
	 */
	advise((uintptr_t)g_seen, (uintptr_t)g_seen + sizeof(g_seen), MADV_DONTNEED);
	populate_tables();
	map_kernel_clock();
	e = __atomic_add_fetch(&g_epoch, 1, __ATOMIC_RELEASE);
	if (g_fastpath && !g_sample && g_depth == 1 && !g_clock_mono && e && e != EXACT_OFF &&
	    __atomic_load_n(&g_kclock, __ATOMIC_ACQUIRE))
		__atomic_store_n(&g_exact_key, e, __ATOMIC_RELEASE);
	else
		__atomic_store_n(&g_exact_key, EXACT_OFF, __ATOMIC_RELEASE);
	set_mode(g_sample ? MODE_SAMPLED : MODE_EXACT);
	__atomic_store_n(&g_starting, 0, __ATOMIC_RELEASE);
}

static void stop_monitoring(void)
{
	__atomic_store_n(&g_next_query, coarse_ns() + QUERY_NS, __ATOMIC_RELAXED);
	__atomic_store_n(&g_exact_key, EXACT_OFF, __ATOMIC_RELEASE);
	set_mode(MODE_PASS);
}

/* The module refused an ioctl with err (positive errno). */
void pmm_dev_refused(int err, const char *what)
{
	if (!pmm_mine())
		return;	/* a vfork child's call: not the parent's business */
	switch (err) {
	case ENOLINK:	/* PMM_ENOTMONITORED_ERRNO: stop sending, poll */
		__atomic_store_n(&g_errors, 0, __ATOMIC_RELAXED);
		stop_monitoring();
		break;
	case ENODEV: case EBADF: case ENOTTY: case ENXIO: case EIO:
	case EPERM: case EACCES:
		disable(err, what);
		break;
	default:	/* this batch or site is lost; give up if it persists */
		if (__atomic_add_fetch(&g_errors, 1, __ATOMIC_RELAXED) >= MAX_ERRORS)
			disable(err, what);
		break;
	}
}

int start_self(void)
{
	struct pmm_config c;

	memset(&c, 0, sizeof(c));
	c.size = sizeof(c);
	c.set = PMM_CFG_START_PID;
	c.start_pid = 0;	/* the caller */
	return pmm_dev_ioctl(PMM_SET_CONFIG, &c);
}

/*
 * A forked child: pthread_atfork's child handler, or pmm_mine when a child
 * made without fork handlers first sends or polls (possibly inside a hook).
 */
void at_fork_child(void)
{
	struct tstate *t = &this_thread;

	__atomic_store_n(&g_pid, (pid_t)syscall(SYS_getpid), __ATOMIC_RELAXED);
	if (g_fork_marker)
		*g_fork_marker = 1;	/* wiped in this copy */
	alone_reseed(g_pid);	/* not the parent's draws */
	t->rng = 0;
	t->pin.pid = 0;
	tbuf_reset(t);	/* the parent's records: the parent sends them */
	scanreg_fork(t);	/* the parent's other threads are not here */
	t->budget = 0;
	t->parked = 0;
	t->sampling = 0;
	g_exact_key = EXACT_OFF;
	g_starting = 0;	/* the parent's, in another thread: not this copy's */
	__atomic_add_fetch(&g_epoch, 1, __ATOMIC_RELEASE);
	if (!g_dev_usable)
		return;
	set_mode(MODE_PASS);
	g_next_query = coarse_ns() + QUERY_NS;
	if (g_follow_fork) {
		int r;

		guard_take(t);
		r = start_self();
		if (r == 0 || pmm_dev_ioctl(PMM_QUERY_SELF, NULL) == 1)
			start_monitoring();
		guard_drop(t);
	}
}
