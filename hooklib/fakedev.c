// SPDX-License-Identifier: GPL-2.0
/*
 * The fake device (the -DPMM_FAKE_DEV build, hooklib/libpmmhook-fake.so):
 * the module, modelled for host tests and benchmarks. Each call is an
 * ioctl on the hook's fd, /dev/null or PMM_DEVICE's file (ENOTTY: a system
 * call's cost and no kernel work; its result is not the answer), so strace
 * shows which file the hook's ioctls reach. The
 * module attributes a call to the calling process: one pid is monitored,
 * this process's at init (none with PMM_FAKE_UNMONITORED), and a START_PID
 * 0 names the caller; from any other pid (a forked or vfork'd child)
 * RECORD_LOG and REGISTER_SITE fail with ENOLINK and QUERY_SELF answers 0.
 * PMM_FAKE_STOP_AT=N: the Nth RECORD_LOG fails with ENOLINK, as if pmctl
 * had stopped the process and started it again.
 * PMM_FAKE_INTERVAL=MS: the sampling interval HEAP_REPORT returns (the
 * module's default, 10000, if unset).
 * PMM_FAKE_RAISE=batch:N|claim:N: SIGUSR1 is raised in the calling thread,
 * inside the hook, once: after the Nth RECORD_LOG (logged), or in the Nth
 * claim of a site's slot, between the claim and its id (pmm_fake_point).
 *
 * PMM_FAKE_LOG=FILE: every call is appended to FILE as one writev (appends
 * do not interleave): six u32 (the caller's pid and thread id, the ioctl's
 * number, the result, a count and the bytes that follow), then the
 * records of a RECORD_LOG, the struct pmm_site of a REGISTER_SITE, the
 * struct pmm_config of a SET_CONFIG or the struct pmm_heap of a
 * HEAP_REPORT. Its fd is kept at 3 or above and, as
 * the device's, checked before each write: if the program closed it, the
 * file is opened again (never the program's file at that number written).
 *
 * Owns: g_fake_* (set once by fake_dev_setup).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "clock.h"
#include "env.h"
#include "fakedev.h"

#ifndef PMM_FAKE_DEV
#error "fakedev.c is the fake-device build's (-DPMM_FAKE_DEV)"
#endif

static int g_fake_unmonitored;
static pid_t g_fake_monitored;
static long g_fake_stop_at;
static int g_fake_interval;	/* ms, HEAP_REPORT's answer */
static long g_fake_logs;	/* RECORD_LOGs so far */
static char g_fake_log[4096];
static int g_fake_raise_at;	/* FAKE_AT_* of PMM_FAKE_RAISE */
static long g_fake_raise_n, g_fake_raise_seen;
static int g_fake_log_fd = -1;
static dev_t g_fake_log_dev;
static ino_t g_fake_log_ino;

static int fake_log_fd(void)
{
	int fd = __atomic_load_n(&g_fake_log_fd, __ATOMIC_ACQUIRE), was = fd, low;
	struct stat st;

	if (fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == g_fake_log_dev &&
	    st.st_ino == g_fake_log_ino)
		return fd;
	low = open(g_fake_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (low < 0)
		return -1;
	fd = fcntl(low, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
	close(low);
	if (fd < 0 || fstat(fd, &st) < 0)
		return -1;
	g_fake_log_dev = st.st_dev;	/* the same file for every thread */
	g_fake_log_ino = st.st_ino;
	if (!__atomic_compare_exchange_n(&g_fake_log_fd, &was, fd, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		close(fd);	/* another thread's, or a signal handler's, won */
		fd = was;
	}
	return fd;
}

static void fake_log(pid_t pid, unsigned long cmd, int result, const void *arg)
{
	const struct pmm_record_batch *b = arg;
	uint32_t head[6] = { (uint32_t)pid, (uint32_t)syscall(SYS_gettid), _IOC_NR(cmd),
			     (uint32_t)result, 0, 0 };
	struct iovec iov[2] = { { head, sizeof(head) }, { NULL, 0 } };
	int fd;

	if (!g_fake_log[0])
		return;
	switch (cmd) {
	case PMM_RECORD_LOG:
		head[4] = b->count;
		iov[1].iov_base = (void *)(uintptr_t)b->records;
		iov[1].iov_len = b->count * sizeof(struct pmm_record);
		break;
	case PMM_REGISTER_SITE:
		head[4] = 1;
		iov[1].iov_base = (void *)arg;
		iov[1].iov_len = sizeof(struct pmm_site);
		break;
	case PMM_SET_CONFIG:
		head[4] = 1;
		iov[1].iov_base = (void *)arg;
		iov[1].iov_len = sizeof(struct pmm_config);
		break;
	case PMM_HEAP_REPORT:
		head[4] = 1;
		iov[1].iov_base = (void *)arg;
		iov[1].iov_len = sizeof(struct pmm_heap);
		break;
	}
	head[5] = (uint32_t)iov[1].iov_len;
	fd = fake_log_fd();
	if (fd < 0 || writev(fd, iov, 2) != (ssize_t)(sizeof(head) + iov[1].iov_len))
		abort();	/* a test's log must be whole */
}

void pmm_fake_point(int at)
{
	if (at == g_fake_raise_at &&
	    __atomic_add_fetch(&g_fake_raise_seen, 1, __ATOMIC_RELAXED) == g_fake_raise_n)
		syscall(SYS_tgkill, (pid_t)syscall(SYS_getpid), (pid_t)syscall(SYS_gettid), SIGUSR1);
}

int fake_ioctl(int fd, unsigned long cmd, void *arg)
{
	pid_t me = (pid_t)syscall(SYS_getpid);
	const struct pmm_config *c = arg;
	int r;

	r = ioctl(fd, cmd, arg);	/* the system call; the file refuses it */
	(void)r;
	fake_clock_refresh();
	switch (cmd) {
	case PMM_SET_CONFIG:
		if ((c->set & PMM_CFG_START_PID) && !c->start_pid && !g_fake_unmonitored)
			__atomic_store_n(&g_fake_monitored, me, __ATOMIC_RELAXED);
		r = 0;
		break;
	case PMM_QUERY_SELF:
		r = me == __atomic_load_n(&g_fake_monitored, __ATOMIC_RELAXED);
		break;
	default:
		r = me == __atomic_load_n(&g_fake_monitored, __ATOMIC_RELAXED) ? 0 : -ENOLINK;
		if (!r && cmd == PMM_RECORD_LOG &&
		    __atomic_add_fetch(&g_fake_logs, 1, __ATOMIC_RELAXED) == g_fake_stop_at)
			r = -ENOLINK;
		if (!r && cmd == PMM_HEAP_REPORT)
			r = g_fake_interval;
		break;
	}
	fake_log(me, cmd, r, arg);
	if (cmd == PMM_RECORD_LOG)
		pmm_fake_point(FAKE_AT_BATCH);
	if (r < 0) {
		errno = -r;
		r = -1;
	}
	return r;
}

void fake_dev_setup(char **env, pid_t pid)
{
	const char *u;

	u = env_get(env, "PMM_FAKE_LOG");
	if (u && strlen(u) < sizeof(g_fake_log))
		strcpy(g_fake_log, u);
	g_fake_unmonitored = env_num(env, "PMM_FAKE_UNMONITORED", 0) != 0;
	g_fake_stop_at = env_num(env, "PMM_FAKE_STOP_AT", 0);
	g_fake_interval = (int)env_num(env, "PMM_FAKE_INTERVAL", 10000);
	u = env_get(env, "PMM_FAKE_RAISE");
	if (u && !strncmp(u, "batch:", 6))
		g_fake_raise_at = FAKE_AT_BATCH;
	else if (u && !strncmp(u, "claim:", 6))
		g_fake_raise_at = FAKE_AT_CLAIM;
	if (g_fake_raise_at)
		g_fake_raise_n = num_of(u + 6, 0);
	if (!g_fake_unmonitored)
		g_fake_monitored = pid;
}
