// SPDX-License-Identifier: GPL-2.0
/*
 * The attach benchmark's program (bench/host_attach.sh): it prints
 * "ready PID" and waits for a line on stdin (the harness attaches the hook
 * meanwhile, or does not), then runs the work phase: T threads, started
 * then, each keeping a window of live blocks and, for a random one,
 * either growing or shrinking it by realloc (1 iteration in 8) or freeing it
 * and allocating a new one; sizes 16..527 bytes, one in 32 1024..8191
 * (first bytes written). Its threads are created and joined within the
 * phase, so their exit (the hook's last batches) counts in it.
 *
 *   attach_bench [-t threads] [-n iterations per thread] [-w window]
 *
 * Prints "cpu MS ms wall MS ms ...": the process's cpu time (getrusage
 * RUSAGE_SELF, user + system) of the work phase alone, so neither the
 * start nor an attach before the line counts.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static long iters = 2000000;
static int window = 4096;

static void *run(void *arg)
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
		if (((x >> 48) & 31) == 0)
			sz = 1024 + (size_t)((x >> 20) % 7168);
		if (((x >> 56) & 7) == 0) {
			void *p = realloc(live[idx], sz);

			if (!p)
				abort();
			live[idx] = p;
		} else {
			free(live[idx]);
			live[idx] = malloc(sz);
			if (!live[idx])
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

static double cpu_ms(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

int main(int argc, char **argv)
{
	pthread_t tid[64];
	struct timespec a, b;
	char line[64];
	double c0, c1;
	int threads = 1, opt;

	while ((opt = getopt(argc, argv, "t:n:w:")) != -1) {
		switch (opt) {
		case 't': threads = atoi(optarg); break;
		case 'n': iters = atol(optarg); break;
		case 'w': window = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: attach_bench [-t threads] [-n iters] [-w window]\n");
			return 2;
		}
	}
	if (threads < 1 || threads > 64 || iters < 1 || window < 1) {
		fprintf(stderr, "attach_bench: bad arguments\n");
		return 2;
	}
	printf("ready %d\n", getpid());
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin)) {
		fprintf(stderr, "attach_bench: no line on stdin\n");
		return 1;
	}
	c0 = cpu_ms();
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < threads; i++)
		pthread_create(&tid[i], NULL, run, (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	c1 = cpu_ms();
	printf("cpu %.1f ms wall %.1f ms threads %d iterations %ld window %d\n", c1 - c0,
	       (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6,
	       threads, iters, window);
	return 0;
}
