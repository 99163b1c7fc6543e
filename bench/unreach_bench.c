// SPDX-License-Identifier: GPL-2.0
/*
 * A heap for pmm-scan's benchmark (host_unreach.sh, guest_unreach.sh):
 * BLOCKS blocks of MIB MiB in all (sizes uniform around their mean), in
 * 1024 lists whose heads are in a global array; each block holds its
 * list's next pointer, a pointer back to an earlier block of its list
 * every 64 bytes and small numbers elsewhere; the heads of LOST lists are
 * dropped (so 1% of blocks by default are lost). With a FILE, the blocks are
 * also written there as struct pmm_block (pmm-scan --blocks FILE): the
 * table the module would hold. Prints "ready PID" and waits for stdin's end.
 *
 *   unreach_bench BLOCKS MIB [LOST] [FILE]
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../kmod/uapi/pmm.h"

#define LISTS 1024

static void *g_head[LISTS];

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

int main(int argc, char **argv)
{
	long blocks = argc > 1 ? atol(argv[1]) : 1000000;
	long mib = argc > 2 ? atol(argv[2]) : 100;
	long lost = argc > 3 ? atol(argv[3]) : LISTS / 100;
	const char *file = argc > 4 ? argv[4] : NULL;
	size_t mean = (size_t)(mib << 20) / (size_t)blocks, rec_bytes = 0;
	struct pmm_block *rec = NULL;
	uint64_t seed = 88172645463325252ULL;
	struct timespec ts;
	long i;
	char c;

	if (blocks <= 0 || mean < 32) {
		fprintf(stderr, "usage: unreach_bench BLOCKS MIB [LOST] [FILE] (a mean of 32 bytes or more)\n");
		return 2;
	}
	if (file) {
		rec_bytes = ((size_t)blocks * sizeof(*rec) + 4095) & ~4095UL;
		rec = mmap(NULL, rec_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (rec == MAP_FAILED)
			return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	for (i = 0; i < blocks; i++) {
		size_t size = (mean / 2 + rnd(&seed) % (mean + 1)) & ~15UL, k;
		long list = i % LISTS;
		uint64_t *b = malloc(size < 16 ? 16 : size);

		if (!b)
			return 1;
		size = size < 16 ? 16 : size;
		b[0] = (uintptr_t)g_head[list];
		b[1] = (uint64_t)i;
		for (k = 2; k < size / 8; k++)
			b[k] = k % 8 == 0 && g_head[list] ? (uintptr_t)g_head[list] : rnd(&seed) % 1000;
		g_head[list] = b;
		if (rec)
			rec[i] = (struct pmm_block){ .ptr = (uintptr_t)b, .size = size,
				.time_ns = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec,
				.site = (uint32_t)(list % 100 + 1), .weight = 1, .op = PMM_OP_MALLOC };
	}
	for (i = 0; i < lost && i < LISTS; i++)
		g_head[i * (LISTS / (lost ? lost : 1)) % LISTS] = NULL;
	if (rec) {
		int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

		if (fd < 0 || write(fd, rec, (size_t)blocks * sizeof(*rec)) !=
			      (ssize_t)((size_t)blocks * sizeof(*rec)))
			return 1;
		close(fd);
		munmap(rec, rec_bytes);
	}
	printf("ready %d\n", getpid());
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	return 0;
}
