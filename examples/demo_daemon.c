// SPDX-License-Identifier: GPL-2.0
/*
 * demo_daemon: a demo daemon, an endless loop of malloc(100), realloc(200),
 * free, built with pmm_hooks.h so that each call
 * is recorded with its file, function and line. (The monitoring daemon of
 * this project is the Python `pmd`: the demo has a name of its own so that
 * "LEAK pid N (demo_daemon)" is not read as pmm's daemon leaking.)
 *
 *   demo_daemon [-n iterations (0: forever)] [-s sleep ms] [-l leak bytes per iteration]
 *
 * With -l, each iteration also leaks that many bytes, in main(). It prints
 * "demo_daemon: pid N" at start; after the loop it flushes its records, prints
 * "demo_daemon: done leak-line L" (the line of the leaking malloc) and waits until
 * stdin reaches end of file (so a test can read /proc/pmm/pid first).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pmm_hooks.h"

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	if (ms > 0)
		nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
	long iterations = 0, sleep = 1000, i;
	size_t leak_bytes = 0;
	int leak_line = 0;
	char *chr;
	int opt;

	while ((opt = getopt(argc, argv, "n:s:l:")) != -1) {
		switch (opt) {
		case 'n': iterations = atol(optarg); break;
		case 's': sleep = atol(optarg); break;
		case 'l': leak_bytes = (size_t)atol(optarg); break;
		default:
			fprintf(stderr, "usage: demo_daemon [-n iterations] [-s sleep ms] [-l leak bytes]\n");
			return 2;
		}
	}
	printf("demo_daemon: pid %d\n", (int)getpid());
	fflush(stdout);
	for (i = 0; iterations == 0 || i < iterations; i++) {
		chr = (char *)malloc(sizeof(char) * 100);		/* malloc call */
		chr = (char *)realloc(chr, sizeof(char) * 200);	/* realloc call */
		free(chr);						/* free call */
		if (leak_bytes) {
			enum { LEAK_LINE = __LINE__ + 1 };
			char *lost = malloc(leak_bytes);			/* leaked on purpose */

			leak_line = LEAK_LINE;
			if (lost)
				memset(lost, 0x5a, leak_bytes);
		}
		sleep_ms(sleep);
	}
	pmm_hooks_flush();
	printf("demo_daemon: done leak-line %d\n", leak_line);
	fflush(stdout);
	while (getchar() != EOF)
		;
	return 0;
}
