/* SPDX-License-Identifier: GPL-2.0 */
/*
 * unwinder.c: a confined child that judges stopped threads by their call
 * chains, unwound by libunwind from the .eh_frame in the target's memory.
 */
#ifndef PMM_INJECT_UNWINDER_H
#define PMM_INJECT_UNWINDER_H

#include <sys/types.h>
#include <sys/user.h>

#include "target.h"

/* Starts the child for t (its objects scanned already); no child, no harm. */
void unwinder_start(const struct target *t);
/* 1 safe, 0 not, -1 cannot tell (no child, or it failed). */
int unwound_safe(pid_t tid, const struct user_regs_struct *r);

#endif /* PMM_INJECT_UNWINDER_H */
