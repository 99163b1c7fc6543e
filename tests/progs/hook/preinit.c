// SPDX-License-Identifier: GPL-2.0
/*
 * The hook's first call from a .preinit_array function, which runs before
 * libc's own initialisation (glibc has not set environ yet). The function
 * sets errno to EBADF and calls malloc, calloc, realloc and free, whose
 * first starts the hook; errno must still be EBADF after each.
 *   preinit [N]   then main keeps N blocks of 48 bytes (default 0) and
 *                 prints "preinit: environ NULL|set, errno kept|changed to E"
 *                 (exit 1 if changed)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

extern char **environ;

static int environ_was_set;
static int errno_seen;		/* the first errno other than EBADF, or 0 */

static void check(void)
{
	if (errno != EBADF && !errno_seen)
		errno_seen = errno ? errno : -1;
	errno = EBADF;
}

static void early(int argc, char **argv, char **envp)
{
	void *volatile p;
	void *volatile q;

	(void)argc;
	(void)argv;
	(void)envp;
	environ_was_set = environ != NULL;
	errno = EBADF;
	p = malloc(100);
	check();
	q = calloc(3, 40);
	check();
	p = realloc(p, 1000);
	check();
	free(q);
	check();
	free(p);
	check();
}

__attribute__((section(".preinit_array"), used)) static void (*early_fn)(int, char **,
									  char **) = early;

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 0;

	for (int i = 0; i < n; i++) {
		void *volatile p = malloc(48);

		(void)p;	/* kept: live blocks, sent as they are */
	}
	printf("preinit: environ %s, ", environ_was_set ? "set" : "NULL");
	if (!errno_seen) {
		printf("errno kept\n");
		return 0;
	}
	printf("errno changed to %d\n", errno_seen < 0 ? 0 : errno_seen);
	return 1;
}
