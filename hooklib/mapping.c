// SPDX-License-Identifier: GPL-2.0
/*
 * Anonymous mappings (mapping.h): what mmap, mmap64, munmap and mremap
 * note while monitored. Only anonymous mappings are recorded, as
 * PMM_OP_MMAP, MUNMAP and MREMAP records, and the hook keeps the set of
 * those it recorded (g_mapped), so that an unmapping of any other memory
 * records nothing. Before init, the system calls themselves.
 *
 * Owns nothing: g_mapped is aset.c's.
 */
#include <errno.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "init.h"
#include "mapping.h"
#include "monitored.h"

/*
 * A mapping's hook while monitored. With the guard held a mapping made
 * passes (an allocator such as jemalloc maps inside malloc: its memory is
 * the heap's), but an unmapping or mremap of a mapping the hook recorded
 * is recorded alone (a signal handler's; the hook's own calls of others'
 * code pass): otherwise the module would keep the mapping live for good.
 */
static inline int enter_map(struct tstate *t)
{
	return enter(t) == ENTER_TAKEN;
}

void *hook_mmap(void *(*fn)(void *, size_t, int, int, int, off_t), void *addr,
		size_t len, int prot, int flags, int fd, off_t off, const struct src *s)
{
	struct tstate *t = &this_thread;
	void *p;
	int saved;

	if (g_fast.mode == MODE_BOOT && booting())
		return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
	if (g_fast.mode < MODE_MONITORED || !(flags & MAP_ANONYMOUS) || !enter_map(t))
		return fn(addr, len, prot, flags, fd, off);
	p = fn(addr, len, prot, flags, fd, off);
	if (p != MAP_FAILED) {
		saved = errno;
		t->in_map++;
		note_alloc(t, PMM_OP_MMAP, p, len, s, &g_mapped);
		t->in_map--;
		errno = saved;
	}
	guard_drop(t);
	return p;
}

int hook_munmap(void *addr, size_t len)
{
	struct tstate *t = &this_thread;
	int r, saved, how;

	if (g_fast.mode == MODE_BOOT && booting())
		return (int)syscall(SYS_munmap, addr, len);
	if (g_fast.mode < MODE_MONITORED || (how = enter(t)) == ENTER_PASS)
		return real.munmap(addr, len);
	saved = errno;
	t->in_map++;
	note_free(how == ENTER_ALONE ? NULL : t, PMM_OP_MUNMAP, addr, len, &g_mapped);
	t->in_map--;
	errno = saved;
	r = real.munmap(addr, len);
	if (how == ENTER_TAKEN)
		guard_drop(t);
	return r;
}

void *hook_mremap(void *old, size_t old_len, size_t len, int flags, void *want,
		  const struct src *s)
{
	struct tstate *t = &this_thread, *by;
	int saved, was, how;
	void *p;

	if (g_fast.mode == MODE_BOOT && booting())
		return (void *)syscall(SYS_mremap, old, old_len, len, flags, want);
	if (g_fast.mode < MODE_MONITORED || (how = enter(t)) == ENTER_PASS)
		return real.mremap(old, old_len, len, flags, want);
	by = how == ENTER_ALONE ? NULL : t;	/* NULL: recorded alone */
	was = set_del(&g_mapped, old);
	p = real.mremap(old, old_len, len, flags, want);
	saved = errno;
	t->in_map++;
	if (was) {
		if (p == MAP_FAILED)
			set_add(&g_mapped, old);
		else if (set_add(&g_mapped, p))
			record(by, PMM_OP_MREMAP, p, old, len, site_of(by, s), 1, 0);
		else
			record(by, PMM_OP_MUNMAP, old, NULL, old_len, 0, 1, 0);
	}
	t->in_map--;
	errno = saved;
	if (by)
		guard_drop(t);
	return p;
}
