/* SPDX-License-Identifier: GPL-2.0 */
/*
 * fakedev.c: the fake device of the -DPMM_FAKE_DEV build, which models the
 * module on /dev/null for the host's tests and benchmarks. Empty in the
 * real build.
 */
#ifndef PMM_FAKEDEV_H
#define PMM_FAKEDEV_H

#include <sys/types.h>

#include "hook.h"

#ifdef PMM_FAKE_DEV

PMM_HIDDEN_BEGIN

/* The fake device's PMM_FAKE_RAISE: SIGUSR1 at the Nth pass at this point. */
enum { FAKE_AT_BATCH = 1, FAKE_AT_CLAIM = 2 };
void pmm_fake_point(int at);

/* The module's answer to ioctl cmd on fd (the device's file, called too). */
int fake_ioctl(int fd, unsigned long cmd, void *arg);

/* PMM_FAKE_* from env; pid: this process, monitored unless
 * PMM_FAKE_UNMONITORED. */
void fake_dev_setup(char **env, pid_t pid);

PMM_HIDDEN_END

#endif /* PMM_FAKE_DEV */

#endif /* PMM_FAKEDEV_H */
