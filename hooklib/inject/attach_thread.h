/* SPDX-License-Identifier: GPL-2.0 */
/*
 * attach_thread.c: one thread of the target, stopped alone, judged at a
 * safe point or not, made to call dlopen, dlsym and pmm_attach, and given
 * back its registers.
 */
#ifndef PMM_INJECT_ATTACH_THREAD_H
#define PMM_INJECT_ATTACH_THREAD_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/user.h>

#include "target.h"

/* The stopped thread tid, its registers r, holds no allocator or loader
 * lock: 1 safe, 0 not. */
int safe_point(const struct target *t, pid_t tid, const struct user_regs_struct *r);
/* dlopen, dlsym and pmm_attach(conf) in the stopped thread tid, which is
 * restored and detached after: 0 (*result: pmm_attach's) or an EXIT_*. */
int attach_thread(struct target *t, pid_t tid, const char *conf, int *result,
		  char *why, size_t why_len);

#endif /* PMM_INJECT_ATTACH_THREAD_H */
