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
#include <errno.h>
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
#include "init.h"
#include "notice.h"
#include "real.h"
#include "sampler.h"
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
void pmm_init(void)
{
	struct tstate *t = &t_st;
	int expected = 0, saved = errno, r, fd, resolved;
	uint64_t mask;
	char **env;

	if (__atomic_load_n(&g_init, __ATOMIC_ACQUIRE) == 0)
		no_huge_pages();
	if (!__atomic_compare_exchange_n(&g_init, &expected, 1, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return;
	guard_take(t);
	mask = pmm_internal_begin();
	resolved = real_resolve();
	find_vdso_clock();
	g_pid = (pid_t)syscall(SYS_getpid);
	alone_reseed(g_pid);
	fork_marker_map();

	env = settings_read();
#ifdef PMM_FAKE_DEV
	fake_dev_setup(env, g_pid);
#endif

	if (!resolved) {
		/* cannot happen with glibc; nothing sane to fall back to */
		notice("dlsym(RTLD_NEXT) failed", 0, "");
		abort();
	}
	r = buffer_key_create();
	pthread_atfork(NULL, NULL, at_fork_child);

	fd = dev_open();
	if (fd < 0 || r != 0) {
		if (fd >= 0)
			close(fd);
		notice("cannot open /dev/" PMM_DEVICE_NAME, fd < 0 ? -fd : r,
		    "; allocations pass through to libc");
		g_dev_usable = 0;
		set_mode(MODE_PASS);
	} else {
		g_fd = fd;
		g_dev_usable = 1;
		set_mode(MODE_PASS);
		g_next_query = coarse_ns() + QUERY_NS;
		if (env_num(env, "PMM_START", 0) > 0) {
			r = start_self();
			if (r < 0 && r != -EBUSY && r != -EALREADY && r != -EEXIST)
				notice("PMM_START=1: START_PID refused", -r, "");
		}
		r = pmm_dev_ioctl(PMM_QUERY_SELF, NULL);
		if (r == 1)
			start_monitoring();
		else if (r < 0)
			pmm_dev_refused(-r, "PMM_QUERY_SELF");
	}
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
	struct tstate *t = &t_st;

	guard_take(t);
	if (t->buf && g_fast.mode >= MODE_MONITORED)
		flush(t);
	guard_drop(t);
}
