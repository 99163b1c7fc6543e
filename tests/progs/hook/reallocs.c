// SPDX-License-Identifier: GPL-2.0
/*
 * realloc's cases, for the records the hook sends of each
 * (tests/host/test_hook_records.py). Under libpmmhook-fake.so; bare, the
 * hook's pmm_flush is missing and nothing is flushed.
 *   reallocs cases     each case with its old block's allocation still in
 *                      the thread's buffer ("NAME-buffered-K"), and sent
 *                      (pmm_flush first: "NAME-sent-K"), K 0 and 1, then
 *                      again (K 2 and 3: the call sites are known), each
 *                      size K bytes more. Prints one line a case:
 *                      "NAME-HOW-K OLD NEW" (addresses, 0x0 for NULL).
 *                      inplace: malloc(8000) shrunk to 4000, then grown
 *                      to 6000 into the chunk's rest; move: malloc(4000) grown to 8000
 *                      past a live block; null: realloc(NULL, 300);
 *                      zero: malloc(500), realloc(p, 0); fail: malloc(100),
 *                      realloc to 2^62 bytes (fails, ENOMEM, p intact).
 *                      Then a flush, every block freed, a flush.
 *   reallocs older N   a flush that the fake device refuses
 *                      (PMM_FAKE_STOP_AT=1: monitoring stops), N blocks of
 *                      64 bytes allocated unmonitored, a wait for the hook
 *                      to see the start again (its poll, once a second),
 *                      then each grown to 5000 and freed. Prints
 *                      "older OLD NEW" a block.
 *   reallocs chain N   string builders: N strings, each grown from NULL by
 *                      40 reallocs of 100 bytes more; the last 16 kept,
 *                      older ones freed. Prints "kept ADDR" for each kept
 *                      string and "bytes B", the bytes all reallocs asked.
 * Then "reallocs: ready", and it exits at the end of its input (the
 * module's tests read its blocks meanwhile). Exit 0; 2 if an allocation
 * failed that should not, or a case did not happen as described (inplace
 * moved, move did not, fail did not fail).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void flush(void)
{
	void (*f)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "pmm_flush");

	if (f)
		f();
}

static void say(const char *name, const char *how, int k, const void *old, const void *now)
{
	if (how)
		printf("%s-%s-%d 0x%lx 0x%lx\n", name, how, k, (unsigned long)old,
		       (unsigned long)now);
	else
		printf("%s 0x%lx 0x%lx\n", name, (unsigned long)old, (unsigned long)now);
}

#define KEEP_MAX 64

static void *keep[KEEP_MAX];
static int kept;

static int hold(void *p)
{
	if (!p || kept == KEEP_MAX)
		return 0;
	keep[kept++] = p;
	return 1;
}

static int cases(void)
{
	static volatile size_t huge = (size_t)1 << 62;
	static const char *const how[] = { "buffered", "sent" };
	void *a, *b, *q;

	/* k: 0 and 1 first run each call site (the hook's site cache is
	 * empty), 2 and 3 again; every size k bytes more */
	for (int k = 0; k < 4; k++) {
		int sent = k & 1;
		size_t d = (size_t)k;

		/*
		 * inplace: a shrunk to 4000 bytes leaves the rest of its chunk
		 * free after it (too big for the tcache), or gives it to the
		 * top chunk: a grows back into it
		 */
		b = malloc(8000 + d);
		a = b ? realloc(b, 4000 + d) : NULL;
		if (a != b)
			return 2;
		if (sent)
			flush();
		q = realloc(a, 6000 + d);
		if (q != a || !hold(q))
			return 2;
		say("inplace", how[sent], k, a, q);

		/* move: a's next chunk is live */
		a = malloc(4000 + d);
		b = malloc(4000 + d);
		if (!a || !hold(b))
			return 2;
		if (sent)
			flush();
		q = realloc(a, 8000 + d);
		if (!q || q == a || !hold(q))
			return 2;
		say("move", how[sent], k, a, q);

		q = realloc(NULL, 300 + d);
		if (!hold(q))
			return 2;
		say("null", how[sent], k, NULL, q);

		a = malloc(500 + d);
		if (!a)
			return 2;
		if (sent)
			flush();
		q = realloc(a, 0);
		if (q)	/* glibc frees a and returns NULL */
			return 2;
		say("zero", how[sent], k, a, q);

		a = malloc(100 + d);
		if (!a)
			return 2;
		memset(a, 7, 100);
		if (sent)
			flush();
		errno = 0;
		q = realloc(a, huge);
		if (q || errno != ENOMEM || ((unsigned char *)a)[99] != 7 || !hold(a))
			return 2;
		say("fail", how[sent], k, a, q);
	}
	flush();
	for (int i = 0; i < kept; i++)
		free(keep[i]);
	flush();
	return 0;
}

static int older(int n)
{
	struct timespec pause = { .tv_sec = 1, .tv_nsec = 200 * 1000 * 1000 };
	void **old = calloc((size_t)n, sizeof(void *));
	void *small[64];

	if (!old)
		return 2;
	free(malloc(16));
	flush();	/* refused: monitoring stops */
	for (int i = 0; i < n; i++)
		if (!(old[i] = malloc(64)))
			return 2;
	nanosleep(&pause, NULL);
	/* the hook polls after 16 KiB of malloc, and asks once a second */
	for (int r = 0; r < 4; r++) {
		for (int i = 0; i < 64; i++)
			small[i] = malloc(1024);
		for (int i = 0; i < 64; i++)
			free(small[i]);
	}
	for (int i = 0; i < n; i++) {
		void *q = realloc(old[i], 5000);

		if (!q)
			return 2;
		say("older", NULL, 0, old[i], q);
		free(q);
	}
	free(old);
	flush();
	return 0;
}

static int chain(int n)
{
	void *live[16] = { 0 };
	unsigned long bytes = 0;

	for (int i = 0; i < n; i++) {
		char *s = NULL;

		for (int step = 1; step <= 40; step++) {
			char *t = realloc(s, (size_t)step * 100);

			if (!t)
				return 2;
			t[step * 100 - 1] = (char)step;
			s = t;
			bytes += (unsigned long)step * 100;
		}
		free(live[i % 16]);
		live[i % 16] = s;
	}
	for (int i = 0; i < 16; i++)
		if (live[i])
			printf("kept 0x%lx\n", (unsigned long)live[i]);
	printf("bytes %lu\n", bytes);
	flush();
	return 0;
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "cases";
	int n = argc > 2 ? atoi(argv[2]) : 100;
	int r;

	if (!strcmp(what, "older"))
		r = older(n);
	else if (!strcmp(what, "chain"))
		r = chain(n);
	else
		r = cases();
	if (r)
		return r;
	printf("reallocs: ready\n");
	fflush(stdout);
	while (getchar() != EOF)
		;
	return 0;
}
