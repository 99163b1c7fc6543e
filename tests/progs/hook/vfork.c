// SPDX-License-Identifier: GPL-2.0
/*
 * A vfork child that allocates: it runs on the parent's memory and calling
 * thread (TLS included), so what the hook does in it happens to the
 * parent's state.
 *   vfork full|over|late   the parent allocates and frees 300 blocks of
 *                     48 bytes, then vforks; the child allocates and frees
 *                     300 blocks of 88 bytes (full: at once, filling a
 *                     PMM_BUFFER=512 buffer), 3000 (over: filling it and
 *                     going on) or 50 after sleeping 150 ms (late: past
 *                     the buffer's 100 ms deadline), then
 *                     _exit(0)s; the parent then allocates and frees 1000
 *                     blocks of 56 bytes and prints "child PID".
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
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
	int late = argc > 1 && !strcmp(argv[1], "late"), status;
	int over = argc > 1 && !strcmp(argv[1], "over");
	struct timespec pause = { 0, 150 * 1000 * 1000 };
	pid_t pid;

	churn(48, 300);
	pid = vfork();
	if (pid == 0) {
		if (late)
			nanosleep(&pause, NULL);
		churn(88, late ? 50 : over ? 3000 : 300);
		_exit(0);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid || status != 0)
		return 1;
	churn(56, 1000);
	printf("child %d\n", (int)pid);
	return 0;
}
