// SPDX-License-Identifier: GPL-2.0
/*
 * fork, allocate in both processes, exec a program in the child (which
 * inherits LD_PRELOAD), wait; also posix_spawn and system(). Prints what
 * each step returned; the host test compares with a bare run.
 */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int main(void)
{
	char *p = malloc(1000);
	int status;
	pid_t pid;

	strcpy(p, "parent block");
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		char *c = malloc(5000);

		strcpy(c, "child");
		free(p);
		execlp("sh", "sh", "-c", "echo exec ok: $(echo child | tr a-z A-Z)", (char *)NULL);
		_exit(127);
	}
	waitpid(pid, &status, 0);
	printf("child exit %d, %s\n", WEXITSTATUS(status), p);
	fflush(stdout);
	{
		char *argv[] = { "sh", "-c", "echo spawn ok", NULL };

		if (posix_spawnp(&pid, "sh", NULL, NULL, argv, environ) == 0) {
			waitpid(pid, &status, 0);
			printf("spawn exit %d\n", WEXITSTATUS(status));
		}
	}
	fflush(stdout);
	status = system("exit 3");
	printf("system exit %d\n", WEXITSTATUS(status));
	free(p);
	return 0;
}
