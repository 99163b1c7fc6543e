/* SPDX-License-Identifier: GPL-2.0 */
/*
 * target.c: the running process: its objects, the hook's registry, a
 * syscall instruction.
 */
#ifndef PMM_SCAN_TARGET_H
#define PMM_SCAN_TARGET_H

#include <stdint.h>
#include <sys/types.h>

struct target_info {
	pid_t pid;
	int pidfd;
	uint64_t registry;		/* pmm_scan_registry's address, 0: no hook */
	uint64_t syscall_insn;		/* a syscall instruction in its code */
	uint64_t hook_dev, hook_ino;	/* libpmmhook.so's file */
	int dynamic;			/* has a dynamic loader */
	int is_init;			/* pid 1 of its pid namespace */
	uint16_t mode;			/* the hook's, read live before the stop */
};

void target_inspect(struct target_info *t);

#endif /* PMM_SCAN_TARGET_H */
