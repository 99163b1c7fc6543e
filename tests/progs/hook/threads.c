// SPDX-License-Identifier: GPL-2.0
/*
 * threads: allocation patterns across threads, for the hook's tests.
 *
 *   threads cross N SIZE   thread A allocates N blocks of SIZE bytes and stays
 *                          alive holding its records; thread B frees them all
 *                          and exits (its FREE records reach the kernel
 *                          first); then A exits. Nothing is left live.
 *   threads exit N SIZE    a thread allocates N blocks of SIZE (kept) and
 *                          exits; main then makes no allocation at all.
 *   threads pingpong N SIZE
 *                          request/response: thread A allocates a request
 *                          and hands it to B, which frees it and answers
 *                          with a block of the same size (glibc gives B the
 *                          request's address back), which A frees; N times.
 *                          B exits after A, so A's records (N <= 255: all
 *                          in one buffer) reach the kernel before B's.
 *                          Then a thread allocates and at once frees N x 10
 *                          blocks of SIZE. All threads exit; nothing is live.
 *   threads race N SIZE    two threads at once, N x 10 times each: allocate
 *                          a block of SIZE, swap it into a shared slot and
 *                          free what was there (often the other thread's).
 *                          glibc's tcache hands a freed address back to the
 *                          thread that freed it, so the same few addresses
 *                          pass between the threads while both threads'
 *                          records are in flight. Nothing is live.
 *
 * Prints "threads: ready" when done and waits until stdin reaches EOF.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long n;
static size_t size;
static void **blocks;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int allocated, freed;

static void *alloc_and_wait(void *arg)
{
	for (long i = 0; i < n; i++) {
		blocks[i] = malloc(size);
		memset(blocks[i], 1, size);
	}
	pthread_mutex_lock(&lock);
	allocated = 1;
	pthread_cond_broadcast(&cond);
	while (arg && !freed)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	return NULL;
}

static void *free_all(void *arg __attribute__((unused)))
{
	pthread_mutex_lock(&lock);
	while (!allocated)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	for (long i = 0; i < n; i++)
		free(blocks[i]);
	return NULL;
}

/* pingpong: the one block in flight and whose turn it is (0: A, 1: B) */
static void *in_flight;
static int turn;

static void *take(int me)
{
	void *p;

	pthread_mutex_lock(&lock);
	while (turn != me)
		pthread_cond_wait(&cond, &lock);
	p = in_flight;
	pthread_mutex_unlock(&lock);
	return p;
}

static void give(void *p, int to)
{
	pthread_mutex_lock(&lock);
	in_flight = p;
	turn = to;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
}

static void *ping(void *arg __attribute__((unused)))
{
	for (long i = 0; i < n; i++) {
		char *req = malloc(size);

		memset(req, 'q', size);
		give(req, 1);
		free(take(0));	/* the response */
	}
	return NULL;
}

static void *pong(void *arg __attribute__((unused)))
{
	for (long i = 0; i < n; i++) {
		char *resp;

		free(take(1));	/* the request */
		resp = malloc(size);
		memset(resp, 'r', size);
		give(resp, 0);
	}
	/* exit (and flush) only after A did: A's records reach the kernel first */
	take(2);
	return NULL;
}

static void *churn(void *arg __attribute__((unused)))
{
	for (long i = 0; i < n * 10; i++) {
		char *p = malloc(size);

		memset(p, 'c', size);
		/* the block is "used": the compiler may not drop the pair */
		__asm__ volatile("" : : "r"(p) : "memory");
		free(p);
	}
	return NULL;
}

/* race: the block the last thread left */
static void *slot;

static int race_ready;
static long race_done[2];	/* each thread's rounds */
#define RACE_LEAD 2

static void *race(void *arg)
{
	int me = (int)(long)arg;
	cpu_set_t cpus;

	/*
	 * Both threads at once, each on its own cpu where there are two: a
	 * barrier's wake-up, or both on one cpu, lets one thread finish first.
	 */
	if (!sched_getaffinity(0, sizeof(cpus), &cpus) && CPU_COUNT(&cpus) >= 2) {
		int want = me, cpu;

		for (cpu = 0; cpu < CPU_SETSIZE; cpu++)
			if (CPU_ISSET(cpu, &cpus) && want-- == 0)
				break;
		CPU_ZERO(&cpus);
		CPU_SET(cpu, &cpus);
		pthread_setaffinity_np(pthread_self(), sizeof(cpus), &cpus);
	}
	__atomic_add_fetch(&race_ready, 1, __ATOMIC_ACQ_REL);
	while (__atomic_load_n(&race_ready, __ATOMIC_ACQUIRE) < 2)
		sched_yield();
	for (long i = 0; i < n * 10; i++) {
		char *p;

		/*
		 * at most RACE_LEAD rounds ahead of the other, so that they cross
		 * even when a busy machine runs one while the other waits
		 */
		__atomic_store_n(&race_done[me], i, __ATOMIC_RELEASE);
		while (i - __atomic_load_n(&race_done[!me], __ATOMIC_ACQUIRE) > RACE_LEAD &&
		       __atomic_load_n(&race_done[!me], __ATOMIC_ACQUIRE) < n * 10 - 1)
			sched_yield();
		p = malloc(size);

		memset(p, 'r', size);
		free(__atomic_exchange_n(&slot, p, __ATOMIC_ACQ_REL));
	}
	return NULL;
}

static void *free_slot(void *arg __attribute__((unused)))
{
	free(slot);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t a, b;

	if (argc != 4 || (strcmp(argv[1], "cross") && strcmp(argv[1], "exit") &&
			  strcmp(argv[1], "pingpong") &&
			  strcmp(argv[1], "race"))) {
		fprintf(stderr, "usage: threads cross|exit|pingpong|race N SIZE\n");
		return 2;
	}
	n = atol(argv[2]);
	size = (size_t)atol(argv[3]);
	if (n < 1 || size < 1)
		return 2;
	blocks = calloc((size_t)n, sizeof(void *));
	if (!strcmp(argv[1], "pingpong")) {
		pthread_create(&a, NULL, ping, NULL);
		pthread_create(&b, NULL, pong, NULL);
		pthread_join(a, NULL);
		give(NULL, 2);
		pthread_join(b, NULL);
		pthread_create(&a, NULL, churn, NULL);
		pthread_join(a, NULL);
	} else if (!strcmp(argv[1], "race")) {
		pthread_create(&a, NULL, race, (void *)0);
		pthread_create(&b, NULL, race, (void *)1);
		pthread_join(a, NULL);
		pthread_join(b, NULL);
		pthread_create(&a, NULL, free_slot, NULL);	/* its exit flushes */
		pthread_join(a, NULL);
	} else if (!strcmp(argv[1], "cross")) {
		/*
		 * B first: pthread_create callocs, and one that came while A
		 * allocated could take the tag slot of one of A's blocks,
		 * whose free then goes untagged (a collision, as tags.h says)
		 */
		pthread_create(&b, NULL, free_all, NULL);
		pthread_create(&a, NULL, alloc_and_wait, (void *)1);
		pthread_join(b, NULL);	/* B exited: its frees are flushed */
		pthread_mutex_lock(&lock);
		freed = 1;
		pthread_cond_broadcast(&cond);
		pthread_mutex_unlock(&lock);
		pthread_join(a, NULL);
	} else {
		pthread_create(&a, NULL, alloc_and_wait, NULL);
		pthread_join(a, NULL);
	}
	printf("threads: ready\n");
	fflush(stdout);
	while (getchar() != EOF)
		;
	return 0;
}
