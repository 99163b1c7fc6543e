// SPDX-License-Identifier: GPL-2.0
/*
 * pmm-scan's mark and sweep over the copy, conservative: every aligned
 * 8-byte word that points into an object (its first byte or any other)
 * references it. Roots: every thread's registers (general and extended),
 * each thread's stack from its stack pointer less the 128-byte red zone
 * to the end of its mapping, and every other writable mapping (libraries'
 * data and bss, TLS, the program's own mappings) but the heaps glibc.c
 * walked, the hook's buffers and tables, and the objects in them.
 *
 * Marking goes in phases, an explicit stack each, so that what reached a
 * block says what it is:
 *   1. from the roots through blocks: reachable; unknown objects met are
 *      kept for
 *   2. from those unknown objects, through everything: reachable only
 *      through memory the table does not know (never lost);
 *   3. from the blocks younger than the age gate that nothing reached
 *      (a pointer in flight, as kmemleak's grace): held by young blocks;
 *   4. what is left is lost, in valgrind memcheck's cliques: in address
 *      order, each object still unreached leads one; every unreached
 *      object its contents reach, a former leader included, is indirectly
 *      lost; leaders that stay are definitely lost.
 *
 * Words are looked up in an index of clusters of objects (sorted, a gap
 * of 16 MiB or a huge object starts a new one), each with the first
 * object of each of its pages: a word outside every object's span costs
 * one compare, one inside a binary search over a few clusters, a page's
 * entry and a search among that page's objects.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "scan.h"

#define PAGE_SHIFT	12
#define CLUSTER_GAP	(16ULL << 20)
#define HUGE_OBJECT	(64ULL << 20)
#define RED_ZONE	128

struct cluster {
	uint64_t lo, hi;
	uint32_t first, last;	/* its objects, inclusive */
	uint32_t *page_first;	/* per page: the first object ending past its start */
};

struct index {
	const struct obj *o;
	struct cluster *c;
	size_t nc;
	uint64_t base, span;	/* words in [base, base + span) may hit */
};

struct marker {
	struct index ix;
	struct obj *o;
	size_t nobj;
	uint32_t *stack;
	size_t sp, cap;
	uint8_t mark;		/* the state this phase gives */
	uint32_t leader;	/* phase 4: the clique's leader */
	int clique;
	uint32_t *frontier;	/* phase 1: unknown objects reached */
	size_t nfrontier, capfrontier;
	struct snapmem *m;
	struct result *res;
};

static void index_build(struct index *ix, const struct obj *o, size_t n)
{
	size_t i = 0;

	memset(ix, 0, sizeof(*ix));
	ix->o = o;
	if (!n)
		return;
	ix->base = o[0].lo;
	ix->span = o[n - 1].hi - o[0].lo;
	while (i < n) {
		struct cluster c = { o[i].lo, o[i].hi, (uint32_t)i, (uint32_t)i, NULL };

		if (o[i].hi - o[i].lo < HUGE_OBJECT)
			while (i + 1 < n && o[i + 1].lo - c.hi <= CLUSTER_GAP &&
			       o[i + 1].hi - o[i + 1].lo < HUGE_OBJECT) {
				i++;
				c.hi = o[i].hi;
				c.last = (uint32_t)i;
			}
		if (c.last > c.first) {
			uint64_t pages = ((c.hi - (c.lo & ~4095ULL)) >> PAGE_SHIFT) + 1, p;
			uint32_t k = c.first;

			c.lo &= ~4095ULL;
			c.page_first = xcalloc(pages + 1, sizeof(*c.page_first));
			for (p = 0; p <= pages; p++) {
				uint64_t start = c.lo + (p << PAGE_SHIFT);

				while (k <= c.last && o[k].hi <= start)
					k++;
				c.page_first[p] = k;
			}
		}
		ix->c = xrealloc(ix->c, ix->nc + 1, sizeof(*ix->c));
		ix->c[ix->nc++] = c;
		i++;
	}
}

/* The object that holds address w, or -1. */
static inline long index_find(const struct index *ix, uint64_t w)
{
	const struct cluster *c;
	size_t lo = 0, hi = ix->nc;
	uint32_t a, b;

	if (w - ix->base >= ix->span)
		return -1;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (ix->c[mid].lo <= w)
			lo = mid;
		else
			hi = mid;
	}
	c = &ix->c[lo];
	if (w < c->lo || w >= c->hi)
		return -1;
	if (!c->page_first)
		return w >= ix->o[c->first].lo ? (long)c->first : -1;
	a = c->page_first[(w - c->lo) >> PAGE_SHIFT];
	b = c->page_first[((w - c->lo) >> PAGE_SHIFT) + 1];
	if (b > c->last)
		b = c->last;
	if (a > b)
		return -1;
	/* the last of [a, b] that starts at or before w */
	while (a < b) {
		uint32_t mid = a + (b - a + 1) / 2;

		if (ix->o[mid].lo <= w)
			a = mid;
		else
			b = mid - 1;
	}
	return ix->o[a].lo <= w && w < ix->o[a].hi ? (long)a : -1;
}

static void push(struct marker *mk, uint32_t i)
{
	if (mk->sp == mk->cap) {
		mk->cap = mk->cap ? mk->cap * 2 : 4096;
		mk->stack = xrealloc(mk->stack, mk->cap, sizeof(*mk->stack));
	}
	mk->stack[mk->sp++] = i;
}

static inline void hit(struct marker *mk, uint64_t w)
{
	long i = index_find(&mk->ix, w);
	struct obj *o;

	if (i < 0)
		return;
	o = &mk->o[i];
	if (mk->clique) {
		/* valgrind's rule: an unreached object, a former leader too */
		if (o->state != ST_UNREACHED || (uint32_t)i == mk->leader)
			return;
		o->state = ST_INDIRECT;
	} else {
		if (o->state != ST_UNREACHED)
			return;
		o->state = mk->mark;
	}
	push(mk, (uint32_t)i);
}

static void scan_words(struct marker *mk, const uint8_t *p, size_t len, uint64_t addr)
{
	const uint64_t base = mk->ix.base, span = mk->ix.span;
	size_t skip = (8 - (addr & 7)) & 7, i, n;
	const uint64_t *w;

	if (len <= skip)
		return;
	w = (const uint64_t *)(p + skip);
	n = (len - skip) / 8;
	for (i = 0; i < n; i++) {
		uint64_t v;

		memcpy(&v, &w[i], sizeof(v));
		if (v - base < span)
			hit(mk, v);
	}
}

static void scan_stream(void *arg, uint64_t addr, const uint8_t *p, size_t len)
{
	struct marker *mk = arg;

	mk->res->roots_bytes += len;
	scan_words(mk, p, len, addr);
}

/* An object's contents, through the windows. */
static void scan_object(struct marker *mk, uint32_t i)
{
	uint64_t a = mk->o[i].lo, hi = mk->o[i].hi;

	mk->o[i].scanned = 1;
	while (a < hi) {
		uint64_t avail;
		const uint8_t *p = snap_at(mk->m, a, &avail);

		if (avail > hi - a)
			avail = hi - a;
		if (p) {
			scan_words(mk, p, avail, a);
			mk->res->objects_bytes_scanned += avail;
		}
		a += avail;
	}
}

/* Pops and scans until the stack is empty; phase 1 keeps unknown objects
 * for phase 2 instead. */
static void drain(struct marker *mk, int defer_unknown)
{
	while (mk->sp) {
		uint32_t i = mk->stack[--mk->sp];

		if (defer_unknown && mk->o[i].kind == OBJ_UNKNOWN) {
			if (mk->nfrontier == mk->capfrontier) {
				mk->capfrontier = mk->capfrontier ? mk->capfrontier * 2 : 1024;
				mk->frontier = xrealloc(mk->frontier, mk->capfrontier,
							sizeof(*mk->frontier));
			}
			mk->frontier[mk->nfrontier++] = i;
			continue;
		}
		scan_object(mk, i);
	}
}

static int range_cmp(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* [lo, hi) minus the objects in it: each gap streamed as roots */
static void scan_gaps(struct marker *mk, const struct obj *o, size_t n, uint64_t lo, uint64_t hi)
{
	size_t a = 0, b = n;

	while (a < b) {		/* the first object ending past lo */
		size_t mid = a + (b - a) / 2;

		if (o[mid].hi <= lo)
			a = mid + 1;
		else
			b = mid;
	}
	for (; lo < hi && a < n && o[a].lo < hi; a++) {
		if (o[a].lo > lo)
			snap_stream(mk->m, lo, o[a].lo, scan_stream, mk);
		if (o[a].hi > lo)
			lo = o[a].hi;
	}
	if (lo < hi)
		snap_stream(mk->m, lo, hi, scan_stream, mk);
}

/* The writable mappings, less exclusions and objects, as roots. */
static void scan_roots(struct marker *mk, const struct snapshot *s, const struct ranges *ex)
{
	struct snapmem *m = mk->m;
	uint64_t (*r)[2] = xcalloc(ex->n + 1, sizeof(*r));
	size_t i, k, nr = 0;
	int t;

	for (i = 0; i < ex->n; i++) {
		r[nr][0] = ex->r[i].lo;
		r[nr][1] = ex->r[i].hi;
		nr++;
	}
	qsort(r, nr, sizeof(*r), range_cmp);
	/* registers: every thread's, the extended state's words too */
	for (t = 0; t < s->n; t++) {
		const struct thread_regs *th = &s->t[t];

		scan_words(mk, (const uint8_t *)&th->regs, sizeof(th->regs), 0);
		if (th->xstate)
			scan_words(mk, th->xstate, th->xlen, 0);
		/* its stack from below its stack pointer on */
		for (i = 0; i < m->nvmas; i++) {
			struct vma *v = &m->vmas[i];
			uint64_t sp = th->regs.rsp >= RED_ZONE ? th->regs.rsp - RED_ZONE : 0;

			if (th->regs.rsp >= v->lo && th->regs.rsp < v->hi) {
				if (sp < v->lo)
					sp = v->lo;
				if (!v->root_lo || sp < v->root_lo)
					v->root_lo = sp;
			}
		}
	}
	drain(mk, 1);
	for (i = 0; i < m->nvmas; i++) {
		struct vma *v = &m->vmas[i];
		uint64_t lo = v->root_lo ? v->root_lo : v->lo, hi = v->hi;

		if (v->use != USE_ROOT || v->perms[0] != 'r' || v->perms[1] != 'w')
			continue;
		if (v->wiped) {
			mk->res->uncopied_bytes += v->hi - v->lo;
			continue;
		}
		/* less the exclusions (sorted): the pieces between them */
		for (k = 0; k < nr && lo < hi; k++) {
			if (r[k][1] <= lo || r[k][0] >= hi)
				continue;
			if (r[k][0] > lo)
				scan_gaps(mk, mk->o, mk->nobj, lo, r[k][0]);
			lo = r[k][1];
		}
		if (lo < hi)
			scan_gaps(mk, mk->o, mk->nobj, lo, hi);
		drain(mk, 1);
	}
	free(r);
}

void sweep(struct snapmem *m, struct obj *o, size_t n, const struct snapshot *s,
	   const struct ranges *excluded, uint64_t age_ns, struct result *res)
{
	struct marker mk;
	uint64_t young_from = s->t1_ns > age_ns ? s->t1_ns - age_ns : 0;
	size_t i;

	memset(&mk, 0, sizeof(mk));
	mk.o = o;
	mk.nobj = n;
	mk.m = m;
	mk.res = res;
	index_build(&mk.ix, o, n);
	res->table.n = res->table.bytes = 0;
	/* 1: from the roots, through blocks */
	mk.mark = ST_REACHED;
	scan_roots(&mk, s, excluded);
	/* 2: through the unknown objects reached */
	mk.mark = ST_VIA_UNKNOWN;
	for (i = 0; i < mk.nfrontier; i++)
		scan_object(&mk, mk.frontier[i]);
	drain(&mk, 0);
	/* 3: held by young blocks that nothing reached */
	for (i = 0; i < n; i++) {
		if (o[i].kind == OBJ_BLOCK && o[i].state == ST_UNREACHED && o[i].time_ns > young_from) {
			o[i].state = ST_YOUNG;
			push(&mk, (uint32_t)i);
		}
	}
	mk.mark = ST_HELD_BY_YOUNG;
	drain(&mk, 0);
	/* 4: cliques, in address order */
	mk.clique = 1;
	for (i = 0; i < n; i++) {
		if (o[i].state != ST_UNREACHED)
			continue;
		mk.leader = (uint32_t)i;
		scan_object(&mk, (uint32_t)i);
		drain(&mk, 0);
	}
	for (i = 0; i < n; i++) {
		struct counts *c = NULL;
		uint64_t bytes = o[i].size;

		if (o[i].kind == OBJ_UNKNOWN) {
			res->unknown.n++;
			res->unknown.bytes += o[i].hi - o[i].lo;
			continue;
		}
		if (o[i].state == ST_UNREACHED)
			o[i].state = ST_DEFINITE;
		res->table.n++;
		res->table.bytes += bytes;
		switch (o[i].state) {
		case ST_REACHED: c = &res->reachable; break;
		case ST_VIA_UNKNOWN: c = &res->via_unknown; break;
		case ST_YOUNG: c = &res->young; break;
		case ST_HELD_BY_YOUNG: c = &res->held_by_young; break;
		case ST_INDIRECT: c = &res->indirect; break;
		default: c = &res->definite; break;
		}
		c->n++;
		c->bytes += bytes;
	}
	for (i = 0; i < mk.ix.nc; i++)
		free(mk.ix.c[i].page_first);
	free(mk.ix.c);
	free(mk.stack);
	free(mk.frontier);
}
