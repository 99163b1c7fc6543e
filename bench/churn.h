/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The allocation churn of malloc_bench and attach_bench: each thread keeps
 * a window of live blocks and, for a random one, frees it and allocates a
 * new one of 16..527 bytes (first bytes written). Mixed (attach_bench):
 * also 1 iteration in 8 a realloc instead, and 1 size in 32 1024..8191.
 * churn() is inlined with mixed a constant, so malloc_bench's loop is the
 * plain one, instruction for instruction.
 */
#ifndef PMM_BENCH_CHURN_H
#define PMM_BENCH_CHURN_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long iters = 2000000;
static int window = 4096;

static inline __attribute__((always_inline)) void *churn(void *arg, int mixed)
{
	uint64_t x = 88172645463325252ULL ^ (uintptr_t)arg;
	void **live = calloc((size_t)window, sizeof(void *));
	unsigned long sum = 0;

	if (!live)
		abort();
	for (long i = 0; i < iters; i++) {
		unsigned int idx;
		size_t sz;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		idx = (unsigned int)(x % (unsigned int)window);
		sz = 16 + (size_t)((x >> 32) % 512);
		if (mixed && ((x >> 48) & 31) == 0)
			sz = 1024 + (size_t)((x >> 20) % 7168);
		if (mixed && ((x >> 56) & 7) == 0) {
			void *p = realloc(live[idx], sz);

			if (!p)
				abort();
			live[idx] = p;
		} else {
			free(live[idx]);
			live[idx] = malloc(sz);
			if (mixed && !live[idx])
				abort();
		}
		memset(live[idx], (int)i, 16);
		sum += ((unsigned char *)live[idx])[1];
	}
	for (int i = 0; i < window; i++)
		free(live[i]);
	free(live);
	return (void *)(uintptr_t)sum;
}

/* fn in threads threads, started and joined; the wall time, ms. */
static double churn_threads(int threads, void *(*fn)(void *))
{
	pthread_t tid[64];
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < threads; i++)
		pthread_create(&tid[i], NULL, fn, (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	return (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
}

/* -t threads -n iterations -w window; exits 2 on a bad one. */
static int churn_args(int argc, char **argv, const char *name)
{
	int threads = 1, opt;

	while ((opt = getopt(argc, argv, "t:n:w:")) != -1) {
		switch (opt) {
		case 't': threads = atoi(optarg); break;
		case 'n': iters = atol(optarg); break;
		case 'w': window = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-t threads] [-n iters] [-w window]\n", name);
			exit(2);
		}
	}
	if (threads < 1 || threads > 64 || iters < 1 || window < 1) {
		fprintf(stderr, "%s: bad arguments\n", name);
		exit(2);
	}
	return threads;
}

#endif /* PMM_BENCH_CHURN_H */
