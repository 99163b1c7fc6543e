// SPDX-License-Identifier: GPL-2.0
/*
 * Three call sites of malloc, first used in the order one, two, three.
 *   sites MS   calls them in turn (40, 72 and 136 bytes, each block freed
 *              again) for MS milliseconds, at least once each; prints the
 *              executable's load base ("0x...").
 */
#define _GNU_SOURCE
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define SITE(name, size)					\
	__attribute__((noinline)) static void name(void)	\
	{							\
		void *volatile p = malloc(size);		\
								\
		free(p);					\
	}

SITE(one, 40)
SITE(two, 72)
SITE(three, 136)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double end = now() + (argc > 1 ? atof(argv[1]) : 0) / 1000;

	do {
		one();
		two();
		three();
	} while (now() < end);
	printf("0x%lx\n", (unsigned long)_r_debug.r_map->l_addr);
	return 0;
}
