// SPDX-License-Identifier: GPL-2.0
/*
 * bigheap N [SIZE] [SITES]: allocates N live blocks of SIZE bytes (32) from
 * SITES call sites (4, taken in turn, so that every page the module hands
 * back mixes them), says "ready N" on stdout, then waits for its stdin to
 * close and exits without freeing them: under the hook in exact mode the
 * module then holds N + 1 blocks (the array that keeps them too) of the
 * exited process, for pmd's harvest.
 * bench/guest_bigheap.sh runs it with 1M and 10M blocks.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define SITE(n) \
	static __attribute__((noinline)) void *alloc##n(size_t size) \
	{ \
		void *p = malloc(size); \
		__asm__ volatile("" ::: "memory"); \
		return p; \
	}
SITE(0)
SITE(1)
SITE(2)
SITE(3)
SITE(4)
SITE(5)
SITE(6)
SITE(7)

int main(int argc, char **argv)
{
	static void *(*const sites[])(size_t) = {
		alloc0, alloc1, alloc2, alloc3, alloc4, alloc5, alloc6, alloc7,
	};
	unsigned long n, i, size, nsites;
	void **keep;
	void (*flush)(void);
	char buf[64];

	if (argc < 2) {
		fprintf(stderr, "usage: bigheap N [SIZE] [SITES (1-8)]\n");
		return 2;
	}
	n = strtoul(argv[1], NULL, 0);
	size = argc > 2 ? strtoul(argv[2], NULL, 0) : 32;
	nsites = argc > 3 ? strtoul(argv[3], NULL, 0) : 4;
	if (nsites < 1 || nsites > 8) {
		fprintf(stderr, "bigheap: SITES is 1 to 8\n");
		return 2;
	}
	/* one more live block: the array that keeps them */
	keep = malloc(n * sizeof(*keep));
	if (!keep) {
		perror("bigheap: malloc");
		return 1;
	}
	for (i = 0; i < n; i++) {
		keep[i] = sites[i % nsites](size);
		if (!keep[i]) {
			fprintf(stderr, "bigheap: malloc failed after %lu blocks\n", i);
			return 1;
		}
	}
	/* an idle thread keeps its last records until its next allocation:
	 * the hook's pmm_flush sends them now (absent without the hook) */
	flush = (void (*)(void))dlsym(RTLD_DEFAULT, "pmm_flush");
	if (flush)
		flush();
	printf("ready %lu\n", n);
	fflush(stdout);
	while (fgets(buf, sizeof(buf), stdin))
		;
	return 0;
}
