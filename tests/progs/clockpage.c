// SPDX-License-Identifier: GPL-2.0
/*
 * The clock page under what a program may do to its mapping: read, then
 * MADV_DONTNEED and read again, mremap to a larger size, mremap to another
 * address, mprotect to writable or executable. Prints key=value lines; a
 * read that faults kills it with SIGBUS.
 */
#define _GNU_SOURCE
#include <sys/mman.h>
#include "pmmtest.h"

static uint64_t read_clock(const void *p)
{
	return ((const volatile struct pmm_clock *)p)->mono_ns;
}

static void wait_tick(void)
{
	struct timespec ts = { 0, 20 * 1000 * 1000 };

	nanosleep(&ts, NULL);
}

int main(void)
{
	int fd = pmm_open();
	uint64_t a, b;
	void *p, *q, *where;

	p = mmap(NULL, PMM_CLOCK_SIZE, PROT_READ, MAP_SHARED, fd, PMM_CLOCK_OFFSET);
	if (p == MAP_FAILED)
		DIE("mmap: %s", strerror(errno));
	a = read_clock(p);
	wait_tick();
	printf("mprotect_write=%d\n", mprotect(p, PMM_CLOCK_SIZE, PROT_READ | PROT_WRITE) ? errno : 0);
	printf("mprotect_exec=%d\n", mprotect(p, PMM_CLOCK_SIZE, PROT_READ | PROT_EXEC) ? errno : 0);
	printf("madvise_dontneed=%d\n", madvise(p, PMM_CLOCK_SIZE, MADV_DONTNEED) ? errno : 0);
	fflush(stdout);
	b = read_clock(p);	/* SIGBUS here if the page is not provided again */
	printf("after_dontneed_advances=%d\n", b > a);
	q = mremap(p, PMM_CLOCK_SIZE, 2 * PMM_CLOCK_SIZE, MREMAP_MAYMOVE);
	printf("mremap_grow=%d\n", q == MAP_FAILED ? errno : 0);
	if (q != MAP_FAILED)
		p = q;
	fflush(stdout);
	/* a hole of two pages elsewhere; move the clock into its first */
	where = mmap(NULL, 2 * PMM_CLOCK_SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (where == MAP_FAILED)
		DIE("mmap hole: %s", strerror(errno));
	q = mremap(p, PMM_CLOCK_SIZE, PMM_CLOCK_SIZE, MREMAP_MAYMOVE | MREMAP_FIXED, where);
	printf("mremap_move=%d\n", q == MAP_FAILED ? errno : 0);
	if (q != MAP_FAILED)
		p = q;
	fflush(stdout);
	wait_tick();
	a = read_clock(p);
	wait_tick();
	b = read_clock(p);
	printf("after_move_advances=%d\n", b > a);
	printf("munmap=%d\n", munmap(p, PMM_CLOCK_SIZE) ? errno : 0);
	return 0;
}
