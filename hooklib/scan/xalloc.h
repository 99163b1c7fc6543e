/* SPDX-License-Identifier: GPL-2.0 */
/*
 * xalloc.c: calloc and realloc that end pmm-scan when memory runs out
 * (EXIT_FAILED).
 */
#ifndef PMM_SCAN_XALLOC_H
#define PMM_SCAN_XALLOC_H

#include <stddef.h>

void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n, size_t size);

#endif /* PMM_SCAN_XALLOC_H */
