// SPDX-License-Identifier: GPL-2.0
/*
 * The library's start and end (init.h): pmm_init resolves libc's functions,
 * finds the clocks, reads the settings, opens the device and asks whether
 * the process is monitored, once, from the constructor or from the first
 * hook that comes before it; until the real functions are known, the hooks
 * serve the bootstrap arena (booting). At exit, the thread's last records
 * are sent.
 *
 * Owns: g_init.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <string.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "arena.h"
#include "aset.h"
#include "buffer.h"
#include "clock.h"
#include "control.h"
#include "device.h"
#include "env.h"
#include "fakedev.h"
#include "heap.h"
#include "init.h"
#include "notice.h"
#include "real.h"
#include "sampled_mode.h"
#include "site.h"
#include "tags.h"

int g_init;

/*
 * The big static tables (address sets, site table, tags, bootstrap arena:
 * 3.4 MiB of bss) are touched a few pages at a time, if at all. With
 * transparent huge pages "always" (Debian's default) the first write into a
 * 2 MiB-aligned part of them faults in and clears a whole huge page, at
 * every process start, for memory never used.
 * Done before anything in the bss is written.
 */
static void no_huge_pages(void)
{
	const struct {
		const void *p;
		size_t len;
	} tables[] = {
		{ &g_mapped, sizeof(g_mapped) },
		{ &g_sampled, sizeof(g_sampled) },
		{ g_tags, sizeof(g_tags) },
		{ g_seen, sizeof(g_seen) },
		{ g_arena, sizeof(g_arena) },
	};
	uintptr_t lo, hi;
	size_t i;

	pmm_site_extent(&lo, &hi);
	for (i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
		if ((uintptr_t)tables[i].p < lo)
			lo = (uintptr_t)tables[i].p;
		if ((uintptr_t)tables[i].p + tables[i].len > hi)
			hi = (uintptr_t)tables[i].p + tables[i].len;
	}
	advise(lo, hi, MADV_NOHUGEPAGE);
}

/*
 * Once, from the library's constructor or from the first hook called before
 * it (another library's constructor, a .preinit_array function). errno is
 * the program's on return, whatever dlsym, dlopen, open or the ioctls did to
 * it; everything it calls that may allocate is the hook's own (internal).
 */
/*
 * This library is the one the program's calls reach: it comes before libc
 * in the loader's list (preloaded, or linked ahead of libc), where one
 * loaded into a running process (attach.c) comes after it, and nothing
 * calls its definitions until pmm_attach points the program at them.
 * (dlsym(RTLD_DEFAULT, "malloc") cannot tell: in an executable that takes
 * malloc's address, it is the executable's PLT entry either way.)
 */
static int interposing(void)
{
	struct link_map *self = NULL, *l;
	Dl_info info;

	if (!dladdr1((void *)pmm_init, &info, (void **)&self, RTLD_DL_LINKMAP) || !self)
		return 1;
	for (l = self; l->l_prev; l = l->l_prev)
		;
	for (; l && l != self; l = l->l_next) {
		const char *base = l->l_name ? strrchr(l->l_name, '/') : NULL;

		if (base && !strcmp(base, "/libc.so.6"))
			return 0;
	}
	return 1;
}

int g_interposed;

int init_device(char **env)
{
	const char *path = dev_path(env);
	int fd, r;

#ifdef PMM_FAKE_DEV
	fake_dev_setup(env, g_pid);
#endif
	if (g_fd >= 0 && dev_ours(g_fd) && g_dev_usable)
		fd = g_fd;	/* a second pmm_attach */
	else
		fd = dev_open(path);
	if (fd < 0) {
		g_dev_usable = 0;
		set_mode(MODE_PASS);
		return fd;
	}
	g_fd = fd;
	g_dev_usable = 1;
	set_mode(MODE_PASS);
	g_next_query = coarse_ns() + QUERY_NS;
	if (env_flag(env, "PMM_START", 0)) {
		r = start_self();
		if (r < 0 && r != -EBUSY && r != -EALREADY && r != -EEXIST)
			notice("PMM_START=1: START_PID refused", -r, "");
	}
	r = pmm_dev_ioctl(PMM_QUERY_SELF, NULL);
	if (r == 1)
		start_monitoring();
	else if (r < 0)
		pmm_dev_refused(-r, path);	/* named: PMM_DEVICE may be the wrong file */
	return 0;
}

void pmm_init(void)
{
	struct tstate *t = &this_thread;
	int expected = 0, saved = errno, r, fd, resolved;
	uint64_t mask;
	char **env = NULL;

	if (__atomic_load_n(&g_init, __ATOMIC_ACQUIRE) == 0)
		no_huge_pages();
	if (!__atomic_compare_exchange_n(&g_init, &expected, 1, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return;
	notice_starting(1);
	guard_take(t);
	mask = pmm_internal_begin();
	g_interposed = interposing();
	resolved = real_resolve(g_interposed);
	heap_init();
	find_vdso_clock();
	g_pid = (pid_t)syscall(SYS_getpid);
	alone_reseed(g_pid);
	fork_marker_map();

	/* attached: the settings are pmm_attach's, not the program's */
	if (g_interposed)
		env = settings_read();
	else
		settings_apply(NULL);

	if (!resolved) {
		/* cannot happen with glibc; nothing sane to fall back to */
		notice("dlsym failed", 0, "");
		abort();
	}
	r = buffer_key_create();
	pthread_atfork(NULL, NULL, at_fork_child);

	if (!g_interposed) {
		/* loaded into a running process: pmm_attach does the rest */
		g_dev_usable = 0;
		set_mode(MODE_PASS);
	} else if (r != 0 || (fd = init_device(env)) < 0) {
		g_dev_usable = 0;
		set_mode(MODE_PASS);
		notice_open(dev_path(env), r ? r : -fd);
	}
	notice_starting(0);
	__atomic_store_n(&g_init, 2, __ATOMIC_RELEASE);
	pmm_internal_end(mask);
	guard_drop(t);
	errno = saved;
}

__attribute__((constructor)) static void pmm_ctor(void)
{
	pmm_init();
}

/* Process exit: this thread's records go now; later ones one by one. */
__attribute__((destructor)) static void pmm_fini(void)
{
	struct tstate *t = &this_thread;

	guard_take(t);
	if (t->buf && g_fast.mode >= MODE_MONITORED)
		flush(t);
	guard_drop(t);
}
