/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pmm: the block table (pmm_int.h describes its segments and slots): the
 * slots' fields, the keyed hash, Robin Hood probes and moves within a
 * segment, and packing a block into a slot or finding it room. Inline: the
 * record path (pairing.c) runs them on every record. blocks.c has the rest
 * (memory, growth and splits, ext records, reading the blocks back).
 */
#ifndef PMM_BLOCKS_H
#define PMM_BLOCKS_H

#include "pmm_int.h"

/* The slot's fields (pmm_int.h, struct pmm_block_ent). */
#define BE_ADDR_BITS	48
#define BE_ADDR_MASK	((1ULL << BE_ADDR_BITS) - 1)
#define BE_TIME_BITS	58
#define BE_TIME_MASK	((1ULL << BE_TIME_BITS) - 1)
#define BE_EXT		BIT_ULL(62)
#define BE_SIZE_BITS	47
#define BE_SIZE_MASK	((1ULL << BE_SIZE_BITS) - 1)
#define BE_OP_SHIFT	47
#define BE_DIST_SHIFT	51
#define BE_DIST_ONE	BIT_ULL(BE_DIST_SHIFT)

static __always_inline u64 be_ptr(const struct pmm_block_ent *e)
{
	return e->w0 & BE_ADDR_MASK;
}

static __always_inline u64 be_time(const struct pmm_block_ent *e)
{
	return e->w1 & BE_TIME_MASK;
}

static __always_inline u32 be_op(const struct pmm_block_ent *e)
{
	return (e->w2 >> BE_OP_SHIFT) & 0xf;
}

static __always_inline u32 be_dist(const struct pmm_block_ent *e)
{
	return e->w2 >> BE_DIST_SHIFT;
}

static __always_inline bool be_used(const struct pmm_block_ent *e)
{
	return be_op(e) != PMM_OP_NONE;
}

static __always_inline u32 be_site_idx(const struct pmm_block_ent *e)
{
	return (u32)(e->w0 >> BE_ADDR_BITS) | (u32)((e->w1 >> 58) & 0xf) << 16;
}

static __always_inline struct pmm_site_stats *
be_site(struct pmm_proc *p, const struct pmm_block_ent *e)
{
	return p->site_list[be_site_idx(e)];
}

static __always_inline struct pmm_block_ext *ext_at(struct pmm_proc *p,
						    u32 idx)
{
	return &p->ext[idx / PMM_EXT_PER_CHUNK][idx % PMM_EXT_PER_CHUNK];
}

/* A block's size and weight. */
static __always_inline u64 be_size(struct pmm_proc *p,
				   const struct pmm_block_ent *e, u32 *w)
{
	struct pmm_block_ext *x;

	if (likely(!(e->w1 & BE_EXT))) {
		*w = 1;
		return e->w2 & BE_SIZE_MASK;
	}
	x = ext_at(p, e->w2 & BE_SIZE_MASK);
	*w = x->weight;
	return x->size;
}

static inline void ext_put(struct pmm_proc *p, u32 idx)
{
	ext_at(p, idx)->next_free = p->ext_free;
	p->ext_free = idx + 1;
}

static inline void pmm_drop(struct pmm_proc *p)
{
	p->dropped++;
	atomic64_inc(&pmm_records_dropped);
}

/* The keyed hash of an address; a table's home slot scales it to its size. */
static __always_inline u32 block_hash(struct pmm_proc *p, u64 ptr)
{
	return hsiphash_2u32((u32)ptr, (u32)(ptr >> 32), &p->hkey);
}

/* In segment t, the bits of a hash below t's prefix (hs = h << depth). */
static __always_inline u32 bt_home(const struct pmm_bseg *t, u32 hs)
{
	return ((u64)hs * t->n) >> 32;
}

static __always_inline u32 bt_next(const struct pmm_bseg *t, u32 i)
{
	return ++i == t->n ? 0 : i;
}

static __always_inline u32 bt_prev(const struct pmm_bseg *t, u32 i)
{
	return (i ? i : t->n) - 1;
}

/* The segment of hash h's blocks; *hs: h without its prefix. */
static __always_inline struct pmm_bseg *seg_of(struct pmm_proc *p, u32 h,
					       u32 *hs)
{
	struct pmm_bseg *t = &p->segs[p->dir[(u64)h >> (32 - p->dir_bits)]];

	*hs = h << t->depth;
	return t;
}

/*
 * Where a block goes in t: at pos, d slots from its home, the entries from
 * pos to the empty slot at end moving one slot on. The blocks of its home
 * stay in front of it.
 */
struct bt_spot {
	u32 pos;
	u32 d;
	u32 end;
};

/*
 * How many blocks of that kind t holds at ptr (hs); *pos and *d: the slot
 * past its home's entries and its distance from home (PMM_PROBE_MAX when
 * that is too far).
 */
static __always_inline u32 bt_count(struct pmm_bseg *t, u32 hs, u64 ptr,
				    bool map, u32 *pos, u32 *d)
{
	u32 i = bt_home(t, hs), k, same = 0;
	struct pmm_block_ent *e;

	for (k = 0; k < PMM_PROBE_MAX; k++, i = bt_next(t, i)) {
		e = &t->slot[i];
		if (!be_used(e) || be_dist(e) < k)
			break;
		if (be_dist(e) == k && be_ptr(e) == ptr &&
		    pmm_op_is_map(be_op(e)) == map)
			same++;
	}
	*pos = i;
	*d = k;
	return same;
}

/*
 * Finds the spot of a block at ptr (hs) in t and counts in *same the blocks
 * of that kind at ptr; false when no spot is within PMM_PROBE_MAX of its
 * home or an entry it moves would be (then nothing is changed).
 */
static __always_inline bool bt_find_spot(struct pmm_bseg *t, u32 hs, u64 ptr,
					 bool map, struct bt_spot *sp, u32 *same)
{
	struct pmm_block_ent *e;
	u32 i, k;

	*same = bt_count(t, hs, ptr, map, &sp->pos, &sp->d);
	if (sp->d >= PMM_PROBE_MAX)
		return false;
	/* the run it pushes on, up to an empty slot */
	for (k = 0, i = sp->pos; k < PMM_PROBE_MAX; k++, i = bt_next(t, i)) {
		e = &t->slot[i];
		if (!be_used(e)) {
			sp->end = i;
			return true;
		}
		if (be_dist(e) + 1 >= PMM_PROBE_MAX)
			return false;
	}
	return false;
}

/* Puts entry ne (its dist field 0) at the spot bt_find_spot gave. */
static __always_inline void bt_put(struct pmm_bseg *t, const struct bt_spot *sp,
				   const struct pmm_block_ent *ne)
{
	u32 i = sp->end, j;

	while (i != sp->pos) {
		j = bt_prev(t, i);
		t->slot[i] = t->slot[j];
		t->slot[i].w2 += BE_DIST_ONE;
		i = j;
	}
	t->slot[i] = *ne;
	t->slot[i].w2 |= (u64)sp->d << BE_DIST_SHIFT;
	t->used++;
}

/*
 * Empties slot e of t: the entries after it that are not at their home
 * move back one slot (no tombstones, Robin Hood order kept).
 */
static __always_inline void bt_unlink(struct pmm_bseg *t,
				      struct pmm_block_ent *e)
{
	u32 i = e - t->slot, j = bt_next(t, i);

	while (be_used(&t->slot[j]) && be_dist(&t->slot[j])) {
		t->slot[i] = t->slot[j];
		t->slot[i].w2 -= BE_DIST_ONE;
		i = j;
		j = bt_next(t, j);
	}
	memset(&t->slot[i], 0, sizeof(t->slot[i]));
	t->used--;
}

u32 pmm_ext_get(struct pmm_proc *p);
void pmm_seg_grow(struct pmm_proc *p, u32 k);
void pmm_block_drop(struct pmm_proc *p, const struct pmm_block_ent *e);

/*
 * Where a new block at ptr goes (*tp, sp): its segment grows first when
 * it is 4/5 full. False when it is 19/20 full, PMM_MAX_SAME_ADDR blocks of
 * that kind sit at ptr already or no spot is near enough to its home.
 */
static __always_inline bool block_spot(struct pmm_proc *p, u64 ptr, bool map,
				       struct pmm_bseg **tp,
				       struct bt_spot *sp)
{
	u32 h = block_hash(p, ptr), hs, same;
	struct pmm_bseg *t = seg_of(p, h, &hs);

	if (unlikely(t->used >= t->grow_at)) {
		pmm_seg_grow(p, p->dir[(u64)h >> (32 - p->dir_bits)]);
		t = seg_of(p, h, &hs);
	}
	*tp = t;
	return ((u64)t->used + 1) * 20 <= (u64)t->n * 19 &&
	       bt_find_spot(t, hs, ptr, map, sp, &same) &&
	       same < PMM_MAX_SAME_ADDR;
}

/*
 * Packs a block into ne (its dist 0); false when it cannot be kept (an
 * address from 2^48, a time from 2^58 ns, no memory for its ext record).
 */
static __always_inline bool block_pack(struct pmm_proc *p,
				       struct pmm_block_ent *ne, u64 ptr,
				       u64 prev, u64 size, u64 t,
				       struct pmm_site_stats *s, u32 w, u16 op)
{
	u32 idx = pmm_site_idx(s), x;
	struct pmm_block_ext *ext;

	if ((ptr >> BE_ADDR_BITS) || (t >> BE_TIME_BITS))
		return false;
	ne->w0 = ptr | (u64)(idx & 0xffff) << BE_ADDR_BITS;
	ne->w1 = t | (u64)(idx >> 16) << 58;
	if (likely(w == 1 && !prev && !(size >> BE_SIZE_BITS))) {
		ne->w2 = size | (u64)op << BE_OP_SHIFT;
		return true;
	}
	x = pmm_ext_get(p);
	if (x == U32_MAX)
		return false;
	ext = ext_at(p, x);
	ext->size = size;
	ext->prev_ptr = prev;
	ext->weight = w;
	ne->w1 |= BE_EXT;
	ne->w2 = x | (u64)op << BE_OP_SHIFT;
	return true;
}

#endif /* PMM_BLOCKS_H */
