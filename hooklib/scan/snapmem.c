// SPDX-License-Identifier: GPL-2.0
/*
 * pmm-scan: the snapshot's maps and memory. The copy never runs, so its
 * /proc/PID/smaps and /proc/PID/mem hold still while we read them; the
 * target owns every byte read here, so each line and address is bounded.
 *
 * Objects (blocks, chunks) are read through windows of 256 KiB kept in
 * memory up to a cap (--memory): a heap no larger than the cap is read
 * once, in big sequential reads (/proc/PID/mem gives several GB/s that
 * way, against about a microsecond per small read), whatever order the
 * mark visits its blocks in; past the cap the least recently used window
 * goes. Roots are read once each, in pieces, around the windows, and only
 * their pages that hold anything: a mapping with no resident or swapped
 * page is skipped, a large one partly resident is read where its page map
 * says so.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../inject/tracee.h"
#include "exit_codes.h"
#include "snapmem.h"
#include "xalloc.h"

#define WIN_SHIFT	18
#define WIN		(1UL << WIN_SHIFT)
#define STREAM		(1UL << 20)
#define PAGE		4096UL
#define SHARED_MAX	(256UL << 20)	/* a shared mapping read whole up to this */

struct window {
	uint64_t key;		/* address >> WIN_SHIFT */
	uint8_t *buf;
	int32_t next;		/* in its bucket, -1: last */
	uint8_t ref;
};

static int vma_cmp(const void *a, const void *b)
{
	const struct vma *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static uint64_t kb_field(const char *line, const char *key)
{
	size_t n = strlen(key);
	unsigned long long v;

	if (strncmp(line, key, n) || sscanf(line + n, " %llu kB", &v) != 1 || v > (1ULL << 44))
		return 0;
	return (uint64_t)v << 10;
}

int snapmem_maps(struct snapmem *m, pid_t child)
{
	char path[64], line[PATH_MAX + 128];
	struct vma *v = NULL;
	size_t cap = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps", child);
	f = fopen(path, "re");
	if (!f)
		return -1;
	m->nvmas = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, off, ino;
		unsigned int major, minor;
		char perms[8], name[PATH_MAX];

		if (strchr(line, '\n') == NULL && !feof(f)) {
			int c;

			while ((c = fgetc(f)) != EOF && c != '\n')
				;	/* the rest of an overlong line */
		}
		name[0] = '\0';
		if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu %4095[^\n]", &lo, &hi, perms, &off,
			   &major, &minor, &ino, name) >= 7 && strlen(perms) == 4 && hi > lo) {
			if (m->nvmas == cap) {
				cap = cap ? cap * 2 : 256;
				if (cap > (1U << 20)) {
					errno = E2BIG;
					break;
				}
				m->vmas = xrealloc(m->vmas, cap, sizeof(*m->vmas));
			}
			v = &m->vmas[m->nvmas++];
			memset(v, 0, sizeof(*v));
			v->lo = lo;
			v->hi = hi;
			v->offset = off;
			memcpy(v->perms, perms, 4);
			v->dev = (uint64_t)major << 32 | minor;
			v->ino = ino;
			v->anon = ino == 0;
			v->named = name[0] == '[';
			v->is_heap = !strcmp(name, "[heap]");
			v->is_stack = !strcmp(name, "[stack]");
			v->shared = perms[3] == 's';
			v->use = perms[0] == 'r' && perms[1] == 'w' && !(v->named && !v->is_heap &&
				 !v->is_stack) ? USE_ROOT : USE_NONE;
			continue;
		}
		if (!v)
			continue;
		if (!strncmp(line, "Rss:", 4))
			v->resident += kb_field(line, "Rss:");
		else if (!strncmp(line, "Swap:", 5))
			v->resident += kb_field(line, "Swap:");
		else if (!strncmp(line, "VmFlags:", 8)) {
			v->wiped = strstr(line, " wf") != NULL;
			v->io = strstr(line, " io") != NULL || strstr(line, " pf") != NULL;
			if (v->io)
				v->use = USE_NONE;
		}
	}
	fclose(f);
	if (m->nvmas == 0) {
		errno = ESRCH;
		return -1;
	}
	qsort(m->vmas, m->nvmas, sizeof(*m->vmas), vma_cmp);
	return 0;
}

struct vma *vma_of(const struct snapmem *m, uint64_t addr)
{
	size_t lo = 0, hi = m->nvmas;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (addr < m->vmas[mid].lo)
			hi = mid;
		else if (addr >= m->vmas[mid].hi)
			lo = mid + 1;
		else
			return &m->vmas[mid];
	}
	return NULL;
}

void snapmem_init_cache(struct snapmem *m, size_t cap)
{
	size_t i;

	m->cap = cap < WIN ? WIN : cap;
	m->nwin_max = m->cap >> WIN_SHIFT;
	m->nwin = 0;
	m->win = xcalloc(m->nwin_max, sizeof(*m->win));
	for (m->nbucket = 64; m->nbucket < m->nwin_max * 2; m->nbucket *= 2)
		;
	m->bucket = xcalloc(m->nbucket, sizeof(*m->bucket));
	for (i = 0; i < m->nbucket; i++)
		m->bucket[i] = -1;
}

static size_t bucket_of(const struct snapmem *m, uint64_t key)
{
	return (size_t)(key * 0x9e3779b97f4a7c15ULL >> 20) & (m->nbucket - 1);
}

/* len bytes at addr: read, the part that could not be zeroed. */
void snap_pread(struct snapmem *m, uint64_t addr, uint8_t *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t r = pread(m->fd, buf + got, len - got, (off_t)(addr + got));

		m->reads++;
		if (r <= 0) {
			/* a page that cannot be read (a hole, a device): zeros */
			size_t skip = PAGE - ((addr + got) & (PAGE - 1));

			if (skip > len - got)
				skip = len - got;
			memset(buf + got, 0, skip);
			got += skip;
			continue;
		}
		got += (size_t)r;
		m->bytes_read += (uint64_t)r;
	}
}

/* The window of key, read now if it is not kept: every mapping's part of it. */
static struct window *window_get(struct snapmem *m, uint64_t key)
{
	size_t b = bucket_of(m, key);
	struct window *w;
	int32_t i, *link;
	uint64_t lo = key << WIN_SHIFT, hi = lo + WIN, a;

	for (i = m->bucket[b]; i >= 0; i = m->win[i].next)
		if (m->win[i].key == key) {
			m->win[i].ref = 1;
			return &m->win[i];
		}
	if (m->nwin < m->nwin_max) {
		i = (int32_t)m->nwin++;
		m->win[i].buf = malloc(WIN);
		if (!m->win[i].buf)
			die(EXIT_FAILED, "out of memory for the snapshot's windows");
	} else {
		/* the clock: the first not used since the hand last passed */
		for (;;) {
			w = &m->win[m->hand];
			m->hand = (m->hand + 1) % m->nwin_max;
			if (!w->ref)
				break;
			w->ref = 0;
		}
		i = (int32_t)(w - m->win);
		for (link = &m->bucket[bucket_of(m, w->key)]; *link != i; link = &m->win[*link].next)
			;
		*link = w->next;
		m->evictions++;
		if (m->last == w)
			m->last = NULL;
	}
	w = &m->win[i];
	w->key = key;
	w->ref = 1;
	w->next = m->bucket[b];
	m->bucket[b] = i;
	/* each mapping's part of the window; holes between them stay unread */
	for (a = lo; a < hi;) {
		struct vma *v = vma_of(m, a);
		uint64_t end;

		if (!v) {
			end = (a | (PAGE - 1)) + 1;
			memset(w->buf + (a - lo), 0, end - a);
			a = end;
			continue;
		}
		end = v->hi < hi ? v->hi : hi;
		if (v->perms[0] == 'r' && !v->io)
			snap_pread(m, a, w->buf + (a - lo), end - a);
		else
			memset(w->buf + (a - lo), 0, end - a);
		a = end;
	}
	return w;
}

const uint8_t *snap_at(struct snapmem *m, uint64_t addr, uint64_t *avail)
{
	struct vma *v;
	struct window *w;
	uint64_t end;

	/* the last window asked for: most calls are for the next bytes */
	if (m->last && addr >> WIN_SHIFT == m->last->key && addr >= m->last_lo &&
	    addr < m->last_hi) {
		m->last->ref = 1;
		*avail = m->last_hi - addr;
		return m->last->buf + (addr & (WIN - 1));
	}
	v = vma_of(m, addr);

	if (!v || v->io || v->perms[0] != 'r') {
		*avail = PAGE - (addr & (PAGE - 1));
		return NULL;
	}
	w = window_get(m, addr >> WIN_SHIFT);
	end = ((addr >> WIN_SHIFT) + 1) << WIN_SHIFT;
	if (v->hi < end)
		end = v->hi;
	*avail = end - addr;
	m->last = w;
	m->last_lo = v->lo > (addr & ~(WIN - 1)) ? v->lo : addr & ~(WIN - 1);
	m->last_hi = end;
	return w->buf + (addr & (WIN - 1));
}

/* The window of addr if it is kept, else NULL; nothing is read. */
static struct window *window_kept(struct snapmem *m, uint64_t addr)
{
	uint64_t key = addr >> WIN_SHIFT;
	int32_t i;

	for (i = m->bucket[bucket_of(m, key)]; i >= 0; i = m->win[i].next)
		if (m->win[i].key == key)
			return &m->win[i];
	return NULL;
}

int snap_read(struct snapmem *m, uint64_t addr, void *buf, size_t len)
{
	uint8_t *out = buf;
	struct vma *v;

	/* a small read where no window is kept: read alone, no window filled */
	if (len <= 4096 && (addr & (WIN - 1)) + len <= WIN && !window_kept(m, addr)) {
		v = vma_of(m, addr);
		if (!v || v->io || v->perms[0] != 'r' || addr + len > v->hi)
			return -1;
		snap_pread(m, addr, buf, len);
		return 0;
	}

	while (len) {
		uint64_t avail;
		const uint8_t *p = snap_at(m, addr, &avail);

		if (!p)
			return -1;
		if (avail > len)
			avail = len;
		memcpy(out, p, avail);
		out += avail;
		addr += avail;
		len -= avail;
	}
	return 0;
}

/* fn over [lo, hi), read in STREAM pieces */
static void stream_all(struct snapmem *m, uint64_t lo, uint64_t hi,
		       void (*fn)(void *, uint64_t, const uint8_t *, size_t), void *arg)
{
	static uint8_t *buf;

	if (!buf)
		buf = xcalloc(1, STREAM);
	while (lo < hi) {
		size_t len = hi - lo < STREAM ? hi - lo : STREAM;

		snap_pread(m, lo, buf, len);
		fn(arg, lo, buf, len);
		lo += len;
	}
}

/* snap_stream within one mapping */
static void stream_vma(struct snapmem *m, struct vma *v, uint64_t lo, uint64_t hi,
		       void (*fn)(void *, uint64_t, const uint8_t *, size_t), void *arg)
{
	static uint64_t pm[4096];

	if (v->io || v->perms[0] != 'r' || lo >= hi)
		return;
	if (v->shared) {
		/* fork copies no page table of a shared mapping: no page map to go by */
		if (v->hi - v->lo <= SHARED_MAX)
			stream_all(m, lo, hi, fn, arg);
		return;
	}
	if (!v->resident)
		return;
	if (m->pagemap < 0 || v->resident >= v->hi - v->lo || hi - lo <= STREAM) {
		stream_all(m, lo, hi, fn, arg);
		return;
	}
	lo &= ~(PAGE - 1);
	while (lo < hi) {
		size_t n = (hi - lo + PAGE - 1) / PAGE, i, run;
		ssize_t got;

		if (n > sizeof(pm) / sizeof(pm[0]))
			n = sizeof(pm) / sizeof(pm[0]);
		got = pread(m->pagemap, pm, n * 8, (off_t)(lo / PAGE * 8));
		if (got < 8) {
			stream_all(m, lo, hi, fn, arg);
			return;
		}
		n = (size_t)got / 8;
		for (i = 0; i < n; i += run) {
			int present = (pm[i] >> 62) != 0;	/* bit 63 present, 62 swapped */

			for (run = 1; i + run < n && ((pm[i + run] >> 62) != 0) == present; run++)
				;
			if (present) {
				uint64_t a = lo + i * PAGE, e = a + run * PAGE;

				stream_all(m, a, e < hi ? e : hi, fn, arg);
			}
		}
		lo += n * PAGE;
	}
}

void snap_stream(struct snapmem *m, uint64_t lo, uint64_t hi,
		 void (*fn)(void *arg, uint64_t addr, const uint8_t *p, size_t len), void *arg)
{
	while (lo < hi) {
		struct vma *v = vma_of(m, lo);
		size_t a = 0, b = m->nvmas;

		if (v) {
			stream_vma(m, v, lo, hi < v->hi ? hi : v->hi, fn, arg);
			lo = v->hi;
			continue;
		}
		while (a < b) {		/* in a hole: on to the next mapping */
			size_t mid = a + (b - a) / 2;

			if (m->vmas[mid].lo <= lo)
				a = mid + 1;
			else
				b = mid;
		}
		if (a == m->nvmas)
			return;
		lo = m->vmas[a].lo;
	}
}
