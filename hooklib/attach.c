// SPDX-License-Identifier: GPL-2.0
/*
 * Attaching to a running process (pmm-inject): the injector has the
 * process dlopen this library and call pmm_attach with the settings, as
 * lines of PMM_*=value. The library's constructor found it was not the
 * one the program's calls reach (init.c: not interposing) and took the
 * program's own functions for real.*; pmm_attach opens the device, starts
 * as PMM_START says, and points every loaded object's calls at the hooks
 * (got.c). Objects loaded later through dlopen are redirected as they
 * come (attach_dlopen).
 *
 * Blocks allocated before the attach reach the hooks' free and realloc:
 * the hooks pass a block they did not record to libc (sampled: not in the
 * sampled set; exact: a free with no tag, which the module counts as a
 * free of a block older than monitoring).
 *
 * Detach is pmctl stop: the hooks stay, not monitored, at that mode's
 * cost; a second pmm_attach takes new settings and starts again.
 *
 * Owns: the settings' copy (g_conf) and libc's dlopen (g_real_dlopen).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <string.h>

#include "control.h"
#include "device.h"
#include "env.h"
#include "got.h"
#include "init.h"
#include "interpose.h"
#include "mode.h"
#include "real.h"
#include "thread_state.h"

#define CONF_BYTES	4096
#define CONF_LINES	64


static char g_conf[CONF_BYTES];
static char *g_conf_env[CONF_LINES + 1];
static void *(*g_real_dlopen)(const char *, int);
static int g_prepared;

/*
 * Where the caller decides where a name is found (its own DT_RPATH or
 * DT_RUNPATH, $ORIGIN) or in which namespace, libc's dlopen must see the
 * caller's return address, not this library's.
 */
static int caller_decides(const char *file, void *ra)
{
	struct link_map *lm = NULL;
	const ElfW(Dyn) *d;
	Lmid_t ns = LM_ID_BASE;
	Dl_info info;

	if (!file || strchr(file, '$'))
		return file != NULL;
	if (!dladdr1(ra, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
		return 1;
	if (dlinfo(lm, RTLD_DI_LMID, &ns) || ns != LM_ID_BASE)
		return 1;
	if (strchr(file, '/'))
		return 0;
	for (d = lm->l_ld; d && d->d_tag != DT_NULL; d++)
		if (d->d_tag == DT_RPATH || d->d_tag == DT_RUNPATH)
			return 1;
	return 0;
}

__attribute__((noinline)) static void *dlopen_redirect(const char *file, int flags)
{
	void *h = g_real_dlopen(file, flags);
	int saved = errno;

	if (h)
		got_redirect();
	errno = saved;
	return h;
}

/*
 * dlopen, followed by the new objects' entries. Where the caller decides
 * (caller_decides), a tail call: those objects are redirected at the next
 * dlopen or attach, and until then call libc directly.
 */
static void *attach_dlopen(const char *file, int flags)
{
	if (caller_decides(file, __builtin_return_address(0)))
		return g_real_dlopen(file, flags);
	return dlopen_redirect(file, flags);
}

static const struct got_entry g_entries[] = {
	{ "malloc", (void *)entry_malloc },
	{ "free", (void *)entry_free },
	{ "calloc", (void *)entry_calloc },
	{ "realloc", (void *)entry_realloc },
	{ "reallocarray", (void *)entry_reallocarray },
	{ "posix_memalign", (void *)entry_posix_memalign },
	{ "aligned_alloc", (void *)entry_aligned_alloc },
	{ "memalign", (void *)entry_memalign },
	{ "valloc", (void *)entry_valloc },
	{ "pvalloc", (void *)entry_pvalloc },
	{ "malloc_usable_size", (void *)entry_malloc_usable_size },
	{ "mmap", (void *)entry_mmap },
	{ "mmap64", (void *)entry_mmap64 },
	{ "munmap", (void *)entry_munmap },
	{ "mremap", (void *)entry_mremap },
	{ "dlopen", (void *)attach_dlopen },
};

/* conf's lines into g_conf_env; -E2BIG if too long or too many. */
static int conf_read(const char *conf)
{
	size_t len = conf ? strnlen(conf, CONF_BYTES) : 0;
	int n = 0;
	char *p;

	if (len >= CONF_BYTES)
		return -E2BIG;
	memcpy(g_conf, conf ? conf : "", len + 1);
	for (p = g_conf; *p; ) {
		char *nl = strchr(p, '\n');

		if (nl)
			*nl = '\0';
		if (*p) {
			if (n == CONF_LINES)
				return -E2BIG;
			g_conf_env[n++] = p;
		}
		if (!nl)
			break;
		p = nl + 1;
	}
	g_conf_env[n] = NULL;
	return 0;
}

/*
 * The injector's call: conf is PMM_* settings, one per line (PMM_SAMPLE,
 * PMM_DEPTH, PMM_UNWIND, PMM_START, PMM_QUIET, PMM_BUFFER, PMM_DEVICE; the
 * fake device's too in that build). The number of entries redirected (0 when
 * a second attach finds them done), or -errno: EALREADY, this library is
 * preloaded (pmctl start is all it needs); EBUSY, monitored now (stop
 * first); E2BIG, conf too long; or the device's open.
 */
PMM_EXPORT int pmm_attach(const char *conf)
{
	static int busy;	/* two injectors, each in a thread of its own */
	struct tstate *t = &this_thread;
	int r, saved = errno;
	uint64_t mask;

	if (__atomic_load_n(&g_init, __ATOMIC_ACQUIRE) != 2)
		return -EAGAIN;
	if (g_interposed)
		return -EALREADY;
	if (__atomic_exchange_n(&busy, 1, __ATOMIC_ACQUIRE))
		return -EBUSY;
	r = conf_read(conf);
	if (r) {
		__atomic_store_n(&busy, 0, __ATOMIC_RELEASE);
		return r;
	}
	guard_take(t);
	mask = pmm_internal_begin();
	if (__atomic_load_n(&g_fast.mode, __ATOMIC_RELAXED) >= MODE_MONITORED) {
		/* stopped since (pmctl stop), unless the module says otherwise:
		 * an idle process has not heard of it yet */
		if (pmm_dev_ioctl(PMM_QUERY_SELF, NULL) == 1) {
			r = -EBUSY;
			goto out;
		}
		pmm_dev_refused(ENOLINK, "PMM_QUERY_SELF");
	}
	settings_apply(g_conf_env);
	if (!g_prepared) {
		g_real_dlopen = program_sym("dlopen");
		r = g_real_dlopen ? got_prepare(g_entries, sizeof(g_entries) / sizeof(g_entries[0])) :
				    -ENOSYS;	/* no dlopen to follow */
		g_prepared = !r;
	}
	if (!r)
		r = init_device(g_conf_env);
	if (!r)
		r = got_redirect();
out:
	pmm_internal_end(mask);
	guard_drop(t);
	__atomic_store_n(&busy, 0, __ATOMIC_RELEASE);
	errno = saved;
	return r;
}
