/* SPDX-License-Identifier: GPL-2.0 */
/*
 * clock.c: the clocks (the vDSO's, the module's clock page) and the stamps
 * of the records (the address clock).
 */
#ifndef PMM_CLOCK_H
#define PMM_CLOCK_H

#include <time.h>

#include "env.h"
#include "hook.h"
#include "thread_state.h"

PMM_HIDDEN_BEGIN

/* The vDSO's own entry, found at init: libc's wrapper costs two more jumps. */
extern int (*g_clock_gettime)(clockid_t, struct timespec *);
void find_vdso_clock(void);

static inline uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	g_clock_gettime(id, &ts);	/* vDSO: no system call */
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static inline uint64_t now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

/*
 * The module's clock page (PMM_CLOCK_OFFSET): CLOCK_MONOTONIC_COARSE, kept
 * by the module. Reading it is one load where the vDSO's coarse clock is a
 * call, which QEMU's TCG makes dear, and exact mode reads it on every record.
 * NULL until mapped (map_kernel_clock), or with a module without it.
 */
extern const struct pmm_clock *g_kclock;

static inline uint64_t coarse_ns(void)
{
	const struct pmm_clock *k = __atomic_load_n(&g_kclock, __ATOMIC_ACQUIRE);

	if (likely(k))
		return __atomic_load_n(&k->mono_ns, __ATOMIC_RELAXED);
	return clock_ns(CLOCK_MONOTONIC_COARSE);
}

#ifdef PMM_FAKE_DEV
/*
 * The module's clock page, faked, so that this build's stamps cost what the
 * module's do, one load: bench/host_instr.sh measures the hook's cost with
 * this build. No thread keeps it: a second thread
 * makes glibc's malloc take its locks, which the measured program would pay.
 * The batches' and polls' stand-in system calls refresh it instead, so its
 * time is that of the last of them.
 */
extern struct pmm_clock g_fake_clock;

static inline void fake_clock_refresh(void)
{
	__atomic_store_n(&g_fake_clock.mono_ns, clock_ns(CLOCK_MONOTONIC_COARSE),
			 __ATOMIC_RELAXED);
}
#endif

/* The coarse time at a poll (the fake-device build refreshes its page). */
static inline uint64_t poll_ns(void)
{
#ifdef PMM_FAKE_DEV
	fake_clock_refresh();
#endif
	return coarse_ns();
}

/*
 * A record's time_ns. The kernel compares the times of records at the same
 * address only (a free pairs with a block at its address allocated no
 * later, an early free with an allocation there no later than itself; maps
 * with maps), so stamps need only follow the order of the events at each
 * address, which threads impose on each other through the memory itself:
 * an allocation happens after the free that released its address (inside
 * libc), a free after the allocation whose pointer it got.
 *
 * The address clock gives exactly that, with no shared counter: each thread
 * keeps its last stamp, and each slot of the per-address table (g_tags,
 * below) the last stamp of an event at its addresses. An event at ptr is
 * stamped max(thread's last + 1, slot's + 1, CLOCK_MONOTONIC_COARSE), and
 * the stamp goes to both; a free stamps before the memory is released, an
 * allocation after it is obtained, so the next event at ptr in any thread
 * reads a slot at least as new. A slot shared by two addresses only makes a
 * stamp larger. The coarse time (the module's clock page: one load) keeps
 * stamps within about a jiffy, plus one ns per record, of CLOCK_MONOTONIC,
 * so the kernel's HH:MM:SS display holds. The cost is that of the table,
 * which the tags read and write anyway: no atomic read-modify-write, no
 * cache line that every thread writes (a process-wide counter is one, and
 * threads contend for it), no vDSO read (a system call in a guest whose
 * clocksource is hpet).
 * Mappings (rare) are stamped from one process-wide atomic counter, also
 * kept at or above the coarse time: a mapping trimmed from its start moves
 * to another address, so their order must hold across addresses.
 * Two stamps of different threads may be equal; never two at one address
 * (but for a race between two addresses that share a slot, both writing it
 * at once: the slot may then keep the smaller stamp; tags still pair such
 * frees right).
 * PMM_CLOCK=mono stamps every record with CLOCK_MONOTONIC instead (tests).
 */
extern uint64_t g_map_clock;	/* the mappings' stamps */

/* The thread's next stamp from the coarse time v: after both its last and
 * at (a slot's last). */
static inline uint64_t stamp_from(struct tstate *t, uint64_t v, uint64_t at)
{
	if (v <= t->clock)
		v = t->clock + 1;
	if (v <= at)
		v = at + 1;
	t->clock = v;
	return v;
}

static inline uint64_t next_stamp(struct tstate *t, uint64_t at)
{
	return stamp_from(t, coarse_ns(), at);
}

/* A mapping's record: after every earlier mapping record of the process.
 * t NULL: made alone (record_alone), without the thread's clock. */
static inline uint64_t stamp_map(struct tstate *t)
{
	uint64_t v, cur;

	if (g_clock_mono)
		return now_ns();
	cur = __atomic_load_n(&g_map_clock, __ATOMIC_RELAXED);
	do {
		if (t) {
			v = next_stamp(t, cur);
		} else {
			v = coarse_ns();
			if (v <= cur)
				v = cur + 1;
		}
	} while (!__atomic_compare_exchange_n(&g_map_clock, &cur, v, 0, __ATOMIC_SEQ_CST,
					      __ATOMIC_RELAXED));
	return v;
}

/* A record that names no address (a failed allocation). */
static inline uint64_t stamp_none(struct tstate *t)
{
	if (g_clock_mono)
		return now_ns();
	return t ? next_stamp(t, 0) : coarse_ns();
}

PMM_HIDDEN_END

#endif /* PMM_CLOCK_H */
