// SPDX-License-Identifier: GPL-2.0
/*
 * pmm-scan: the blocks at the snapshot. The module's table is read twice,
 * before the stop (t0) and after the threads resume (t2); the snapshot
 * was taken at t1 in between. What was live at t1:
 *  - t2's blocks allocated before t1 (live at t2, so at t1): blocks;
 *  - the records the hook's threads had not sent at t1 (their buffers, in
 *    the copy, through the registry): allocations added, frees applied;
 *  - t0's blocks that t2 no longer has were freed between t0 and t2,
 *    before or after t1: unknown (traced through, never called lost);
 *  - t2's blocks allocated after t1 are not in the copy, but what was at
 *    their address may be: unknown too.
 * Blocks in no mapping of the copy are dropped; of blocks that overlap
 * (a free the module never got), the newest stays. glibc.c then checks
 * them against the heap's chunks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../kmod/uapi/pmm.h"
#include "../inject/tracee.h"
#include "../scanreg.h"
#include "exit_codes.h"
#include "result.h"
#include "snapmem.h"
#include "snapshot.h"
#include "table.h"
#include "xalloc.h"

#define TABLE_MAX	(64UL << 20)	/* blocks: the module keeps at most 16M a process */
#define TAG_MASK	((1ULL << PMM_ALLOC_TAG_BITS) - 1)
#define STATE_MAX_OFF	4096
#define BUFFER_MAX	(256UL << 20)
#define TABLE_BYTES_MAX	(64UL << 20)

static void table_add(struct table *t, const struct pmm_block *b, size_t n)
{
	if (t->n + n > TABLE_MAX)
		die(EXIT_FAILED, "more than %lu blocks in the table", TABLE_MAX);
	if (t->n + n > t->cap) {
		t->cap = (t->n + n) * 2;
		t->b = xrealloc(t->b, t->cap, sizeof(*t->b));
	}
	memcpy(t->b + t->n, b, n * sizeof(*b));
	t->n += n;
}

void table_read(int dev_fd, pid_t pid, struct table *t)
{
	static struct pmm_block buf[PMM_MAX_READ];
	struct pmm_read rd;

	t->n = 0;
	memset(&rd, 0, sizeof(rd));
	rd.pid = pid;
	rd.capacity = PMM_MAX_READ;
	rd.buf = (uintptr_t)buf;
	for (;;) {
		if (ioctl(dev_fd, PMM_READ_BLOCKS, &rd)) {
			int err = errno;

			if (err == ENOENT)
				die(EXIT_NOT_MONITORED, "process %d is not monitored (pmctl attach %d, or "
				    "pmctl run, in exact mode)", pid, pid);
			if (err == ESRCH)
				die(EXIT_NO_PROCESS, "no process %d", pid);
			if (err == EPERM || err == EACCES)
				die(EXIT_PERMISSION, "the module refused to read process %d's blocks "
				    "(%s)", pid, strerror(err));
			if (err == ENOTTY)
				die(EXIT_UNSUPPORTED, "the device does not answer PMM_READ_BLOCKS: not "
				    "a pmm device, or a module of another ABI");
			die(EXIT_FAILED, "PMM_READ_BLOCKS: %s", strerror(err));
		}
		if (rd.count > PMM_MAX_READ)
			die(EXIT_FAILED, "PMM_READ_BLOCKS returned %u entries", rd.count);
		table_add(t, buf, rd.count);
		if (rd.done)
			break;
	}
}

void table_load(const char *path, struct table *t)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	ssize_t got;

	t->n = 0;
	if (fd < 0 || fstat(fd, &st))
		die(EXIT_USAGE, "%s: %s", path, strerror(errno));
	if (st.st_size % sizeof(struct pmm_block) ||
	    (size_t)st.st_size / sizeof(struct pmm_block) > TABLE_MAX)
		die(EXIT_USAGE, "%s: not an array of struct pmm_block", path);
	t->cap = (size_t)st.st_size / sizeof(struct pmm_block) + 1;
	t->b = xcalloc(t->cap, sizeof(*t->b));
	got = read(fd, t->b, (size_t)st.st_size);
	if (got != st.st_size)
		die(EXIT_USAGE, "%s: short read", path);
	t->n = (size_t)st.st_size / sizeof(struct pmm_block);
	close(fd);
}

void ranges_add(struct ranges *r, uint64_t lo, uint64_t hi)
{
	if (hi <= lo)
		return;
	if (r->n == r->cap) {
		r->cap = r->cap ? r->cap * 2 : 64;
		r->r = xrealloc(r->r, r->cap, sizeof(*r->r));
	}
	r->r[r->n].lo = lo;
	r->r[r->n].hi = hi;
	r->n++;
}

static int read_u64(struct snapmem *m, uint64_t a, uint64_t *v)
{
	return snap_read(m, a, v, sizeof(*v));
}

static int read_u32(struct snapmem *m, uint64_t a, uint32_t *v)
{
	return snap_read(m, a, v, sizeof(*v));
}

void registry_read(struct snapmem *m, uint64_t registry, struct records *pending,
		   struct ranges *excluded, struct result *res)
{
	struct pmm_scanreg reg;
	struct pmm_scanreg_thread *th;
	uint32_t epoch, overflow = 0, i;
	uint64_t marker;
	uint16_t mode;

	if (snap_read(m, registry, &reg, sizeof(reg)) || reg.magic != PMM_SCANREG_MAGIC ||
	    reg.version != PMM_SCANREG_VERSION || reg.record_size != sizeof(struct pmm_record) ||
	    reg.nthreads > MAX_THREADS || reg.off_buf > STATE_MAX_OFF ||
	    reg.off_n > STATE_MAX_OFF || reg.off_gen > STATE_MAX_OFF)
		die(EXIT_NOT_EXACT, "process %d: the hook's registry is not one this pmm-scan "
		    "reads", res->pid);
	if (snap_read(m, reg.mode, &mode, sizeof(mode)) || read_u32(m, reg.epoch, &epoch))
		die(EXIT_NOT_EXACT, "process %d: the hook's registry is not readable", res->pid);
	if (mode != PMM_SCANREG_MODE_EXACT)
		die(EXIT_NOT_EXACT, "process %d left exact mode before the snapshot", res->pid);
	read_u32(m, reg.overflow, &overflow);
	res->buffers_unlisted = overflow;
	if (!read_u64(m, reg.fork_marker, &marker) && marker)
		ranges_add(excluded, marker & ~4095ULL, (marker & ~4095ULL) + 4096);
	for (i = 0; i < PMM_SCANREG_TABLES; i++)
		if (reg.tables[i].len <= TABLE_BYTES_MAX)
			ranges_add(excluded, reg.tables[i].addr, reg.tables[i].addr + reg.tables[i].len);
	th = xcalloc(reg.nthreads ? reg.nthreads : 1, sizeof(*th));
	if (snap_read(m, reg.threads, th, (size_t)reg.nthreads * sizeof(*th)))
		reg.nthreads = 0;
	for (i = 0; i < reg.nthreads; i++) {
		uint64_t buf = 0;
		uint32_t n = 0, gen = 0;
		size_t cap;

		if (!th[i].state || !th[i].buf || th[i].bytes > BUFFER_MAX ||
		    read_u64(m, th[i].state + reg.off_buf, &buf) || buf != th[i].buf)
			continue;	/* a slot being taken or given back */
		ranges_add(excluded, buf, buf + th[i].bytes);
		cap = th[i].bytes / sizeof(struct pmm_record);
		if (read_u32(m, th[i].state + reg.off_n, &n) ||
		    read_u32(m, th[i].state + reg.off_gen, &gen) || gen != epoch || n > cap || !n)
			continue;	/* records of another epoch are never sent */
		if (pending->n + n > pending->cap) {
			pending->cap = (pending->n + n) * 2;
			pending->r = xrealloc(pending->r, pending->cap, sizeof(*pending->r));
		}
		if (!snap_read(m, buf, pending->r + pending->n, (size_t)n * sizeof(struct pmm_record)))
			pending->n += n;
	}
	free(th);
}

/* -- the blocks at t1 -------------------------------------------------- */

enum { C_BLOCK, C_FREED_MEANWHILE, C_AFTER, C_GONE };

struct cand {
	uint64_t ptr, size, time_ns;
	uint32_t site;
	uint8_t cls;
};

static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->ptr != y->ptr)
		return x->ptr < y->ptr ? -1 : 1;
	return x->time_ns < y->time_ns ? -1 : x->time_ns > y->time_ns;
}


static int is_alloc(uint16_t op)
{
	return op == PMM_OP_MALLOC || op == PMM_OP_CALLOC || op == PMM_OP_REALLOC ||
	       op == PMM_OP_POSIX_MEMALIGN || op == PMM_OP_ALIGNED_ALLOC ||
	       op == PMM_OP_MEMALIGN || op == PMM_OP_VALLOC || op == PMM_OP_PVALLOC ||
	       op == PMM_OP_MMAP || op == PMM_OP_MREMAP;
}

/* The candidate freed by a free of ptr at time t (tag: its allocation's
 * stamp's low bits, -1: none): the tagged one, else the newest older. */
static struct cand *freed_by(struct cand *c, size_t n, uint64_t ptr, int64_t tag, uint64_t t)
{
	size_t lo = 0, hi = n;
	struct cand *best = NULL;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (c[mid].ptr < ptr)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < n && c[lo].ptr == ptr; lo++) {
		if (c[lo].cls == C_GONE || c[lo].cls == C_AFTER)
			continue;
		if (tag >= 0 && (int64_t)(c[lo].time_ns & TAG_MASK) == tag)
			return &c[lo];
		if (tag < 0 && c[lo].time_ns <= t)
			best = &c[lo];
	}
	return best;
}

/* [lo, hi) cut to the part mapped from lo on without a hole; 0 if none.
 * Asked in address order: the last mapping first. */
static uint64_t mapped_end(const struct snapmem *m, uint64_t lo, uint64_t hi)
{
	static const struct vma *last;
	const struct vma *v = last && lo >= last->lo && lo < last->hi ? last : vma_of(m, lo);
	uint64_t end;

	last = v;
	if (!v || v->perms[0] != 'r')
		return 0;
	end = v->hi;
	while (end < hi) {
		const struct vma *next = vma_of(m, end);

		if (!next || next->perms[0] != 'r')
			break;
		end = next->hi;
	}
	return end < hi ? end : hi;
}

/* LSD radix sort of objects by lo, 11 bits a pass, passes whose digit never varies skipped */
static void sort_objects(struct obj *o, size_t n)
{
	struct obj *tmp;
	size_t count[2048], i;
	int shift;

	for (i = 1; i < n && o[i - 1].lo <= o[i].lo; i++)
		;
	if (i >= n)
		return;
	tmp = xcalloc(n, sizeof(*tmp));
	for (shift = 0; shift < 64; shift += 11) {
		size_t sum = 0;

		memset(count, 0, sizeof(count));
		for (i = 0; i < n; i++)
			count[(o[i].lo >> shift) & 2047]++;
		if (count[(o[0].lo >> shift) & 2047] == n)
			continue;
		for (i = 0; i < 2048; i++) {
			size_t c = count[i];

			count[i] = sum;
			sum += c;
		}
		for (i = 0; i < n; i++)
			tmp[count[(o[i].lo >> shift) & 2047]++] = o[i];
		memcpy(o, tmp, n * sizeof(*o));
	}
	free(tmp);
}

/* An open-addressed set of (ptr, time) pairs: t2's blocks, for t0's difference. */
struct pairset {
	uint64_t (*k)[2];
	size_t mask;
};

static size_t pair_slot(const struct pairset *s, uint64_t ptr, uint64_t t)
{
	size_t h = (size_t)((ptr ^ (t * 0x9e3779b97f4a7c15ULL)) * 0xff51afd7ed558ccdULL >> 17);

	for (h &= s->mask; s->k[h][0] && (s->k[h][0] != ptr || s->k[h][1] != t);
	     h = (h + 1) & s->mask)
		;
	return h;
}

static void pairset_init(struct pairset *s, const struct table *t)
{
	size_t i, size = 16;

	while (size < t->n * 2)
		size *= 2;
	s->k = xcalloc(size, sizeof(*s->k));
	s->mask = size - 1;
	for (i = 0; i < t->n; i++) {
		size_t h = pair_slot(s, t->b[i].ptr, t->b[i].time_ns);

		s->k[h][0] = t->b[i].ptr;
		s->k[h][1] = t->b[i].time_ns;
	}
}

static int pairset_has(const struct pairset *s, uint64_t ptr, uint64_t t)
{
	return s->k[pair_slot(s, ptr, t)][0] == ptr;
}

/* Candidates by address, then time: an LSD radix sort of (address, index)
 * pairs (passes whose digit never varies skipped), the candidates moved
 * once, each run of one address then put in time order. */
static void sort_cands(struct cand **cp, size_t n)
{
	struct cand *c = *cp, *out;
	struct { uint64_t key, idx; } *a, *b, *t;
	size_t count[2048], i, j;
	int shift;

	for (i = 1; i < n && cand_cmp(&c[i - 1], &c[i]) <= 0; i++)
		;
	if (i >= n)
		return;
	a = xcalloc(n, sizeof(*a));
	b = xcalloc(n, sizeof(*b));
	for (i = 0; i < n; i++) {
		a[i].key = c[i].ptr;
		a[i].idx = i;
	}
	for (shift = 0; shift < 64; shift += 11) {
		size_t sum = 0;

		memset(count, 0, sizeof(count));
		for (i = 0; i < n; i++)
			count[(a[i].key >> shift) & 2047]++;
		if (count[(a[0].key >> shift) & 2047] == n)
			continue;
		for (i = 0; i < 2048; i++) {
			size_t k = count[i];

			count[i] = sum;
			sum += k;
		}
		for (i = 0; i < n; i++)
			b[count[(a[i].key >> shift) & 2047]++] = a[i];
		t = a;
		a = b;
		b = t;
	}
	out = xcalloc(n, sizeof(*out));
	for (i = 0; i < n; i++)
		out[i] = c[a[i].idx];
	free(a);
	free(b);
	free(c);
	for (i = 1; i < n; i++) {	/* runs of one address: few and short */
		struct cand x = out[i];

		for (j = i; j > 0 && out[j - 1].ptr == x.ptr && out[j - 1].time_ns > x.time_ns; j--)
			out[j] = out[j - 1];
		out[j] = x;
	}
	*cp = out;
}

struct obj *objects_build(const struct table *t0, const struct table *t2,
			  const struct records *pending, uint64_t t1_ns, struct snapmem *m,
			  size_t *n_out, struct result *res)
{
	size_t na = t0 == t2 ? 0 : t0->n, nb = t2->n, i, j, nc = 0, no = 0;
	struct cand *c = xcalloc(na + nb + pending->n + 1, sizeof(*c));
	struct pairset in_t2 = { 0 };
	struct obj *o;

	for (i = 0; i < nb; i++) {
		const struct pmm_block *b = &t2->b[i];

		c[nc] = (struct cand){ b->ptr, b->size, b->time_ns, b->site,
				       b->time_ns <= t1_ns ? C_BLOCK : C_AFTER };
		res->after_snapshot += c[nc].cls == C_AFTER;
		nc++;
	}
	res->table.n = nc - res->after_snapshot;
	if (na || pending->n)
		pairset_init(&in_t2, t2);
	/* t0's blocks that t2 no longer has */
	for (i = 0; i < na; i++) {
		const struct pmm_block *a = &t0->b[i];

		if (a->time_ns <= t1_ns && !pairset_has(&in_t2, a->ptr, a->time_ns))
			c[nc++] = (struct cand){ a->ptr, a->size, a->time_ns, a->site,
						 C_FREED_MEANWHILE };
	}
	/* the allocations not sent at t1 (unless sent since: t2 has them) */
	for (i = 0; i < pending->n; i++) {
		const struct pmm_record *r = &pending->r[i];

		if (!is_alloc(r->op) || !r->ptr || r->time_ns > t1_ns ||
		    (r->flags & (PMM_REC_F_FAILED | PMM_REC_F_FREED)) ||
		    pairset_has(&in_t2, r->ptr, r->time_ns))
			continue;
		c[nc++] = (struct cand){ r->ptr, r->size, r->time_ns, r->site, C_BLOCK };
	}
	free(in_t2.k);
	sort_cands(&c, nc);
	for (i = j = 0; i < nc; i++) {
		if (j && c[j - 1].ptr == c[i].ptr && c[j - 1].time_ns == c[i].time_ns) {
			if (c[i].cls == C_BLOCK)
				c[j - 1].cls = C_BLOCK;
			continue;
		}
		c[j++] = c[i];
	}
	nc = j;
	for (i = 0; i < pending->n; i++) {
		const struct pmm_record *r = &pending->r[i];
		uint64_t ptr = 0;
		int64_t tag = (r->flags & PMM_REC_F_TAGGED) ? (int64_t)r->alloc_tag : -1;
		struct cand *gone;

		if (r->flags & (PMM_REC_F_FAILED | PMM_REC_F_OLDER) || r->time_ns > t1_ns)
			continue;
		if (r->op == PMM_OP_FREE || r->op == PMM_OP_MUNMAP)
			ptr = r->ptr;
		else if ((r->op == PMM_OP_REALLOC || r->op == PMM_OP_MREMAP) &&
			 !(r->flags & PMM_REC_F_PREV_FREED))
			ptr = r->prev_ptr;
		if (!ptr)
			continue;
		gone = freed_by(c, nc, ptr, tag, r->time_ns);
		if (gone) {
			gone->cls = C_GONE;
			res->pending_frees++;
		}
	}
	for (i = 0; i < pending->n; i++)
		res->pending_allocs += is_alloc(pending->r[i].op) && pending->r[i].ptr &&
				       !(pending->r[i].flags & (PMM_REC_F_FAILED | PMM_REC_F_FREED));
	o = xcalloc(nc + 1, sizeof(*o));
	for (i = 0; i < nc; i++) {
		uint64_t lo = c[i].ptr, hi = lo + (c[i].size ? c[i].size : 1), end;

		if (c[i].cls == C_GONE)
			continue;
		if (hi < lo)
			hi = UINT64_MAX;
		end = mapped_end(m, lo, hi);
		if (!end) {
			res->unmapped += c[i].cls == C_BLOCK;
			continue;
		}
		res->freed_meanwhile += c[i].cls == C_FREED_MEANWHILE;
		o[no++] = (struct obj){ .lo = lo, .hi = end, .time_ns = c[i].time_ns,
					.size = c[i].size, .site = c[i].site,
					.kind = c[i].cls == C_BLOCK ? OBJ_BLOCK : OBJ_UNKNOWN };
	}
	free(c);
	*n_out = objects_normalize(o, no, res);
	return o;
}

size_t objects_normalize(struct obj *o, size_t n, struct result *res)
{
	size_t i, j;

	sort_objects(o, n);
	for (i = j = 0; i < n; i++) {
		struct obj *last = j ? &o[j - 1] : NULL;

		if (!last || o[i].lo >= last->hi) {
			o[j++] = o[i];
			continue;
		}
		if (last->kind == OBJ_UNKNOWN && o[i].kind == OBJ_UNKNOWN) {
			if (o[i].hi > last->hi)
				last->hi = o[i].hi;
		} else if (last->kind == OBJ_BLOCK && o[i].kind == OBJ_BLOCK) {
			res->overlapping++;
			if (o[i].time_ns > last->time_ns)
				*last = o[i];
		} else if (o[i].kind == OBJ_BLOCK) {
			*last = o[i];	/* the unknown under it goes */
		}
	}
	return j;
}
