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

#include "churn.h"

static void *run(void *arg)
{
	return churn(arg, 0);
}

int main(int argc, char **argv)
{
	int threads = churn_args(argc, argv, "malloc_bench");
	double ms = churn_threads(threads, run);

	printf("threads %d iterations %ld window %d wall %.3f s\n", threads, iters, window,
	       ms / 1e3);
	return 0;
}
