// SPDX-License-Identifier: GPL-2.0
/* attachee's library, loaded after the attach (dlopen LIB AT): its
 * allocations must reach the hook through its own GOT. */
#include <stdlib.h>

void *attachee_alloc(size_t n);

void *attachee_alloc(size_t n)
{
	return malloc(n);
}
