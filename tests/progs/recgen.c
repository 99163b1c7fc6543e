// SPDX-License-Identifier: GPL-2.0
/*
 * Record generator: monitors itself, sends a known sequence from two threads
 * whose batches reach the kernel out of order, and prints what the kernel
 * holds as key=value lines.
 *
 *   recgen xthread N   thread A allocates N blocks, thread B frees them;
 *                      B's batch (later timestamps) is sent first
 *   recgen reuse N     per address: A malloc@t1, B free@t2, A malloc@t3 (the
 *                      address reused); B's batch first, then A's
 */
#include <pthread.h>
#include "pmmtest.h"

static int fd;
static uint32_t n;
static const char *mode;
static pthread_barrier_t built, sent;
static struct pmm_record *ra, *rb;

#define BASE 0x7f0000100000ull
#define SIZE(i) (32 + (i) % 100)

static void *thread_a(void *arg)
{
	uint32_t i, k = 0;
	int err;

	for (i = 0; i < n; i++)
		ra[k++] = rec(PMM_OP_MALLOC, BASE + i * 256, 0, SIZE(i),
			      now_ns(), 1);
	pthread_barrier_wait(&built);	/* B takes its times after ours */
	pthread_barrier_wait(&sent);	/* B has sent */
	if (!strcmp(mode, "reuse"))
		for (i = 0; i < n; i++)	/* after B's frees: reuse */
			ra[k++] = rec(PMM_OP_CALLOC, BASE + i * 256, 0, 2 * SIZE(i),
				      now_ns(), 2);
	for (i = 0; i < k; i += PMM_MAX_BATCH) {
		err = pmm_send(fd, ra + i, k - i < PMM_MAX_BATCH ? k - i : PMM_MAX_BATCH);
		if (err)
			DIE("A send: %s", strerror(err));
	}
	return arg;
}

static void *thread_b(void *arg)
{
	uint32_t i;
	int err;

	pthread_barrier_wait(&built);
	for (i = 0; i < n; i++)
		rb[i] = rec(PMM_OP_FREE, BASE + i * 256, 0, 0, now_ns(), 3);
	for (i = 0; i < n; i += PMM_MAX_BATCH) {
		err = pmm_send(fd, rb + i, n - i < PMM_MAX_BATCH ? n - i : PMM_MAX_BATCH);
		if (err)
			DIE("B send: %s", strerror(err));
	}
	pthread_barrier_wait(&sent);
	return arg;
}

int main(int argc, char **argv)
{
	struct pmm_site_stats s1, s2;
	struct pmm_pid_info info;
	pthread_t a, b;
	int err;

	memset(&info, 0, sizeof(info));
	memset(&s1, 0, sizeof(s1));
	memset(&s2, 0, sizeof(s2));
	if (argc != 3)
		DIE("usage: recgen xthread|reuse N");
	mode = argv[1];
	n = strtoul(argv[2], NULL, 0);
	ra = calloc(2 * n, sizeof(*ra));
	rb = calloc(n, sizeof(*rb));
	if (!ra || !rb)
		DIE("calloc");
	fd = pmm_open();
	err = pmm_startstop(fd, 0, 1);
	if (err)
		DIE("start: %s", strerror(err));
	pthread_barrier_init(&built, NULL, 2);
	pthread_barrier_init(&sent, NULL, 2);
	pthread_create(&a, NULL, thread_a, NULL);
	pthread_create(&b, NULL, thread_b, NULL);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	if ((err = pmm_self_info(fd, &info)))
		DIE("info: %s", strerror(err));
	printf("records=%llu live_blocks=%llu live_bytes=%llu pending=%llu unmatched=%llu dropped=%llu\n",
	       (unsigned long long)info.records, (unsigned long long)info.live_blocks,
	       (unsigned long long)info.live_bytes, (unsigned long long)info.pending_frees,
	       (unsigned long long)info.unmatched_frees,
	       (unsigned long long)info.dropped_records);
	if ((err = pmm_site_stats(fd, 0, 1, &s1)))
		DIE("site 1: %s", strerror(err));
	printf("site1 live_blocks=%llu live_bytes=%llu alloc_bytes=%llu free_bytes=%llu mallocs=%llu frees=%llu\n",
	       (unsigned long long)s1.live_blocks, (unsigned long long)s1.live_bytes,
	       (unsigned long long)s1.alloc_bytes, (unsigned long long)s1.free_bytes,
	       (unsigned long long)s1.alloc_count[PMM_OP_MALLOC],
	       (unsigned long long)s1.alloc_count[PMM_OP_FREE]);
	if (!strcmp(mode, "reuse")) {
		if ((err = pmm_site_stats(fd, 0, 2, &s2)))
			DIE("site 2: %s", strerror(err));
		printf("site2 live_blocks=%llu live_bytes=%llu alloc_bytes=%llu free_bytes=%llu callocs=%llu frees=%llu\n",
		       (unsigned long long)s2.live_blocks, (unsigned long long)s2.live_bytes,
		       (unsigned long long)s2.alloc_bytes, (unsigned long long)s2.free_bytes,
		       (unsigned long long)s2.alloc_count[PMM_OP_CALLOC],
		       (unsigned long long)s2.alloc_count[PMM_OP_FREE]);
	}
	return 0;
}
