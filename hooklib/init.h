/* SPDX-License-Identifier: GPL-2.0 */
/*
 * init.c: the library's initialisation (the real functions, the settings,
 * the device, fork handlers) and its exit.
 */
#ifndef PMM_INIT_H
#define PMM_INIT_H

#include "hook.h"
#include "real.h"

PMM_HIDDEN_BEGIN

extern int g_init;		/* 0: not started, 1: resolving, 2: done */

extern int g_interposed;	/* preloaded: the program's calls reach the hooks */

/* Once: from the constructor or the first hook called before it. */
void pmm_init(void);
/* Opens the device (env's PMM_DEVICE, or keeps it open), takes env's
 * PMM_START and asks whether the module monitors the process; 0 or -errno
 * of the open. */
int init_device(char **env);

/* Bootstrap: the real functions are not known yet. 1: use the arena. */
static inline int booting(void)
{
	if (__atomic_load_n(&g_init, __ATOMIC_ACQUIRE) == 0)
		pmm_init();
	return !__atomic_load_n(&g_resolved, __ATOMIC_ACQUIRE);
}

PMM_HIDDEN_END

#endif /* PMM_INIT_H */
