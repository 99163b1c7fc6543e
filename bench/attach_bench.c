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

#include "churn.h"

static void *run(void *arg)
{
	return churn(arg, 1);
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
	char line[64];
	double c0, wall;
	int threads = churn_args(argc, argv, "attach_bench");

	printf("ready %d\n", getpid());
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin)) {
		fprintf(stderr, "attach_bench: no line on stdin\n");
		return 1;
	}
	c0 = cpu_ms();
	wall = churn_threads(threads, run);
	printf("cpu %.1f ms wall %.1f ms threads %d iterations %ld window %d\n", cpu_ms() - c0,
	       wall, threads, iters, window);
	return 0;
}
