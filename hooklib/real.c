// SPDX-License-Identifier: GPL-2.0
/*
 * libc's functions that the hooks stand in front of, found once. Preloaded
 * (interposed), with dlsym(RTLD_NEXT): the next object in the lookup order
 * after this library (libc, or another preloaded allocator). Loaded into a
 * running process (attach.c): what the program's own calls reach, libc's
 * or an allocator it is linked with (program_sym). Until they are
 * known, the hooks serve allocations from the bootstrap arena (arena.c).
 *
 * Owns: real, g_resolved.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "real.h"

struct real_fns real;
int g_resolved;

static int g_interposing;

/*
 * A function's definition at addr (a defined symbol there, under one of
 * its names), not a PLT entry standing for it: a non-PIE executable that
 * takes the function's address has an undefined symbol of that name whose
 * value is its PLT entry, which dladdr reports as if it were one.
 */
static int defines(void *addr)
{
	const ElfW(Sym) *s = NULL;
	Dl_info info;

	return addr && dladdr1(addr, &info, (void **)&s, RTLD_DL_SYMENT) &&
	       info.dli_saddr == addr && s && s->st_shndx != SHN_UNDEF;
}

/*
 * What the program's calls of name reach. dlsym(RTLD_DEFAULT) gives it,
 * unless the executable takes the function's address: then it gives the
 * executable's PLT entry (the address the program compares), which jumps
 * through the GOT that got.c redirects to the hooks. The definition is
 * then the first shared object's in the loader's list that has one.
 */
void *program_sym(const char *name)
{
	void *p = dlsym(RTLD_DEFAULT, name), *self = (void *)program_sym;
	struct link_map *head = NULL, *l;
	Dl_info info, mine;

	if (!p || defines(p))
		return p;
	if (!dladdr1(self, &info, (void **)&head, RTLD_DL_LINKMAP) || !head)
		return NULL;
	while (head->l_prev)
		head = head->l_prev;
	for (l = head->l_next; l; l = l->l_next) {
		void *h = l->l_name && l->l_name[0] ? dlopen(l->l_name, RTLD_LAZY | RTLD_NOLOAD) :
			  NULL;

		p = h ? dlsym(h, name) : NULL;
		if (h)
			dlclose(h);
		/* l's own definition, not one of its dependencies' */
		if (defines(p) && dladdr(p, &info) && dladdr(self, &mine) &&
		    info.dli_fbase != mine.dli_fbase && info.dli_fname &&
		    !strcmp(info.dli_fname, l->l_name))
			return p;
	}
	return NULL;
}

static void *sym(const char *name)
{
	return g_interposing ? dlsym(RTLD_NEXT, name) : program_sym(name);
}

int real_resolve(int interposed)
{
	g_interposing = interposed;
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
