// SPDX-License-Identifier: GPL-2.0
/*
 * Sites: one id per allocation source, de-duplicated in the process and
 * described to the kernel once per monitoring epoch (PMM_REGISTER_SITE).
 *
 * The table is a fixed-size, lock-free open-addressing hash (no malloc):
 * a slot is claimed with one compare-and-swap on its key and never freed.
 * Keys: the return address itself for depth 1; a hash of the frames (top
 * bit set) for depth > 1; a hash of (file, func, line) pointers and value
 * (top two bits set) for pmm_hooks.h sites. User-space addresses on x86-64
 * never have the top bit set.
 *
 * The site id is a process-wide counter, 1, 2, 3... in the order sites are
 * first used, stored in the slot (slot_id): stable for the life of the
 * process (and in a forked child), and it says nothing of where code is
 * loaded. Ids travel to readers who may not see the process's addresses
 * (netlink events, pmd's database); an id derived from the return address
 * (a slot index of its hash) would give the load base away from a few ids.
 *
 * Registration is lazy: the first record that uses a slot in the current
 * epoch (g_epoch, bumped whenever monitoring starts) registers it, so a
 * process that is stopped and started again, or a forked child, describes
 * its sites afresh. A full table (or 64 probes without a match) gives site
 * 0, which the kernel counts as "unknown"; no other path does, but for a
 * vfork child's site not registered yet (claim_registration).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>

#include "control.h"
#include "device.h"
#include "env.h"
#include "fakedev.h"
#include "mode.h"
#include "site.h"
#include "unwind.h"

#define SITE_BITS	16
#define SITE_SLOTS	(1U << SITE_BITS)
#define SITE_PROBES	64
#define KEY_FRAMES	(1ULL << 63)
#define KEY_SOURCE	(3ULL << 62)

struct site_slot {
	uint64_t key;		/* 0: free */
	unsigned int reg_epoch;	/* epoch it was registered in */
	uint32_t id;		/* 0 until slot_id gives it */
};

static struct site_slot g_sites[SITE_SLOTS];
static uint32_t g_site_ids;	/* the last id given */

void pmm_site_extent(uintptr_t *lo, uintptr_t *hi)
{
	*lo = (uintptr_t)g_sites;
	*hi = (uintptr_t)(g_sites + SITE_SLOTS);
}

static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

/*
 * The slot's id, given now if it has none: the thread that claimed the key
 * gives it right after, but may never get there (another thread forked in
 * between, or it was cancelled, or a signal handler left with longjmp), so
 * whoever finds none gives one. Two finders each take a number and the
 * first to store wins, the other adopts it: ids may skip a number under
 * contention, never in a single thread.
 */
static uint32_t slot_id(struct site_slot *s)
{
	uint32_t id = __atomic_load_n(&s->id, __ATOMIC_ACQUIRE), none = 0;

	if (likely(id))
		return id;
	id = __atomic_add_fetch(&g_site_ids, 1, __ATOMIC_RELAXED);
	if (!__atomic_compare_exchange_n(&s->id, &none, id, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		id = none;
	return id;
}

/* The slot of key, claimed if new; *id its id (never 0). */
static struct site_slot *slot_get(uint64_t key, uint32_t *id)
{
	uint64_t h = mix64(key);
	unsigned int i;

	for (i = 0; i < SITE_PROBES; i++) {
		struct site_slot *s = &g_sites[(uint32_t)(h + i) & (SITE_SLOTS - 1)];
		uint64_t k = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE);

		if (k == 0) {
			uint64_t zero = 0;

			if (__atomic_compare_exchange_n(&s->key, &zero, key, 0,
							__ATOMIC_ACQ_REL,
							__ATOMIC_ACQUIRE)) {
#ifdef PMM_FAKE_DEV
				pmm_fake_point(FAKE_AT_CLAIM);
#endif
				k = key;
			} else {
				k = zero;
			}
		}
		if (k == key) {
			*id = slot_id(s);
			return s;
		}
	}
	return NULL;
}

/*
 * 1 when this caller must describe the slot now (once per epoch); -1 when
 * it is not described in this epoch yet and this caller, a vfork child,
 * must not do it: its record then names site 0, and the parent describes
 * the site when it next uses it (a site cache keeps no 0).
 */
static inline int claim_registration(struct site_slot *s)
{
	unsigned int e = __atomic_load_n(&g_epoch, __ATOMIC_RELAXED);
	unsigned int old = __atomic_load_n(&s->reg_epoch, __ATOMIC_RELAXED);

	if (likely(old == e))
		return 0;
	if (!pmm_mine())
		return -1;
	return __atomic_compare_exchange_n(&s->reg_epoch, &old, e, 0,
					   __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

static void copy_str(char *dst, size_t cap, const char *src)
{
	size_t i = 0;

	if (src)
		for (; i + 1 < cap && src[i]; i++)
			dst[i] = src[i];
	dst[i] = '\0';
}

static void send_site(struct pmm_site *d)
{
	int err = pmm_dev_ioctl(PMM_REGISTER_SITE, d);

	if (err)
		pmm_dev_refused(-err, "PMM_REGISTER_SITE");
}

/*
 * alone: for a record made alone (a signal handler that interrupted the
 * hook): frame pointers only, and only where the thread's stack bounds are
 * known; libgcc's unwinder takes the loader's lock, which the interrupted
 * code may hold.
 */
uint32_t pmm_site_addr(void *ra, void *frame, int alone)
{
	uint64_t frames[PMM_MAX_FRAMES];
	struct site_slot *s;
	struct pmm_site d;
	uint64_t key;
	uint32_t id;
	int n = 1, i, claim;

	if (g_depth <= 1) {
		key = (uintptr_t)ra;
		frames[0] = (uintptr_t)ra;
	} else {
		/*
		 * auto: frame pointers (a few loads a frame), and libgcc's
		 * unwinder (far dearer: it reads .eh_frame) only when they stop
		 * before 3 frames, i.e. in code built without them.
		 */
		if (g_unwind == UNWIND_EH && !alone)
			n = pmm_unwind_eh(frames, g_depth, ra);
		else
			n = pmm_unwind_fp(frames, g_depth, ra, frame, alone);
		if (g_unwind == UNWIND_AUTO && n < g_depth && n < 3 && !alone)
			n = pmm_unwind_eh(frames, g_depth, ra);
		key = 0x9e3779b97f4a7c15ULL;
		for (i = 0; i < n; i++)
			key = mix64(key ^ frames[i]) + (uint64_t)i;
		key |= KEY_FRAMES;
	}
	if (unlikely(key == 0))
		key = 1;
	s = slot_get(key, &id);
	if (unlikely(!s))
		return 0;
	claim = claim_registration(s);
	if (unlikely(claim < 0))
		return 0;
	if (unlikely(claim)) {
		memset(&d, 0, sizeof(d));
		d.site = id;
		d.depth = (uint32_t)n;
		for (i = 0; i < n; i++)
			d.frames[i] = frames[i];
		send_site(&d);
	}
	return id;
}

uint32_t pmm_site_source(void *caller, const char *file, const char *func, int line)
{
	struct site_slot *s;
	struct pmm_site d;
	const char *base;
	uint64_t key;
	uint32_t id;
	int claim;

	key = mix64((uintptr_t)file ^ mix64((uintptr_t)func ^ mix64((uint64_t)(uint32_t)line)));
	key |= KEY_SOURCE;
	s = slot_get(key, &id);
	if (unlikely(!s))
		return 0;
	claim = claim_registration(s);
	if (unlikely(claim < 0))
		return 0;
	if (unlikely(claim)) {
		memset(&d, 0, sizeof(d));
		d.site = id;
		d.flags = PMM_SITE_F_SOURCE;
		d.depth = 1;
		d.line = line > 0 ? (uint32_t)line : 0;
		d.frames[0] = (uintptr_t)caller;
		/* /proc/pmm/pid's "main() 207 demo_daemon.c": the basename of __FILE__ */
		base = file;
		if (file)
			for (const char *p = file; *p; p++)
				if (*p == '/' && p[1])
					base = p + 1;
		copy_str(d.file, sizeof(d.file), base);
		copy_str(d.func, sizeof(d.func), func);
		send_site(&d);
	}
	return id;
}
