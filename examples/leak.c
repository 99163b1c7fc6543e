// SPDX-License-Identifier: GPL-2.0
/*
 * leak: leaks a known number of bytes per iteration at a known line, among
 * allocations that are all freed (malloc 100, realloc 200, free).
 *
 *   leak [-n iterations] [-b bytes leaked per iteration] [-s sleep ms] [-w]
 *
 * Built twice: bin/leak (plain: the site is the caller's address) and
 * bin/leak_shim (with pmm_hooks.h: file, function, line). Prints
 * "leak: pid P line L bytes B" at start and "leak: done T" after the loop
 * (T = total leaked bytes), having flushed its records; with -w it then
 * waits until stdin reaches end of file. SIGUSR1 ends the loop early.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef PMM_SHIM
#include "pmm_hooks.h"
#endif

enum { LEAK_LINE = __LINE__ + 3 };
__attribute__((noinline)) static void *leak_here(size_t bytes)
{
	void *p = malloc(bytes);	/* the leak */

	if (p)
		memset(p, 0x6c, bytes);
	return p;
}

__attribute__((noinline)) static void churn(void)
{
	char *c = malloc(100);

	c = realloc(c, 200);
	memset(c, 1, 200);
	free(c);
}

static volatile sig_atomic_t stop_loop;

static void on_usr1(int sig)
{
	(void)sig;
	stop_loop = 1;
}

static void flush_records(void)
{
	/* libpmmhook.so's pmm_flush, if it is loaded: send buffered records */
	void (*flush)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "pmm_flush");

	if (flush)
		flush();
}

int main(int argc, char **argv)
{
	long n = 10, sleep_ms = 0, i;
	size_t bytes = 1000, total = 0;
	int opt, wait = 0;

	while ((opt = getopt(argc, argv, "n:b:s:w")) != -1) {
		switch (opt) {
		case 'n': n = atol(optarg); break;
		case 'b': bytes = (size_t)atol(optarg); break;
		case 's': sleep_ms = atol(optarg); break;
		case 'w': wait = 1; break;
		default:
			fprintf(stderr, "usage: leak [-n iterations] [-b bytes] [-s sleep ms] [-w]\n");
			return 2;
		}
	}
	signal(SIGUSR1, on_usr1);
	printf("leak: pid %d line %d bytes %zu\n", (int)getpid(), LEAK_LINE, bytes);
	fflush(stdout);
	for (i = 0; i < n && !stop_loop; i++) {
		if (leak_here(bytes))
			total += bytes;
		churn();
		if (sleep_ms > 0) {
			struct timespec ts = { sleep_ms / 1000, (sleep_ms % 1000) * 1000000L };

			nanosleep(&ts, NULL);
		}
	}
	flush_records();
	printf("leak: done %zu\n", total);
	fflush(stdout);
	if (wait)
		while (getchar() != EOF)
			;
	return 0;
}
