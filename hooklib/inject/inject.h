/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pmm-inject's parts: inject.c (the process: checks, its threads, main),
 * objects.c (the target's objects: what a safe point must avoid, libc's
 * dlopen), thread.c (one thread: stopped, judged, made to call, restored),
 * startup.c (--exec: a program started with the hook, attached at its
 * entry point); tracee.c, shared with pmm-scan, what any ptrace of it needs.
 */
#ifndef PMM_INJECT_H
#define PMM_INJECT_H

#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

#include "elfmem.h"
#include "tracee.h"

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

#define MAX_RANGES	256
#define MAX_OBJECTS	256
#define STACK_SCAN	(256 * 1024)	/* bytes of stack above sp searched */
#define CALL_TIMEOUT_MS	10000
#define SCRATCH		4096		/* below the red zone: the calls' strings */
#define STACK_NEED	(64 * 1024)	/* stack below sp that dlopen and pmm_attach may use */

struct range {
	uintptr_t lo, hi;
};

/* A file the target has mapped (its maps' device and inode), as loaded. */
struct object {
	char name[256];		/* the path its maps give: a name only, never opened */
	char dev[16];
	unsigned long ino;
	uintptr_t lo, hi;	/* its mappings */
	uintptr_t base;		/* the mapping at file offset 0 */
	uintptr_t text_lo, text_hi;
	struct elf_image img;
	struct eh_table eh;
	int have_eh;
};

struct target {
	pid_t pid;
	int pidfd;		/* pins the process: a reused pid is not it */
	struct object objs[MAX_OBJECTS];
	int n_objs;
	struct range deny[MAX_RANGES];
	int n_deny;
	struct range plain[MAX_RANGES];	/* code of the program's own */
	int n_plain;
	uintptr_t restorer;	/* libc's signal return (__restore_rt), 0: unknown */
	uintptr_t dlopen, dlsym, dlerror;	/* in the target */
	uintptr_t memfd_create, close;		/* libc's, for via_memfd */
	const char *lib;
	/* lib is not that file at its path in the target's mount namespace: a
	 * copy in a memfd of the target's is loaded instead (/proc/self/fd/N) */
	int via_memfd;
	/* --exec with a socket for --status-fd: once attached, "pid PID" is
	 * said there and the program waits at its entry point until the reader
	 * answers (pmctl run saves its maps meanwhile); -1: none */
	int hold_fd;
};


/* objects.c: t's deny and plain ranges and libc's dl* functions, from its
 * maps and the objects' .dynsym; dies if it has no dynamic loader. */
void scan_objects(struct target *t);

/* unwinder.c: a child that judges threads by their unwound call chains;
 * unwound_safe: 1 safe, 0 not, -1 cannot tell (no child, or it failed). */
void unwinder_start(const struct target *t);
int unwound_safe(pid_t tid, const struct user_regs_struct *r);

/* thread.c */
int in_ranges(const struct range *r, int n, uintptr_t a);
int safe_point(const struct target *t, pid_t tid, const struct user_regs_struct *r);
/* dlopen, dlsym and pmm_attach(conf) in the stopped thread tid, which is
 * restored and detached after: 0 (*result: pmm_attach's) or an EXIT_*. */
int attach_thread(struct target *t, pid_t tid, const char *conf, int *result,
		  char *why, size_t why_len);

/* startup.c: --exec. Starts argv with the hook attached at its entry
 * point and exits as it exits; refusals die() before it runs. */
__attribute__((noreturn)) void exec_program(struct target *t, const char *conf, char **argv,
					    int status_fd);

#endif /* PMM_INJECT_H */
