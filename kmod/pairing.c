// SPDX-License-Identifier: GPL-2.0
/*
 * pmm: the pairing of records: what each record does to the process's
 * live blocks (the block table: blocks.h, blocks.c), its early (pending)
 * frees, the checks a record must pass and their application. All of it is
 * under the process's lock. The record path is this file and blocks.h:
 * their helpers are __always_inline into pmm_apply_records.
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
#include <linux/hash.h>
#include <linux/hashtable.h>
#include <linux/jiffies.h>
#include "blocks.h"

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
		pmm_block_drop(p, &ne);
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

