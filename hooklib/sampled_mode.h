/* SPDX-License-Identifier: GPL-2.0 */
/*
 * sampled_mode.c: sampled mode (PMM_SAMPLE=BYTES); kmod/sampler.c is the
 * module's sampler thread, another thing. Sample points form a Poisson
 * process over the bytes a thread allocates, one per BYTES on average, as
 * tcmalloc's and jemalloc's samplers do; an allocation is recorded if a
 * point falls in it, with the weight 1/p. malloc's budget (tstate.budget)
 * runs to the next point, so that most calls never reach the hook's code.
 */
#ifndef PMM_SAMPLED_MODE_H
#define PMM_SAMPLED_MODE_H

#include <sys/types.h>

#include "hook.h"
#include "thread_state.h"

PMM_HIDDEN_BEGIN

/* malloc's budget: budget, or parked while the guard is held (guard_take). */
static inline uint64_t *budget_of(struct tstate *t)
{
	return t->guard ? &t->parked : &t->budget;
}

/*
 * The budget is spent and not set again yet (2^63 or more: it wrapped): a
 * malloc that spent it is between its entry point and its decision, and a
 * signal handler interrupted it. The sample gap is that malloc's to update;
 * the handler's calls are decided alone (sample_alone).
 */
static inline int gap_busy(struct tstate *t)
{
	return *budget_of(t) >= 1ULL << 63;
}

/*
 * The next sample point is gap bytes away: malloc's entry point passes all
 * of them to libc, or POLL_BYTES if wait (records wait for their deadline,
 * which its slow path checks).
 */
static inline void sample_budget(struct tstate *t, int64_t gap, int wait)
{
	uint64_t budget = (uint64_t)gap;

	if (wait && budget > POLL_BYTES)
		budget = POLL_BYTES;
	*budget_of(t) = budget;
	t->beyond = gap - (int64_t)budget;
	t->sampling = 1;
}

/* Sampled: the bytes to the next sample point (the budget may have wrapped
 * below 0 when malloc's entry point took a size larger than it). */
static inline int64_t sample_gap_left(struct tstate *t)
{
	return (int64_t)(*budget_of(t) + (uint64_t)t->beyond);
}

/* Sampled: a record was buffered. t NULL: one made alone. */
static inline void sampled_wait(struct tstate *t)
{
	if (t && t->sampling && *budget_of(t) > POLL_BYTES && !gap_busy(t))
		sample_budget(t, sample_gap_left(t), 1);
}

/*
 * Is this allocation of size bytes sampled? Then *weight is 1/p with
 * p = 1 - exp(-size/BYTES), the chance that a sample point fell in it,
 * rounded at random so that E[weight] = 1/p: weighted live bytes per site
 * are unbiased. t NULL, or the gap another call's: sample_alone.
 */
int sample(struct tstate *t, uint64_t size, uint32_t *weight);

/* The draws of calls made alone start afresh: at init and in a forked
 * child (getrandom; the pid if that fails). */
void alone_reseed(pid_t pid);

PMM_HIDDEN_END

#endif /* PMM_SAMPLED_MODE_H */
