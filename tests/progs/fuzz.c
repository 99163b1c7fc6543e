// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz N [SEED] [--nobody]: N random ioctls on /dev/pmm (valid and random
 * command numbers, random sizes, payloads and pointers: NULL, unmapped,
 * kernel addresses, structs that run into a PROT_NONE page) mixed with
 * random /proc/pmm/cfg writes and /proc/pmm/pid reads. With --nobody the
 * device is opened as root and the process then becomes nobody (no
 * capabilities), so the permission checks are fuzzed too. Prints how many
 * calls ended in each errno; exit 0 unless the program itself fails.
 */
#define _GNU_SOURCE
#include <grp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include "pmmtest.h"

static uint64_t seed = 0x9E3779B97F4A7C15ull;
static unsigned long counts[256];
static pid_t child;

static uint64_t rnd(void)
{
	seed ^= seed << 13;
	seed ^= seed >> 7;
	seed ^= seed << 17;
	return seed;
}

static uint64_t pick(const uint64_t *v, size_t n)
{
	return v[rnd() % n];
}

static uint32_t interesting32(void)
{
	static const uint64_t v[] = { 0, 1, 2, 9, 10, 11, 16, 64, 100, 1000, 4095,
		4096, 4097, 65536, 1048576, 3600000, 3600001, 16777216, 16777217,
		0x7fffffff, 0x80000000, 0xffffffff };

	return rnd() % 4 ? (uint32_t)pick(v, sizeof(v) / sizeof(v[0])) : (uint32_t)rnd();
}

static int32_t rpid(void)
{
	static const int64_t v[] = { 0, 1, 2, -1, 0x7fffffff, -0x7fffffff - 1, 4194304, 99999 };

	switch (rnd() % 4) {
	case 0:
		return getpid();
	case 1:
		return child;
	case 2:
		return (int32_t)(rnd() % 400);
	}
	return (int32_t)v[rnd() % (sizeof(v) / sizeof(v[0]))];
}

static uint64_t ptrs[64];

static void fill_records(struct pmm_record *r, uint32_t n)
{
	uint64_t t = now_ns();
	uint32_t i;

	for (i = 0; i < n; i++) {
		memset(&r[i], 0, sizeof(r[i]));
		r[i].op = rnd() % 8 ? 1 + rnd() % 12 : (uint16_t)rnd();
		r[i].ptr = rnd() % 8 ? ptrs[rnd() % 64] : rnd();
		if (r[i].op == PMM_OP_REALLOC || r[i].op == PMM_OP_MREMAP || rnd() % 16 == 0)
			r[i].prev_ptr = ptrs[rnd() % 64];
		r[i].size = rnd() % 8 ? rnd() % 100000 : rnd();
		r[i].time_ns = rnd() % 8 ? t - rnd() % 1000000000ull + rnd() % 1000000000ull : rnd();
		r[i].site = rnd() % 8 ? rnd() % 16 : (uint32_t)rnd();
		r[i].weight = rnd() % 8 ? 1 + rnd() % 4 : (uint32_t)rnd();
		r[i].flags = rnd() % 8 ? (rnd() % 10 == 0) : (uint16_t)rnd();
		r[i].alloc_tag = rnd() % 16 ? 0 : (uint32_t)rnd();
	}
}

/* A pointer for the ioctl argument: mostly buf, sometimes bad. */
static void *arg_ptr(void *buf, size_t size, char *guard)
{
	static const uint64_t bad[] = { 0, 8, 0xdead0000, 0xffff888000000000ull,
		0xffffffffff600000ull, 0x7ffffffff000ull, 0xffffffffffffffffull };

	switch (rnd() % 16) {
	case 0:
		return (void *)(uintptr_t)pick(bad, sizeof(bad) / sizeof(bad[0]));
	case 1:		/* runs into the PROT_NONE page */
		return guard - (size ? rnd() % size : 0);
	case 2:
		return (void *)(uintptr_t)rnd();
	}
	return buf;
}

static void cfg_write(void)
{
	static const char *const keys[] = { "INTERVAL", "SCAN", "START_PID", "STOP_PID",
		"MAX_PIDS", "MAX_BLOCKS", "MAX_SITES", "MAX_SAMPLES", "interval", "", "SCAN=",
		"INTERVAL  ", "STOP_PIDX" };
	static const char *const vals[] = { "0", "1", "10", "9", "100", "-1", "abc", "1 2",
		"4294967296", "0x10", "+5", "1\n", "1\n\n", " 1", "3600001", "65", "" };
	char line[128];
	int f, len;

	if (rnd() % 8 == 0) {
		for (len = 0; len < (int)(rnd() % 100); len++)
			line[len] = (char)rnd();
	} else {
		len = snprintf(line, sizeof(line), "%s %s", keys[rnd() % 13], rnd() % 3 ?
			       vals[rnd() % 17] : "");
		if (rnd() % 3 == 0)
			len = snprintf(line, sizeof(line), "%s %d", keys[rnd() % 8], rpid());
	}
	f = open("/proc/pmm/cfg", O_WRONLY);
	if (f < 0) {
		counts[errno & 255]++;
		return;
	}
	if (write(f, line, len) < 0)
		counts[errno & 255]++;
	else
		counts[0]++;
	close(f);
}

/* Reads up to 64 KiB of /proc/pmm/pid from a random offset, in random sizes. */
static void pid_read(void)
{
	char buf[4096];
	int f = open("/proc/pmm/pid", O_RDONLY), i;

	if (f < 0)
		return;
	if (rnd() % 2)
		lseek(f, rnd() % 10000, SEEK_SET);
	for (i = 0; i < 16 && read(f, buf, 1 + rnd() % sizeof(buf)) > 0; i++)
		;
	close(f);
}

int main(int argc, char **argv)
{
	static const unsigned int cmds[] = { PMM_RECORD_LOG, PMM_SET_CONFIG, PMM_GET_CONFIG,
		PMM_MONITORED_PIDS, PMM_REGISTER_SITE, PMM_READ_BLOCKS, PMM_READ_SITES,
		PMM_READ_SAMPLES, PMM_GET_STATS, PMM_QUERY_SELF, PMM_HEAP_REPORT };
	unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 0) : 100000, i;
	int nobody = argc > 3 && !strcmp(argv[3], "--nobody");
	size_t big = (size_t)PMM_MAX_READ * sizeof(struct pmm_site_stats) + 4096;
	struct pmm_record *recs;
	char *pages, *guard, *rbuf;
	unsigned int cmd;
	uint64_t t0;
	int fd, e;

	if (argc > 2)
		seed ^= strtoull(argv[2], NULL, 0) * 0x2545F4914F6CDD1Dull;
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (i = 0; i < 64; i++)
		ptrs[i] = 0x10000000 + (rnd() % 64) * 16 + (i % 4) * 0x1000;
	fd = pmm_open();
	child = fork();
	if (child == 0) {
		/* a process to start and stop; it must not keep /dev/pmm open */
		close(fd);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (nobody && (setgroups(0, NULL) || setresgid(65534, 65534, 65534) ||
			       setresuid(65534, 65534, 65534)))
			_exit(1);
		prctl(PR_SET_DUMPABLE, 1);	/* nobody may monitor it */
		for (;;)
			pause();
	}
	pmm_startstop(fd, 0, 1);
	if (nobody) {
		if (setgroups(0, NULL) || setresgid(65534, 65534, 65534) ||
		    setresuid(65534, 65534, 65534))
			DIE("drop privileges: %s", strerror(errno));
	}
	pages = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	rbuf = malloc(big);
	recs = calloc(PMM_MAX_BATCH + 16, sizeof(*recs));
	if (pages == MAP_FAILED || !rbuf || !recs)
		DIE("memory");
	guard = pages + 4096;
	mprotect(guard, 4096, PROT_NONE);

	t0 = now_ns();
	for (i = 0; i < n; i++) {
		union {
			struct pmm_record_batch b;
			struct pmm_config c;
			struct pmm_read r;
			struct pmm_site s;
			struct pmm_stats st;
			struct pmm_heap h;
			char raw[2048];
		} u;
		size_t size = 0;
		long ret;

		if (i % 20000 == 0)
			fprintf(stderr, "fuzz: %lu calls, %.1f s\n", i, (now_ns() - t0) / 1e9);
		if (rnd() % 64 == 0) {
			cfg_write();
			continue;
		}
		if (rnd() % 512 == 0) {
			pid_read();
			continue;
		}
		for (e = 0; e < (int)sizeof(u.raw); e++)
			u.raw[e] = rnd() % 4 ? 0 : (char)rnd();
		switch (rnd() % 8) {
		case 0:
			cmd = (uint32_t)rnd();
			break;
		case 1:
			cmd = _IOC(rnd() % 4, PMM_IOC_MAGIC, rnd() % 16, rnd() % 1024);
			break;
		default:
			cmd = cmds[rnd() % (sizeof(cmds) / sizeof(cmds[0]))];
		}
		switch (cmd) {
		case PMM_RECORD_LOG:
			size = sizeof(u.b);
			memset(&u.b, 0, size);
			u.b.count = rnd() % 4 ? 1 + rnd() % 64 : interesting32();
			fill_records(recs, u.b.count < PMM_MAX_BATCH ? u.b.count : PMM_MAX_BATCH);
			u.b.records = (uintptr_t)arg_ptr(recs, 0, guard);
			if (rnd() % 16 == 0)
				u.b.flags = interesting32();
			if (rnd() % 16 == 0)
				u.b.reserved = interesting32();
			break;
		case PMM_SET_CONFIG:
		case PMM_GET_CONFIG:
			size = sizeof(u.c);
			memset(&u.c, 0, size);
			u.c.size = rnd() % 8 ? sizeof(u.c) : interesting32();
			u.c.set = rnd() % 4 ? 1u << (rnd() % 9) : interesting32();
			u.c.interval_ms = interesting32();
			u.c.scan = rnd() % 3;
			u.c.start_pid = rpid();
			u.c.stop_pid = rpid();
			u.c.max_pids = interesting32();
			u.c.max_blocks_per_pid = interesting32();
			u.c.max_sites_per_pid = interesting32();
			u.c.max_samples_per_pid = rnd() % 2 ? 1 + rnd() % 64 : interesting32();
			if (rnd() % 16 == 0)
				u.c.reserved2[0] = rnd();
			if (rnd() % 16 == 0)
				u.c.older_frees = rnd();
			break;
		case PMM_MONITORED_PIDS:
		case PMM_READ_BLOCKS:
		case PMM_READ_SITES:
		case PMM_READ_SAMPLES:
			size = sizeof(u.r);
			memset(&u.r, 0, size);
			u.r.pid = cmd == PMM_MONITORED_PIDS && rnd() % 4 ? 0 : rpid();
			u.r.capacity = rnd() % 4 ? 1 + rnd() % 64 : interesting32();
			u.r.buf = (uintptr_t)arg_ptr(rbuf, 0, guard);
			u.r.cursor = rnd() % 2 ? 0 : rnd() % 4 ? rnd() % 5000 : rnd();
			if (rnd() % 16 == 0)
				u.r.flags = interesting32();
			if (rnd() % 16 == 0)
				u.r.reserved = interesting32();
			break;
		case PMM_REGISTER_SITE:
			size = sizeof(u.s);
			u.s.site = rnd() % 4 ? rnd() % 20 : interesting32();
			u.s.flags = rnd() % 4 ? rnd() % 2 : interesting32();
			u.s.depth = rnd() % 4 ? rnd() % 33 : interesting32();
			u.s.line = interesting32();
			if (rnd() % 4)
				u.s.file[rnd() % PMM_SITE_FILE_LEN] = 0;
			if (rnd() % 4)
				u.s.func[rnd() % PMM_SITE_FUNC_LEN] = 0;
			break;
		case PMM_HEAP_REPORT:
			/* mostly well formed (glibc's sum holds), a field off at times */
			size = sizeof(u.h);
			memset(&u.h, 0, size);
			u.h.size = rnd() % 8 ? sizeof(u.h) : interesting32();
			u.h.allocator = rnd() % 4 ? 1 + rnd() % 2 : interesting32();
			u.h.in_use = rnd() % (1ULL << (rnd() % 60));
			u.h.free = rnd() % (1ULL << (rnd() % 60));
			u.h.mapped = u.h.allocator == PMM_ALLOC_GLIBC && rnd() % 4 ?
				     u.h.in_use + u.h.free : rnd();
			u.h.top = u.h.allocator == PMM_ALLOC_GLIBC && u.h.free ?
				  rnd() % u.h.free : 0;
			if (rnd() % 16 == 0)
				u.h.retained = rnd();
			if (rnd() % 16 == 0)
				u.h.time_ns = rnd();
			if (rnd() % 16 == 0)
				u.h.reserved = rnd();
			break;
		case PMM_GET_STATS:
			size = sizeof(u.st);
			memset(&u.st, 0, size);
			u.st.pid = rpid();
			if (rnd() % 16 == 0)
				u.st.reserved = interesting32();
			break;
		}
		if (size && rnd() % 16 == 1) {
			/* the struct itself runs into the guard page */
			char *at = guard - 1 - rnd() % size;

			memcpy(at, &u, guard - at);
			ret = ioctl(fd, cmd, at);
		} else {
			ret = ioctl(fd, cmd, arg_ptr(&u, size, guard));
		}
		counts[ret < 0 ? errno & 255 : 0]++;
	}
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	printf("fuzz: %lu calls as %s:", n, nobody ? "nobody" : "root");
	for (e = 0; e < 256; e++)
		if (counts[e])
			printf(" %s=%lu", e ? strerror(e) : "ok", counts[e]);
	printf("\n");
	return 0;
}
