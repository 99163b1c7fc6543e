// SPDX-License-Identifier: GPL-2.0
/* timer_shutdown_sync() (6.2, in 6.1.y) */
#include <linux/timer.h>

int pmm_probe(struct timer_list *t);
int pmm_probe(struct timer_list *t)
{
	return timer_shutdown_sync(t);
}
