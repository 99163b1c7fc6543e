// SPDX-License-Identifier: GPL-2.0
/*
 * Growth of kind RETENTION by arenas: a thread starts every 200 ms; each
 * gets an arena of its own (glibc gives a new thread a new arena while
 * there are fewer than M_ARENA_MAX: set to 256 here, so the program behaves
 * the same on any number of CPUs), allocates 256 blocks of 4 KiB in it,
 * writes them, then a 16-byte block above them, and frees the 256: the
 * small block keeps the arena from shrinking, so each thread leaves 1 MiB
 * of free memory its arena holds (about 5 MiB/s) and 16 bytes of live
 * heap. The threads wait until the end, a small malloc and free every
 * 150 ms. It grows from a first SIGUSR2 until SECS seconds or a second
 * one (kinds.h).
 *
 *   kind_arenas SECS
 */
#include <pthread.h>

#include "kinds.h"

#define BLOCKS 256
#define MAX_THREADS 256

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_settled; /* threads whose arena holds its 1 MiB of free memory */

static void *worker(void *arg)
{
	static __thread void *blocks[BLOCKS];
	void *pin;
	int i;

	for (i = 0; i < BLOCKS; i++) {
		blocks[i] = malloc(4096);
		if (blocks[i])
			memset(blocks[i], 0x3c, 4096);
	}
	pin = malloc(16);
	for (i = 0; i < BLOCKS; i++)
		free(blocks[i]);
	pthread_mutex_lock(&g_lock);
	if (pin)
		g_own_live += 16;
	g_settled++;
	pthread_mutex_unlock(&g_lock);
	/* some work now and then, as a worker does: it also lets the hook
	 * send the frees it holds (it sends a thread's records when one comes
	 * 100 ms after the first it holds)
	 */
	while (!g_stop) {
		usleep(150000);
		free(malloc(16));
	}
	free(pin);
	return arg;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 10, end, next;
	pthread_t threads[MAX_THREADS];
	int n = 0, rc, i;

	mallopt(M_ARENA_MAX, MAX_THREADS);
	kinds_start();
	end = kinds_wait_start(secs);
	next = now_s();
	while (kinds_growing(end)) {
		if (now_s() >= next && n < MAX_THREADS) {
			if (pthread_create(&threads[n], NULL, worker, NULL) == 0)
				n++;
			next += 0.2;
		}
		kinds_tick(10000);
	}
	/* the report at the hold is the program's figures once growth ended:
	 * a thread started last, slowed on a busy machine, may still be
	 * writing its blocks (arena counted, pages not yet resident) */
	for (;;) {
		pthread_mutex_lock(&g_lock);
		i = g_settled;
		pthread_mutex_unlock(&g_lock);
		if (i >= n)
			break;
		usleep(10000);
	}
	rc = kinds_hold();
	for (i = 0; i < n; i++)
		pthread_join(threads[i], NULL);
	return rc;
}
