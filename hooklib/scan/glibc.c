// SPDX-License-Identifier: GPL-2.0
/*
 * pmm-scan: glibc's heaps in the copy, chunk by chunk (malloc/malloc.c's
 * layout on x86-64, glibc 2.26 and later): the main arena's [heap] from
 * its first byte, every other arena's heaps from their 64 MiB-aligned
 * heap_info. Each chunk's size is checked against the heap's bounds, its
 * flags against the arena, a free chunk against its footer (the next
 * chunk's prev_size) and its neighbours (two free chunks would have been
 * merged); one failure and the heap is not walked: its memory between
 * blocks then counts as roots, as any allocator's does (jemalloc and the
 * rest are never walked).
 *
 * A walked heap holds no roots. Its chunks in use are objects: the
 * table's blocks where one starts a chunk, else unknown (allocated before
 * monitoring began, or by glibc for itself: traced through, never lost).
 * Chunks that look in use but are free, in a thread's tcache or an
 * arena's fastbins, are found through their lists (tcache_perthread_struct,
 * malloc_state's fastbinsY, safe-linking's mangled pointers or not), each
 * list checked to its end against its count and its chunks' sizes: their
 * stale contents must not make lost blocks look reachable. A block of the
 * table on a free chunk was freed (a free the module never got): dropped.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "glibc.h"
#include "result.h"
#include "snapmem.h"
#include "table.h"
#include "xalloc.h"

#define HEAP_MAX	(64UL << 20)	/* HEAP_MAX_SIZE: 2 * DEFAULT_MMAP_THRESHOLD_MAX */
#define MINSIZE		32
#define PREV_INUSE	1
#define IS_MMAPPED	2
#define NON_MAIN	4
#define STATE_SIZE	2200		/* sizeof(struct malloc_state) */
#define STATE_FASTBINS	0x10
#define STATE_TOP	0x60
#define NFASTBINS	10
#define TCACHE_BINS	64
#define SEARCH_MAX	(16UL << 20)	/* bytes of libraries' data searched for main_arena */

enum { CH_INUSE, CH_FREE, CH_TOP, CH_FENCE, CH_CACHED };

struct chunk {
	uint64_t addr, size, prev_size;
	uint8_t flags, state, matched;
};

struct walk {
	struct chunk *c;
	size_t n, cap;
};

struct arena_heap {
	uint64_t lo, hi;	/* the heap's rw part */
	uint64_t state;		/* its arena's malloc_state (0: main) */
	uint64_t top;		/* its last chunk, if that is the arena's top */
};

static void add_chunk(struct walk *w, uint64_t addr, uint64_t size, uint64_t prev, uint8_t flags)
{
	if (w->n == w->cap) {
		w->cap = w->cap ? w->cap * 2 : 4096;
		w->c = xrealloc(w->c, w->cap, sizeof(*w->c));
	}
	w->c[w->n++] = (struct chunk){ addr, size, prev, flags, CH_INUSE, 0 };
}

/* A chunk's header, through the windows: a heap is walked in order. */
static int snap_header(struct snapmem *m, uint64_t c, uint64_t hdr[2])
{
	uint64_t avail;
	const uint8_t *p = snap_at(m, c, &avail);

	if (p && avail >= 16) {
		memcpy(hdr, p, 16);
		return 0;
	}
	return snap_read(m, c, hdr, 16);
}

/*
 * Walks [first, end): 0 and the chunks appended to w, or -1 and w as it
 * was. *top: the last chunk if the heap ends with one (not fenceposts).
 */
static int walk_heap(struct snapmem *m, uint64_t first, uint64_t end, int non_main,
		     struct walk *w, uint64_t *top)
{
	size_t start = w->n, i;
	uint64_t c = first, hdr[2];
	int fenced = 0;

	*top = 0;
	while (c < end) {
		uint64_t sz;
		uint8_t fl;

		if (end - c < 16 || snap_header(m, c, hdr))
			goto bad;
		sz = hdr[1] & ~7ULL;
		fl = hdr[1] & 7;
		if (fl & IS_MMAPPED)
			goto bad;
		if (sz == 16 && non_main) {
			/* a heap's fenceposts: a 16-byte chunk, then a size 0 */
			uint64_t last[2];

			if (snap_read(m, c + 16, last, sizeof(last)) || (last[1] & ~7ULL) != 0)
				goto bad;
			add_chunk(w, c, 16, hdr[0], fl);
			w->c[w->n - 1].state = CH_FENCE;
			fenced = 1;
			break;
		}
		if (sz < MINSIZE || sz & 15 || sz > end - c)
			goto bad;
		add_chunk(w, c, sz, hdr[0], fl);
		c += sz;
	}
	if (w->n == start || (!fenced && c != end) || !(w->c[start].flags & PREV_INUSE))
		goto bad;
	for (i = start; i < w->n; i++) {
		struct chunk *ch = &w->c[i], *next = i + 1 < w->n ? &w->c[i + 1] : NULL;

		if (ch->state == CH_FENCE)
			continue;
		if (!next) {
			ch->state = CH_TOP;
			*top = ch->addr;
			if (!(ch->flags & PREV_INUSE) && i > start)
				goto bad;	/* a free chunk next to top is merged into it */
			continue;
		}
		ch->state = (next->flags & PREV_INUSE) ? CH_INUSE : CH_FREE;
		if (ch->state == CH_FREE) {
			/* its footer, and no free neighbour (except beyond a fencepost) */
			if (next->prev_size != ch->size)
				goto bad;
			if (next->state != CH_FENCE && i + 2 < w->n &&
			    !(w->c[i + 2].flags & PREV_INUSE))
				goto bad;
		} else if (non_main != !!(ch->flags & NON_MAIN)) {
			goto bad;	/* in use: the arena bit says which arena's */
		}
	}
	return 0;
bad:
	w->n = start;
	return -1;
}

static int chunk_cmp(const void *a, const void *b)
{
	const struct chunk *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static struct chunk *chunk_at(struct walk *w, uint64_t addr)
{
	size_t lo = 0, hi = w->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (w->c[mid].addr < addr)
			lo = mid + 1;
		else if (w->c[mid].addr > addr)
			hi = mid;
		else
			return &w->c[mid];
	}
	return NULL;
}

/* A list of free chunks of size want from e on (mem pointers when mem,
 * else chunk pointers), mangled (safe-linking) or not: its length if it
 * ends within max, -1 otherwise. mark: tag them as cached. */
static long follow(struct snapmem *m, struct walk *w, uint64_t e, uint64_t want, int mem,
		   int mangled, long max, int mark)
{
	long k = 0;

	while (e) {
		uint64_t ch_addr = mem ? e - 16 : e, slot = mem ? e : e + 16, raw;
		struct chunk *ch;

		if (k >= max || e & 15)
			return -1;
		ch = chunk_at(w, ch_addr);
		if (!ch || ch->size != want || (ch->state != CH_INUSE && ch->state != CH_CACHED))
			return -1;
		if (mark)
			ch->state = CH_CACHED;
		if (snap_read(m, slot, &raw, sizeof(raw)))
			return -1;
		e = mangled ? (slot >> 12) ^ raw : raw;
		k++;
	}
	return k;
}

/* A chunk in use that may be a thread's tcache_perthread_struct: its lists
 * all check out (64 bins, counts of 16 bits from 2.30, of 8 before). */
static int tcache_struct(struct snapmem *m, struct walk *w, const struct chunk *ch)
{
	uint8_t raw[64 * 2 + 64 * 8];
	int wide = ch->size == 0x290, mangled, i, any = 0;
	size_t entries_off = wide ? 128 : 64;

	if ((ch->size != 0x290 && ch->size != 0x250) || ch->state != CH_INUSE ||
	    snap_read(m, ch->addr + 16, raw, entries_off + 64 * 8))
		return 0;
	for (mangled = 1; mangled >= 0; mangled--) {
		int ok = 1;

		for (i = 0; i < TCACHE_BINS && ok; i++) {
			uint64_t e, count = wide ? ((uint16_t *)raw)[i] : raw[i];

			memcpy(&e, raw + entries_off + i * 8, 8);
			if (!e && !count)
				continue;
			any = 1;
			ok = follow(m, w, e, 32 + 16 * (uint64_t)i, 1, mangled, (long)count + 1, 0) ==
			     (long)count;
		}
		if (!ok)
			continue;
		if (!any)
			return 0;	/* empty: nothing to learn from it */
		for (i = 0; i < TCACHE_BINS; i++) {
			uint64_t e;

			memcpy(&e, raw + entries_off + i * 8, 8);
			if (e)
				follow(m, w, e, 32 + 16 * (uint64_t)i, 1, mangled, 1L << 20, 1);
		}
		return 1;
	}
	return 0;
}

/* An arena's fastbins, at its malloc_state: 1 if its top is top and every
 * list checks out (their chunks are then marked). */
static int fastbins(struct snapmem *m, struct walk *w, uint64_t state, uint64_t top)
{
	uint64_t bins[NFASTBINS], t;
	int mangled, i;

	if (snap_read(m, state + STATE_TOP, &t, sizeof(t)) || t != top ||
	    snap_read(m, state + STATE_FASTBINS, bins, sizeof(bins)))
		return 0;
	for (mangled = 1; mangled >= 0; mangled--) {
		int ok = 1;

		for (i = 0; i < NFASTBINS && ok; i++)
			ok = follow(m, w, bins[i], 32 + 16 * (uint64_t)i, 0, mangled, (long)w->n, 0) >= 0;
		if (!ok)
			continue;
		for (i = 0; i < NFASTBINS; i++)
			follow(m, w, bins[i], 32 + 16 * (uint64_t)i, 0, mangled, (long)w->n, 1);
		return 1;
	}
	return 0;
}

/* main_arena, in a library's data: where a word is [heap]'s top chunk and
 * the fastbins before it check out. */
static void main_fastbins(struct snapmem *m, struct walk *w, uint64_t top)
{
	uint64_t searched = 0, *buf = xcalloc(1, 1 << 16);
	size_t i;

	for (i = 0; i < m->nvmas && searched < SEARCH_MAX; i++) {
		struct vma *v = &m->vmas[i];
		uint64_t a;

		if (v->anon || v->shared || v->use != USE_ROOT || !v->resident ||
		    v->hi - v->lo > SEARCH_MAX)
			continue;
		for (a = v->lo; a < v->hi; a += 1 << 16) {
			size_t len = v->hi - a < (1 << 16) ? v->hi - a : (1 << 16), k;

			if (snap_read(m, a, buf, len))
				break;
			searched += len;
			for (k = 0; k < len / 8; k++)
				if (buf[k] == top && a + k * 8 >= STATE_TOP &&
				    fastbins(m, w, a + k * 8 - STATE_TOP, top)) {
					free(buf);
					return;
				}
		}
	}
	free(buf);
}

static int heap_cmp(const void *a, const void *b)
{
	const struct arena_heap *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* lo lies in a walked heap (h sorted) */
static int in_heaps(const struct arena_heap *h, size_t n, uint64_t lo)
{
	size_t a = 0, b = n;

	while (a < b) {
		size_t mid = a + (b - a) / 2;

		if (lo < h[mid].lo)
			b = mid;
		else if (lo >= h[mid].hi)
			a = mid + 1;
		else
			return 1;
	}
	return 0;
}

void glibc_walk(struct snapmem *m, struct obj **objs_io, size_t *n_io, struct ranges *walked,
		struct result *res)
{
	struct walk w = { 0 };
	struct arena_heap *heaps = NULL;
	size_t nheaps = 0, i, j, n = *n_io, nout;
	uint64_t main_top = 0, info_size = 48;
	struct obj *o = *objs_io, *out;
	long *cidx;

	res->allocator = "unknown";
	w.cap = n + 4096;	/* as many chunks as blocks, as a rule */
	w.c = xcalloc(w.cap, sizeof(*w.c));
	for (i = 0; i < m->nvmas; i++) {
		struct vma *v = &m->vmas[i];
		uint64_t top, h;

		if (v->use != USE_ROOT || v->perms[0] != 'r' || v->shared)
			continue;
		if (v->is_heap) {
			if (walk_heap(m, v->lo, v->hi, 0, &w, &top)) {
				res->heaps_unwalkable++;
				continue;
			}
			main_top = top;
			heaps = xrealloc(heaps, nheaps + 1, sizeof(*heaps));
			heaps[nheaps++] = (struct arena_heap){ v->lo, v->hi, 0, top };
			continue;
		}
		if (!v->anon || v->named || v->lo & (HEAP_MAX - 1))
			continue;
		for (h = v->lo; h < v->hi; h += HEAP_MAX) {
			uint64_t info[4], first, state = 0;
			int ok = -1;

			if (snap_read(m, h, info, sizeof(info)) || !info[2] || info[2] > HEAP_MAX ||
			    info[3] < info[2] || info[3] > HEAP_MAX || h + info[3] > v->hi ||
			    (info[1] & (HEAP_MAX - 1)))
				break;
			if (info[0] == h + 32 || info[0] == h + 48) {
				/* an arena's first heap: its malloc_state follows */
				state = info[0];
				info_size = info[0] - h;
				first = state + STATE_SIZE;
				if ((first + 16) & 15)
					first += 16 - ((first + 16) & 15);
				ok = walk_heap(m, first, h + info[2], 1, &w, &top);
			} else {
				ok = walk_heap(m, h + info_size, h + info[2], 1, &w, &top);
				if (ok)
					ok = walk_heap(m, h + (info_size == 48 ? 32 : 48), h + info[2], 1,
						       &w, &top);
			}
			if (ok) {
				res->heaps_unwalkable++;
				continue;
			}
			heaps = xrealloc(heaps, nheaps + 1, sizeof(*heaps));
			heaps[nheaps++] = (struct arena_heap){ h, h + info[3], state ? state : info[0],
							       top };
		}
	}
	res->heaps_walked = nheaps;
	if (!nheaps) {
		free(w.c);
		return;
	}
	res->allocator = "glibc";
	for (i = 1; i < w.n && w.c[i - 1].addr < w.c[i].addr; i++)
		;
	if (i < w.n)	/* heaps are walked in address order: sorted already, as a rule */
		qsort(w.c, w.n, sizeof(*w.c), chunk_cmp);
	/* the blocks on chunks (both sorted: one pass): a block must start a
	 * chunk in use and fit in it */
	qsort(heaps, nheaps, sizeof(*heaps), heap_cmp);
	cidx = xcalloc(n + 1, sizeof(*cidx));
	for (i = j = 0; i < n; i++) {
		cidx[i] = -1;
		if (o[i].kind != OBJ_BLOCK || !in_heaps(heaps, nheaps, o[i].lo))
			continue;
		while (j < w.n && w.c[j].addr < o[i].lo - 16)
			j++;
		if (j < w.n && w.c[j].addr == o[i].lo - 16) {
			cidx[i] = (long)j;
			if (w.c[j].state == CH_INUSE && o[i].hi <= w.c[j].addr + w.c[j].size + 8)
				w.c[j].matched = 1;
		}
	}
	/* free chunks that look in use: tcaches (never a block: glibc makes
	 * them itself), fastbins */
	for (i = 0; i < w.n; i++)
		if (!w.c[i].matched)
			tcache_struct(m, &w, &w.c[i]);
	if (main_top)
		main_fastbins(m, &w, main_top);
	for (i = 0; i < nheaps; i++) {
		if (!heaps[i].state || !heaps[i].top)
			continue;
		for (j = 0; j < nheaps; j++)
			if (heaps[j].state == heaps[i].state && heaps[j].top)
				fastbins(m, &w, heaps[i].state, heaps[j].top);
	}
	/* the objects and the unknown chunks, merged in address order */
	out = xcalloc(n + w.n + 1, sizeof(*out));
	nout = 0;
	for (i = j = 0; i < n || j < w.n;) {
		struct chunk *ch = j < w.n ? &w.c[j] : NULL;

		if (ch && (ch->state != CH_INUSE || ch->matched)) {
			res->free_chunks += ch->state == CH_FREE;
			res->cached_chunks += ch->state == CH_CACHED;
			j++;
			continue;
		}
		if (ch && (i == n || ch->addr + 16 < o[i].lo)) {
			out[nout++] = (struct obj){ .lo = ch->addr + 16, .hi = ch->addr + ch->size + 8,
						    .size = ch->size - 8, .kind = OBJ_UNKNOWN };
			j++;
			continue;
		}
		if (in_heaps(heaps, nheaps, o[i].lo)) {
			struct chunk *on = cidx[i] >= 0 ? &w.c[cidx[i]] : NULL;

			if (o[i].kind == OBJ_UNKNOWN) {
				i++;	/* the walk knows better */
				continue;
			}
			if (on && on->state != CH_INUSE) {
				res->freed_in_heap++;	/* freed, or in a tcache or a fastbin */
				i++;
				continue;
			}
			if (!on || !on->matched) {
				o[i].kind = OBJ_UNKNOWN;	/* not where a chunk starts */
				res->demoted++;
			}
		}
		out[nout++] = o[i++];
	}
	free(cidx);
	for (i = 0; i < nheaps; i++)
		ranges_add(walked, heaps[i].lo, heaps[i].hi);
	free(o);
	free(w.c);
	free(heaps);
	*objs_io = out;
	*n_io = objects_normalize(out, nout, res);
}
