// SPDX-License-Identifier: GPL-2.0
/*
 * libreuse.so, preloaded after the hook: the realloc the hook calls (dlsym
 * RTLD_NEXT). When glibc's realloc moved the block, it allocates the old
 * block's size again through the PLT before returning, as another thread
 * could between libc's return and the hook's record: glibc hands back the
 * old address, and the hook (its guard held) records that allocation alone,
 * writing the old address's tag slot. The hook's record of the realloc must
 * still carry the old block's own tag. The blocks are kept.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stddef.h>

extern void *__libc_realloc(void *p, size_t n);

/* exported: kept blocks the compiler may not drop with their malloc */
__attribute__((visibility("default"))) void *reuse_kept[64];
static unsigned int nkept;

__attribute__((visibility("default"))) void *realloc(void *p, size_t n)
{
	size_t old = p ? malloc_usable_size(p) : 0;
	void *q = __libc_realloc(p, n);

	if (q && p && q != p && nkept < sizeof(reuse_kept) / sizeof(reuse_kept[0]))
		reuse_kept[nkept++] = malloc(old);
	return q;
}
