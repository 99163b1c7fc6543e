// SPDX-License-Identifier: GPL-2.0
/*
 * pmm-scan's output: one JSON document on stdout, what pmctl reads
 * (src/pmm/unreachable.py): the stop, the table, the heap, the counts by
 * category, and per site the lost blocks (definitely and indirectly)
 * with one example each, definitely lost first: its address, size and
 * first 32 bytes. Keys are stable; numbers are integers; bytes as hex.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "result.h"
#include "snapmem.h"
#include "xalloc.h"

#define EXAMPLE_BYTES	32

struct site_sum {
	uint32_t site;
	struct counts definite, indirect;
	long example;		/* the oldest definitely lost block, else indirectly */
};

static int lost(const struct obj *o)
{
	return o->kind == OBJ_BLOCK && (o->state == ST_DEFINITE || o->state == ST_INDIRECT);
}

static int by_site(const void *a, const void *b, void *arg)
{
	const struct obj *o = arg;
	const uint32_t *x = a, *y = b;

	if (o[*x].site != o[*y].site)
		return o[*x].site < o[*y].site ? -1 : 1;
	return *x < *y ? -1 : *x > *y;
}

static int worst_first(const void *a, const void *b)
{
	const struct site_sum *x = a, *y = b;

	if (x->definite.bytes != y->definite.bytes)
		return x->definite.bytes > y->definite.bytes ? -1 : 1;
	if (x->indirect.bytes != y->indirect.bytes)
		return x->indirect.bytes > y->indirect.bytes ? -1 : 1;
	if (x->definite.n + x->indirect.n != y->definite.n + y->indirect.n)
		return x->definite.n + x->indirect.n > y->definite.n + y->indirect.n ? -1 : 1;
	return x->site < y->site ? -1 : x->site > y->site;
}

static void counts(const char *key, const struct counts *c, const char *sep)
{
	printf("\"%s\": {\"blocks\": %llu, \"bytes\": %llu}%s", key, (unsigned long long)c->n,
	       (unsigned long long)c->bytes, sep);
}

void report(const struct result *r, const struct obj *o, size_t n, struct snapmem *m)
{
	uint32_t *idx = xcalloc(n + 1, sizeof(*idx));
	struct site_sum *s = NULL;
	size_t nl = 0, ns = 0, i;

	for (i = 0; i < n; i++)
		if (lost(&o[i]))
			idx[nl++] = (uint32_t)i;
	if (nl)
		qsort_r(idx, nl, sizeof(*idx), by_site, (void *)o);
	for (i = 0; i < nl; i++) {
		const struct obj *b = &o[idx[i]];
		struct site_sum *cur;
		int def = b->state == ST_DEFINITE;

		if (!ns || s[ns - 1].site != b->site) {
			s = xrealloc(s, ns + 1, sizeof(*s));
			memset(&s[ns], 0, sizeof(*s));
			s[ns].site = b->site;
			s[ns].example = -1;
			ns++;
		}
		cur = &s[ns - 1];
		if (def) {
			cur->definite.n++;
			cur->definite.bytes += b->size;
		} else {
			cur->indirect.n++;
			cur->indirect.bytes += b->size;
		}
		if (cur->example < 0 ||
		    (def && o[cur->example].state != ST_DEFINITE) ||
		    (def == (o[cur->example].state == ST_DEFINITE) &&
		     b->time_ns < o[cur->example].time_ns))
			cur->example = idx[i];
	}
	if (ns)
		qsort(s, ns, sizeof(*s), worst_first);
	printf("{\"version\": 1, \"pid\": %d, \"snapshot_ns\": %llu, \"age_ns\": %llu,\n",
	       r->pid, (unsigned long long)r->snapshot_ns, (unsigned long long)r->age_ns);
	printf(" \"stop\": {\"threads\": %d, \"longest_us\": %llu, \"all_stopped_us\": %llu, "
	       "\"clone_us\": %llu},\n", r->threads, (unsigned long long)r->longest_stop_us,
	       (unsigned long long)r->stop_all_us, (unsigned long long)r->fork_us);
	printf(" \"scan\": {\"us\": %llu, \"table_us\": %llu, \"walk_us\": %llu, "
	       "\"graph_us\": %llu, \"mark_us\": %llu, \"roots_bytes\": %llu, "
	       "\"objects_bytes\": %llu, \"read_bytes\": %llu},\n",
	       (unsigned long long)r->scan_us, (unsigned long long)r->table_us,
	       (unsigned long long)r->walk_us, (unsigned long long)r->graph_us,
	       (unsigned long long)r->mark_us, (unsigned long long)r->roots_bytes,
	       (unsigned long long)r->objects_bytes_scanned, (unsigned long long)r->read_bytes);
	printf(" \"table\": {\"blocks\": %llu, \"bytes\": %llu, \"pending_allocs\": %llu, "
	       "\"pending_frees\": %llu, \"after_snapshot\": %llu, \"freed_meanwhile\": %llu, "
	       "\"unmapped\": %llu, \"freed_in_heap\": %llu, \"demoted\": %llu, "
	       "\"overlapping\": %llu, \"buffers_unlisted\": %llu},\n",
	       (unsigned long long)r->table.n, (unsigned long long)r->table.bytes,
	       (unsigned long long)r->pending_allocs, (unsigned long long)r->pending_frees,
	       (unsigned long long)r->after_snapshot, (unsigned long long)r->freed_meanwhile,
	       (unsigned long long)r->unmapped, (unsigned long long)r->freed_in_heap,
	       (unsigned long long)r->demoted, (unsigned long long)r->overlapping,
	       (unsigned long long)r->buffers_unlisted);
	printf(" \"heap\": {\"allocator\": \"%s\", \"walked\": %llu, \"unwalkable\": %llu, "
	       "\"free_chunks\": %llu, \"cached_chunks\": %llu, \"uncopied_bytes\": %llu},\n",
	       r->allocator ? r->allocator : "unknown", (unsigned long long)r->heaps_walked,
	       (unsigned long long)r->heaps_unwalkable, (unsigned long long)r->free_chunks,
	       (unsigned long long)r->cached_chunks, (unsigned long long)r->uncopied_bytes);
	printf(" ");
	counts("reachable", &r->reachable, ", ");
	counts("via_unknown", &r->via_unknown, ", ");
	counts("young", &r->young, ", ");
	counts("held_by_young", &r->held_by_young, ",\n ");
	counts("definite", &r->definite, ", ");
	counts("indirect", &r->indirect, ", ");
	counts("unknown", &r->unknown, ",\n");
	printf(" \"sites\": [");
	for (i = 0; i < ns; i++) {
		const struct obj *e = &o[s[i].example];
		uint8_t bytes[EXAMPLE_BYTES];
		size_t len = e->size < EXAMPLE_BYTES ? e->size : EXAMPLE_BYTES, k;

		if (snap_read(m, e->lo, bytes, len))
			len = 0;
		printf("%s\n  {\"site\": %u, ", i ? "," : "", s[i].site);
		counts("definite", &s[i].definite, ", ");
		counts("indirect", &s[i].indirect, ", ");
		printf("\"example\": {\"ptr\": %llu, \"size\": %llu, \"time_ns\": %llu, "
		       "\"definite\": %s, \"bytes\": \"", (unsigned long long)e->lo,
		       (unsigned long long)e->size, (unsigned long long)e->time_ns,
		       e->state == ST_DEFINITE ? "true" : "false");
		for (k = 0; k < len; k++)
			printf("%02x", bytes[k]);
		printf("\"}}");
	}
	printf("%s]}\n", ns ? "\n " : "");
	fflush(stdout);
	free(idx);
	free(s);
}
