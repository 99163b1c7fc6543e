// SPDX-License-Identifier: GPL-2.0
/*
 * A child made with or without fork handlers.
 *   forkraw fork|_Fork|clone   the parent allocates and frees 300 blocks of
 *                              48 bytes, then makes a child with fork(),
 *                              glibc's _Fork() (no atfork handlers) or a
 *                              raw clone system call (SIGCHLD only: a copy,
 *                              as fork, that glibc never hears of); the
 *                              child allocates and frees 600 blocks of 88
 *                              bytes and 1000 of 104, and exits; the parent
 *                              waits, allocates and frees 1000 blocks of 56
 *                              bytes and prints "child PID".
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) static void churn(size_t size, int n)
{
	for (int i = 0; i < n; i++) {
		void *volatile p = malloc(size);

		free(p);
	}
}

int main(int argc, char **argv)
{
	const char *how = argc > 1 ? argv[1] : "fork";
	int status;
	pid_t pid;

	churn(48, 300);
	if (!strcmp(how, "_Fork"))
		pid = _Fork();
	else if (!strcmp(how, "clone"))
		pid = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
	else
		pid = fork();
	if (pid == 0) {
		churn(88, 600);
		churn(104, 1000);
		exit(0);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid || status != 0)
		return 1;
	churn(56, 1000);
	printf("child %d\n", (int)pid);
	return 0;
}
