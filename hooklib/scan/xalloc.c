// SPDX-License-Identifier: GPL-2.0
/*
 * calloc and realloc for pmm-scan's tables, which end the scan with
 * EXIT_FAILED when memory runs out: no caller has a way on without it.
 */
#include <stdint.h>
#include <stdlib.h>

#include "../inject/tracee.h"
#include "exit_codes.h"
#include "xalloc.h"

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (!p)
		die(EXIT_FAILED, "out of memory (%zu x %zu bytes)", n, size);
	return p;
}

void *xrealloc(void *p, size_t n, size_t size)
{
	if (size && n > SIZE_MAX / size)
		die(EXIT_FAILED, "out of memory (%zu x %zu bytes)", n, size);
	p = realloc(p, n && size ? n * size : 1);
	if (!p)
		die(EXIT_FAILED, "out of memory (%zu x %zu bytes)", n, size);
	return p;
}
