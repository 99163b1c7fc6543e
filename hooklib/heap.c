// SPDX-License-Identifier: GPL-2.0
/*
 * The allocator's own report of its heap, for the module's samples: how
 * much it holds free beside the live blocks the records describe (heap.h).
 * glibc: mallinfo2() (2.33 and later; without it, no report). jemalloc,
 * when it is the allocator the hooks call (its mallctl is in the object
 * whose malloc real.malloc is): "epoch" refreshes its statistics, then
 * stats.allocated, active, resident, mapped and retained. Another
 * allocator: no report. uapi/pmm.h says what each figure holds.
 *
 * mallinfo2 takes every arena's lock in turn and walks its free lists,
 * about a microsecond a free chunk (docs/performance.md: on a heap of half
 * a million free chunks, hundreds of milliseconds, while the other threads'
 * mallocs in that arena wait); mallctl("epoch") merges every arena's
 * statistics. So a report is made at most once per sampling interval (the
 * module's, which PMM_HEAP_REPORT returns) and at most 1% of the time (the
 * next report waits 100 d, d the shorter of the last two reports' times: a
 * report slow by chance, or the first, which may set the allocator's
 * statistics up, does not stretch the wait), by one thread, inside
 * pmm_internal: every signal blocked, and whatever the allocator allocates
 * meanwhile goes straight to libc.
 *
 * Which allocator it is, is found once, at init (heap_init): a lookup
 * later, in the middle of the program, could allocate (dlsym's error
 * message) and so change where the program's next blocks go.
 *
 * Owns: g_heap_next, g_heap_kind and the functions it looked up.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <string.h>

#include "clock.h"
#include "device.h"
#include "heap.h"
#include "real.h"
#include "thread_state.h"

/* Before the module's interval is known, or when it says none. */
#define HEAP_DEFAULT_MS	10000
/* The share of the time reports may take: 1 / HEAP_DUTY. */
#define HEAP_DUTY	100

static uint64_t g_heap_next;	/* coarse ns before which no report is made */
static uint64_t g_heap_took;	/* ns the last report took (coarse), 0 before one */
static int g_heap_kind;		/* PMM_ALLOC_* (heap_init) */
static struct mallinfo2 (*g_mallinfo2)(void);
static int (*g_mallctl)(const char *, void *, size_t *, void *, size_t);

/* fn is defined in the object real.malloc is in. */
static int same_object(void *fn)
{
	Dl_info a, b;

	return fn && real.malloc && dladdr(fn, &a) && dladdr((void *)real.malloc, &b) &&
	       a.dli_fbase == b.dli_fbase;
}

void heap_init(void)
{
	void *ctl = dlsym(RTLD_DEFAULT, "mallctl");
	void *mi2 = dlsym(RTLD_DEFAULT, "mallinfo2");

	g_heap_kind = PMM_ALLOC_NONE;
	if (same_object(ctl)) {
		g_mallctl = (int (*)(const char *, void *, size_t *, void *, size_t))ctl;
		g_heap_kind = PMM_ALLOC_JEMALLOC;
	} else if (same_object(mi2)) {
		g_mallinfo2 = (struct mallinfo2 (*)(void))mi2;
		g_heap_kind = PMM_ALLOC_GLIBC;
	}
}

static int jemalloc_stat(const char *name, __u64 *v)
{
	size_t x, len = sizeof(x);

	if (g_mallctl(name, &x, &len, NULL, 0) || len != sizeof(x))
		return -1;
	*v = x;
	return 0;
}

static int read_jemalloc(struct pmm_heap *h)
{
	__u64 resident, active;
	uint64_t epoch = 1;
	size_t len = sizeof(epoch);

	if (g_mallctl("epoch", &epoch, &len, &epoch, len) ||
	    jemalloc_stat("stats.allocated", &h->in_use) ||
	    jemalloc_stat("stats.active", &active) ||
	    jemalloc_stat("stats.resident", &resident) ||
	    jemalloc_stat("stats.mapped", &h->mapped) ||
	    jemalloc_stat("stats.retained", &h->retained))
		return -1;
	h->free = resident > h->in_use ? resident - h->in_use : 0;
	return h->in_use <= active && active <= h->mapped ? 0 : -1;
}

static void read_glibc(struct pmm_heap *h)
{
	struct mallinfo2 mi = g_mallinfo2();

	h->mapped = mi.arena + mi.hblkhd;
	h->in_use = mi.uordblks + mi.hblkhd;
	h->free = mi.fordblks;
	h->top = mi.keepcost;
}

int heap_read(struct pmm_heap *h)
{
	uint64_t mask = pmm_internal_begin();
	int ret = 0;

	memset(h, 0, sizeof(*h));
	h->size = sizeof(*h);
	h->allocator = (uint32_t)g_heap_kind;
	if (g_heap_kind == PMM_ALLOC_GLIBC)
		read_glibc(h);
	else if (g_heap_kind != PMM_ALLOC_JEMALLOC || read_jemalloc(h))
		ret = -1;
	pmm_internal_end(mask);
	return ret;
}

void heap_report_maybe(void)
{
	uint64_t now = coarse_ns(), next = __atomic_load_n(&g_heap_next, __ATOMIC_RELAXED);
	uint64_t wait = HEAP_DEFAULT_MS * NSEC_PER_MSEC, took, prev;
	struct pmm_heap h;
	int r;

	if ((int64_t)(now - next) < 0 || g_heap_kind == PMM_ALLOC_NONE)
		return;
	/* this thread's turn; the others wait for the next interval */
	if (!__atomic_compare_exchange_n(&g_heap_next, &next, now + HEAP_DEFAULT_MS * NSEC_PER_MSEC,
					 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return;
	/* the coarse clock (a jiffy, one load of the clock page): a report
	 * shorter than that stretches nothing, and no clock is a system call */
	if (heap_read(&h))
		return;
	took = coarse_ns() - now;
	prev = __atomic_exchange_n(&g_heap_took, took, __ATOMIC_RELAXED);
	if (prev < took)
		took = prev;	/* the first report: 0 */
	r = pmm_dev_ioctl(PMM_HEAP_REPORT, &h);
	if (r >= PMM_INTERVAL_MIN_MS)
		wait = (uint64_t)r * NSEC_PER_MSEC;
	if (wait < took * HEAP_DUTY)
		wait = took * HEAP_DUTY;
	__atomic_store_n(&g_heap_next, now + wait, __ATOMIC_RELAXED);
}
