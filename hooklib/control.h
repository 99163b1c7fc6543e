/* SPDX-License-Identifier: GPL-2.0 */
/*
 * control.c: monitoring starts and stops as the module says, refusals, and
 * forks: whose state the hook's is (pmm_mine).
 */
#ifndef PMM_CONTROL_H
#define PMM_CONTROL_H

#include <sys/types.h>

#include "hook.h"

PMM_HIDDEN_BEGIN

extern pid_t g_pid;		/* the process the hook's state belongs to */
extern uint64_t g_next_query;	/* not monitored: coarse time of the next QUERY_SELF */
extern int g_errors;		/* consecutive refusals other than ENOLINK */
/* The page mapped MADV_WIPEONFORK that tells a copied child (NULL: none). */
extern volatile uint8_t *g_fork_marker;

/* 0 in a vfork child, which must not send; a copy made without fork
 * handlers becomes a forked child here. */
int pmm_mine(void);
/* The module refused an ioctl with err (positive errno). */
void pmm_dev_refused(int err, const char *what);
/* The module monitors this process: records flow from now on. */
void start_monitoring(void);
/* PMM_SET_CONFIG START_PID 0: asks to be monitored; 0 or -errno. */
int start_self(void);
/* pthread_atfork's child handler (and pmm_mine's, for a copy). */
void at_fork_child(void);
/* At init: the page that tells a copied child from a vfork child. */
void fork_marker_map(void);

PMM_HIDDEN_END

#endif /* PMM_CONTROL_H */
