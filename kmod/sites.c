// SPDX-License-Identifier: GPL-2.0
/*
 * pmm: sites. A process's sites (allocation sources, by the id its hook
 * chose) live in an open-addressing table of pointers hashed with the
 * process's key, in front of which site_get (pmm_int.h) keeps a
 * direct-mapped cache for the record path. All of it is under the
 * process's lock. No site sits farther than PMM_SITE_PROBE_MAX from its
 * home slot; a site's entry is never freed before the process's tables
 * (blocks point at it).
 */
#include <linux/slab.h>
#include <linux/mm.h>
#include "pmm_int.h"

static struct kmem_cache *pmm_site_cache;

int pmm_sites_init(void)
{
	pmm_site_cache = kmem_cache_create("pmm_site",
					   sizeof(struct pmm_site_ent), 0,
					   SLAB_ACCOUNT, NULL);
	return pmm_site_cache ? 0 : -ENOMEM;
}

void pmm_sites_exit(void)
{
	kmem_cache_destroy(pmm_site_cache);
}

/* Frees a process's sites and their table (its lock held, or the last put). */
void pmm_sites_free(struct pmm_proc *p)
{
	u32 i;

	if (!p->sites)
		return;
	for (i = 0; i < 1U << p->site_bits; i++)
		if (p->sites[i])
			kmem_cache_free(pmm_site_cache,
					container_of(p->sites[i],
						     struct pmm_site_ent, st));
	pmm_kmem_add(-(long)(p->nsites * kmem_cache_size(pmm_site_cache) +
			     (sizeof(*p->sites) << p->site_bits) +
			     sizeof(*p->site_list) * p->site_list_cap));
	kvfree(p->sites);
	kvfree(p->site_list);
	p->site_list = NULL;
	p->site_list_cap = 0;
	p->sites = NULL;
	p->site_bits = 0;
	p->nsites = 0;
	memset(p->site_cache, 0, sizeof(p->site_cache));
}

static u32 site_home(struct pmm_proc *p, u32 id, u32 bits)
{
	return hsiphash_1u32(id, &p->hkey) >> (32 - bits);
}

/*
 * The slot of id in a table of 1 << bits: its entry, or the empty slot it
 * would take; NULL when neither is within PMM_SITE_PROBE_MAX of its home.
 */
static struct pmm_site_stats **site_slot(struct pmm_proc *p,
					 struct pmm_site_stats **tab, u32 bits,
					 u32 id)
{
	u32 mask = (1U << bits) - 1, i = site_home(p, id, bits), k;

	for (k = 0; k < PMM_SITE_PROBE_MAX; k++, i = (i + 1) & mask)
		if (!tab[i] || tab[i]->desc.site == id)
			return &tab[i];
	return NULL;
}

/*
 * Doubles the site table (or creates it). Fails, leaving it as it was,
 * when memory is short, at the size limit, or when an entry would land too
 * far from its home in the new one.
 */
static bool sites_grow(struct pmm_proc *p)
{
	u32 bits = p->site_bits ? p->site_bits + 1 : PMM_SITE_MIN_BITS, i;
	struct pmm_site_stats **nt, **slot;

	if (bits > PMM_SITE_MAX_BITS)
		return false;
	nt = kvcalloc(1U << bits, sizeof(*nt), GFP_KERNEL_ACCOUNT | __GFP_NOWARN);
	if (!nt)
		return false;
	for (i = 0; p->sites && i < 1U << p->site_bits; i++) {
		if (!p->sites[i])
			continue;
		slot = site_slot(p, nt, bits, p->sites[i]->desc.site);
		if (!slot) {
			kvfree(nt);
			return false;
		}
		*slot = p->sites[i];
	}
	if (p->sites)
		pmm_kmem_add(-(long)(sizeof(*nt) << p->site_bits));
	pmm_kmem_add(sizeof(*nt) << bits);
	kvfree(p->sites);
	p->sites = nt;
	p->site_bits = bits;
	return true;
}

/* Room in site_list for one more site (doubled when full). */
static bool site_list_room(struct pmm_proc *p)
{
	u32 cap = p->site_list_cap ? 2 * p->site_list_cap : 64;
	struct pmm_site_stats **nl;

	if (p->nsites < p->site_list_cap)
		return true;
	nl = kvmalloc_array(cap, sizeof(*nl), GFP_KERNEL_ACCOUNT | __GFP_NOWARN);
	if (!nl)
		return false;
	if (p->site_list)
		memcpy(nl, p->site_list, sizeof(*nl) * p->nsites);
	kvfree(p->site_list);
	pmm_kmem_add(sizeof(*nl) * (cap - p->site_list_cap));
	p->site_list = nl;
	p->site_list_cap = cap;
	return true;
}

/* site_get's slow path (pmm_int.h): the table, or a new (undescribed) entry. */
noinline struct pmm_site_stats *pmm_site_lookup(struct pmm_proc *p, u32 id)
{
	struct pmm_site_stats *s, **slot = NULL;
	struct pmm_site_ent *e;

	if (unlikely(!p->segs))
		return NULL;	/* retired */
	if (p->sites)
		slot = site_slot(p, p->sites, p->site_bits, id);
	if (slot && *slot) {
		p->site_cache[id % PMM_SITE_CACHE] = *slot;
		return *slot;
	}
	if (p->nsites >= READ_ONCE(pmm_cfg.max_sites))
		return NULL;
	/* grown at half full, or when the slot is too far from its home */
	if (!slot || (p->nsites + 1) * 2 > 1U << p->site_bits) {
		if (!sites_grow(p) && !slot)
			return NULL;
		slot = site_slot(p, p->sites, p->site_bits, id);
		if (!slot)
			return NULL;
	}
	if (!site_list_room(p))
		return NULL;
	e = kmem_cache_zalloc(pmm_site_cache, GFP_KERNEL);
	if (!e)
		return NULL;
	s = &e->st;
	s->desc.site = id;
	e->idx = p->nsites;
	*slot = s;
	p->site_list[p->nsites++] = s;
	pmm_kmem_add(kmem_cache_size(pmm_site_cache));
	p->site_cache[id % PMM_SITE_CACHE] = s;
	return s;
}

/*
 * The first site at or after *slot in table order, updating *slot; NULL
 * past the end. The caller moves on with ++*slot.
 */
struct pmm_site_stats *pmm_site_at(struct pmm_proc *p, u64 *slot)
{
	lockdep_assert_held(&p->lock);
	if (!p->sites)
		return NULL;
	for (; *slot < 1U << p->site_bits; (*slot)++)
		if (p->sites[*slot])
			return p->sites[*slot];
	return NULL;
}

int pmm_register_site(struct pmm_proc *p, const struct pmm_site *in,
		      const u64 *loc)
{
	struct pmm_site_stats *s;

	lockdep_assert_held(&p->lock);
	s = site_get(p, in->site);
	if (!s)
		return -ENOSPC;
	s->desc = *in;
	if (in->depth < PMM_MAX_FRAMES)
		memset(&s->desc.frames[in->depth], 0,
		       (PMM_MAX_FRAMES - in->depth) * sizeof(s->desc.frames[0]));
	memset(s->loc, 0, sizeof(s->loc));
	memcpy(s->loc, loc, in->depth * sizeof(*loc));
	if (!(in->flags & PMM_SITE_F_SOURCE)) {
		memset(s->desc.file, 0, sizeof(s->desc.file));
		memset(s->desc.func, 0, sizeof(s->desc.func));
		s->desc.line = 0;
	}
	return 0;
}
