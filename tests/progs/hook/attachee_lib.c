// SPDX-License-Identifier: GPL-2.0
/* attachee's library, loaded after the attach (dlopen LIB AT): its
 * allocations must reach the hook through its own GOT. Or loaded before it
 * in a namespace of its own (dlmopen LIB), bound lazily: it allocates
 * (through its libc's malloc and strdup) before the attach, and frees after
 * it, through a free it calls for the first time then. Or the same loaded
 * with RTLD_DEEPBIND, linked against an allocator of its own (deepbind
 * LIB): its malloc and free are that allocator's. */
#include <stdlib.h>
#include <string.h>

void *attachee_alloc(size_t n);
void attachee_keep(int dup);
void attachee_release(void);

static void *g_kept[64];
static char *g_dup;

void attachee_keep(int dup)
{
	int i;

	for (i = 0; i < 64; i++)
		g_kept[i] = malloc(100 + i);
	if (dup)	/* libc's own malloc: the same libc's free only */
		g_dup = strdup("kept by another namespace's libc");
}

void attachee_release(void)
{
	int i;

	for (i = 0; i < 64; i++)
		free(g_kept[i]);
	free(g_dup);
}

void *attachee_alloc(size_t n)
{
	return malloc(n);
}
