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
 * Every object's words are read once, in address order (sequential reads of
 * the copy, each word scanned while it is in the cache), into a graph: per
 * object, the objects its words point to. Marking then walks that graph, in
 * phases, an explicit stack each, so that what reached a block says what it
 * is:
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

#include "../inject/tracee.h"
#include "result.h"
#include "snapmem.h"
#include "snapshot.h"
#include "sweep.h"
#include "table.h"
#include "xalloc.h"

#define PAGE_SHIFT	12
#define CLUSTER_GAP	(16ULL << 20)
#define HUGE_OBJECT	(64ULL << 20)
#define RED_ZONE	128
#define STREAM		(1UL << 20)

struct cluster {
	uint64_t lo, hi;
	uint32_t first, last;	/* its objects, inclusive */
	uint32_t *page_first;	/* per page: the first object ending past its start */
};

struct index {
	const uint64_t *lo, *hi;	/* the objects' extents, apart: the hot loop's data */
	struct cluster *c;
	size_t nc;
	uint64_t base, span;	/* words in [base, base + span) may hit */
};

struct marker {
	struct index ix;
	struct obj *o;
	uint64_t *lo, *hi;
	uint8_t *st;		/* the objects' states, apart too */
	size_t nobj;
	uint32_t *stack;
	size_t sp, cap;
	uint8_t mark;		/* the state this phase gives */
	uint32_t leader;	/* phase 4: the clique's leader */
	int clique;
	uint64_t *edge_start;	/* per object: its first edge; edge_start[n]: all */
	uint32_t *edge;		/* the objects each points to, object by object */
	size_t nedge, capedge;
	uint32_t src, last;	/* building: the object scanned, its last edge */
	int building;
	uint32_t *frontier;	/* phase 1: unknown objects reached */
	size_t nfrontier, capfrontier;
	struct snapmem *m;
	struct result *res;
};

static void index_build(struct index *ix, const uint64_t *lo, const uint64_t *hi, size_t n)
{
	size_t i = 0;

	memset(ix, 0, sizeof(*ix));
	ix->lo = lo;
	ix->hi = hi;
	if (!n)
		return;
	ix->base = lo[0];
	ix->span = hi[n - 1] - lo[0];
	while (i < n) {
		struct cluster c = { lo[i], hi[i], (uint32_t)i, (uint32_t)i, NULL };

		if (hi[i] - lo[i] < HUGE_OBJECT)
			while (i + 1 < n && lo[i + 1] - c.hi <= CLUSTER_GAP &&
			       hi[i + 1] - lo[i + 1] < HUGE_OBJECT) {
				i++;
				c.hi = hi[i];
				c.last = (uint32_t)i;
			}
		if (c.last > c.first) {
			uint64_t pages = ((c.hi - (c.lo & ~4095ULL)) >> PAGE_SHIFT) + 1, p;
			uint32_t k = c.first;

			c.lo &= ~4095ULL;
			c.page_first = xcalloc(pages + 1, sizeof(*c.page_first));
			for (p = 0; p <= pages; p++) {
				uint64_t start = c.lo + (p << PAGE_SHIFT);

				while (k <= c.last && hi[k] <= start)
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
		return w >= ix->lo[c->first] ? (long)c->first : -1;
	a = c->page_first[(w - c->lo) >> PAGE_SHIFT];
	b = c->page_first[((w - c->lo) >> PAGE_SHIFT) + 1];
	if (b > c->last)
		b = c->last;
	if (a > b)
		return -1;
	/* the last of [a, b] that starts at or before w */
	while (a < b) {
		uint32_t mid = a + (b - a + 1) / 2;

		if (ix->lo[mid] <= w)
			a = mid;
		else
			b = mid - 1;
	}
	return ix->lo[a] <= w && w < ix->hi[a] ? (long)a : -1;
}

static void push(struct marker *mk, uint32_t i)
{
	if (mk->sp == mk->cap) {
		mk->cap = mk->cap ? mk->cap * 2 : 4096;
		mk->stack = xrealloc(mk->stack, mk->cap, sizeof(*mk->stack));
	}
	mk->stack[mk->sp++] = i;
}

static void add_edge(struct marker *mk, uint32_t to)
{
	if (mk->nedge == mk->capedge) {
		mk->capedge = mk->capedge ? mk->capedge * 2 : 1 << 16;
		mk->edge = xrealloc(mk->edge, mk->capedge, sizeof(*mk->edge));
	}
	mk->edge[mk->nedge++] = to;
	mk->last = to;
}

static inline void hit(struct marker *mk, uint64_t w)
{
	long i = index_find(&mk->ix, w);

	if (i < 0)
		return;
	if (mk->building) {
		if ((uint32_t)i != mk->src && (uint32_t)i != mk->last)
			add_edge(mk, (uint32_t)i);
		return;
	}
	if (mk->st[i] != ST_UNREACHED)
		return;
	if (mk->clique) {
		/* valgrind's rule: an unreached object, a former leader too */
		if ((uint32_t)i == mk->leader)
			return;
		mk->st[i] = ST_INDIRECT;
	} else {
		mk->st[i] = mk->mark;
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

/* An object's references: its edges. */
static void scan_object(struct marker *mk, uint32_t i)
{
	uint64_t e;

	for (e = mk->edge_start[i]; e < mk->edge_start[i + 1]; e++) {
		uint32_t j = mk->edge[e];

		if (mk->st[j] != ST_UNREACHED)
			continue;
		if (mk->clique) {
			if (j == mk->leader)
				continue;
			mk->st[j] = ST_INDIRECT;	/* a former leader too: valgrind's rule */
		} else {
			mk->st[j] = mk->mark;
		}
		push(mk, j);
	}
}

static void edges_stream(void *arg, uint64_t addr, const uint8_t *p, size_t len)
{
	struct marker *mk = arg;

	mk->res->objects_bytes_scanned += len;
	scan_words(mk, p, len, addr);
}

static void edges_begin(struct marker *mk, size_t i)
{
	mk->src = (uint32_t)i;
	mk->last = UINT32_MAX;
	mk->edge_start[i] = mk->nedge;
}

/*
 * Every object's edges, in address order: the copy read in pieces of up to
 * STREAM bytes from one object's start on, each piece's objects scanned
 * while it is in the cache. An object bigger than a piece is read by
 * snap_stream, which skips its pages that hold nothing.
 */
static void build_edges(struct marker *mk)
{
	uint8_t *buf = xcalloc(1, STREAM);
	size_t n = mk->nobj, i = 0;

	mk->edge_start = xcalloc(n + 1, sizeof(*mk->edge_start));
	mk->building = 1;
	while (i < n) {
		struct vma *v = vma_of(mk->m, mk->lo[i]);
		uint64_t a = mk->lo[i], end = v ? (a + STREAM < v->hi ? a + STREAM : v->hi) : a;

		if (mk->hi[i] > end) {
			edges_begin(mk, i);
			snap_stream(mk->m, mk->lo[i], mk->hi[i], edges_stream, mk);
			i++;
			continue;
		}
		snap_pread(mk->m, a, buf, end - a);
		/* this piece's objects, as far as they lie whole in it */
		for (; i < n && mk->hi[i] <= end; i++) {
			edges_begin(mk, i);
			scan_words(mk, buf + (mk->lo[i] - a), mk->hi[i] - mk->lo[i], mk->lo[i]);
			mk->res->objects_bytes_scanned += mk->hi[i] - mk->lo[i];
		}
	}
	mk->edge_start[n] = mk->nedge;
	mk->building = 0;
	free(buf);
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
static void scan_gaps(struct marker *mk, uint64_t lo, uint64_t hi)
{
	const uint64_t *olo = mk->lo, *ohi = mk->hi;
	size_t a = 0, b = mk->nobj, n = mk->nobj;

	while (a < b) {		/* the first object ending past lo */
		size_t mid = a + (b - a) / 2;

		if (ohi[mid] <= lo)
			a = mid + 1;
		else
			b = mid;
	}
	for (; lo < hi && a < n && olo[a] < hi; a++) {
		if (olo[a] > lo)
			snap_stream(mk->m, lo, olo[a], scan_stream, mk);
		if (ohi[a] > lo)
			lo = ohi[a];
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
			/* zeros in the copy; the hook's own such page is no loss */
			for (k = 0; k < nr && !(r[k][0] <= v->lo && r[k][1] >= v->hi); k++)
				;
			if (k == nr)
				mk->res->uncopied_bytes += v->hi - v->lo;
			continue;
		}
		/* less the exclusions (sorted): the pieces between them */
		for (k = 0; k < nr && lo < hi; k++) {
			if (r[k][1] <= lo || r[k][0] >= hi)
				continue;
			if (r[k][0] > lo)
				scan_gaps(mk, lo, r[k][0]);
			lo = r[k][1];
		}
		if (lo < hi)
			scan_gaps(mk, lo, hi);
		drain(mk, 1);
	}
	free(r);
}

void sweep(struct snapmem *m, struct obj *o, size_t n, const struct snapshot *s,
	   const struct ranges *excluded, uint64_t age_ns, struct result *res)
{
	struct marker mk;
	uint64_t young_from = s->t1_ns > age_ns ? s->t1_ns - age_ns : 0, t0;
	size_t i;

	memset(&mk, 0, sizeof(mk));
	mk.o = o;
	mk.nobj = n;
	mk.m = m;
	mk.res = res;
	mk.lo = xcalloc(n + 1, sizeof(*mk.lo));
	mk.hi = xcalloc(n + 1, sizeof(*mk.hi));
	mk.st = xcalloc(n + 1, 1);
	for (i = 0; i < n; i++) {
		mk.lo[i] = o[i].lo;
		mk.hi[i] = o[i].hi;
	}
	t0 = now_us();
	index_build(&mk.ix, mk.lo, mk.hi, n);
	build_edges(&mk);
	res->graph_us = now_us() - t0;
	t0 = now_us();
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
		if (o[i].kind == OBJ_BLOCK && mk.st[i] == ST_UNREACHED && o[i].time_ns > young_from) {
			mk.st[i] = ST_YOUNG;
			push(&mk, (uint32_t)i);
		}
	}
	mk.mark = ST_HELD_BY_YOUNG;
	drain(&mk, 0);
	/* 4: cliques, in address order */
	mk.clique = 1;
	for (i = 0; i < n; i++) {
		if (mk.st[i] != ST_UNREACHED)
			continue;
		mk.leader = (uint32_t)i;
		scan_object(&mk, (uint32_t)i);
		drain(&mk, 0);
	}
	res->mark_us = now_us() - t0;
	for (i = 0; i < n; i++) {
		struct counts *c = NULL;
		uint64_t bytes = o[i].size;

		o[i].state = mk.st[i];
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
	free(mk.lo);
	free(mk.hi);
	free(mk.st);
	free(mk.edge);
	free(mk.edge_start);
}
