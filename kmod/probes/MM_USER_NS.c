// SPDX-License-Identifier: GPL-2.0
/* mm_struct.user_ns (gone in 7.2: task_exec_state) */
#include <linux/mm_types.h>

struct user_namespace *pmm_probe(struct mm_struct *mm);
struct user_namespace *pmm_probe(struct mm_struct *mm)
{
	return mm->user_ns;
}
