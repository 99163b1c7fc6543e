/* SPDX-License-Identifier: GPL-2.0 */
/*
 * real.c: libc's own allocator and mapping functions, which the hooks call
 * (dlsym, once, from pmm_init).
 */
#ifndef PMM_REAL_H
#define PMM_REAL_H

#include <sys/types.h>

#include "hook.h"

PMM_HIDDEN_BEGIN

struct real_fns {
	void *(*malloc)(size_t);
	void (*free)(void *);
	void *(*calloc)(size_t, size_t);
	void *(*realloc)(void *, size_t);
	void *(*reallocarray)(void *, size_t, size_t);
	int (*posix_memalign)(void **, size_t, size_t);
	void *(*aligned_alloc)(size_t, size_t);
	void *(*memalign)(size_t, size_t);
	void *(*valloc)(size_t);
	void *(*pvalloc)(size_t);
	size_t (*malloc_usable_size)(void *);
	void *(*mmap)(void *, size_t, int, int, int, off_t);
	void *(*mmap64)(void *, size_t, int, int, int, off_t);
	int (*munmap)(void *, size_t);
	void *(*mremap)(void *, size_t, size_t, int, ...);
};

extern struct real_fns real;
extern int g_resolved;		/* real.* are set */

/* Resolves real.* (interposed: the next definitions after this library's;
 * else the program's own), then sets g_resolved; the caller marks the calls
 * as the hook's own (pmm_internal_begin: dlsym may allocate). 0 if one that
 * every libc has is missing. */
int real_resolve(int interposed);
/* What the program's own calls of name reach (not a PLT entry of the
 * executable's); for a library loaded into a running process. */
void *program_sym(const char *name);

PMM_HIDDEN_END

#endif /* PMM_REAL_H */
