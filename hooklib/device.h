/* SPDX-License-Identifier: GPL-2.0 */
/*
 * device.c: $PMM_DEVICE or /dev/pmm (/dev/null in the fake-device build):
 * open, the check that the hook's fd is still the device, the ioctls, and
 * giving up.
 */
#ifndef PMM_DEVICE_H
#define PMM_DEVICE_H

#include "hook.h"

PMM_HIDDEN_BEGIN

extern int g_fd;		/* the device, 3 or above (dev_open); -1: none */
extern int g_dev_usable;	/* 0: everything passes straight to libc */

/* env's PMM_DEVICE if set and not empty, else /dev/pmm (/dev/null fake). */
const char *dev_path(char **env);
/* path's fd, close-on-exec, at 3 or above, or -errno. */
int dev_open(const char *path);
/* fd is still the file dev_open opened. */
int dev_ours(int fd);
/* ioctl on the device, EINTR retried; 0 or more, or -errno; errno kept.
 * A device fd the program closed gives up the device, quietly. */
int pmm_dev_ioctl(unsigned long cmd, void *arg);
/* Everything passes straight to libc from now on; 1 if this call ended it. */
int deactivate(void);
/* deactivate, with the one line on stderr: what failed with err. */
void disable(int err, const char *what);

PMM_HIDDEN_END

#endif /* PMM_DEVICE_H */
