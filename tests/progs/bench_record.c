// SPDX-License-Identifier: GPL-2.0
/*
 * bench_record [RECORDS]: the cost per record of PMM_RECORD_LOG at batch
 * sizes 1, 16, 256 and 4096 (a monitored process sending malloc/free pairs
 * of distinct addresses, so the table stays small). Prints one line per
 * batch size: "batch N: X ns/record".
 */
#include "pmmtest.h"

int main(int argc, char **argv)
{
	static const uint32_t sizes[] = { 1, 16, 256, 4096 };
	static struct pmm_record r[PMM_MAX_BATCH];
	uint64_t total = argc > 1 ? strtoull(argv[1], NULL, 0) : 200000;
	uint64_t sent, t0, t1, j = 0, addr = 0x10000000;
	unsigned int k;
	uint32_t i, bs;
	int fd, err;

	fd = pmm_open();
	if ((err = pmm_startstop(fd, 0, 1)))
		DIE("start: %s", strerror(err));
	for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		bs = sizes[k];
		t0 = now_ns();
		for (sent = 0; sent < total; sent += bs) {
			for (i = 0; i < bs; i++, j++) {
				if (j % 2 == 0)
					r[i] = rec(PMM_OP_MALLOC, addr + j / 2 * 64, 0, 64, now_ns(), 1);
				else
					r[i] = rec(PMM_OP_FREE, addr + j / 2 * 64, 0, 0, now_ns(), 1);
			}
			if ((err = pmm_send(fd, r, bs)))
				DIE("send: %s", strerror(err));
		}
		t1 = now_ns();
		printf("batch %u: %.1f ns/record\n", bs, (double)(t1 - t0) / sent);
	}
	return 0;
}
