// SPDX-License-Identifier: GPL-2.0
/*
 * The registry pmm-scan reads (scanreg.h): the threads' buffers, which
 * hold the addresses of recent blocks and the records not sent yet, and
 * the tables of block addresses (tags, sampled and mapped sets). A slot
 * is taken when a thread maps its buffer and given back before it unmaps
 * it (once per thread: never on a hook's path); lock-free, probing from
 * the state's hash.
 *
 * Owns: pmm_scan_registry, g_scanreg_threads, g_scanreg_overflow.
 */
#include <stddef.h>

#include "hook.h"
#include "aset.h"
#include "control.h"
#include "mode.h"
#include "scanreg.h"
#include "tags.h"
#include "thread_state.h"

_Static_assert(MODE_EXACT == PMM_SCANREG_MODE_EXACT && MODE_SAMPLED == PMM_SCANREG_MODE_SAMPLED,
	       "pmm-scan reads the modes by number");

static struct pmm_scanreg_thread g_scanreg_threads[PMM_SCANREG_THREADS];
static uint32_t g_scanreg_overflow;

PMM_EXPORT const struct pmm_scanreg pmm_scan_registry = {
	.magic = PMM_SCANREG_MAGIC,
	.version = PMM_SCANREG_VERSION,
	.record_size = sizeof(struct pmm_record),
	.mode = (uintptr_t)&g_fast.mode,
	.epoch = (uintptr_t)&g_epoch,
	.threads = (uintptr_t)g_scanreg_threads,
	.overflow = (uintptr_t)&g_scanreg_overflow,
	.fork_marker = (uintptr_t)&g_fork_marker,
	.nthreads = PMM_SCANREG_THREADS,
	.off_buf = offsetof(struct tstate, buf),
	.off_n = offsetof(struct tstate, n),
	.off_gen = offsetof(struct tstate, gen),
	.tables = {
		{ (uintptr_t)g_tags, sizeof(g_tags) },
		{ (uintptr_t)&g_sampled, sizeof(g_sampled) },
		{ (uintptr_t)&g_mapped, sizeof(g_mapped) },
		{ (uintptr_t)g_seen, sizeof(g_seen) },
	},
};

static uint32_t slot_of(const struct tstate *t)
{
	return (uint32_t)((uintptr_t)t * 0x9e3779b97f4a7c15ULL >> 52) % PMM_SCANREG_THREADS;
}

void scanreg_add(const struct tstate *t, const void *buf, uint64_t bytes)
{
	uint32_t i, s = slot_of(t);

	for (i = 0; i < PMM_SCANREG_THREADS; i++, s = (s + 1) % PMM_SCANREG_THREADS) {
		struct pmm_scanreg_thread *e = &g_scanreg_threads[s];
		uint64_t zero = 0;

		if (__atomic_compare_exchange_n(&e->state, &zero, (uintptr_t)t, 0,
						__ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
			__atomic_store_n(&e->buf, (uintptr_t)buf, __ATOMIC_RELAXED);
			__atomic_store_n(&e->bytes, bytes, __ATOMIC_RELAXED);
			return;
		}
	}
	__atomic_add_fetch(&g_scanreg_overflow, 1, __ATOMIC_RELAXED);
}

void scanreg_del(const struct tstate *t)
{
	uint32_t i, s = slot_of(t);

	for (i = 0; i < PMM_SCANREG_THREADS; i++, s = (s + 1) % PMM_SCANREG_THREADS) {
		struct pmm_scanreg_thread *e = &g_scanreg_threads[s];

		if (__atomic_load_n(&e->state, __ATOMIC_RELAXED) == (uintptr_t)t) {
			__atomic_store_n(&e->buf, 0, __ATOMIC_RELAXED);
			__atomic_store_n(&e->bytes, 0, __ATOMIC_RELAXED);
			__atomic_store_n(&e->state, 0, __ATOMIC_RELAXED);
			return;
		}
	}
}

void scanreg_fork(const struct tstate *t)
{
	uint32_t i;

	for (i = 0; i < PMM_SCANREG_THREADS; i++) {
		struct pmm_scanreg_thread *e = &g_scanreg_threads[i];

		if (e->state && e->state != (uintptr_t)t) {
			e->buf = 0;
			e->bytes = 0;
			e->state = 0;
		}
	}
}
