/* SPDX-License-Identifier: GPL-2.0 */
/* Helpers shared by the in-guest test programs. */
#ifndef PMMTEST_H
#define PMMTEST_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include "pmm.h"

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(2); } while (0)

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static inline int pmm_open(void)
{
	int fd = open("/dev/pmm", O_RDWR | O_CLOEXEC);

	if (fd < 0)
		DIE("open /dev/pmm: %s", strerror(errno));
	return fd;
}

/* START_PID (start) or STOP_PID of pid (0: the caller); returns errno or 0. */
static inline int pmm_startstop(int fd, int pid, int start)
{
	struct pmm_config c;

	memset(&c, 0, sizeof(c));
	c.size = sizeof(c);
	if (start) {
		c.set = PMM_CFG_START_PID;
		c.start_pid = pid;
	} else {
		c.set = PMM_CFG_STOP_PID;
		c.stop_pid = pid;
	}
	return ioctl(fd, PMM_SET_CONFIG, &c) ? errno : 0;
}

/* Sends n records; returns errno or 0. */
static inline int pmm_send(int fd, struct pmm_record *r, uint32_t n)
{
	struct pmm_record_batch b;

	memset(&b, 0, sizeof(b));
	b.records = (uintptr_t)r;
	b.count = n;
	return ioctl(fd, PMM_RECORD_LOG, &b) ? errno : 0;
}

static inline struct pmm_record rec(uint16_t op, uint64_t ptr, uint64_t prev,
				    uint64_t size, uint64_t t, uint32_t site)
{
	struct pmm_record r;

	memset(&r, 0, sizeof(r));
	r.op = op;
	r.ptr = ptr;
	r.prev_ptr = prev;
	r.size = size;
	r.time_ns = t;
	r.site = site;
	r.weight = 1;
	return r;
}

/* The caller's own pmm_pid_info; returns errno or 0. */
static inline int pmm_self_info(int fd, struct pmm_pid_info *out)
{
	struct pmm_pid_info infos[64];
	struct pmm_read rd;
	uint32_t i;
	int me = getpid();

	memset(&rd, 0, sizeof(rd));
	rd.capacity = 64;
	rd.buf = (uintptr_t)infos;
	if (ioctl(fd, PMM_MONITORED_PIDS, &rd))
		return errno;
	for (i = 0; i < rd.count; i++)
		if (infos[i].pid == me) {
			*out = infos[i];
			return 0;
		}
	return ENOENT;
}

/* One site's counters of pid (0: the caller); returns errno or 0. */
static inline int pmm_site_stats(int fd, int pid, uint32_t site,
				 struct pmm_site_stats *out)
{
	static struct pmm_site_stats buf[256];
	struct pmm_read rd;
	uint32_t i;

	memset(&rd, 0, sizeof(rd));
	rd.pid = pid;
	rd.capacity = 256;
	rd.buf = (uintptr_t)buf;
	do {
		if (ioctl(fd, PMM_READ_SITES, &rd))
			return errno;
		for (i = 0; i < rd.count; i++)
			if (buf[i].desc.site == site) {
				*out = buf[i];
				return 0;
			}
	} while (!rd.done);
	return ENOENT;
}

#endif
