// SPDX-License-Identifier: GPL-2.0
/*
 * bench_record [RECORDS]: the cost per record of PMM_RECORD_LOG at batch
 * sizes 1, 16, 256 and 4096 (a monitored process sending malloc/free pairs
 * of distinct addresses, so the table stays small; the records are built
 * before timing, so only the ioctls are measured). Prints one line per
 * batch size: "batch N: X ns/record". Then the microbenchmark's pattern in
 * batches of 512 (the hook's): 4096 live blocks, each step a tagged free of
 * a random one and an allocation at a freed address or a new one:
 * "window 4096: X ns/record".
 */
#include "pmmtest.h"

#define WINDOW	4096
#define REUSE	1024

static void window(int fd, struct pmm_record *r, uint64_t total, uint64_t now,
		   unsigned int win)
{
	static uint64_t live[WINDOW], born[WINDOW], freed[REUSE];
	uint64_t j, t0, t1, rng = 88172645463325252ULL, next = 0x7f0000000000ULL;
	unsigned int k, nfreed = 0;
	int err;

	for (k = 0; k < win; k++) {	/* the window, sent untimed */
		live[k] = next;
		born[k] = now++;
		next += 64;
		r[k] = rec(PMM_OP_MALLOC, live[k], 0, 64, born[k], 1);
	}
	if ((err = pmm_send(fd, r, win)))
		DIE("send: %s", strerror(err));
	for (j = 0; j + 1 < total; j += 2) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		k = rng % win;
		r[j] = rec(PMM_OP_FREE, live[k], 0, 0, now++, 0);
		r[j].flags = PMM_REC_F_TAGGED;
		r[j].alloc_tag = born[k] & ((1U << PMM_ALLOC_TAG_BITS) - 1);
		if (nfreed < REUSE)
			freed[nfreed++] = live[k];
		/* mostly a recently freed address, as malloc's caches give */
		if (rng >> 60 && nfreed) {
			unsigned int at = (rng >> 20) % nfreed;

			live[k] = freed[at];
			freed[at] = freed[--nfreed];
		} else {
			live[k] = next;
			next += 64;
		}
		born[k] = now++;
		r[j + 1] = rec(PMM_OP_MALLOC, live[k], 0, 16 + rng % 512, born[k], 1);
	}
	t0 = now_ns();
	for (j = 0; j + 512 <= total; j += 512)
		if ((err = pmm_send(fd, r + j, 512)))
			DIE("send: %s", strerror(err));
	t1 = now_ns();
	printf("window %u: %.1f ns/record\n", win, (double)(t1 - t0) / j);
}

int main(int argc, char **argv)
{
	static const uint32_t sizes[] = { 1, 16, 256, 4096 };
	uint64_t total = argc > 1 ? strtoull(argv[1], NULL, 0) : 200000;
	uint64_t sent, t0, t1, j, base = 0x10000000, now;
	struct pmm_record *r;
	unsigned int k;
	uint32_t bs;
	int fd, err;

	total -= total % 4096;
	r = calloc(total, sizeof(*r));
	if (!r || !total)
		DIE("calloc");
	fd = pmm_open();
	if ((err = pmm_startstop(fd, 0, 1)))
		DIE("start: %s", strerror(err));
	for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		bs = sizes[k];
		/* built before the clock starts: only the ioctls are timed */
		now = now_ns();
		for (j = 0; j < total; j++)
			r[j] = rec(j % 2 ? PMM_OP_FREE : PMM_OP_MALLOC, base + j / 2 * 64,
				   0, j % 2 ? 0 : 64, now + j, 1);
		base += total * 64;
		t0 = now_ns();
		for (sent = 0; sent < total; sent += bs)
			if ((err = pmm_send(fd, r + sent, bs)))
				DIE("send: %s", strerror(err));
		t1 = now_ns();
		printf("batch %u: %.1f ns/record\n", bs, (double)(t1 - t0) / total);
	}
	window(fd, r, total, now_ns(), WINDOW);
	window(fd, r, total, now_ns(), 256);
	return 0;
}
