/* SPDX-License-Identifier: GPL-2.0 */
/*
 * aset.c: address sets. g_sampled holds the blocks sampled mode recorded
 * (a free records only those), g_mapped the anonymous mappings the hook
 * recorded (a munmap or mremap records only those, so that file mappings
 * never look like unmatched frees).
 *
 * Fixed-size, lock-free: 8 slots (one cache line) per bucket, no probing
 * beyond it, so a delete is one store and a miss is one cache line. A slot
 * holds addr | (epoch & 15) (blocks are 16-aligned), so entries from before
 * a stop/start or a fork are not sent. A full bucket refuses the insert;
 * the caller then does not record the block at all.
 */
#ifndef PMM_ASET_H
#define PMM_ASET_H

#include "hook.h"
#include "mode.h"

/* Address sets (below): buckets of 8 slots, and a filter of one counter per
 * 8 buckets (at most 64 entries) that a miss reads instead of a bucket. */
#define SET_BITS	14
#define SET_BUCKETS	(1U << SET_BITS)
#define SET_WAYS	8
#define SET_TAG		15ULL
#define SET_FILTER	(SET_BUCKETS / 8)

_Static_assert(SET_FILTER == SAMPLED_FILTER, "g_fast.sampled_filter is g_sampled's");

PMM_HIDDEN_BEGIN

struct aset {
	uint64_t slot[SET_BUCKETS][SET_WAYS] __attribute__((aligned(64)));
};

extern struct aset g_sampled, g_mapped;
extern uint8_t g_mapped_filter[SET_FILTER];

/* Fibonacci hashing of p / 16 (blocks are 16-aligned): the multiplier is
 * 2^64 / golden ratio / 16, which spares sampled free a shift. */
static inline uint32_t set_hash(const void *p)
{
	return (uint32_t)((uintptr_t)p * 0x09e3779b97f4a7c1ULL >> (64 - SET_BITS));
}

static inline uint64_t *set_bucket(struct aset *s, const void *p)
{
	return s->slot[set_hash(p)];
}

/* The counter of p's 8 buckets (g_sampled's lives in g_fast). */
static inline uint8_t *set_filter(struct aset *s, const void *p)
{
	uint8_t *f = s == &g_sampled ? g_fast.sampled_filter : g_mapped_filter;

	return &f[set_hash(p) / (SET_BUCKETS / SET_FILTER)];
}

/* Adds p; 0 if its bucket is full (or p is not 16-aligned). */
int set_add(struct aset *s, const void *p);
/* Removes p; returns 1 if it was there from the current epoch. */
int set_del(struct aset *s, const void *p);

PMM_HIDDEN_END

#endif /* PMM_ASET_H */
