// SPDX-License-Identifier: GPL-2.0
/*
 * libnextmalloc.so, preloaded after the hook: the malloc the hook calls
 * (dlsym RTLD_NEXT). Every 64th call maps and unmaps a page of its own
 * through the PLT, one frame below the hook, as jemalloc or mimalloc map
 * their memory, then returns glibc's block.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <sys/mman.h>

extern void *__libc_malloc(size_t n);

__attribute__((visibility("default"))) void *malloc(size_t n)
{
	static __thread unsigned int calls;

	if (++calls % 64 == 0) {
		void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);

		if (p != MAP_FAILED)
			munmap(p, 4096);
	}
	return __libc_malloc(n);
}
