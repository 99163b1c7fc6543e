/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The process pmm-inject attaches to, as its parts share it: its objects
 * and the code ranges a safe point must avoid (objects.c fills them), the
 * library to load and how (inject.c, startup.c). main owns the one
 * struct target and passes it to each part.
 */
#ifndef PMM_INJECT_TARGET_H
#define PMM_INJECT_TARGET_H

#include <stdint.h>
#include <sys/types.h>

#include "elfmem.h"

#define MAX_RANGES	256
#define MAX_OBJECTS	256

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

/* a is in one of the n ranges r */
static inline int in_ranges(const struct range *r, int n, uintptr_t a)
{
	int i;

	for (i = 0; i < n; i++)
		if (a >= r[i].lo && a < r[i].hi)
			return 1;
	return 0;
}

#endif /* PMM_INJECT_TARGET_H */
