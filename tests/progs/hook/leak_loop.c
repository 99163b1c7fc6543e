// SPDX-License-Identifier: GPL-2.0
/*
 * A daemon-like leaker for the attach tests (tests/guest/test_attach.py):
 * prints its pid, then every 10 ms leaks 100 bytes at leak_request and
 * churns (malloc/free) in THREADS more threads, until SECS have passed or
 * it is killed. Built -O1 -g -fno-omit-frame-pointer, as a user builds.
 *
 *   leak_loop SECS [THREADS]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile int g_stop;
static void *g_kept[200000];

__attribute__((noinline)) static void *leak_request(size_t n)
{
	void *p = malloc(n);

	if (p)
		memset(p, 0x5a, n);
	return p;
}

static void *churn(void *arg)
{
	while (!g_stop) {
		free(malloc(48));
		usleep(500);
	}
	return arg;
}

int main(int argc, char **argv)
{
	int secs = argc > 1 ? atoi(argv[1]) : 60, threads = argc > 2 ? atoi(argv[2]) : 0;
	time_t end = time(NULL) + secs;
	pthread_t t[8];
	int i, n = 0;

	printf("pid %d\n", getpid());
	fflush(stdout);
	for (i = 0; i < threads && i < 8; i++)
		pthread_create(&t[i], NULL, churn, NULL);
	while (time(NULL) < end) {
		if (n < 200000)
			g_kept[n++] = leak_request(100);
		g_kept[n - 1] = NULL;	/* the last pointer to it dropped: a leak */
		usleep(10000);
	}
	g_stop = 1;
	for (i = 0; i < threads && i < 8; i++)
		pthread_join(t[i], NULL);
	printf("leaked %d\n", n);
	return 0;
}
