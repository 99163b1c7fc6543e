/* SPDX-License-Identifier: GPL-2.0 */
/*
 * report.c: the JSON that pmctl unreachable reads.
 */
#ifndef PMM_SCAN_REPORT_H
#define PMM_SCAN_REPORT_H

#include <stddef.h>

#include "result.h"
#include "snapmem.h"

void report(const struct result *res, const struct obj *objs, size_t n, struct snapmem *m);

#endif /* PMM_SCAN_REPORT_H */
