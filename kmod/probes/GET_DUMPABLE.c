// SPDX-License-Identifier: GPL-2.0
/* get_dumpable() and SUID_DUMP_USER (gone in 7.2: task_exec_state) */
#include <linux/mm_types.h>
#include <linux/sched/coredump.h>

bool pmm_probe(struct mm_struct *mm);
bool pmm_probe(struct mm_struct *mm)
{
	return get_dumpable(mm) == SUID_DUMP_USER;
}
