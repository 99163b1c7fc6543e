// SPDX-License-Identifier: GPL-2.0
/*
 * Measures the two stack walkers of unwind.c: ns per call and frames found,
 * from a call chain 40 deep. Built twice: with frame pointers
 * (unwind_bench) and without (unwind_bench_nofp), as most of Debian is.
 *
 *   unwind_bench [-n calls] [-d depth]
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "hook.h"	/* -iquote ../hooklib: PMM_MAX_FRAMES */
#include "unwind.h"	/* the walkers; <unwind.h> is libgcc's */

__thread int pmm_internal;	/* the library's; unwind.c marks its calls */

static long calls = 200000;
static int depth = 8;
static volatile int sink;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Stands for a hook: its caller's return address starts the walk. */
__attribute__((noinline)) static int hook(int eh)
{
	uint64_t out[PMM_MAX_FRAMES];
	void *ra = __builtin_return_address(0);
	int n;

	if (eh == 2) {
		out[0] = (uintptr_t)ra;
		n = 1;
	} else {
		n = eh ? pmm_unwind_eh(out, depth, ra)
		       : pmm_unwind_fp(out, depth, ra, __builtin_frame_address(0), 0);
	}
	sink += (int)out[0];
	return n;
}

__attribute__((noinline)) static int chain(int level, int eh)
{
	int r;

	if (level == 0)
		return hook(eh);
	r = chain(level - 1, eh);
	sink += level;	/* no tail call */
	return r;
}

int main(int argc, char **argv)
{
	int opt;

	while ((opt = getopt(argc, argv, "n:d:")) != -1) {
		if (opt == 'n')
			calls = atol(optarg);
		else if (opt == 'd')
			depth = atoi(optarg);
		else
			return 2;
	}
	if (depth < 1 || depth > PMM_MAX_FRAMES)
		return 2;
	double base = 0;

	for (int eh = 2; eh >= 0; eh--) {
		static const char *const name[] = { "fp", "eh", "none" };
		double a, b, ns;
		int frames = 0;

		chain(40, eh);
		a = now();
		for (long i = 0; i < calls; i++)
			frames = chain(40, eh);
		b = now();
		ns = (b - a) * 1e9 / (double)calls;
		if (eh == 2) {
			base = ns;
			continue;
		}
		printf("%s depth %2d: %7.1f ns/walk (call chain %.1f ns subtracted), %2d frames\n",
		       name[eh], depth, ns - base, base, frames);
	}
	return 0;
}
