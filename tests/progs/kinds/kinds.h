/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the kinds-of-growth programs share (tests/guest/test_growth_kinds.py):
 * each waits for a first SIGUSR2, grows its memory one way for SECS seconds
 * or until a second SIGUSR2, then holds it until SIGTERM (a test starts
 * the growth once it watches). On SIGUSR1, and once growth ends, it
 * writes its figures to $KIND_REPORT (else nothing): the bytes it holds in
 * live blocks by its own count, glibc's mallinfo2() and
 * /proc/self/smaps_rollup, as "name bytes"
 * lines, so a test checks pmm's numbers against them. The report is written
 * from the main loop (mallinfo2 is not async-signal-safe) into a temporary
 * file renamed over the report, so a reader never sees half of one.
 *
 * The first line on stdout is the pid; "holding" follows when growth ends.
 */
#ifndef KINDS_H
#define KINDS_H

#include <dlfcn.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_report, g_stop, g_usr2;
static size_t g_own_live; /* bytes in the program's live blocks, as requested */

static void on_usr1(int sig)
{
	(void)sig;
	g_report = 1;
}

static void on_usr2(int sig)
{
	(void)sig;
	g_usr2++;
}

static void on_term(int sig)
{
	(void)sig;
	g_stop = 1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void kinds_report(void)
{
	const char *path = getenv("KIND_REPORT");
	struct mallinfo2 mi = mallinfo2();
	char tmp[4096], line[256], name[64];
	unsigned long long kb;
	FILE *f, *r;

	if (!path || !*path)
		return;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "pid %d\nown_live %zu\n", (int)getpid(), g_own_live);
	fprintf(f, "mallinfo2.arena %zu\nmallinfo2.ordblks %zu\nmallinfo2.hblkhd %zu\n"
		"mallinfo2.uordblks %zu\nmallinfo2.fordblks %zu\nmallinfo2.keepcost %zu\n",
		mi.arena, mi.ordblks, mi.hblkhd, mi.uordblks, mi.fordblks, mi.keepcost);
	r = fopen("/proc/self/smaps_rollup", "r");
	while (r && fgets(line, sizeof(line), r))
		if (sscanf(line, "%63[A-Za-z_]: %llu kB", name, &kb) == 2)
			fprintf(f, "rollup.%s %llu\n", name, kb * 1024);
	if (r)
		fclose(r);
	fclose(f);
	rename(tmp, path);
}

/* Installs the handlers and prints the pid. */
static void kinds_start(void)
{
	signal(SIGUSR1, on_usr1);
	signal(SIGUSR2, on_usr2);
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	printf("%d\n", (int)getpid());
	fflush(stdout);
}

/* Waits for the first SIGUSR2 (or SIGTERM); then, the end of growth. */
static double kinds_wait_start(double secs)
{
	while (!g_usr2 && !g_stop)
		usleep(10000);
	return now_s() + secs;
}

/* Whether to grow on: until `end` (now_s()), a second SIGUSR2 or SIGTERM. */
static int kinds_growing(double end)
{
	return !g_stop && g_usr2 < 2 && now_s() < end;
}

/* Between steps: answers a report request, sleeps `us` microseconds. */
static void kinds_tick(unsigned int us)
{
	if (g_report) {
		g_report = 0;
		kinds_report();
	}
	usleep(us);
}

/*
 * After growth: reports once, says so, and holds until SIGTERM. A held
 * program calls no allocator, so the hook's report of the allocator (made
 * from its allocation paths, at most every 100 times the last one took:
 * hooklib/heap.c) would stay as the growth left it; the hook's pmm_flush,
 * when it is loaded, lets the next one be made without touching the heap.
 */
static int kinds_hold(void)
{
	void (*flush)(void);

	*(void **)&flush = dlsym(RTLD_DEFAULT, "pmm_flush");
	kinds_report();
	printf("holding\n");
	fflush(stdout);
	while (!g_stop) {
		if (flush)
			flush();
		kinds_tick(20000);
	}
	return 0;
}

#endif
