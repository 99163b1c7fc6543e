// SPDX-License-Identifier: GPL-2.0
/*
 * /dev/pmm's ioctls in the kernel selftest style (tools/testing/selftests/
 * drivers/ntsync): before each call every output struct is filled with 0xcc;
 * afterwards the return value and errno are checked, and so is every field
 * the module must write and every byte it must leave alone. A refused call
 * must change nothing: neither its argument nor the module's configuration.
 *
 * Run as root with pmm.ko loaded and nothing monitored. Prints TAP
 * ("ok N - what" / "not ok N - what: why") and exits with the number of
 * failures.
 */
#include <stdarg.h>
#include <stddef.h>
#include "pmmtest.h"

#define FILL	0xcc

static int tests, failures;

static void result(int ok, const char *what, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void result(int ok, const char *what, const char *fmt, ...)
{
	va_list ap;

	tests++;
	if (ok) {
		printf("ok %d - %s\n", tests, what);
		return;
	}
	failures++;
	printf("not ok %d - %s: ", tests, what);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

/* The ioctl's return value and errno (0 when it succeeded). */
static int call(int fd, unsigned long req, void *arg, int *ret)
{
	errno = 0;
	*ret = ioctl(fd, req, arg);
	return *ret < 0 ? errno : 0;
}

/* Is [p + from, p + to) still all FILL? */
static int untouched(const void *p, size_t from, size_t to)
{
	const unsigned char *b = p;

	for (; from < to; from++)
		if (b[from] != FILL)
			return 0;
	return 1;
}

static void expect_refused(int fd, unsigned long req, void *arg, size_t size,
			   size_t keep_from, int want, const char *what)
{
	unsigned char before[4096];
	int ret, err;

	memcpy(before, arg, size);
	err = call(fd, req, arg, &ret);
	if (ret != -1 || err != want) {
		result(0, what, "returned %d, errno %d (%s), want -1 and %d", ret, err,
		       strerror(err), want);
		return;
	}
	/* the caller's fields before keep_from and the rest: all as they were */
	result(!memcmp(before, arg, size) && untouched(arg, keep_from, size), what,
	       "the argument was changed");
}

static struct pmm_config get_config(int fd)
{
	struct pmm_config c;
	int ret;

	memset(&c, FILL, sizeof(c));
	c.size = sizeof(c);
	if (call(fd, PMM_GET_CONFIG, &c, &ret))
		DIE("PMM_GET_CONFIG: %s", strerror(errno));
	return c;
}

/* The settable values of a configuration, for "nothing changed". */
static int same_settings(const struct pmm_config *a, const struct pmm_config *b)
{
	return a->interval_ms == b->interval_ms && a->scan == b->scan &&
	       a->max_pids == b->max_pids && a->max_blocks_per_pid == b->max_blocks_per_pid &&
	       a->max_sites_per_pid == b->max_sites_per_pid &&
	       a->max_samples_per_pid == b->max_samples_per_pid &&
	       a->max_pids_per_uid == b->max_pids_per_uid && a->exited_ttl_s == b->exited_ttl_s &&
	       a->monitored_pids == b->monitored_pids;
}

static void test_get_config(int fd)
{
	struct pmm_config c;
	int ret, err;

	memset(&c, FILL, sizeof(c));
	c.size = sizeof(c);
	err = call(fd, PMM_GET_CONFIG, &c, &ret);
	result(!err && !ret, "GET_CONFIG returns 0", "ret %d errno %d", ret, err);
	result(c.size == sizeof(c) && c.set == 0 && c.abi_version == PMM_ABI_VERSION,
	       "GET_CONFIG: size, set 0, abi_version", "size %u set %u abi %u", c.size, c.set,
	       c.abi_version);
	result(c.interval_ms >= PMM_INTERVAL_MIN_MS && c.interval_ms <= PMM_INTERVAL_MAX_MS &&
	       c.scan <= 1 && c.max_pids >= 1 && c.max_pids_per_uid >= 1 &&
	       c.exited_ttl_s >= PMM_EXITED_TTL_MIN_S,
	       "GET_CONFIG: every setting written, in range", "interval %u scan %u", c.interval_ms,
	       c.scan);
	result(c.reserved == 0 && c.reserved2[0] == 0 &&
	       c.monitored_pids == 0,
	       "GET_CONFIG: reserved fields and counters written", "reserved %u", c.reserved);
	result(!untouched(&c, offsetof(struct pmm_config, kmem_bytes),
			  offsetof(struct pmm_config, kmem_bytes) + 8) &&
	       !untouched(&c, offsetof(struct pmm_config, records_queued),
			  offsetof(struct pmm_config, records_queued) + 8) &&
	       !untouched(&c, offsetof(struct pmm_config, older_frees),
			  offsetof(struct pmm_config, older_frees) + 8),
	       "GET_CONFIG: the counters written", "a counter left as 0xcc");

	memset(&c, FILL, sizeof(c));
	c.size = sizeof(c) - 8;
	expect_refused(fd, PMM_GET_CONFIG, &c, sizeof(c), sizeof(c.size), EINVAL,
		       "GET_CONFIG of another size: EINVAL, nothing written");
	err = call(fd, PMM_GET_CONFIG, (void *)8, &ret);
	result(ret == -1 && err == EFAULT, "GET_CONFIG at a bad pointer: EFAULT", "errno %d", err);
}

static void test_set_config(int fd)
{
	struct pmm_config before = get_config(fd), c, after;
	int ret, err, i;

	for (i = 0; i < 9; i++) {
		const char *what = NULL;

		memset(&c, 0, sizeof(c));
		c.size = sizeof(c);
		c.set = PMM_CFG_INTERVAL;
		c.interval_ms = 500;
		switch (i) {
		case 0: c.size = sizeof(c) + 8; what = "SET_CONFIG of another size"; break;
		case 1: c.set |= 1U << 10; what = "SET_CONFIG with an unknown set bit"; break;
		case 2: c.reserved = 1; what = "SET_CONFIG with reserved set"; break;
		case 3: c.reserved2[0] = 1; what = "SET_CONFIG with reserved2 set"; break;
		case 4: c.kmem_bytes = 1; what = "SET_CONFIG with a counter set"; break;
		case 5: c.abi_version = PMM_ABI_VERSION + 1; what = "SET_CONFIG of another ABI"; break;
		case 6: c.interval_ms = PMM_INTERVAL_MIN_MS - 1; what = "SET_CONFIG interval too small"; break;
		case 7: c.set |= PMM_CFG_EXITED_TTL; c.exited_ttl_s = 0; what = "SET_CONFIG exited_ttl 0"; break;
		case 8: c.set |= PMM_CFG_MAX_PIDS_PER_UID; c.max_pids_per_uid = PMM_MAX_PIDS_LIMIT + 1;
			what = "SET_CONFIG max_pids_per_uid too large"; break;
		}
		err = call(fd, PMM_SET_CONFIG, &c, &ret);
		after = get_config(fd);
		result(ret == -1 && err == EINVAL && same_settings(&before, &after), what,
		       "returned %d errno %d, settings %s", ret, err,
		       same_settings(&before, &after) ? "kept" : "changed");
	}
	/* a refused START leaves the other values alone */
	memset(&c, 0, sizeof(c));
	c.size = sizeof(c);
	c.set = PMM_CFG_INTERVAL | PMM_CFG_START_PID;
	c.interval_ms = 777;
	c.start_pid = 0x7ffffff0;	/* no such process */
	err = call(fd, PMM_SET_CONFIG, &c, &ret);
	after = get_config(fd);
	result(ret == -1 && err == ESRCH && after.interval_ms == before.interval_ms,
	       "SET_CONFIG: START of no process is ESRCH and changes nothing", "errno %d interval %u",
	       err, after.interval_ms);
	err = call(fd, PMM_SET_CONFIG, (void *)8, &ret);
	result(ret == -1 && err == EFAULT, "SET_CONFIG at a bad pointer: EFAULT", "errno %d", err);
}

static void test_record_log(int fd)
{
	struct pmm_record r[2];
	struct pmm_record_batch b;
	int ret, err;

	r[0] = rec(PMM_OP_MALLOC, 0x1000, 0, 16, now_ns(), 1);
	r[1] = r[0];
	r[1].op = PMM_OP_NR;	/* bad */

	memset(&b, FILL, sizeof(b));
	b.records = (uintptr_t)r;
	b.count = 1;
	b.flags = 0;
	b.reserved = 0;
	expect_refused(fd, PMM_RECORD_LOG, &b, sizeof(b), sizeof(b), ENOLINK,
		       "RECORD_LOG while not monitored: ENOLINK, accepted left alone");
	if (pmm_startstop(fd, 0, 1))
		DIE("START self: %s", strerror(errno));

	memset(&b, FILL, sizeof(b));
	b.records = (uintptr_t)r;
	b.count = 1;
	b.flags = 1;
	b.reserved = 0;
	expect_refused(fd, PMM_RECORD_LOG, &b, sizeof(b), sizeof(b), EINVAL,
		       "RECORD_LOG with flags: EINVAL, accepted left alone");
	b.flags = 0;
	b.reserved = 1;
	expect_refused(fd, PMM_RECORD_LOG, &b, sizeof(b), sizeof(b), EINVAL,
		       "RECORD_LOG with reserved: EINVAL, accepted left alone");
	b.reserved = 0;
	b.count = 0;
	expect_refused(fd, PMM_RECORD_LOG, &b, sizeof(b), sizeof(b), EINVAL,
		       "RECORD_LOG of 0 records: EINVAL");
	b.count = PMM_MAX_BATCH + 1;
	expect_refused(fd, PMM_RECORD_LOG, &b, sizeof(b), sizeof(b), EINVAL,
		       "RECORD_LOG of more than PMM_MAX_BATCH: EINVAL");

	b.count = 2;	/* the second is bad: the first is applied, accepted = 1 */
	err = call(fd, PMM_RECORD_LOG, &b, &ret);
	result(ret == -1 && err == EINVAL && b.accepted == 1 && b.count == 2 && !b.flags &&
	       !b.reserved && b.records == (uintptr_t)r,
	       "RECORD_LOG with a bad second record: EINVAL, accepted 1, the rest kept",
	       "errno %d accepted %u", err, b.accepted);
	r[1] = rec(PMM_OP_CALLOC, 0x2000, 0, 32, now_ns(), 2);
	b.records = (uintptr_t)&r[1];
	b.count = 1;
	err = call(fd, PMM_RECORD_LOG, &b, &ret);
	result(!err && !ret && b.accepted == 1, "RECORD_LOG of one record: accepted 1",
	       "errno %d accepted %u", err, b.accepted);
	b.records = 8;
	err = call(fd, PMM_RECORD_LOG, &b, &ret);
	result(ret == -1 && err == EFAULT && b.accepted == 0,
	       "RECORD_LOG of records at a bad pointer: EFAULT, accepted 0", "errno %d accepted %u",
	       err, b.accepted);
}

static void test_reads(int fd)
{
	static struct pmm_block blocks[8];
	struct pmm_read rd;
	int ret, err, i;

	memset(&rd, FILL, sizeof(rd));
	rd.pid = 0;
	rd.capacity = 0;
	rd.buf = (uintptr_t)blocks;
	rd.flags = 0;
	rd.reserved = 0;
	expect_refused(fd, PMM_READ_BLOCKS, &rd, sizeof(rd), sizeof(rd), EINVAL,
		       "READ_BLOCKS of capacity 0: EINVAL, nothing written");
	rd.capacity = PMM_MAX_READ + 1;
	expect_refused(fd, PMM_READ_BLOCKS, &rd, sizeof(rd), sizeof(rd), EINVAL,
		       "READ_BLOCKS over PMM_MAX_READ: EINVAL");
	rd.capacity = 8;
	rd.flags = 1;
	expect_refused(fd, PMM_READ_BLOCKS, &rd, sizeof(rd), sizeof(rd), EINVAL,
		       "READ_BLOCKS with flags: EINVAL");
	rd.flags = 0;
	rd.pid = -1;
	expect_refused(fd, PMM_READ_BLOCKS, &rd, sizeof(rd), sizeof(rd), EINVAL,
		       "READ_BLOCKS of a negative pid: EINVAL");
	rd.pid = 0x7ffffff0;
	expect_refused(fd, PMM_READ_BLOCKS, &rd, sizeof(rd), sizeof(rd), ESRCH,
		       "READ_BLOCKS of no process: ESRCH");
	rd.pid = 1;	/* exists, not monitored */
	expect_refused(fd, PMM_READ_BLOCKS, &rd, sizeof(rd), sizeof(rd), ENOENT,
		       "READ_BLOCKS of an unmonitored process: ENOENT");
	rd.pid = 5;
	expect_refused(fd, PMM_MONITORED_PIDS, &rd, sizeof(rd), sizeof(rd), EINVAL,
		       "MONITORED_PIDS with a pid: EINVAL");

	/* test_record_log's two live blocks: cursor, count, done, total
	 * written, the buffer past count untouched */
	memset(&rd, FILL, sizeof(rd));
	memset(blocks, FILL, sizeof(blocks));
	rd.pid = 0;
	rd.capacity = 8;
	rd.buf = (uintptr_t)blocks;
	rd.cursor = 0;
	rd.flags = 0;
	rd.reserved = 0;
	err = call(fd, PMM_READ_BLOCKS, &rd, &ret);
	result(!err && rd.count == 2 && rd.done == 1 && rd.total == 2 && rd.cursor != 0,
	       "READ_BLOCKS: count, done, total, cursor written", "errno %d count %u done %u total %llu",
	       err, rd.count, rd.done, (unsigned long long)rd.total);
	i = blocks[0].ptr == 0x1000 ? 0 : 1;
	result(blocks[i].ptr == 0x1000 && blocks[i].size == 16 && blocks[i].site == 1 &&
	       blocks[i].op == PMM_OP_MALLOC && blocks[i].weight == 1 && !blocks[i].prev_ptr &&
	       !blocks[i].reserved[0] && !blocks[i].reserved[1] && !blocks[i].reserved[2] &&
	       blocks[1 - i].ptr == 0x2000 && blocks[1 - i].op == PMM_OP_CALLOC,
	       "READ_BLOCKS: every field of the blocks written", "ptr %llx size %llu",
	       (unsigned long long)blocks[i].ptr, (unsigned long long)blocks[i].size);
	result(untouched(blocks, 2 * sizeof(blocks[0]), sizeof(blocks)),
	       "READ_BLOCKS: the buffer past count untouched", "written past count");
	rd.buf = 8;
	rd.cursor = 0;
	err = call(fd, PMM_READ_BLOCKS, &rd, &ret);
	result(ret == -1 && err == EFAULT, "READ_BLOCKS into a bad buffer: EFAULT", "errno %d", err);
}

static void test_stats_and_sites(int fd)
{
	struct pmm_stats st;
	struct pmm_site s;
	int ret, err;

	memset(&st, FILL, sizeof(st));
	st.pid = 0;
	st.reserved = 1;
	expect_refused(fd, PMM_GET_STATS, &st, sizeof(st), sizeof(st), EINVAL,
		       "GET_STATS with reserved: EINVAL, nothing written");
	st.reserved = 0;
	err = call(fd, PMM_GET_STATS, &st, &ret);
	result(!err && st.pid == getpid() && !st.reserved && !st.reserved2[0] && !st.reserved2[2] &&
	       st.older_frees == 0 &&
	       st.buckets[0].malloc_count == 1 && st.buckets[1].calloc_count == 1 &&
	       st.failed_allocs == 0,
	       "GET_STATS: pid, buckets, reserved written", "errno %d pid %d", err, st.pid);

	memset(&s, 0, sizeof(s));
	s.site = 0;
	expect_refused(fd, PMM_REGISTER_SITE, &s, sizeof(s), sizeof(s), EINVAL,
		       "REGISTER_SITE of site 0: EINVAL");
	s.site = 7;
	s.depth = PMM_MAX_FRAMES + 1;
	expect_refused(fd, PMM_REGISTER_SITE, &s, sizeof(s), sizeof(s), EINVAL,
		       "REGISTER_SITE deeper than PMM_MAX_FRAMES: EINVAL");
	s.depth = 1;
	s.flags = PMM_SITE_F_SOURCE;
	memset(s.file, 'a', sizeof(s.file));	/* no NUL */
	expect_refused(fd, PMM_REGISTER_SITE, &s, sizeof(s), sizeof(s), EINVAL,
		       "REGISTER_SITE with an unterminated file: EINVAL");
	s.file[0] = 0;
	s.flags = 1U << 5;
	expect_refused(fd, PMM_REGISTER_SITE, &s, sizeof(s), sizeof(s), EINVAL,
		       "REGISTER_SITE with an unknown flag: EINVAL");
}

static void test_misc(int fd)
{
	int ret, err;

	err = call(fd, _IO(PMM_IOC_MAGIC, 99), NULL, &ret);
	result(ret == -1 && err == ENOTTY, "an unknown ioctl: ENOTTY", "errno %d", err);
	err = call(fd, PMM_QUERY_SELF, NULL, &ret);
	result(!err && ret == 1, "QUERY_SELF while monitored: 1", "ret %d", ret);
}

int main(void)
{
	struct pmm_config c;
	int fd = pmm_open();

	c = get_config(fd);
	if (c.monitored_pids)
		DIE("run with nothing monitored");
	test_get_config(fd);
	test_set_config(fd);
	test_record_log(fd);
	test_reads(fd);
	test_stats_and_sites(fd);
	test_misc(fd);
	pmm_startstop(fd, 0, 0);
	printf("1..%d\n", tests);
	return failures;
}
