// SPDX-License-Identifier: GPL-2.0
/*
 * Sampled mode's draws (sampled_mode.h): each thread's own generator for its
 * sample gaps, and a process-wide one for calls made alone (a signal
 * handler's, which must not touch the thread's gap).
 *
 * Owns: g_alone_rng.
 */
#include <math.h>
#include <sys/random.h>

#include "clock.h"
#include "env.h"
#include "sampled_mode.h"

static inline uint64_t rng_next(struct tstate *t)
{
	uint64_t x = t->rng;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	t->rng = x;
	return x * 0x2545f4914f6cdd1dULL;
}

static inline double rng_unit(struct tstate *t)	/* (0, 1] */
{
	return (double)((rng_next(t) >> 11) + 1) * (1.0 / 9007199254740992.0);
}

/* Exponential gap with mean g_sample: sample points form a Poisson process
 * over the allocated bytes, as tcmalloc's and jemalloc's samplers do. */
static int64_t sample_gap(struct tstate *t)
{
	double g = -log(rng_unit(t)) * (double)g_sample;

	return g > 9e18 ? INT64_MAX : (int64_t)g + 1;
}

/* The weight 1/p, rounded at random (u: uniform in (0, 1]) so that
 * E[weight] = 1/p. */
static uint32_t sample_weight(double p, double u)
{
	double w = 1.0 / p, fl = floor(w);

	if (u <= w - fl)
		fl += 1.0;
	return fl >= 4294967295.0 ? UINT32_MAX : fl < 1.0 ? 1 : (uint32_t)fl;
}

/*
 * sample() for an allocation made alone (record_alone): the thread's
 * sample gap may be half way through an update, so an independent draw
 * decides, with the chance p = 1 - exp(-size/BYTES) that the gap's Poisson
 * process puts a sample point in these bytes. Its random numbers come from
 * a process-wide counter through a mixer: one atomic add, signal-safe.
 */
static uint64_t g_alone_rng;

/* getrandom, not a clock read: one is a system call on a guest whose
 * clocksource is hpet. */
void alone_reseed(pid_t pid)
{
	uint64_t seed = (uint64_t)pid << 32 | 1;
	int saved = errno;

	if (syscall(SYS_getrandom, &seed, sizeof(seed), GRND_NONBLOCK) != sizeof(seed))
		seed = (uint64_t)pid << 32 | 1;
	errno = saved;
	g_alone_rng = seed;
}

static double alone_unit(void)	/* (0, 1] */
{
	uint64_t x = __atomic_add_fetch(&g_alone_rng, 0x9e3779b97f4a7c15ULL, __ATOMIC_RELAXED);

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return (double)((x >> 11) + 1) * (1.0 / 9007199254740992.0);
}

static int sample_alone(uint64_t size, uint32_t *weight)
{
	double p = -expm1(-(double)size / (double)g_sample);

	if (alone_unit() > p)
		return 0;
	*weight = sample_weight(p, alone_unit());
	return 1;
}

int sample(struct tstate *t, uint64_t size, uint32_t *weight)
{
	int64_t gap;

	if (!t || gap_busy(t))
		return sample_alone(size, weight);
	if (unlikely(!t->rng)) {
		t->rng = now_ns() ^ ((uintptr_t)t * 0x9e3779b97f4a7c15ULL) ^ 0x5851f42d4c957f2dULL;
		if (!t->rng)
			t->rng = 1;
	}
	gap = t->sampling ? sample_gap_left(t) : sample_gap(t);
	gap -= (int64_t)size;
	if (likely(gap > 0)) {
		sample_budget(t, gap, t->n != 0);
		return 0;
	}
	sample_budget(t, sample_gap(t), 1);	/* memoryless: from this block's end */
	*weight = sample_weight(-expm1(-(double)size / (double)g_sample), rng_unit(t));
	return 1;
}
