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
 *
 * Prints "threads: ready" when done and waits until stdin reaches EOF.
 */
#include <pthread.h>
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

int main(int argc, char **argv)
{
	pthread_t a, b;

	if (argc != 4 || (strcmp(argv[1], "cross") && strcmp(argv[1], "exit"))) {
		fprintf(stderr, "usage: threads cross|exit N SIZE\n");
		return 2;
	}
	n = atol(argv[2]);
	size = (size_t)atol(argv[3]);
	if (n < 1 || size < 1)
		return 2;
	blocks = calloc((size_t)n, sizeof(void *));
	if (!strcmp(argv[1], "cross")) {
		pthread_create(&a, NULL, alloc_and_wait, (void *)1);
		pthread_create(&b, NULL, free_all, NULL);
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
