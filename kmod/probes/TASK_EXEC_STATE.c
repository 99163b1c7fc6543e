// SPDX-License-Identifier: GPL-2.0
/* task_struct.exec_state: dumpable and user_ns (7.2) */
#include <linux/sched.h>
#include <linux/sched/exec_state.h>

bool pmm_probe(struct task_struct *t);
bool pmm_probe(struct task_struct *t)
{
	struct task_exec_state *es = rcu_dereference_raw(t->exec_state);

	return es->user_ns && es->dumpable == TASK_DUMPABLE_OWNER;
}
