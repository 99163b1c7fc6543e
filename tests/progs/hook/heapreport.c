// SPDX-License-Identifier: GPL-2.0
/*
 * A heap with holes whose live bytes and allocator figures are known.
 *   heapreport N SIZE WAIT_MS
 *     mallocs N blocks of SIZE bytes (written), frees the odd ones, waits
 *     WAIT_MS (longer than the module's interval: the hook's next report is
 *     due) and calls the hook's pmm_flush when it is preloaded (the batch
 *     goes, and the allocator's report). Then prints, allocating nothing:
 *       live BYTES BLOCKS      the blocks it keeps
 *       glibc ARENA HBLKHD UORDBLKS FORDBLKS KEEPCOST       (its mallinfo2)
 *     or, when jemalloc is the allocator (preloaded: its mallctl is found),
 *       jemalloc ALLOCATED ACTIVE RESIDENT MAPPED RETAINED  (after "epoch")
 *       ready
 *     and waits for the end of stdin. Exit 2 if an allocation failed.
 */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_BLOCKS	(1 << 20)

/* Found by the loader, without dlsym (whose errors allocate). */
void pmm_flush(void) __attribute__((weak));
int mallctl(const char *name, void *old, size_t *oldlen, void *new, size_t newlen)
	__attribute__((weak));

static void *blocks[MAX_BLOCKS];

static void say(const char *line)
{
	size_t n = strlen(line);

	if (write(1, line, n) != (ssize_t)n)
		exit(3);
}

static unsigned long long stat_of(const char *name)
{
	size_t v = 0, len = sizeof(v);

	mallctl(name, &v, &len, NULL, 0);
	return v;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000, size = argc > 2 ? atol(argv[2]) : 1000;
	long wait_ms = argc > 3 ? atol(argv[3]) : 300;
	struct timespec ts = { wait_ms / 1000, wait_ms % 1000 * 1000000L };
	char line[256], c;

	if (n < 1 || n > MAX_BLOCKS || size < 1)
		return 2;
	for (long i = 0; i < n; i++) {
		blocks[i] = malloc(size);
		if (!blocks[i])
			return 2;
		memset(blocks[i], 0x5a, size);
	}
	for (long i = 1; i < n; i += 2)
		free(blocks[i]);
	nanosleep(&ts, NULL);
	if (pmm_flush)
		pmm_flush();
	snprintf(line, sizeof(line), "live %llu %llu\n",
		 (unsigned long long)((n + 1) / 2 * size), (unsigned long long)((n + 1) / 2));
	if (mallctl) {
		uint64_t epoch = 1;
		size_t len = sizeof(epoch);

		mallctl("epoch", &epoch, &len, &epoch, len);
		snprintf(line + strlen(line), sizeof(line) - strlen(line),
			 "jemalloc %llu %llu %llu %llu %llu\n", stat_of("stats.allocated"),
			 stat_of("stats.active"), stat_of("stats.resident"),
			 stat_of("stats.mapped"), stat_of("stats.retained"));
	} else {
		struct mallinfo2 mi = mallinfo2();

		snprintf(line + strlen(line), sizeof(line) - strlen(line),
			 "glibc %zu %zu %zu %zu %zu\n", mi.arena, mi.hblkhd, mi.uordblks,
			 mi.fordblks, mi.keepcost);
	}
	say(line);
	say("ready\n");
	while (read(0, &c, 1) > 0)
		;
	return 0;
}
