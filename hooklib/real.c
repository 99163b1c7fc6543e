// SPDX-License-Identifier: GPL-2.0
/*
 * libc's functions that the hooks stand in front of, found once with
 * dlsym(RTLD_NEXT): the next object in the lookup order after this library
 * (libc, or another preloaded allocator). Until they are known, the hooks
 * serve allocations from the bootstrap arena (arena.c).
 *
 * Owns: real, g_resolved.
 */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "real.h"

struct real_fns real;
int g_resolved;

static void *sym(const char *name)
{
	return dlsym(RTLD_NEXT, name);
}

int real_resolve(void)
{
	real.malloc = sym("malloc");
	real.free = sym("free");
	real.calloc = sym("calloc");
	real.realloc = sym("realloc");
	real.reallocarray = sym("reallocarray");
	real.posix_memalign = sym("posix_memalign");
	real.aligned_alloc = sym("aligned_alloc");
	real.memalign = sym("memalign");
	real.valloc = sym("valloc");
	real.pvalloc = sym("pvalloc");
	real.malloc_usable_size = sym("malloc_usable_size");
	real.mmap = sym("mmap");
	real.mmap64 = sym("mmap64");
	real.munmap = sym("munmap");
	real.mremap = sym("mremap");
	if (!real.mmap64)
		real.mmap64 = real.mmap;
	__atomic_store_n(&g_resolved, 1, __ATOMIC_RELEASE);
	return real.malloc && real.free && real.calloc && real.realloc && real.mmap &&
	       real.munmap && real.mremap;
}
