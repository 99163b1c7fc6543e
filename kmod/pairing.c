// SPDX-License-Identifier: GPL-2.0
/*
 * pmm: the pairing of records: each process's live blocks keyed by address,
 * its early (pending) frees, the checks a record must pass and their
 * application. All of it is under the process's lock. The record path is
 * this file: its helpers are __always_inline into pmm_apply_records.
 *
 * Pairing. Every record carries time_ns (CLOCK_MONOTONIC's scale, taken by
 * the hook at the call, ordered at each address). Records of different
 * threads reach the kernel out of order, so:
 *  - a FREE at ptr pairs with the newest live heap block at ptr whose
 *    time_ns <= the free's time_ns (several blocks may share an address
 *    while records of other threads are in flight: all are kept); a
 *    TAGGED free only with one whose time_ns has its tag in the low bits,
 *    which keeps pairs right when another thread freed and reused the
 *    address meanwhile and its records are still in flight;
 *  - a FREE that finds none waits in a bounded pending list (PMM_PENDING_MAX
 *    per process, PMM_PENDING_AGE_MS); an allocation that arrives later at
 *    that address with time_ns <= the free's pairs with the earliest such
 *    free, and its block never appears. Expired or evicted pending frees are
 *    unmatched frees;
 *  - REALLOC is a free of prev_ptr and a new block at ptr, both at the
 *    record's time (with PMM_REC_F_PREV_FREED only the new block: the old
 *    one's allocation was sent FREED); MREMAP likewise for mappings;
 *  - at most PMM_MAX_SAME_ADDR blocks may share an address (more cannot be
 *    in flight at once from the hook), wherever a block lands (a trimmed
 *    mapping moves); a further one is dropped;
 *  - no block sits farther than PMM_PROBE_MAX slots from its home slot: a
 *    process that learned the order of its table (reads show it) cannot
 *    build longer runs, and no probe, removal or growth walks farther; a
 *    block that finds no slot that close is dropped;
 *  - MUNMAP(ptr, len) pairs with a MMAP/MREMAP block that starts at ptr: a
 *    length >= the block's size removes it, a shorter one trims it from the
 *    start. An unmap that does not start at a block waits, then counts as
 *    unmatched;
 *  - an allocation flagged PMM_REC_F_FREED was freed by its own thread
 *    before the batch left: it is counted as allocated and freed at its
 *    site and never enters the table (its free is not sent).
 * Counters: per site and in the size buckets every figure is weighted (a
 * record of weight w counts w events of w x size bytes). The per-process
 * live_bytes is weighted too; nblocks ("Log count") counts table entries.
 *
 * Hostile input. Addresses and site ids are whatever the process sends, so
 * every table hashes them with a key of its own (hsiphash, random per
 * process): no chosen set of addresses lands in one slot, and probes stay
 * short. Every byte a process's tables take is counted in pmm_kmem_bytes
 * (kmem_add), as allocated (slab sizes rounded as the allocator rounds
 * them), and a process's tables are freed when it is stopped or expires,
 * whoever still holds a reference to it (pmm_proc_retire).
 */
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/vmalloc.h>
#include <linux/hash.h>
#include <linux/hashtable.h>
#include <linux/jiffies.h>
#include "pmm_int.h"

static struct kmem_cache *pmm_pending_cache;

int pmm_pairing_init(void)
{
	pmm_pending_cache = KMEM_CACHE(pmm_pending, SLAB_ACCOUNT);
	return pmm_pending_cache ? 0 : -ENOMEM;
}

void pmm_pairing_exit(void)
{
	kmem_cache_destroy(pmm_pending_cache);
}

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
static noinline u32 ext_get(struct pmm_proc *p)
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

static void ext_put(struct pmm_proc *p, u32 idx)
{
	ext_at(p, idx)->next_free = p->ext_free;
	p->ext_free = idx + 1;
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

/* Buckets <= 16, 256, 1K, 4K, 16K, 64K bytes and larger, by bit length. */
static unsigned int size_bucket(u64 size)
{
	static const u8 by_bits[65] = {
		0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5,
		[17 ... 64] = PMM_SIZE_BUCKETS - 1
	};

	BUILD_BUG_ON(PMM_SIZE_BUCKETS != 7);
	return size ? by_bits[fls64(size - 1)] : 0;
}

static void pmm_drop(struct pmm_proc *p)
{
	p->dropped++;
	atomic64_inc(&pmm_records_dropped);
}

static void pmm_unmatched(struct pmm_proc *p)
{
	p->stats.unmatched_frees++;
	atomic64_inc(&pmm_unmatched_frees);
}

/* A free of a block allocated before monitoring began: counted, no more. */
static void pmm_older(struct pmm_proc *p)
{
	p->stats.older_frees++;
	atomic64_inc(&pmm_older_frees);
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

/* Block e is dropped (not freed): its figures leave the process's. */
static void block_drop(struct pmm_proc *p, const struct pmm_block_ent *e)
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
			block_drop(p, &ne);
	}
}

/*
 * Grows segment segs[k] by a quarter, or splits it in two by the next bit
 * of the hash once it would pass PMM_SEG_MAX_SLOTS: either rehashes at most
 * that many entries, so no record waits long. When memory is short (or at
 * the last split) it stays as it is, and the next try waits until 1/16 of
 * it more is used.
 */
static noinline void seg_grow(struct pmm_proc *p, u32 k)
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
 * A free's tag: the low bits of its block's allocation time, or NO_TAG when
 * the sender did not know them (then the newest older block is taken).
 */
#define NO_TAG	U32_MAX

static bool tag_fits(u64 alloc_time, u32 tag)
{
	return tag == NO_TAG ||
	       (alloc_time & ((1U << PMM_ALLOC_TAG_BITS) - 1)) == tag;
}

/*
 * The newest live block at ptr of that kind with time_ns <= t and tag, in
 * segment *tp. The newest even with a tag: blocks whose times differ by a
 * multiple of 2^PMM_ALLOC_TAG_BITS ns share it, and the free's own block,
 * if it has arrived, is the newest older one (an allocation between them
 * would have freed it first).
 */
static __always_inline struct pmm_block_ent *
block_find(struct pmm_proc *p, u64 ptr, u64 time, bool map, u32 tag,
	   struct pmm_bseg **tp)
{
	struct pmm_block_ent *e, *best = NULL;
	struct pmm_bseg *t;
	u32 hs, i, d;
	u64 et;

	if (ptr >> BE_ADDR_BITS)
		return NULL;	/* never kept */
	t = seg_of(p, block_hash(p, ptr), &hs);
	*tp = t;
	i = bt_home(t, hs);
	for (d = 0; d < PMM_PROBE_MAX; d++, i = bt_next(t, i)) {
		e = &t->slot[i];
		if (!be_used(e) || be_dist(e) < d)
			break;
		if (be_dist(e) != d || be_ptr(e) != ptr ||
		    pmm_op_is_map(be_op(e)) != map)
			continue;
		et = be_time(e);
		if (et > time || !tag_fits(et, tag))
			continue;
		if (!best || et > be_time(best))
			best = e;
	}
	return best;
}

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
		seg_grow(p, p->dir[(u64)h >> (32 - p->dir_bits)]);
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
	x = ext_get(p);
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

static __always_inline void count_alloc(struct pmm_proc *p,
					struct pmm_site_stats *s, u16 op,
					unsigned int bucket, u64 size, u32 w)
{
	struct pmm_bucket_stats *bs = &p->stats.buckets[bucket];

	s->alloc_count[op] += w;
	s->alloc_bytes += size * w;
	if (op == PMM_OP_CALLOC)
		bs->calloc_count += w;
	else if (op == PMM_OP_REALLOC || op == PMM_OP_MREMAP)
		bs->realloc_count += w;
	else
		bs->malloc_count += w;
	bs->alloc_bytes += size * w;
}

/*
 * A free of len bytes of a block of size bucket "bucket" (of its size before
 * the free) that belongs to site s.
 */
static __always_inline void count_free(struct pmm_proc *p,
				       struct pmm_site_stats *s, u16 fop,
				       unsigned int bucket, u64 len, u32 w)
{
	struct pmm_bucket_stats *bs = &p->stats.buckets[bucket];

	bs->free_count += w;
	bs->free_bytes += len * w;
	if (s) {
		s->alloc_count[fop] += w;
		s->free_bytes += len * w;
	}
}

static __always_inline void live_sub(struct pmm_proc *p,
				     struct pmm_site_stats *s, u64 bytes)
{
	p->live_bytes -= bytes;
	if (s)
		s->live_bytes -= bytes;
}

/* Frees block e of t: its site's and the process's figures, its ext record. */
static __always_inline void block_remove(struct pmm_proc *p, struct pmm_bseg *t,
					 struct pmm_block_ent *e,
					 struct pmm_site_stats *s, u64 size, u32 w)
{
	live_sub(p, s, size * w);
	s->live_blocks -= w;
	if (unlikely(e->w1 & BE_EXT))
		ext_put(p, e->w2 & BE_SIZE_MASK);
	bt_unlink(t, e);
	p->nblocks--;
}

static void pending_del(struct pmm_proc *p, struct pmm_pending *pe)
{
	hlist_del(&pe->node);
	list_del(&pe->fifo);
	kmem_cache_free(pmm_pending_cache, pe);
	p->npending--;
	pmm_kmem_add(-(long)kmem_cache_size(pmm_pending_cache));
}

static struct hlist_head *pending_bucket(struct pmm_proc *p, u64 ptr)
{
	return &p->pending[block_hash(p, ptr) & (PMM_PENDING_BUCKETS - 1)];
}

void pmm_expire_pending(struct pmm_proc *p, bool all)
{
	struct pmm_pending *pe, *tmp;

	list_for_each_entry_safe(pe, tmp, &p->pending_fifo, fifo) {
		if (!all && time_before(jiffies, pe->expires))
			break;
		pmm_unmatched(p);
		pending_del(p, pe);
	}
}

static void pending_add(struct pmm_proc *p, u64 ptr, u64 len, u64 t, u16 op,
			u32 tag)
{
	struct pmm_pending *pe;

	if (p->npending >= PMM_PENDING_MAX) {
		pe = list_first_entry(&p->pending_fifo, struct pmm_pending,
				      fifo);
		pmm_unmatched(p);
		pending_del(p, pe);
	}
	pe = kmem_cache_alloc(pmm_pending_cache, GFP_KERNEL);
	if (!pe) {
		pmm_unmatched(p);
		return;
	}
	pe->ptr = ptr;
	pe->len = len;
	pe->time_ns = t;
	pe->tag = tag;
	pe->op = op;
	pe->expires = jiffies + msecs_to_jiffies(PMM_PENDING_AGE_MS);
	hlist_add_head(&pe->node, pending_bucket(p, ptr));
	list_add_tail(&pe->fifo, &p->pending_fifo);
	p->npending++;
	pmm_kmem_add(kmem_cache_size(pmm_pending_cache));
}

/*
 * The earliest pending free at ptr of that kind with time_ns >= t whose tag
 * fits an allocation at t.
 */
static struct pmm_pending *pending_find(struct pmm_proc *p, u64 ptr, u64 t,
					bool map)
{
	struct pmm_pending *pe, *best = NULL;

	hlist_for_each_entry(pe, pending_bucket(p, ptr), node) {
		bool pmap = pe->op == PMM_OP_MUNMAP;

		if (pe->ptr != ptr || pmap != map || pe->time_ns < t ||
		    !tag_fits(t, pe->tag))
			continue;
		if (!best || pe->time_ns < best->time_ns)
			best = pe;
	}
	return best;
}

static __always_inline void do_alloc(struct pmm_proc *p, u16 op, u64 ptr,
				     u64 prev, u64 size, u64 t, u32 site, u32 w)
{
	unsigned int bucket = size_bucket(size);
	struct pmm_pending *pe = NULL;
	struct pmm_bseg *seg = NULL;
	struct pmm_site_stats *s;
	struct pmm_block_ent ne;
	struct bt_spot sp;
	bool need_block;
	u64 len = 0;

	if (p->npending)
		pe = pending_find(p, ptr, t, pmm_op_is_map(op));
	/*
	 * A block remains unless a pending free cancels all of it; an unmap
	 * that cancels its start leaves the rest at ptr + its length.
	 */
	need_block = !pe || (pe->op == PMM_OP_MUNMAP && pe->len < size);
	if (pe)
		len = pe->op == PMM_OP_MUNMAP ? min(pe->len, size) : size;
	if (need_block &&
	    (p->nblocks >= READ_ONCE(pmm_cfg.max_blocks) ||
	     !block_spot(p, ptr + len, pmm_op_is_map(op), &seg, &sp)))
		goto drop;
	s = site_get(p, site);
	if (!s)
		goto drop;
	if (need_block &&
	    !block_pack(p, &ne, ptr + len, prev, size - len, t, s, w, op))
		goto drop;
	count_alloc(p, s, op, bucket, size, w);
	if (pe) {
		/* its free arrived first: the pair cancels */
		count_free(p, s, pe->op, bucket, len, w);
		pending_del(p, pe);
		if (!need_block)
			return;
		size -= len;
	}
	bt_put(seg, &sp, &ne);
	p->nblocks++;
	p->live_bytes += size * w;
	s->live_bytes += size * w;
	s->live_blocks += w;
	return;
drop:
	pmm_drop(p);
}

/*
 * What is left of mapping e (of t), trimmed by len bytes from its start,
 * moves to its new address (dropped if it finds no spot there).
 */
static void map_trim(struct pmm_proc *p, struct pmm_bseg *t,
		     struct pmm_block_ent *e, struct pmm_site_stats *s,
		     u64 size, u32 w, u64 len)
{
	struct pmm_block_ent ne = *e;
	u64 at = be_ptr(e) + len;
	struct bt_spot sp;

	ne.w2 &= ~(~0ULL << BE_DIST_SHIFT);
	bt_unlink(t, e);
	size -= len;
	if (ne.w1 & BE_EXT)
		ext_at(p, ne.w2 & BE_SIZE_MASK)->size = size;
	else
		ne.w2 = (ne.w2 & ~BE_SIZE_MASK) | size;
	ne.w0 = (ne.w0 & ~BE_ADDR_MASK) | (at & BE_ADDR_MASK);
	if ((at >> BE_ADDR_BITS) || !block_spot(p, at, true, &t, &sp)) {
		block_drop(p, &ne);
		return;
	}
	bt_put(t, &sp, &ne);
}

/* Frees len bytes (U64_MAX: all) at ptr now; false if no block is there. */
static __always_inline bool free_now(struct pmm_proc *p, u64 ptr, u64 len,
				     u64 t, u16 fop, u32 tag)
{
	bool map = fop == PMM_OP_MUNMAP;
	struct pmm_site_stats *s;
	struct pmm_block_ent *b;
	struct pmm_bseg *seg;
	u64 size;
	u32 w;

	b = block_find(p, ptr, t, map, tag, &seg);
	if (!b)
		return false;
	s = be_site(p, b);
	size = be_size(p, b, &w);
	if (map && len < size) {
		/* trimmed from the start */
		count_free(p, s, fop, size_bucket(size), len, w);
		live_sub(p, s, len * w);
		map_trim(p, seg, b, s, size, w, len);
		return true;
	}
	count_free(p, s, fop, size_bucket(size), size, w);
	block_remove(p, seg, b, s, size, w);
	return true;
}

static __always_inline void do_free(struct pmm_proc *p, u64 ptr, u64 len,
				    u64 t, u16 fop, u32 tag)
{
	if (!ptr)
		return;		/* free(NULL) */
	if (!free_now(p, ptr, len, t, fop, tag))
		pending_add(p, ptr, len, t, fop, tag);
}

/*
 * An allocation its thread freed again before sending (PMM_REC_F_FREED): the
 * site counts both, no block is made, and no pending free can be its pair
 * (only its own thread freed it, and that free never left the thread).
 */
static __always_inline void alloc_and_free(struct pmm_proc *p, u16 op,
					   const struct pmm_record *r)
{
	struct pmm_site_stats *s = site_get(p, r->site);
	unsigned int bucket = size_bucket(r->size);

	if (!s) {
		pmm_drop(p);
		return;
	}
	count_alloc(p, s, op, bucket, r->size, r->weight);
	count_free(p, s, PMM_OP_FREE, bucket, r->size, r->weight);
}

/* The block a successful allocation record makes, or its counts if FREED. */
static __always_inline void alloc_rec(struct pmm_proc *p,
				      const struct pmm_record *r)
{
	if (r->flags & PMM_REC_F_FREED)
		alloc_and_free(p, r->op, r);
	else
		do_alloc(p, r->op, r->ptr, r->prev_ptr, r->size, r->time_ns,
			 r->site, r->weight);
}

/* The rules a record must keep (see struct pmm_record and its flags). */
static int pmm_check_record_rules(const struct pmm_record *r)
{
	bool moves = r->op == PMM_OP_REALLOC || r->op == PMM_OP_MREMAP;
	bool frees = r->op == PMM_OP_FREE || r->op == PMM_OP_MUNMAP;

	if (r->op == PMM_OP_NONE || r->op >= PMM_OP_NR)
		return -EINVAL;
	if ((r->flags & ~PMM_REC_F_ALL) || !r->weight)
		return -EINVAL;
	if (r->flags & PMM_REC_F_TAGGED) {
		if (!(r->op == PMM_OP_FREE ||
		      (r->op == PMM_OP_REALLOC && r->prev_ptr)) ||
		    r->alloc_tag >> PMM_ALLOC_TAG_BITS)
			return -EINVAL;
	} else if (r->alloc_tag) {
		return -EINVAL;
	}
	if (frees && (r->flags & PMM_REC_F_FAILED))
		return -EINVAL;
	if ((r->flags & PMM_REC_F_FREED) &&
	    (frees || pmm_op_is_map(r->op) || !r->ptr ||
	     (r->flags & PMM_REC_F_FAILED)))
		return -EINVAL;
	if (!moves && r->prev_ptr)
		return -EINVAL;
	if ((r->flags & PMM_REC_F_PREV_FREED) &&
	    (r->op != PMM_OP_REALLOC || !r->ptr || !r->prev_ptr ||
	     (r->flags & (PMM_REC_F_TAGGED | PMM_REC_F_FAILED))))
		return -EINVAL;
	if ((r->flags & PMM_REC_F_OLDER) &&
	    (!(r->op == PMM_OP_FREE ||
	       (r->op == PMM_OP_REALLOC && r->prev_ptr)) ||
	     (r->op == PMM_OP_FREE && !r->ptr) ||
	     (r->flags & (PMM_REC_F_TAGGED | PMM_REC_F_PREV_FREED |
			  PMM_REC_F_FAILED))))
		return -EINVAL;
	if (r->op == PMM_OP_MUNMAP && !r->size)
		return -EINVAL;
	return 0;
}

static __always_inline int pmm_check_record(const struct pmm_record *r)
{
	/*
	 * Most records are a malloc (as it was, or freed before it left) or a
	 * tagged free: accepted in a few compares. The rules accept exactly
	 * these of their shapes; every other record is judged by them.
	 */
	if (r->weight && !r->prev_ptr && !(r->alloc_tag >> PMM_ALLOC_TAG_BITS)) {
		if (r->op == PMM_OP_MALLOC && !r->alloc_tag &&
		    (!r->flags || (r->flags == PMM_REC_F_FREED && r->ptr)))
			return 0;
		if (r->op == PMM_OP_FREE && r->flags == PMM_REC_F_TAGGED)
			return 0;
	}
	return pmm_check_record_rules(r);
}

/* How many of the n records, from the first, are valid. */
u32 pmm_check_records(const struct pmm_record *r, u32 n)
{
	u32 i;

	for (i = 0; i < n; i++)
		if (pmm_check_record(&r[i]))
			break;
	return i;
}

/*
 * Applies one checked record. An allocation with the FAILED flag, or with
 * ptr 0, is a failed allocation and changes no table; REALLOC with ptr 0,
 * no FAILED flag and size 0 is realloc(p, 0) freeing p.
 */
static __always_inline void pmm_apply_record(struct pmm_proc *p,
					     const struct pmm_record *r)
{
	bool failed, found = false;
	u64 prev;
	u16 fop;
	u32 tag;

	lockdep_assert_held(&p->lock);
	p->records++;
	/*
	 * The shapes of most records first, each in code of its own where its
	 * op and flags are constants (fewer instructions than the general case
	 * below, which does the same with them): a malloc, sent as it was or
	 * freed before it left, and a tagged free. A checked MALLOC has no
	 * prev_ptr.
	 */
	if (r->op == PMM_OP_MALLOC && r->ptr) {
		if (!r->flags) {
			do_alloc(p, PMM_OP_MALLOC, r->ptr, 0, r->size,
				 r->time_ns, r->site, r->weight);
			return;
		}
		if (r->flags == PMM_REC_F_FREED) {
			alloc_and_free(p, PMM_OP_MALLOC, r);
			return;
		}
	} else if (r->op == PMM_OP_FREE && r->flags == PMM_REC_F_TAGGED) {
		do_free(p, r->ptr, 0, r->time_ns, PMM_OP_FREE, r->alloc_tag);
		return;
	}

	if (unlikely(r->flags & PMM_REC_F_OLDER)) {
		/* its block was never in the table: no lookup, no pending */
		pmm_older(p);
		if (r->op == PMM_OP_REALLOC && r->ptr)
			alloc_rec(p, r);
		return;
	}
	failed = (r->flags & PMM_REC_F_FAILED) || !r->ptr;
	fop = r->op == PMM_OP_MREMAP ? PMM_OP_MUNMAP : PMM_OP_FREE;
	tag = r->flags & PMM_REC_F_TAGGED ? r->alloc_tag : NO_TAG;
	switch (r->op) {
	case PMM_OP_FREE:
		do_free(p, r->ptr, 0, r->time_ns, PMM_OP_FREE, tag);
		break;
	case PMM_OP_MUNMAP:
		do_free(p, r->ptr, r->size, r->time_ns, PMM_OP_MUNMAP, NO_TAG);
		break;
	case PMM_OP_REALLOC:
	case PMM_OP_MREMAP:
		if (failed && !(r->flags & PMM_REC_F_FAILED) && !r->size) {
			do_free(p, r->prev_ptr, U64_MAX, r->time_ns, fop, tag);
			break;
		}
		if (failed) {
			p->stats.failed_allocs += r->weight;
			break;
		}
		/*
		 * The old block is looked up first and a pending free for it
		 * added last, so that an in-place realloc never pairs with
		 * its own free. PREV_FREED: its free is counted already.
		 */
		prev = r->flags & PMM_REC_F_PREV_FREED ? 0 : r->prev_ptr;
		if (prev)
			found = free_now(p, prev, U64_MAX, r->time_ns, fop,
					 tag);
		alloc_rec(p, r);
		if (prev && !found)
			pending_add(p, prev, U64_MAX, r->time_ns, fop, tag);
		break;
	default:
		if (failed) {
			p->stats.failed_allocs += r->weight;
			break;
		}
		alloc_rec(p, r);
		break;
	}
}

/*
 * Applies n checked records of one thread, in order. The record path is
 * this one function: its helpers are __always_inline and only rare paths
 * (a new site, growth, pending frees) are calls. Under QEMU's TCG every
 * return is a lookup of an indirect jump, which inlining avoids; on
 * hardware it costs nothing.
 */
void pmm_apply_records(struct pmm_proc *p, const struct pmm_record *r, u32 n)
{
	u32 i;

	for (i = 0; i < n; i++)
		pmm_apply_record(p, &r[i]);
	pmm_expire_pending(p, false);
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
