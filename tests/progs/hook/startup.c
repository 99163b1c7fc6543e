// SPDX-License-Identifier: GPL-2.0
/*
 * A program to start with the hook attached at its entry point
 * (pmm-inject --exec, pmctl run --no-preload): what it prints must be a
 * bare run's.
 *
 *   startup STATUS [wait] [kill]
 *   startup child
 *
 * A constructor of its own keeps a block of 222221 bytes, main one of
 * 111111 first thing (both after the entry point: recorded). It prints
 * LD_PRELOAD and how many PMM_* variables it has, then runs itself as
 * "child" (fork and exec), which allocates 333331 bytes and prints whether
 * a libpmmhook library is mapped in it ("no" bare: the hook must not be
 * inherited). wait: then reads stdin to its end (a test signals it
 * meanwhile); kill: ends by SIGTERM; else exits with STATUS.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void *volatile kept[3];

__attribute__((constructor)) static void early(void)
{
	kept[0] = malloc(222221);
}

static int hook_mapped(void)
{
	char line[512];
	FILE *f = fopen("/proc/self/maps", "re");
	int found = 0;

	while (f && fgets(line, sizeof(line), f))
		found |= strstr(line, "libpmmhook") != NULL;
	if (f)
		fclose(f);
	return found;
}

static int child(void)
{
	kept[2] = malloc(333331);
	printf("child: hook mapped %s, LD_PRELOAD %s\n", hook_mapped() ? "yes" : "no",
	       getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "unset");
	free(kept[2]);
	return 0;
}

int main(int argc, char **argv)
{
	int status = 0, pmm_vars = 0, i;
	char buf[256];
	pid_t pid;

	kept[1] = malloc(111111);
	if (argc > 1 && !strcmp(argv[1], "child"))
		return child();
	for (i = 0; environ[i]; i++)
		pmm_vars += !strncmp(environ[i], "PMM_", 4);
	printf("LD_PRELOAD %s, %d PMM_* variables, %d in all\n",
	       getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "unset", pmm_vars, i);
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		execl("/proc/self/exe", argv[0], "child", (char *)NULL);
		_exit(127);
	}
	waitpid(pid, &status, 0);
	printf("child status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	fflush(stdout);
	free(kept[1]);
	for (i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "wait")) {
			printf("waiting\n");
			fflush(stdout);
			while (fgets(buf, sizeof(buf), stdin))
				;
		} else if (!strcmp(argv[i], "kill")) {
			raise(SIGTERM);
		}
	}
	return argc > 1 ? atoi(argv[1]) : 0;
}
