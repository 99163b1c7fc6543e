// SPDX-License-Identifier: GPL-2.0
/*
 * A process whose main thread calls pthread_exit(): the thread-group leader
 * becomes a zombie with no mm while a second thread runs on (60 s).
 * Prints "ready" once the second thread runs.
 */
#include <pthread.h>
#include "pmmtest.h"

static void *run(void *arg)
{
	(void)arg;
	sleep(60);
	return NULL;
}

int main(void)
{
	pthread_t t;

	if (pthread_create(&t, NULL, run, NULL))
		DIE("pthread_create");
	printf("ready\n");
	fflush(stdout);
	pthread_exit(NULL);
}
