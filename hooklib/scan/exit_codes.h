/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pmm-scan's exit codes, each with one line on stderr: pmctl unreachable
 * tells them apart.
 */
#ifndef PMM_SCAN_EXIT_CODES_H
#define PMM_SCAN_EXIT_CODES_H


enum {
	EXIT_SCANNED = 0,
	EXIT_FAILED = 1,	/* the scan itself failed (its message says why) */
	EXIT_USAGE = 2,
	EXIT_NO_PROCESS = 3,
	EXIT_PERMISSION = 4,	/* ptrace refused: permission, Yama */
	EXIT_TRACED = 5,	/* traced already: a debugger, an attach */
	EXIT_STATIC = 6,	/* statically linked: no hook can be in it */
	EXIT_NOT_MONITORED = 7,	/* the module has no entry for it */
	EXIT_NOT_EXACT = 8,	/* not in exact mode, or a hook without the registry */
	EXIT_SECCOMP = 9,	/* a seccomp filter could refuse or kill the clone */
	EXIT_NO_FORK = 10,	/* the copy could not be made: the clone failed, pid 1 */
	EXIT_NOT_STOPPED = 11,	/* a thread did not stop in time */
	EXIT_GONE = 12,		/* it exited meanwhile */
	EXIT_UNSUPPORTED = 13,	/* the kernel or the module lacks what the scan needs */
};

#endif /* PMM_SCAN_EXIT_CODES_H */
