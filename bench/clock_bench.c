// SPDX-License-Identifier: GPL-2.0
/* ns per clock_gettime (MONOTONIC, MONOTONIC_COARSE) and per getppid()
 * system call: what a record's timestamp and a batch's ioctl entry cost. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double secs(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Prints the mean cost of one clock_gettime(id) over n reads. */
static long time_clock(clockid_t id, const char *name, long n)
{
	struct timespec ts;
	double a, b;
	long s = 0;

	a = secs();
	for (long i = 0; i < n; i++) {
		clock_gettime(id, &ts);
		s += ts.tv_nsec;
	}
	b = secs();
	printf("clock_gettime(%s): %.1f ns\n", name, (b - a) * 1e9 / (double)n);
	return s;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	double a, b;
	long s;

	s = time_clock(CLOCK_MONOTONIC, "CLOCK_MONOTONIC", n);
	s += time_clock(CLOCK_MONOTONIC_COARSE, "CLOCK_MONOTONIC_COARSE", n);
	a = secs();
	for (long i = 0; i < n / 10; i++)
		s += syscall(SYS_getppid);
	b = secs();
	printf("syscall(getppid): %.1f ns\n", (b - a) * 1e9 / (double)(n / 10));
	return s == 42;
}
