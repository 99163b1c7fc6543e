/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pmm-inject's exit codes: each refusal's own, with one line on stderr (or
 * "error MESSAGE" on --status-fd). pmctl attach and pmctl run --no-preload
 * tell them apart.
 */
#ifndef PMM_INJECT_EXIT_CODES_H
#define PMM_INJECT_EXIT_CODES_H

enum {
	EXIT_ATTACHED = 0,
	EXIT_USAGE = 2,
	EXIT_NO_PROCESS = 3,	/* no such process */
	EXIT_PERMISSION = 4,	/* ptrace refused: permission, Yama */
	EXIT_TRACED = 5,	/* traced already (a debugger, another attach) */
	EXIT_NOT_DYNAMIC = 6,	/* no dynamic loader: static, or not glibc */
	EXIT_NO_LIBRARY = 7,	/* not the same file there, and no copy in a memfd */
	EXIT_SECCOMP = 8,	/* a seccomp filter could refuse or kill the calls */
	EXIT_NO_SAFE_POINT = 9,	/* no thread at a safe point in time */
	EXIT_LOAD_FAILED = 10,	/* dlopen or dlsym failed in the target */
	EXIT_ATTACH_FAILED = 11,	/* pmm_attach refused (its errno) */
	EXIT_GONE = 12,		/* the target exited meanwhile */
};

#endif /* PMM_INJECT_EXIT_CODES_H */
