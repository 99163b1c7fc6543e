/* SPDX-License-Identifier: GPL-2.0 */
/*
 * startup.c: --exec, a program started with the hook attached at its entry
 * point, without LD_PRELOAD.
 */
#ifndef PMM_INJECT_STARTUP_H
#define PMM_INJECT_STARTUP_H

#include "target.h"

/* Starts argv with the hook attached at its entry point and exits as it
 * exits; refusals die() before it runs. */
__attribute__((noreturn)) void exec_program(struct target *t, const char *conf, char **argv,
					    int status_fd);

#endif /* PMM_INJECT_STARTUP_H */
