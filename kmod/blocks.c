// SPDX-License-Identifier: GPL-2.0
/*
 * pmm: the block table's memory and growth (blocks.h has its slots and
 * probes, pmm_int.h its layout): a segment grows by a quarter or splits in
 * two, rehashing at most PMM_SEG_MAX_SLOTS entries, so that no record
 * waits long; ext records for what does not fit a slot; reading the blocks
 * back. Every byte is counted in pmm_kmem_bytes and charged to the
 * process's memory cgroup (__GFP_ACCOUNT). Under the process's lock.
 */
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/vmalloc.h>
#include <linux/hashtable.h>
#include "blocks.h"

static void block_view(struct pmm_proc *p, const struct pmm_block_ent *e,
		       struct pmm_block_view *v)
{
	v->ptr = be_ptr(e);
	v->time_ns = be_time(e);
	v->op = be_op(e);
	v->site = be_site(p, e);
	v->size = be_size(p, e, &v->weight);
	v->prev_ptr = e->w1 & BE_EXT ?
		ext_at(p, e->w2 & BE_SIZE_MASK)->prev_ptr : 0;
}

/*
 * An ext record (index), chunks added as needed, or U32_MAX when memory is
 * short or max_blocks of them exist.
 */
u32 pmm_ext_get(struct pmm_proc *p)
{
	struct pmm_block_ext *x, **nc;
	u32 idx, cap;

	if (p->ext_free) {
		idx = p->ext_free - 1;
		p->ext_free = ext_at(p, idx)->next_free;
		return idx;
	}
	if ((u64)p->ext_chunks * PMM_EXT_PER_CHUNK >= PMM_MAX_BLOCKS_LIMIT)
		return U32_MAX;
	if (p->ext_chunks == p->ext_cap) {
		cap = p->ext_cap ? 2 * p->ext_cap : 16;
		nc = kvmalloc_array(cap, sizeof(*nc),
				    GFP_KERNEL_ACCOUNT | __GFP_NOWARN);
		if (!nc)
			return U32_MAX;
		if (p->ext)
			memcpy(nc, p->ext, sizeof(*nc) * p->ext_chunks);
		kvfree(p->ext);
		pmm_kmem_add(sizeof(*nc) * (cap - p->ext_cap));
		p->ext = nc;
		p->ext_cap = cap;
	}
	x = kmalloc(PAGE_SIZE, GFP_KERNEL_ACCOUNT | __GFP_NOWARN);
	if (!x)
		return U32_MAX;
	pmm_kmem_add(PAGE_SIZE);
	p->ext[p->ext_chunks++] = x;
	/* the chunk's records but its first go on the free list */
	idx = (p->ext_chunks - 1) * PMM_EXT_PER_CHUNK;
	for (cap = PMM_EXT_PER_CHUNK - 1; cap >= 1; cap--) {
		x[cap].next_free = p->ext_free;
		p->ext_free = idx + cap + 1;
	}
	return idx;
}

static void ext_free_all(struct pmm_proc *p)
{
	u32 i;

	for (i = 0; i < p->ext_chunks; i++)
		kfree(p->ext[i]);
	pmm_kmem_add(-(long)(PAGE_SIZE * p->ext_chunks +
			     sizeof(*p->ext) * p->ext_cap));
	kvfree(p->ext);
	p->ext = NULL;
	p->ext_chunks = 0;
	p->ext_cap = 0;
	p->ext_free = 0;
}

/*
 * Memory for a table: kmalloc up to a page, vmalloc above (whole pages, no
 * order rounding). What it takes, as counted in pmm_kmem_bytes.
 */
static size_t tab_charge(size_t bytes)
{
	return bytes <= PAGE_SIZE ? pmm_kmalloc_size_roundup(bytes) :
				    PAGE_ALIGN(bytes);
}

static void *tab_alloc(size_t bytes)
{
	void *t;

	if (bytes <= PAGE_SIZE)
		t = kzalloc(bytes, GFP_KERNEL_ACCOUNT | __GFP_NOWARN);
	else
		t = __vmalloc(bytes, GFP_KERNEL_ACCOUNT | __GFP_ZERO |
				     __GFP_NOWARN);
	if (t)
		pmm_kmem_add(tab_charge(bytes));
	return t;
}

static void tab_free(void *t, size_t bytes)
{
	if (!t)
		return;
	pmm_kmem_add(-(long)tab_charge(bytes));
	kvfree(t);
}

#define SLOT_BYTES(n)	((size_t)(n) * sizeof(struct pmm_block_ent))

/* A segment's slots for m blocks: 64% full, in steps of 512 (3 pages). */
static u32 seg_slots_for(u32 m)
{
	return max_t(u32, round_up(m + m / 2 + m / 16 + 1, 512), 512);
}

/* A new process's block table: one segment. */
int pmm_blocks_alloc(struct pmm_proc *p)
{
	/* the fields of a slot (pmm_int.h) */
	BUILD_BUG_ON(sizeof(struct pmm_block_ent) != 24);
	BUILD_BUG_ON(PMM_OP_NR > 16);
	BUILD_BUG_ON(PMM_PROBE_MAX > 1 << (64 - BE_DIST_SHIFT));
	BUILD_BUG_ON(PMM_MAX_SITES_LIMIT > 1 << 20);
	BUILD_BUG_ON(PMM_MAX_BLOCKS_LIMIT >= 1ULL << BE_SIZE_BITS);
	BUILD_BUG_ON(SLOT_BYTES(512) % PAGE_SIZE);

	hash_init(p->pending);
	INIT_LIST_HEAD(&p->pending_fifo);
	p->segs = tab_alloc(sizeof(*p->segs) * 4);
	p->dir = tab_alloc(sizeof(*p->dir));
	if (!p->segs || !p->dir)
		goto nomem;
	p->segs_cap = 4;
	p->segs[0].n = seg_slots_for(0);
	p->segs[0].grow_at = p->segs[0].n / 2;
	p->segs[0].slot = tab_alloc(SLOT_BYTES(p->segs[0].n));
	if (!p->segs[0].slot)
		goto nomem;
	p->nsegs = 1;
	return 0;
nomem:
	pmm_blocks_free(p);
	return -ENOMEM;
}

/* Frees the block table and the pending frees (they count as unmatched). */
void pmm_blocks_free(struct pmm_proc *p)
{
	u32 i;

	for (i = 0; i < p->nsegs; i++)
		tab_free(p->segs[i].slot, SLOT_BYTES(p->segs[i].n));
	tab_free(p->segs, sizeof(*p->segs) * p->segs_cap);
	tab_free(p->dir, sizeof(*p->dir) << p->dir_bits);
	p->segs = NULL;
	p->dir = NULL;
	p->nsegs = 0;
	p->segs_cap = 0;
	p->dir_bits = 0;
	ext_free_all(p);
	p->nblocks = 0;
	pmm_expire_pending(p, true);
}

/* Block e is dropped (not freed): its figures leave the process's. */
void pmm_block_drop(struct pmm_proc *p, const struct pmm_block_ent *e)
{
	struct pmm_site_stats *s = be_site(p, e);
	u32 w;
	u64 size = be_size(p, e, &w);

	p->live_bytes -= size * w;
	s->live_bytes -= size * w;
	s->live_blocks -= w;
	if (e->w1 & BE_EXT)
		ext_put(p, e->w2 & BE_SIZE_MASK);
	p->nblocks--;
	pmm_drop(p);
}

/*
 * Puts the entries of slots old[0..n) into segment t (its depth set) by
 * their hash or, for a split, into t or t1 by the bit of their hash after
 * the prefix the two share. One that finds no spot is dropped.
 */
static void seg_fill(struct pmm_proc *p, struct pmm_bseg *t,
		     struct pmm_bseg *t1, const struct pmm_block_ent *old,
		     u32 n)
{
	struct pmm_block_ent ne;
	struct pmm_bseg *to;
	struct bt_spot sp;
	u32 i, h, same;

	for (i = 0; i < n; i++) {
		if (!be_used(&old[i]))
			continue;
		ne = old[i];
		ne.w2 &= ~(~0ULL << BE_DIST_SHIFT);
		h = block_hash(p, be_ptr(&ne));
		to = t1 && (h << (t->depth - 1)) >> 31 ? t1 : t;
		if (bt_find_spot(to, h << to->depth, be_ptr(&ne),
				 pmm_op_is_map(be_op(&ne)), &sp, &same))
			bt_put(to, &sp, &ne);
		else
			pmm_block_drop(p, &ne);
	}
}

/*
 * Grows segment segs[k] by a quarter, or splits it in two by the next bit
 * of the hash once it would pass PMM_SEG_MAX_SLOTS: either rehashes at most
 * that many entries, so no record waits long. When memory is short (or at
 * the last split) it stays as it is, and the next try waits until 1/16 of
 * it more is used.
 */
void pmm_seg_grow(struct pmm_proc *p, u32 k)
{
	struct pmm_bseg *t = &p->segs[k], *ns, old = *t;
	u32 n, half, i, *nd;

	/*
	 * A table of one segment (a small heap: a few KiB) doubles at half
	 * full instead, where probes are shortest.
	 */
	n = t->depth ? seg_slots_for(t->used + 1) : 2 * t->n;
	if (n <= PMM_SEG_MAX_SLOTS) {
		t->slot = tab_alloc(SLOT_BYTES(n));
		if (!t->slot) {
			*t = old;
			goto later;
		}
		t->n = n;
		t->used = 0;
		t->grow_at = t->depth ? n * 4 / 5 : n / 2;
		seg_fill(p, t, NULL, old.slot, old.n);
		tab_free(old.slot, SLOT_BYTES(old.n));
		return;
	}
	if (t->depth == PMM_SEG_MAX_DEPTH)
		goto later;
	/* the directory doubles when the segment's prefix is as long as its */
	if (t->depth == p->dir_bits) {
		nd = tab_alloc(sizeof(*nd) << (p->dir_bits + 1));
		if (!nd)
			goto later;
		for (i = 0; i < 2U << p->dir_bits; i++)
			nd[i] = p->dir[i >> 1];
		tab_free(p->dir, sizeof(*nd) << p->dir_bits);
		p->dir = nd;
		p->dir_bits++;
	}
	if (p->nsegs == p->segs_cap) {
		ns = tab_alloc(sizeof(*ns) * 2 * p->segs_cap);
		if (!ns)
			goto later;
		memcpy(ns, p->segs, sizeof(*ns) * p->nsegs);
		tab_free(p->segs, sizeof(*ns) * p->segs_cap);
		p->segs = ns;
		p->segs_cap *= 2;
		t = &p->segs[k];
	}
	/* each half 2/3 full (the keyed hash splits them evenly) */
	half = round_up(old.used * 3 / 4 + 1, 512);
	ns = &p->segs[p->nsegs];
	ns->slot = tab_alloc(SLOT_BYTES(half));
	t->slot = tab_alloc(SLOT_BYTES(half));
	if (!ns->slot || !t->slot) {
		tab_free(ns->slot, SLOT_BYTES(half));
		tab_free(t->slot, SLOT_BYTES(half));
		ns->slot = NULL;
		*t = old;
		goto later;
	}
	t->n = half;
	ns->n = half;
	t->used = 0;
	ns->used = 0;
	t->depth = old.depth + 1;
	ns->depth = old.depth + 1;
	t->grow_at = half * 4 / 5;
	ns->grow_at = half * 4 / 5;
	seg_fill(p, t, ns, old.slot, old.n);
	tab_free(old.slot, SLOT_BYTES(old.n));
	/* the directory's entries of the 1 half (that bit of their index) */
	for (i = 0; i < 1U << p->dir_bits; i++)
		if (p->dir[i] == k &&
		    ((i >> (p->dir_bits - 1 - old.depth)) & 1))
			p->dir[i] = p->nsegs;
	p->nsegs++;
	return;
later:
	p->segs[k].grow_at = p->segs[k].used + p->segs[k].n / 16;
}

/*
 * The first block at or after *slot (segment << 32 | slot in it), read
 * into *v, updating *slot; false past the end. The caller moves on with
 * ++*slot.
 */
bool pmm_block_at(struct pmm_proc *p, u64 *slot, struct pmm_block_view *v)
{
	struct pmm_bseg *t;
	u32 k, i;

	lockdep_assert_held(&p->lock);
	for (k = *slot >> 32; k < p->nsegs; k++) {
		t = &p->segs[k];
		for (i = k == *slot >> 32 ? (u32)*slot : 0; i < t->n; i++) {
			if (be_used(&t->slot[i])) {
				*slot = (u64)k << 32 | i;
				block_view(p, &t->slot[i], v);
				return true;
			}
		}
	}
	return false;
}
