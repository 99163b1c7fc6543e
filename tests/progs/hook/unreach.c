// SPDX-License-Identifier: GPL-2.0
/*
 * A server-like program for `pmctl unreachable` (tests/guest/test_unreachable.py)
 * and valgrind's leak check (tests/host/test_unreachable.py): it reads
 * commands on stdin, answers "ok CMD N" to each, and leaks only where a
 * line is marked LOST (definitely or indirectly, as valgrind calls it).
 *
 *   req N     handles N requests; each drops its struct (and its body with it)
 *   list N    builds a list of N nodes, then overwrites its head
 *   cycle N   N pairs of blocks that point to each other, dropped
 *   cache N   adds N entries to a cache that stays referenced (a global)
 *   saw N     allocates N blocks, then frees them all (a sawtooth)
 *   churn N   N rounds of temporary blocks, freed at once
 *   slot N    N blocks kept in a table of slots made at start (the only
 *             reference to them: after an attach, from a block older than it)
 *   quit      frees the cache and returns from main
 *
 * With UNREACH_THREAD=1 a thread of its own reads the commands and the main
 * thread leaves (pthread_exit): its process runs on, its leader a zombie.
 *
 * Each command runs in a function of its own (noinline), so no pointer of
 * it stays in main's frame, and scrub() then clears the stack below main:
 * the frames of stdio's next call would otherwise keep stale pointers of
 * the command's (a conservative scan, valgrind's at any time too, counts
 * them); use() keeps the compiler from deleting a block whose contents
 * nobody reads.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct request {
	char *body;
	int id;
	long pad[5];
};

struct node {
	struct node *next;
	long value;
};

struct pair {
	struct pair *other;
	long pad[9];
};

struct entry {
	struct entry *next;
	char key[24];
	char *value;
};

#define BUCKETS 64
static struct entry *g_cache[BUCKETS];
static void *g_saw[100000];
#define SLOTS 4096
static void **g_slots;

__attribute__((noinline)) static void use(void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

__attribute__((noinline)) static void scrub(void)
{
	char dead[32768];

	explicit_bzero(dead, sizeof(dead));	/* a store the compiler keeps */
}

__attribute__((noinline)) static void handle_request(int id)
{
	struct request *r = malloc(sizeof(*r));	/* LOST: definite */
	char *scratch = malloc(64);

	r->body = malloc(128);	/* LOST: indirect */
	r->id = id;
	snprintf(r->body, 128, "request %d body", id);
	snprintf(scratch, 64, "scratch %d", id);
	use(r);
	use(scratch);
	free(scratch);
}

__attribute__((noinline)) static void build_list(int n)
{
	struct node *head = NULL;
	int i;

	for (i = 0; i < n; i++) {
		struct node *x = malloc(sizeof(*x));	/* LOST: definite, indirect */

		x->next = head;
		x->value = i;
		head = x;
	}
	use(head);
	head = NULL;	/* the head overwritten: the whole list is lost */
	use(head);
}

/* valgrind's cliques: of two blocks that point to each other the first in
 * address order leads (a, allocated first from a size nothing else frees) */
__attribute__((noinline)) static void make_cycle(void)
{
	struct pair *a = malloc(sizeof(*a));	/* LOST: definite */
	struct pair *b = malloc(sizeof(*b));	/* LOST: indirect */

	a->other = b;
	b->other = a;
	use(a);
}

__attribute__((noinline)) static void cache_add(int i)
{
	struct entry *e = malloc(sizeof(*e));
	unsigned int h = (unsigned int)i * 2654435761u % BUCKETS;

	snprintf(e->key, sizeof(e->key), "key-%d", i);
	e->value = strdup(e->key);
	e->next = g_cache[h];
	g_cache[h] = e;
}

__attribute__((noinline)) static void sawtooth(int n)
{
	int i;

	for (i = 0; i < n && i < 100000; i++)
		g_saw[i] = malloc(32 + i % 200);
	for (i = 0; i < n && i < 100000; i++) {
		free(g_saw[i]);
		g_saw[i] = NULL;
	}
}

__attribute__((noinline)) static void churn(int n)
{
	void *p[32];
	int i, k;

	for (i = 0; i < n; i++) {
		for (k = 0; k < 32; k++) {
			p[k] = malloc(16 + (size_t)k * 24);
			use(p[k]);
		}
		for (k = 0; k < 32; k++)
			free(p[k]);
	}
	memset(p, 0, sizeof(p));
	use(p);
}

__attribute__((noinline)) static void fill_slots(int n)
{
	int i;

	for (i = 0; i < n && i < SLOTS; i++) {
		free(g_slots[i]);
		g_slots[i] = malloc(40);
	}
}

__attribute__((noinline)) static void cache_free(void)
{
	int h;

	for (h = 0; h < BUCKETS; h++) {
		while (g_cache[h]) {
			struct entry *e = g_cache[h];

			g_cache[h] = e->next;
			free(e->value);
			free(e);
		}
	}
}

static void *serve(void *arg);

int main(void)
{
	const char *threaded = getenv("UNREACH_THREAD");
	pthread_t t;

	if (threaded && !strcmp(threaded, "1")) {
		if (pthread_create(&t, NULL, serve, NULL))
			return 1;
		pthread_exit(NULL);
	}
	serve(NULL);
	return 0;
}

static void *serve(void *arg)
{
	char line[128], cmd[16];
	int n, i;

	setvbuf(stdout, NULL, _IOLBF, 0);
	g_slots = calloc(SLOTS, sizeof(*g_slots));
	if (!g_slots)
		exit(1);
	while (fgets(line, sizeof(line), stdin)) {
		n = 0;
		if (sscanf(line, "%15s %d", cmd, &n) < 1)
			continue;
		if (!strcmp(cmd, "req"))
			for (i = 0; i < n; i++)
				handle_request(i);
		else if (!strcmp(cmd, "list"))
			build_list(n);
		else if (!strcmp(cmd, "cycle"))
			for (i = 0; i < n; i++)
				make_cycle();
		else if (!strcmp(cmd, "cache"))
			for (i = 0; i < n; i++)
				cache_add(i);
		else if (!strcmp(cmd, "saw"))
			sawtooth(n);
		else if (!strcmp(cmd, "churn"))
			churn(n);
		else if (!strcmp(cmd, "slot"))
			fill_slots(n);
		else if (!strcmp(cmd, "quit"))
			break;
		scrub();
		printf("ok %s %d\n", cmd, n);
	}
	cache_free();
	for (i = 0; i < SLOTS; i++)
		free(g_slots[i]);
	free(g_slots);
	printf("bye\n");
	exit(0);
	return arg;
}
