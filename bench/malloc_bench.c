// SPDX-License-Identifier: GPL-2.0
/*
 * The hook's microbenchmark: each thread keeps a window of live blocks and
 * repeatedly frees a random one and allocates a new one of 16..527 bytes
 * (writing its first bytes), so every iteration is one free + one malloc.
 *
 *   malloc_bench [-t threads] [-n iterations per thread] [-w window]
 *
 * Prints the iterations and the wall time; the harness measures cpu time.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long iters = 2000000;
static int window = 4096;

static void *run(void *arg)
{
	uint64_t x = 88172645463325252ULL ^ (uintptr_t)arg;
	void **live = calloc((size_t)window, sizeof(void *));
	unsigned long sum = 0;

	for (long i = 0; i < iters; i++) {
		unsigned int idx;
		size_t sz;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		idx = (unsigned int)(x % (unsigned int)window);
		sz = 16 + (size_t)((x >> 32) % 512);
		free(live[idx]);
		live[idx] = malloc(sz);
		memset(live[idx], (int)i, 16);
		sum += ((unsigned char *)live[idx])[1];
	}
	for (int i = 0; i < window; i++)
		free(live[i]);
	free(live);
	return (void *)(uintptr_t)sum;
}

int main(int argc, char **argv)
{
	pthread_t tid[64];
	struct timespec a, b;
	int threads = 1, opt;

	while ((opt = getopt(argc, argv, "t:n:w:")) != -1) {
		switch (opt) {
		case 't': threads = atoi(optarg); break;
		case 'n': iters = atol(optarg); break;
		case 'w': window = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: malloc_bench [-t threads] [-n iters] [-w window]\n");
			return 2;
		}
	}
	if (threads < 1 || threads > 64 || iters < 1 || window < 1) {
		fprintf(stderr, "malloc_bench: bad arguments\n");
		return 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < threads; i++)
		pthread_create(&tid[i], NULL, run, (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("threads %d iterations %ld window %d wall %.3f s\n", threads, iters, window,
	       (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9);
	return 0;
}
