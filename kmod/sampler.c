// SPDX-License-Identifier: GPL-2.0
/*
 * pmm: the sampler thread. Every interval_ms it visits each monitored
 * process: alive? (its struct pid is held, so a reused pid number is never
 * confused), its identity refreshed (exec, reparenting), and while scan is 1
 * vm and rss (total, anon, file, shmem) into the process's ring, and the
 * genl events. Exited entries are removed exited_ttl_s after their exit or
 * their last read. A configuration change wakes it; the new interval counts
 * from that moment. Each sample also carries the live heap (the tables'
 * figures), the memory cgroup's usage and the process's last heap report
 * (PMM_HEAP_REPORT), taken at the same instant. It takes pmm_lock only to
 * find the next process, and each process's lock as a reader
 * (pmm_proc_lock_read): it never applies a process's queued records, so no
 * process can make it wait for long.
 */
#include <linux/kthread.h>
#include <linux/wait.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/pid.h>
#include <linux/timekeeping.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/memcontrol.h>
#include "pmm_int.h"

static struct task_struct *pmm_sampler;
static DECLARE_WAIT_QUEUE_HEAD(pmm_sampler_wq);
static atomic_t pmm_cfg_gen = ATOMIC_INIT(0);

void pmm_sampler_kick(void)
{
	atomic_inc(&pmm_cfg_gen);
	wake_up_interruptible(&pmm_sampler_wq);
}

/* The next process in start order after id, with a reference (held by p). */
static struct pmm_proc *pmm_next_proc(u64 id)
{
	struct pmm_proc *p, *found = NULL;

	mutex_lock(&pmm_lock);
	list_for_each_entry(p, &pmm_procs, node) {
		if (p->id > id) {
			refcount_inc(&p->ref);
			found = p;
			break;
		}
	}
	mutex_unlock(&pmm_lock);
	return found;
}

/* The mm of any live thread of task's group, with a reference, or NULL. */
static struct mm_struct *pmm_group_mm(struct task_struct *task)
{
	struct mm_struct *mm = NULL;
	struct task_struct *t;

	rcu_read_lock();
	for_each_thread(task, t) {
		task_lock(t);
		if (t->mm && !(t->flags & PF_KTHREAD)) {
			mm = t->mm;
			mmget(mm);
		}
		task_unlock(t);
		if (mm)
			break;
	}
	rcu_read_unlock();
	return mm;
}

/*
 * Grows the ring (doubling, from 16) while it is full and below
 * max_samples_per_pid; sample seq lives at ring[seq % ring_size].
 * Called and returns with p->lock held; drops it to allocate.
 */
static void pmm_ring_grow(struct pmm_proc *p)
{
	u32 max = READ_ONCE(pmm_cfg.max_samples), old_size = p->ring_size;
	struct mem_cgroup *old_memcg;
	struct pmm_sample *ring, *old;
	u64 seq, first;
	u32 size;

	if (p->nsamples < old_size || old_size >= max || p->stopped)
		return;
	size = old_size ? min_t(u64, (u64)old_size * 2, max) : min(16U, max);
	pmm_proc_unlock_read(p);
	old_memcg = pmm_set_active_memcg(p->memcg);	/* the process's memory */
	ring = kvmalloc_array(size, sizeof(*ring), GFP_KERNEL_ACCOUNT);
	pmm_set_active_memcg(old_memcg);
	pmm_proc_lock_read(p);
	if (!ring)
		return;
	if (p->ring_size != old_size || p->stopped) {
		old = ring;		/* raced: someone else grew it */
	} else {
		first = p->nsamples - min_t(u64, p->nsamples, old_size);
		for (seq = first; seq < p->nsamples; seq++)
			ring[seq % size] = p->ring[seq % old_size];
		old = p->ring;
		p->ring = ring;
		p->ring_size = size;
		atomic64_add((u64)(size - old_size) * sizeof(*ring),
			     &pmm_kmem_bytes);
	}
	pmm_proc_unlock_read(p);
	kvfree(old);
	pmm_proc_lock_read(p);
}

/* The sample ring: sample seq at ring[seq % ring_size]. */
static void pmm_add_sample(struct pmm_proc *p, const struct pmm_sample *s)
{
	lockdep_assert_held(&p->lock);
	if (!p->ring)
		return;
	p->ring[p->nsamples % p->ring_size] = *s;
	p->nsamples++;
}

/* An exited entry whose time is up goes (unless stopped meanwhile). */
static void pmm_expire_if_due(struct pmm_proc *p)
{
	unsigned long expires = READ_ONCE(p->expires);

	if (expires && time_after_eq(jiffies, expires))
		pmm_expire(p);
}

/*
 * Samples p (scan on), or only notices its exit (scan off). Exited entries
 * only wait for their expiry.
 */
static void pmm_sample_one(struct pmm_proc *p, bool scan)
{
	struct task_struct *task;
	struct mm_struct *mm = NULL;
	struct pmm_sample s = {};
	u64 dropped = 0;
	bool exited = false, sites = false;

	pmm_proc_lock_read(p);
	pmm_expire_pending(p, false);
	if (p->state == PMM_STATE_EXITED || p->stopped) {
		pmm_proc_unlock_read(p);
		pmm_expire_if_due(p);
		return;
	}
	pmm_proc_unlock_read(p);

	task = get_pid_task(p->pid, PIDTYPE_TGID);
	if (!task || atomic_read(&task->signal->live) == 0) {
		exited = true;
	} else {
		mm = pmm_group_mm(task);
		if (!mm)
			exited = true;
	}
	if (task)
		put_task_struct(task);
	if (mm && !scan) {
		mmput(mm);
		mm = NULL;
		pmm_proc_lock_read(p);
		pmm_proc_refresh(p);
		pmm_proc_unlock_read(p);
		return;
	}
	if (mm) {
		s.vm = (u64)mm->total_vm << PAGE_SHIFT;
		s.rss_anon = (u64)get_mm_counter(mm, MM_ANONPAGES) << PAGE_SHIFT;
		s.rss_file = (u64)get_mm_counter(mm, MM_FILEPAGES) << PAGE_SHIFT;
		s.rss_shmem = (u64)get_mm_counter(mm, MM_SHMEMPAGES) << PAGE_SHIFT;
		s.rss = s.rss_anon + s.rss_file + s.rss_shmem;
		if (pmm_memcg_usage(mm, &s.cgroup_usage))
			s.flags |= PMM_SAMPLE_F_MEMCG;
		mmput(mm);
	}
	s.time_ns = ktime_get_boottime_ns();

	pmm_proc_lock_read(p);
	if (p->stopped) {	/* stopped meanwhile: no event after STOPPED */
		pmm_proc_unlock_read(p);
		return;
	}
	if (!exited)
		pmm_ring_grow(p);
	if (exited) {
		p->state = PMM_STATE_EXITED;
		p->exit_time_ns = s.time_ns;
		WRITE_ONCE(p->expires, (jiffies + READ_ONCE(pmm_cfg.exited_ttl_s) *
					(unsigned long)HZ) ?: 1);
	} else {
		pmm_proc_refresh(p);
		s.live_bytes = p->live_bytes;
		s.live_blocks = p->nblocks;
		if (p->heap.size)
			s.heap = p->heap;
		pmm_add_sample(p, &s);
		sites = p->nsamples % PMM_SITES_EVERY == 0;
	}
	if (p->dropped != p->dropped_reported) {
		dropped = p->dropped;
		p->dropped_reported = dropped;
	}
	pmm_proc_unlock_read(p);

	if (exited) {
		pmm_genl_proc_event(PMM_CMD_EXITED, p);
		return;
	}
	pmm_genl_sample(p, &s);
	if (dropped)
		pmm_genl_dropped(p, dropped);
	if (sites)
		pmm_genl_sites(p);
}

static void pmm_sample_all(bool scan)
{
	struct pmm_proc *p;
	u64 id = 0;

	while (!kthread_should_stop() && (p = pmm_next_proc(id))) {
		id = p->id;
		pmm_sample_one(p, scan);
		pmm_proc_put(p);
	}
}

static bool pmm_sampler_woken(int gen)
{
	return kthread_should_stop() || atomic_read(&pmm_cfg_gen) != gen;
}

static int pmm_sampler_fn(void *unused)
{
	int gen = atomic_read(&pmm_cfg_gen);
	long timeout;

	while (!kthread_should_stop()) {
		timeout = msecs_to_jiffies(READ_ONCE(pmm_cfg.interval_ms));
		timeout = wait_event_interruptible_timeout(pmm_sampler_wq,
							   pmm_sampler_woken(gen),
							   timeout);
		if (timeout) {
			/* woken: new configuration, wait anew */
			gen = atomic_read(&pmm_cfg_gen);
			continue;
		}
		pmm_sample_all(READ_ONCE(pmm_cfg.scan));
	}
	return 0;
}

int pmm_sampler_init(void)
{
	pmm_sampler = kthread_run(pmm_sampler_fn, NULL, "pmm_sampler");
	return PTR_ERR_OR_ZERO(pmm_sampler);
}

void pmm_sampler_exit(void)
{
	kthread_stop(pmm_sampler);
}
