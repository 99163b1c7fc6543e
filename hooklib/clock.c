// SPDX-License-Identifier: GPL-2.0
/*
 * The clocks the hook reads (clock.h): the vDSO's entry, found once, and
 * the module's clock page once control.c has mapped it (the fake device's
 * own page in that build).
 *
 * Owns: g_clock_gettime, g_kclock, g_map_clock, g_fake_clock.
 */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "clock.h"

int (*g_clock_gettime)(clockid_t, struct timespec *) = clock_gettime;
const struct pmm_clock *g_kclock;
uint64_t g_map_clock;
#ifdef PMM_FAKE_DEV
struct pmm_clock g_fake_clock;
#endif

void find_vdso_clock(void)
{
	void *vdso = dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_NOLOAD);
	void *f = vdso ? dlsym(vdso, "__vdso_clock_gettime") : NULL;

	if (f)
		g_clock_gettime = (int (*)(clockid_t, struct timespec *))f;
}
