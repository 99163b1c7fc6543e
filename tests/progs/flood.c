// SPDX-License-Identifier: GPL-2.0
/*
 * Address flood: monitors itself and sends N malloc records at N distinct
 * addresses, all left live, then prints how long the module took.
 *
 *   flood random N        addresses from a 64-bit mix, in user space (below
 *                         2^47: what a heap looks like to a hash)
 *   flood adversarial N   i * 2^26: a table that masks an address, or hashes
 *                         its low bits unseeded, puts every one of them in
 *                         the same slot at every size the module allows
 *
 * Output: mode=... n=... seconds=... live=... (live blocks the module holds);
 * then it stops its monitoring, which frees its tables.
 */
#include "pmmtest.h"

#define USER_SPACE_BITS	47

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

int main(int argc, char **argv)
{
	struct pmm_record *r;
	struct pmm_pid_info info;
	uint64_t t0, t1, i, ptr;
	uint32_t n, k;
	int fd, err, adversarial;

	if (argc != 3)
		DIE("usage: flood random|adversarial N");
	adversarial = !strcmp(argv[1], "adversarial");
	n = (uint32_t)strtoul(argv[2], NULL, 10);
	r = calloc(n, sizeof(*r));
	if (!r)
		DIE("calloc");
	if (n >= 1U << (USER_SPACE_BITS - 26))
		DIE("at most %u", (1U << (USER_SPACE_BITS - 26)) - 1);
	for (i = 0; i < n; i++) {
		ptr = adversarial ? (i + 1) << 26 :
			(mix(i) & ((1ULL << USER_SPACE_BITS) - 1)) | 1;
		r[i] = rec(PMM_OP_MALLOC, ptr, 0, 64, now_ns(), 1);
	}
	fd = pmm_open();
	err = pmm_startstop(fd, 0, 1);
	if (err)
		DIE("START: %s", strerror(err));
	t0 = now_ns();
	for (i = 0; i < n; i += k) {
		k = n - i < PMM_MAX_BATCH ? n - i : PMM_MAX_BATCH;
		err = pmm_send(fd, r + i, k);
		if (err)
			DIE("RECORD_LOG: %s", strerror(err));
	}
	t1 = now_ns();
	err = pmm_self_info(fd, &info);
	if (err)
		DIE("MONITORED_PIDS: %s", strerror(err));
	printf("mode=%s n=%u seconds=%.3f live=%llu\n", argv[1], n,
	       (t1 - t0) / 1e9, (unsigned long long)info.live_blocks);
	err = pmm_startstop(fd, 0, 0);
	if (err)
		DIE("STOP: %s", strerror(err));
	return 0;
}
