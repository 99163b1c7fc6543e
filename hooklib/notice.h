/* SPDX-License-Identifier: GPL-2.0 */
/* notice.c: the hook's one line on stderr. */
#ifndef PMM_NOTICE_H
#define PMM_NOTICE_H

#include "hook.h"

PMM_HIDDEN_BEGIN

extern int g_quiet;		/* PMM_QUIET (env.c): never a line on stderr */

/* "pmm: what: <err's name> (errno N)then", once per process at most, none
 * with PMM_QUIET; err 0: no errno part. While the preloaded hook starts,
 * once per process tree: not if the parent process (or the process group's
 * leader) has this library loaded. errno kept. */
void notice(const char *what, int err, const char *then);
/* pmm_init starts (1) and ends (0): its notices are said once per tree. */
void notice_starting(int starting);
/* notice "cannot open PATH: ...; allocations pass through to libc". */
void notice_open(const char *path, int err);
/* The parts as one line on stderr (one write, no stdio, no malloc), none
 * with PMM_QUIET; errno kept. */
void say(const char *const parts[], size_t nparts);

PMM_HIDDEN_END

#endif /* PMM_NOTICE_H */
