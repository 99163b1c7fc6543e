/* SPDX-License-Identifier: GPL-2.0 */
/*
 * site.c: site ids, one per allocation source, and their registration with
 * the module (PMM_REGISTER_SITE), once per monitoring epoch.
 */
#ifndef PMM_SITE_H
#define PMM_SITE_H

#include "hook.h"

PMM_HIDDEN_BEGIN

/* Where an allocation comes from, as an entry point sees it. */
struct src {
	void *ra;		/* the hook's caller */
	void *frame;		/* the hook's frame (frame-pointer walks start here) */
	const char *file;	/* pmm_hooks.h: file, func, line; else NULL */
	const char *func;
	int line;
};

/* The src of an entry point's caller: its return address and the entry
 * point's frame (no file, function, line: those are pmm_hooks.h's). */
#define CALLER_SRC(ra_, fr_) { .ra = (ra_), .frame = (fr_) }

/*
 * The site id of a call site: 1, 2, 3... in order of first use (a number
 * may be skipped when threads race to give one); 0 when the table is full,
 * and in a vfork child for a site not registered in this epoch.
 * pmm_site_addr: from the return address ra, or PMM_DEPTH frames from
 * frame (alone: a signal handler's call, frame pointers only);
 * pmm_site_source: pmm_hooks.h's file, function and line.
 */
uint32_t pmm_site_addr(void *ra, void *frame, int alone);
uint32_t pmm_site_source(void *caller, const char *file, const char *func, int line);
/* The site table's extent (pmm_init keeps huge pages off it). */
void pmm_site_extent(uintptr_t *lo, uintptr_t *hi);

PMM_HIDDEN_END

#endif /* PMM_SITE_H */
