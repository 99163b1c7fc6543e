// SPDX-License-Identifier: GPL-2.0
/*
 * pmm: control, for /dev/pmm's PMM_SET_CONFIG and /proc/pmm/cfg alike:
 * START and STOP of a process (with the access checks and the limits:
 * max_pids, max_pids_per_uid), the expiry of an exited entry, and the
 * configuration's values. pmm_lock protects the list, pmm_nprocs and
 * pmm_cfg; access checks run before it is taken, a process's lock after
 * it is dropped (pmm_proc_retire).
 *
 * START of a process that already has an entry is -EEXIST; an exited
 * entry with the same number is another process's and does not count.
 */
#include <linux/capability.h>
#include <linux/pid.h>
#include <linux/pid_namespace.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include "pmm_int.h"

static bool pmm_task_dead(struct task_struct *task)
{
	return atomic_read(&task->signal->live) == 0;
}

/* Entries started by euid, running or exited; pmm_lock held. */
static u32 pmm_count_owned(kuid_t euid)
{
	struct pmm_proc *p;
	u32 n = 0;

	lockdep_assert_held(&pmm_lock);
	list_for_each_entry(p, &pmm_procs, node)
		n += uid_eq(p->owner, euid);
	return n;
}

static void pmm_set_last(struct pid **last, struct pid *pid)
{
	lockdep_assert_held(&pmm_lock);
	put_pid(*last);
	*last = get_pid(pid);
}

/*
 * START slots that only CAP_SYS_ADMIN may take: an eighth of max_pids, at
 * least one from two on, so that users filling the table (each within its
 * own cap) cannot lock root out.
 */
static u32 pmm_admin_reserve(u32 max_pids)
{
	return min(max_pids / 2, max(1U, max_pids / 8));
}

/* START of pid number nr (0: the caller) for the holder of file. */
int pmm_start_pid(pid_t nr, const struct file *file)
{
	struct task_struct *task = NULL;
	struct pmm_proc *p;
	struct pid *pid;
	bool admin;
	int ret;

	if (nr < 0)
		return -EINVAL;
	pid = nr ? pmm_tgid_of(nr, task_active_pid_ns(current)) :
		   get_pid(task_tgid(current));
	if (pid)
		task = get_pid_task(pid, PIDTYPE_PID);
	put_pid(pid);
	if (!task)
		return -ESRCH;
	if (pmm_task_dead(task)) {
		ret = -ESRCH;
		goto out_put_task;
	}
	if (task->flags & PF_KTHREAD) {
		ret = -EINVAL;
		goto out_put_task;
	}
	if (!pmm_may_access_task(task, file)) {
		ret = -EPERM;
		goto out_put_task;
	}
	p = pmm_proc_alloc(task);
	if (!p) {
		ret = -ENOMEM;
		goto out_put_task;
	}
	admin = capable(CAP_SYS_ADMIN);
	mutex_lock(&pmm_lock);
	if (pmm_proc_find_pid(p->pid)) {
		ret = -EEXIST;
		goto out_unlock;
	}
	if (pmm_nprocs >= pmm_cfg.max_pids ||
	    (!admin && pmm_nprocs >= pmm_cfg.max_pids - pmm_admin_reserve(pmm_cfg.max_pids))) {
		ret = -ENOSPC;
		goto out_unlock;
	}
	if (pmm_count_owned(p->owner) >= pmm_cfg.max_pids_per_uid && !admin) {
		ret = -EDQUOT;
		goto out_unlock;
	}
	p->id = ++pmm_next_id;
	list_add_tail(&p->node, &pmm_procs);
	pmm_proc_publish(p);
	pmm_nprocs++;
	pmm_set_last(&pmm_cfg.last_start, p->pid);
	refcount_inc(&p->ref);
	mutex_unlock(&pmm_lock);
	put_task_struct(task);
	pmm_genl_proc_event(PMM_CMD_STARTED, p);
	pmm_proc_put(p);
	return 0;

out_unlock:
	mutex_unlock(&pmm_lock);
	pmm_proc_put(p);
out_put_task:
	put_task_struct(task);
	return ret;
}

/*
 * Takes p out of the list (false if someone else did first) and frees its
 * tables. The caller holds a reference.
 */
static bool pmm_remove(struct pmm_proc *p)
{
	mutex_lock(&pmm_lock);
	if (p->stopped || !pmm_proc_find_pid(p->pid)) {
		mutex_unlock(&pmm_lock);
		return false;
	}
	pmm_proc_unpublish(p);
	list_del(&p->node);
	pmm_nprocs--;
	WRITE_ONCE(p->stopped, true);
	mutex_unlock(&pmm_lock);
	pmm_proc_retire(p);
	return true;
}

/* Removes an exited entry whose time is up (the sampler). */
void pmm_expire(struct pmm_proc *p)
{
	if (pmm_remove(p))
		pmm_proc_put(p);	/* the list's reference */
}

int pmm_stop_pid(pid_t nr, const struct file *file)
{
	struct pmm_proc *p;
	int err = 0;

	if (nr < 0)
		return -EINVAL;
	p = pmm_get_entry(nr, file, PMM_CONTROL, &err);
	if (!p)
		return err;
	if (!pmm_remove(p)) {
		pmm_proc_put(p);
		return -ENOENT;		/* stopped meanwhile */
	}
	mutex_lock(&pmm_lock);
	pmm_set_last(&pmm_cfg.last_stop, p->pid);
	mutex_unlock(&pmm_lock);
	pmm_genl_proc_event(PMM_CMD_STOPPED, p);
	pmm_proc_put(p);	/* the list's */
	pmm_proc_put(p);	/* ours */
	return 0;
}

static bool pmm_in_range(u32 v, u32 lo, u32 hi)
{
	return v >= lo && v <= hi;
}

/* Is v a valid value for the single PMM_CFG_* bit (not START/STOP)? */
bool pmm_cfg_valid(u32 bit, u32 v)
{
	switch (bit) {
	case PMM_CFG_INTERVAL:
		return pmm_in_range(v, PMM_INTERVAL_MIN_MS, PMM_INTERVAL_MAX_MS);
	case PMM_CFG_SCAN:
		return v <= 1;
	case PMM_CFG_MAX_PIDS:
		return pmm_in_range(v, 1, PMM_MAX_PIDS_LIMIT);
	case PMM_CFG_MAX_BLOCKS:
		return pmm_in_range(v, 1, PMM_MAX_BLOCKS_LIMIT);
	case PMM_CFG_MAX_SITES:
		return pmm_in_range(v, 1, PMM_MAX_SITES_LIMIT);
	case PMM_CFG_MAX_SAMPLES:
		return pmm_in_range(v, 1, PMM_MAX_SAMPLES_LIMIT);
	case PMM_CFG_MAX_PIDS_PER_UID:
		return pmm_in_range(v, 1, PMM_MAX_PIDS_LIMIT);
	case PMM_CFG_EXITED_TTL:
		return pmm_in_range(v, PMM_EXITED_TTL_MIN_S,
				    PMM_EXITED_TTL_MAX_S);
	}
	return false;
}

/* Sets one checked value; pmm_lock held. */
void pmm_cfg_apply(u32 bit, u32 v)
{
	lockdep_assert_held(&pmm_lock);
	switch (bit) {
	case PMM_CFG_INTERVAL:
		WRITE_ONCE(pmm_cfg.interval_ms, v);
		break;
	case PMM_CFG_SCAN:
		WRITE_ONCE(pmm_cfg.scan, v);
		break;
	case PMM_CFG_MAX_PIDS:
		WRITE_ONCE(pmm_cfg.max_pids, v);
		break;
	case PMM_CFG_MAX_BLOCKS:
		WRITE_ONCE(pmm_cfg.max_blocks, v);
		break;
	case PMM_CFG_MAX_SITES:
		WRITE_ONCE(pmm_cfg.max_sites, v);
		break;
	case PMM_CFG_MAX_SAMPLES:
		WRITE_ONCE(pmm_cfg.max_samples, v);
		break;
	case PMM_CFG_MAX_PIDS_PER_UID:
		WRITE_ONCE(pmm_cfg.max_pids_per_uid, v);
		break;
	case PMM_CFG_EXITED_TTL:
		WRITE_ONCE(pmm_cfg.exited_ttl_s, v);
		break;
	}
}
