// SPDX-License-Identifier: GPL-2.0
/*
 * malloc and free from a signal handler that interrupts them.
 *   sigstorm MS   for MS milliseconds of its cpu time the main loop allocates and frees
 *                 blocks of 40 bytes at one call site, under a SIGALRM storm
 *                 (ITIMER_REAL, every 20 us) whose handler frees the block
 *                 its previous call allocated and allocates one of 200
 *                 bytes, at another call site. Prints "rounds R handler H":
 *                 the main loop's blocks and the handler's (seven of them
 *                 from before the storm, which fill glibc's tcache for
 *                 that size, so that the handler never needs the arena's
 *                 lock, which the main loop could hold); the handler's last
 *                 block is not freed.
 *   sigstorm MS calloc   the same, the main loop's blocks from calloc(1, 40).
 *
 * MS is the process's cpu time, not the wall clock's: the timer's signals
 * that come while it waits for a cpu merge into one, so on a busy machine
 * MS of wall time gave a handful of handler calls where an idle one gives
 * thousands (the tests need a thousand).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static void *volatile last;
static volatile long handled;
static double end;		/* then the handler does nothing: a main loop
				 * that the handlers starve still ends */

/* The handler's call site, also used to warm its size class. */
__attribute__((noinline)) static void *handler_block(void)
{
	void *volatile p = malloc(200);	/* not a tail call: one site */

	return p;
}

static int use_calloc;

__attribute__((noinline)) static void main_round(void)
{
	void *volatile p = use_calloc ? calloc(1, 40) : malloc(40);

	free(p);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void on_alarm(int sig)
{
	int saved = errno;

	(void)sig;
	if (now() >= end)
		return;
	free(last);
	last = handler_block();
	handled++;
	errno = saved;
}

int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	struct itimerval storm = { { 0, 20 }, { 0, 20 } }, off = { { 0, 0 }, { 0, 0 } };
	void *warm[7];
	long rounds = 0;

	use_calloc = argc > 2 && argv[2][0] == 'c';
	for (int i = 0; i < 7; i++)
		warm[i] = handler_block();
	for (int i = 0; i < 7; i++)
		free(warm[i]);
	handled = 7;
	main_round();
	rounds = 1;
	end = now() + (argc > 1 ? atof(argv[1]) : 100) / 1000;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGALRM, &sa, NULL) || setitimer(ITIMER_REAL, &storm, NULL))
		return 1;
	do {
		for (int i = 0; i < 256; i++)
			main_round();
		rounds += 256;
	} while (now() < end);
	setitimer(ITIMER_REAL, &off, NULL);
	printf("rounds %ld handler %ld\n", rounds, handled);
	return 0;
}
