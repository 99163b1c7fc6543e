// SPDX-License-Identifier: GPL-2.0
/*
 * Blocks of the hook's bootstrap arena (what dlsym allocates while the hook
 * starts) freed, reallocated and measured by the program later, in whatever
 * mode the hook is in then: none may reach libc's free or realloc, which
 * would abort on a pointer that is not theirs. Needs the fake-device build,
 * which exports pmm_fake_arena_alloc to hand out such blocks.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void check(int ok, const char *what)
{
	if (!ok) {
		printf("FAIL %s\n", what);
		failures++;
	}
}

static int filled(const unsigned char *p, int c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != c)
			return 0;
	return 1;
}

int main(void)
{
	void *(*arena_alloc)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT,
								 "pmm_fake_arena_alloc");
	unsigned char *p, *q;

	if (!arena_alloc) {
		puts("arena: no pmm_fake_arena_alloc (run under libpmmhook-fake.so)");
		return 2;
	}
	for (int round = 0; round < 100; round++) {
		/* kept, grown: the content moves to the heap, then a real free */
		p = arena_alloc(100);
		check(p != NULL, "arena block");
		memset(p, 'a', 100);
		check(malloc_usable_size(p) >= 100, "malloc_usable_size of an arena block");
		q = realloc(p, 1000);
		check(q != NULL && filled(q, 'a', 100), "realloc moves the content");
		free(q);
		/* freed as it is, and reallocated to 0 */
		free(arena_alloc(50));
		q = realloc(arena_alloc(64), 0);
		free(q);
		p = reallocarray(arena_alloc(32), 4, 16);
		check(p != NULL, "reallocarray of an arena block");
		free(p);
		/* ordinary blocks between them still go to libc */
		p = malloc(200);
		free(p);
	}
	printf("arena: %d failure(s)\n", failures);
	return failures != 0;
}
