/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pmm_hooks.h: the compile-time shim, file/function/line sites.
 *
 *   #include <stdlib.h>      (system headers first)
 *   #include "pmm_hooks.h"   (then this: malloc, calloc, realloc and free in
 *                             this file go through malloc_() etc.)
 *
 * It does `#define malloc(A) malloc_(A, __FILE__, __FUNCTION__,
 * __LINE__)`. When libpmmhook.so is loaded (LD_PRELOAD, or linked with
 * -lpmmhook) the calls go to its pmm_src_* entry points, which record the
 * allocation under a site described by file (basename), function and line,
 * so /proc/pmm/pid shows `Caller: 0x... main() 207 demo_daemon.c`. When it is not
 * loaded they call libc directly. The library is looked up once per source
 * file with dlsym(RTLD_DEFAULT) (glibc >= 2.34 has dlsym in libc; older
 * ones need -ldl). Costs one site lookup per call in the library.
 *
 * pmm_hooks_flush() sends the calling thread's buffered records now (a
 * no-op without the library); handy before a program goes idle.
 */
#ifndef PMM_HOOKS_H
#define PMM_HOOKS_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>

struct pmm_hooks_fns {
	int resolved;
	void *(*malloc_fn)(size_t, void *, const char *, const char *, int);
	void *(*calloc_fn)(size_t, size_t, void *, const char *, const char *, int);
	void *(*realloc_fn)(void *, size_t, void *, const char *, const char *, int);
	void (*free_fn)(void *, void *, const char *, const char *, int);
	void (*flush_fn)(void);
};

static struct pmm_hooks_fns pmm_hooks_fns;

static inline const struct pmm_hooks_fns *pmm_hooks_get(void)
{
	struct pmm_hooks_fns *f = &pmm_hooks_fns;

	if (__builtin_expect(!__atomic_load_n(&f->resolved, __ATOMIC_ACQUIRE), 0)) {
		/* all or nothing: a partial set would mix two allocators */
		void *m = dlsym(RTLD_DEFAULT, "pmm_src_malloc");
		void *c = dlsym(RTLD_DEFAULT, "pmm_src_calloc");
		void *r = dlsym(RTLD_DEFAULT, "pmm_src_realloc");
		void *fr = dlsym(RTLD_DEFAULT, "pmm_src_free");
		void *fl = dlsym(RTLD_DEFAULT, "pmm_flush");

		if (m && c && r && fr && fl) {
			f->malloc_fn = (void *(*)(size_t, void *, const char *, const char *, int))m;
			f->calloc_fn = (void *(*)(size_t, size_t, void *, const char *,
						  const char *, int))c;
			f->realloc_fn = (void *(*)(void *, size_t, void *, const char *,
						   const char *, int))r;
			f->free_fn = (void (*)(void *, void *, const char *, const char *, int))fr;
			f->flush_fn = (void (*)(void))fl;
		}
		__atomic_store_n(&f->resolved, 1, __ATOMIC_RELEASE);
	}
	return f;
}

/* noinline: __builtin_return_address(0) is then the call site itself */
__attribute__((noinline, unused))
static void *malloc_(size_t size, const char *file, const char *fn, int line)
{
	const struct pmm_hooks_fns *f = pmm_hooks_get();

	if (f->malloc_fn)
		return f->malloc_fn(size, __builtin_return_address(0), file, fn, line);
	return malloc(size);
}

__attribute__((noinline, unused))
static void *calloc_(size_t n, size_t size, const char *file, const char *fn, int line)
{
	const struct pmm_hooks_fns *f = pmm_hooks_get();

	if (f->calloc_fn)
		return f->calloc_fn(n, size, __builtin_return_address(0), file, fn, line);
	return calloc(n, size);
}

__attribute__((noinline, unused))
static void *realloc_(void *ptr, size_t size, const char *file, const char *fn, int line)
{
	const struct pmm_hooks_fns *f = pmm_hooks_get();

	if (f->realloc_fn)
		return f->realloc_fn(ptr, size, __builtin_return_address(0), file, fn, line);
	return realloc(ptr, size);
}

__attribute__((noinline, unused))
static void free_(void *ptr, const char *file, const char *fn, int line)
{
	const struct pmm_hooks_fns *f = pmm_hooks_get();

	if (f->free_fn)
		f->free_fn(ptr, __builtin_return_address(0), file, fn, line);
	else
		free(ptr);
}

__attribute__((unused))
static void pmm_hooks_flush(void)
{
	const struct pmm_hooks_fns *f = pmm_hooks_get();

	if (f->flush_fn)
		f->flush_fn();
}

#define malloc(A)	malloc_((A), __FILE__, __FUNCTION__, __LINE__)
#define calloc(A, B)	calloc_((A), (B), __FILE__, __FUNCTION__, __LINE__)
#define realloc(A, B)	realloc_((A), (B), __FILE__, __FUNCTION__, __LINE__)
#define free(A)		free_((A), __FILE__, __FUNCTION__, __LINE__)

#endif /* PMM_HOOKS_H */
