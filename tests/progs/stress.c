// SPDX-License-Identifier: GPL-2.0
/*
 * stress SECONDS: 8 processes x 4 threads record concurrently while a
 * toggler process starts and stops monitoring of processes 4..7 and reads
 * /proc/pmm/pid and the read-back ioctls. Processes 0..3 stay monitored;
 * each checks at the end that the kernel's per-site counters, live bytes
 * and live blocks equal what it sent, exactly. A third of the blocks are
 * freed by another thread than the one that allocated them, so frees often
 * reach the kernel before their allocation. Exit 0 when all is exact.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include "pmmtest.h"

#define NPROC 8
#define NSTAY 4
#define NTHR 4
#define BATCH 32
#define LIVE 512
#define HANDOFF 4096

struct expect {
	atomic_ullong alloc_bytes, free_bytes, allocs, frees;
};

struct handoff {
	pthread_mutex_t lock;
	uint64_t ptr[HANDOFF], size[HANDOFF];
	unsigned int head, tail;
};

static int fd, stay;
static uint64_t deadline;
static struct expect exp_site[NTHR + 1];
static struct handoff hand[NTHR];
static atomic_int failed;

static uint64_t xs(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

struct pend {		/* a record in the batch and what it means when sent */
	int site;	/* site whose counters it changes */
	int is_free;
	uint64_t size;
};

static void flush(struct pmm_record *r, struct pend *pd, int *n)
{
	int err, i;

	if (!*n)
		return;
	err = pmm_send(fd, r, *n);
	if (err) {
		if (stay || err != ENOLINK) {
			fprintf(stderr, "stress: send: %s\n", strerror(err));
			failed = 1;
		}
		*n = 0;
		return;
	}
	for (i = 0; i < *n; i++) {
		struct expect *e = &exp_site[pd[i].site];

		if (pd[i].is_free) {
			e->frees++;
			e->free_bytes += pd[i].size;
		} else {
			e->allocs++;
			e->alloc_bytes += pd[i].size;
		}
	}
	*n = 0;
}

static void *worker_thread(void *arg)
{
	int t = (int)(intptr_t)arg, n = 0, site = t + 1;
	uint64_t seed = 88172645463325252ull ^ ((uint64_t)getpid() << 8 | t);
	uint64_t live_ptr[LIVE], live_size[LIVE], next = 0;
	struct pmm_record r[BATCH];
	struct pend pd[BATCH];
	unsigned int nlive = 0, k;
	struct handoff *mine = &hand[t], *peer = &hand[(t + 1) % NTHR];

	while (now_ns() < deadline) {
		uint64_t ptr = ((uint64_t)(t + 1) << 36) + (next++ << 6);
		uint64_t size = 1 + xs(&seed) % 5000;

		/* one in three goes to the next thread to free */
		if (xs(&seed) % 3 == 0) {
			r[n] = rec(PMM_OP_MALLOC, ptr, 0, size, now_ns(), site);
			pd[n++] = (struct pend){ site, 0, size };
			pthread_mutex_lock(&peer->lock);
			if (peer->head - peer->tail < HANDOFF) {
				peer->ptr[peer->head % HANDOFF] = ptr;
				peer->size[peer->head % HANDOFF] = size | (uint64_t)site << 56;
				peer->head++;
			}
			pthread_mutex_unlock(&peer->lock);
		} else {
			if (nlive == LIVE) {
				k = xs(&seed) % LIVE;
				r[n] = rec(PMM_OP_FREE, live_ptr[k], 0, 0, now_ns(), site);
				pd[n++] = (struct pend){ site, 1, live_size[k] };
				live_ptr[k] = live_ptr[--nlive];
				live_size[k] = live_size[nlive];
				if (n == BATCH)
					flush(r, pd, &n);
			}
			r[n] = rec(PMM_OP_MALLOC, ptr, 0, size, now_ns(), site);
			pd[n++] = (struct pend){ site, 0, size };
			live_ptr[nlive] = ptr;
			live_size[nlive++] = size;
		}
		if (n == BATCH)
			flush(r, pd, &n);
		pthread_mutex_lock(&mine->lock);
		if (mine->head != mine->tail && n < BATCH) {
			uint64_t p = mine->ptr[mine->tail % HANDOFF];
			uint64_t sz = mine->size[mine->tail % HANDOFF];

			mine->tail++;
			r[n] = rec(PMM_OP_FREE, p, 0, 0, now_ns(), site);
			pd[n++] = (struct pend){ (int)(sz >> 56), 1, sz & ((1ull << 56) - 1) };
		}
		pthread_mutex_unlock(&mine->lock);
		if (n == BATCH)
			flush(r, pd, &n);
	}
	flush(r, pd, &n);
	return NULL;
}

static int check_self(int idx)
{
	struct pmm_pid_info info;
	struct pmm_site_stats s;
	uint64_t live_bytes = 0, live_blocks = 0;
	int site, bad = 0, err;

	memset(&info, 0, sizeof(info));
	memset(&s, 0, sizeof(s));
	for (site = 1; site <= NTHR; site++) {
		struct expect *e = &exp_site[site];
		uint64_t lb = e->alloc_bytes - e->free_bytes, lk = e->allocs - e->frees;

		if ((err = pmm_site_stats(fd, 0, site, &s))) {
			fprintf(stderr, "stress[%d]: site %d: %s\n", idx, site, strerror(err));
			return 1;
		}
		if (s.alloc_bytes != e->alloc_bytes || s.free_bytes != e->free_bytes ||
		    s.alloc_count[PMM_OP_MALLOC] != e->allocs ||
		    s.alloc_count[PMM_OP_FREE] != e->frees || s.live_bytes != lb ||
		    s.live_blocks != lk) {
			fprintf(stderr, "stress[%d]: site %d: kernel alloc %llu/%llu free %llu/%llu live %llu/%llu, sent alloc %llu/%llu free %llu/%llu\n",
				idx, site, (unsigned long long)s.alloc_count[PMM_OP_MALLOC],
				(unsigned long long)s.alloc_bytes,
				(unsigned long long)s.alloc_count[PMM_OP_FREE],
				(unsigned long long)s.free_bytes,
				(unsigned long long)s.live_blocks, (unsigned long long)s.live_bytes,
				(unsigned long long)e->allocs, (unsigned long long)e->alloc_bytes,
				(unsigned long long)e->frees, (unsigned long long)e->free_bytes);
			bad = 1;
		}
		live_bytes += lb;
		live_blocks += lk;
	}
	if ((err = pmm_self_info(fd, &info))) {
		fprintf(stderr, "stress[%d]: info: %s\n", idx, strerror(err));
		return 1;
	}
	if (info.live_bytes != live_bytes || info.live_blocks != live_blocks ||
	    info.pending_frees || info.unmatched_frees || info.dropped_records) {
		fprintf(stderr, "stress[%d]: pid live %llu/%llu pending %llu unmatched %llu dropped %llu, expected live %llu/%llu\n",
			idx, (unsigned long long)info.live_blocks,
			(unsigned long long)info.live_bytes,
			(unsigned long long)info.pending_frees,
			(unsigned long long)info.unmatched_frees,
			(unsigned long long)info.dropped_records,
			(unsigned long long)live_blocks, (unsigned long long)live_bytes);
		bad = 1;
	}
	printf("stress[%d]: pid %d records %llu live_blocks %llu live_bytes %llu %s\n",
	       idx, getpid(), (unsigned long long)info.records,
	       (unsigned long long)info.live_blocks, (unsigned long long)info.live_bytes,
	       bad ? "MISMATCH" : "exact");
	return bad;
}

static int worker(int idx, int go_fd)
{
	pthread_t th[NTHR];
	char c;
	int t;

	stay = idx < NSTAY;
	for (t = 0; t < NTHR; t++)
		pthread_mutex_init(&hand[t].lock, NULL);
	if (read(go_fd, &c, 1) != 1)
		return 3;
	for (t = 0; t < NTHR; t++)
		pthread_create(&th[t], NULL, worker_thread, (void *)(intptr_t)t);
	for (t = 0; t < NTHR; t++)
		pthread_join(th[t], NULL);
	if (failed)
		return 1;
	return stay ? check_self(idx) : 0;
}

static void drain(const char *path)
{
	char buf[65536];
	int f = open(path, O_RDONLY);

	if (f < 0)
		return;
	while (read(f, buf, sizeof(buf)) > 0)
		;
	close(f);
}

static int toggler(pid_t *pids)
{
	static struct pmm_block blocks[256];
	uint64_t seed = 12345, rounds = 0;
	struct pmm_read rd;
	int i, err;

	while (now_ns() < deadline) {
		for (i = NSTAY; i < NPROC; i++) {
			err = pmm_startstop(fd, pids[i], 1);
			if (err && err != EEXIST && err != ESRCH)
				DIE("toggler start: %s", strerror(err));
		}
		usleep(xs(&seed) % 20000);
		drain("/proc/pmm/pid");
		memset(&rd, 0, sizeof(rd));
		rd.pid = pids[xs(&seed) % NPROC];
		rd.capacity = 256;
		rd.buf = (uintptr_t)blocks;
		if (ioctl(fd, PMM_READ_BLOCKS, &rd) && errno != ENOENT && errno != ESRCH)
			DIE("toggler read: %s", strerror(errno));
		for (i = NSTAY; i < NPROC; i++) {
			err = pmm_startstop(fd, pids[i], 0);
			if (err && err != ENOENT && err != ESRCH)
				DIE("toggler stop: %s", strerror(err));
		}
		rounds++;
	}
	printf("toggler: %llu start/stop rounds\n", (unsigned long long)rounds);
	return 0;
}

int main(int argc, char **argv)
{
	int secs = argc > 1 ? atoi(argv[1]) : 5;
	pid_t pids[NPROC], tog;
	int go[2], i, status, bad = 0, err;

	setvbuf(stdout, NULL, _IOLBF, 0);
	fd = pmm_open();
	if (pipe(go))
		DIE("pipe");
	deadline = now_ns() + (uint64_t)(secs + 1) * 1000000000ull;
	for (i = 0; i < NPROC; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			close(go[1]);
			_exit(worker(i, go[0]));
		}
	}
	close(go[0]);
	for (i = 0; i < NSTAY; i++)
		if ((err = pmm_startstop(fd, pids[i], 1)))
			DIE("start %d: %s", pids[i], strerror(err));
	tog = fork();
	if (tog == 0)
		_exit(toggler(pids));
	for (i = 0; i < NPROC; i++)
		if (write(go[1], "g", 1) != 1)
			DIE("write");
	for (i = 0; i < NPROC; i++) {
		waitpid(pids[i], &status, 0);
		if (!WIFEXITED(status) || WEXITSTATUS(status)) {
			fprintf(stderr, "stress: worker %d failed (status %#x)\n", i, status);
			bad = 1;
		}
	}
	waitpid(tog, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		bad = 1;
	printf("stress: %s\n", bad ? "FAILED" : "ok");
	return bad;
}
