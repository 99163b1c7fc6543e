// SPDX-License-Identifier: GPL-2.0
/*
 * bench_record [RECORDS]: the cost per record of PMM_RECORD_LOG at batch
 * sizes 1, 16, 256 and 4096 (a monitored process sending malloc/free pairs
 * of distinct addresses, so the table stays small; the records are built
 * before timing, so only the ioctls are measured). Prints one line per
 * batch size: "batch N: X ns/record".
 */
#include "pmmtest.h"

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
	return 0;
}
