// SPDX-License-Identifier: GPL-2.0
/*
 * forker: the parent leaks PARENT bytes, forks; the child leaks CHILD bytes.
 * For the hook's fork-policy tests.
 *
 *   forker PARENT CHILD
 *
 * Each process flushes its records (pmm_flush, when libpmmhook.so is
 * loaded), prints "parent P ready" / "child C ready" and waits until stdin
 * reaches end of file; the parent then reaps the child.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void flush_records(void)
{
	void (*flush)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "pmm_flush");

	if (flush)
		flush();
}

/* kept here so that the compiler cannot drop the allocations */
static void *volatile kept[2];

__attribute__((noinline)) static void *leak_parent(size_t n)
{
	void *p = malloc(n);

	memset(p, 1, n);
	return p;
}

__attribute__((noinline)) static void *leak_child(size_t n)
{
	void *p = malloc(n);

	memset(p, 2, n);
	return p;
}

int main(int argc, char **argv)
{
	size_t parent, child;
	pid_t pid;

	if (argc != 3) {
		fprintf(stderr, "usage: forker PARENT CHILD\n");
		return 2;
	}
	parent = (size_t)atol(argv[1]);
	child = (size_t)atol(argv[2]);
	setvbuf(stdout, NULL, _IONBF, 0);
	kept[0] = leak_parent(parent);	/* still in the parent's buffer at fork */
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		kept[1] = leak_child(child);
		flush_records();
		printf("child %d ready\n", (int)getpid());
		while (getchar() != EOF)
			;
		_exit(0);
	}
	flush_records();
	printf("parent %d ready\n", (int)getpid());
	while (getchar() != EOF)
		;
	waitpid(pid, NULL, 0);
	return 0;
}
