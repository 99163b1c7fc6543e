// SPDX-License-Identifier: GPL-2.0
/*
 * libclearenv.so: a library whose constructor, which runs after libc's
 * initialisation and before the preloaded hook's own constructor, empties
 * the environment (clearenv: environ becomes NULL) and then allocates, so
 * that the hook starts there.
 */
#define _GNU_SOURCE
#include <stdlib.h>

__attribute__((constructor)) static void wipe(void)
{
	void *volatile p;

	clearenv();
	p = malloc(64);
	free(p);
}
