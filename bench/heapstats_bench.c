// SPDX-License-Identifier: GPL-2.0
/*
 * What the hook's heap report costs (hooklib/heap.c): glibc's mallinfo2(),
 * or jemalloc's "epoch" and five stats.* when it is the allocator (run with
 * LD_PRELOAD=libjemalloc.so.2), on a heap of N live blocks of 16..1040
 * bytes with every other one freed (N/2 free chunks for mallinfo2 to walk),
 * made by T threads (T arenas for glibc).
 *   heapstats_bench N T REPS
 * Prints "ALLOCATOR N T free_chunks median_ns max_ns" over REPS reports.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int mallctl(const char *name, void *old, size_t *oldlen, void *new, size_t newlen)
	__attribute__((weak));

static long g_n;
static int g_threads;
static pthread_barrier_t g_built;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Each thread's share of the heap, its odd blocks freed; kept until exit. */
static void *build(void *arg)
{
	long n = g_n / g_threads, seed = (long)(intptr_t)arg;
	void **b = malloc(n * sizeof(*b));

	for (long i = 0; b && i < n; i++)
		b[i] = malloc(16 + (size_t)((i * 7919 + seed) % 1025));
	for (long i = 1; b && i < n; i += 2)
		free(b[i]);
	pthread_barrier_wait(&g_built);
	pthread_barrier_wait(&g_built);	/* until the measurement is done */
	return NULL;
}

static void report(void)
{
	if (mallctl) {
		uint64_t epoch = 1;
		size_t v, len = sizeof(epoch);
		static const char *const names[] = { "stats.allocated", "stats.active",
			"stats.resident", "stats.mapped", "stats.retained" };

		mallctl("epoch", &epoch, &len, &epoch, len);
		for (int i = 0; i < 5; i++) {
			len = sizeof(v);
			mallctl(names[i], &v, &len, NULL, 0);
		}
	} else {
		struct mallinfo2 mi = mallinfo2();

		__asm__ volatile("" : : "r"(&mi) : "memory");
	}
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int reps = argc > 3 ? atoi(argv[3]) : 21;
	pthread_t *th;
	uint64_t *ns;

	g_n = argc > 1 ? atol(argv[1]) : 1000000;
	g_threads = argc > 2 ? atoi(argv[2]) : 1;
	if (g_n < 2 || g_threads < 1 || reps < 1)
		return 2;
	th = calloc(g_threads, sizeof(*th));
	ns = calloc(reps, sizeof(*ns));
	if (!th || !ns)
		return 2;
	pthread_barrier_init(&g_built, NULL, g_threads + 1);
	for (int i = 0; i < g_threads; i++)
		if (pthread_create(&th[i], NULL, build, (void *)(intptr_t)i))
			return 2;
	pthread_barrier_wait(&g_built);
	for (int r = 0; r < reps; r++) {
		uint64_t t0 = now_ns();

		report();
		ns[r] = now_ns() - t0;
	}
	pthread_barrier_wait(&g_built);
	for (int i = 0; i < g_threads; i++)
		pthread_join(th[i], NULL);
	qsort(ns, reps, sizeof(*ns), cmp);
	printf("%s %ld %d %ld %llu %llu\n", mallctl ? "jemalloc" : "glibc", g_n, g_threads,
	       g_n / g_threads / 2 * g_threads, (unsigned long long)ns[reps / 2],
	       (unsigned long long)ns[reps - 1]);
	return 0;
}
