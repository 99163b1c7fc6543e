/* SPDX-License-Identifier: GPL-2.0 */
/*
 * snapshot.c: every thread stopped, its registers copied, a copy of the
 * process made by a clone system call, the threads let go.
 */
#ifndef PMM_SCAN_SNAPSHOT_H
#define PMM_SCAN_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

#define MAX_THREADS	65536

struct thread_regs {
	pid_t tid;
	struct user_regs_struct regs;
	uint8_t *xstate;	/* NT_X86_XSTATE, xlen bytes */
	size_t xlen;
	uint64_t stopped_us, released_us;
};

struct snapshot {
	pid_t pid, child;
	struct thread_regs *t;
	int n;
	uint64_t t1_ns;			/* CLOCK_MONOTONIC with every thread stopped */
	uint64_t longest_stop_us, fork_us, stop_all_us;
};

/* Stops every thread, copies their registers, makes the copy (clone from
 * one of them at syscall_insn) and lets them go; dies on a refusal. */
void snapshot_take(struct snapshot *s, uint64_t syscall_insn);
void snapshot_drop(struct snapshot *s);

#endif /* PMM_SCAN_SNAPSHOT_H */
