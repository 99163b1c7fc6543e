// SPDX-License-Identifier: GPL-2.0
/*
 * The address sets (aset.h): lock-free insert and delete, one cache line
 * each.
 *
 * Owns: g_sampled, g_mapped, g_mapped_filter.
 */
#include "aset.h"

struct aset g_sampled, g_mapped;
uint8_t g_mapped_filter[SET_FILTER];

int set_add(struct aset *s, const void *p)
{
	uint64_t *b = set_bucket(s, p);
	uint64_t v = (uintptr_t)p | (g_epoch & SET_TAG);
	int i;

	if ((uintptr_t)p & SET_TAG)
		return 0;
	for (i = 0; i < SET_WAYS; i++) {
		uint64_t zero = 0;

		if (__atomic_load_n(&b[i], __ATOMIC_RELAXED) == 0 &&
		    __atomic_compare_exchange_n(&b[i], &zero, v, 0, __ATOMIC_RELAXED,
						__ATOMIC_RELAXED)) {
			__atomic_add_fetch(set_filter(s, p), 1, __ATOMIC_RELAXED);
			return 1;
		}
	}
	return 0;
}

int set_del(struct aset *s, const void *p)
{
	uint64_t *b;
	int i;

	if (!__atomic_load_n(set_filter(s, p), __ATOMIC_RELAXED))
		return 0;
	b = set_bucket(s, p);
	for (i = 0; i < SET_WAYS; i++) {
		uint64_t v = __atomic_load_n(&b[i], __ATOMIC_RELAXED);

		if (v && (v & ~SET_TAG) == (uintptr_t)p) {
			__atomic_store_n(&b[i], 0, __ATOMIC_RELAXED);
			__atomic_sub_fetch(set_filter(s, p), 1, __ATOMIC_RELAXED);
			return (v & SET_TAG) == (g_epoch & SET_TAG);
		}
	}
	return 0;
}
