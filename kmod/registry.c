// SPDX-License-Identifier: GPL-2.0
/*
 * pmm: the process registry. Owns struct pmm_proc's life (alloc, retire,
 * put), the hash of monitored processes by struct pid (pmm_hash: RCU
 * readers, writers under pmm_lock, with the list pmm_procs), each
 * process's identity (comm, parent, credentials: under its lock), and the
 * per-process lock with its inbox of queued records and the drain work
 * (see the locking notes in pmm_int.h).
 */
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/hashtable.h>
#include <linux/pid.h>
#include <linux/memcontrol.h>
#include <linux/sched/mm.h>
#include <linux/sched/coredump.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/random.h>
#include "pmm_int.h"

/* Monitored processes by struct pid; RCU readers, writers under pmm_lock. */
static DEFINE_HASHTABLE(pmm_hash, 8);
static struct kmem_cache *pmm_queued_cache;
static struct workqueue_struct *pmm_drain_wq;

/*
 * With a constructor the slab does not clear each new object (init_on_alloc,
 * on in Debian's kernels): records are copied over count entries and no
 * more are read, and clearing a chunk (rep stosb, which QEMU's TCG runs a
 * byte at a time) would cost about as much as applying it.
 */
static void pmm_queued_ctor(void *obj)
{
	struct pmm_queued *q = obj;

	q->count = 0;
}

int pmm_registry_init(void)
{
	pmm_queued_cache = kmem_cache_create("pmm_queued",
					     sizeof(struct pmm_queued), 0,
					     SLAB_ACCOUNT, pmm_queued_ctor);
	pmm_drain_wq = alloc_workqueue("pmm_drain", WQ_UNBOUND, 0);
	if (pmm_queued_cache && pmm_drain_wq)
		return 0;
	if (pmm_drain_wq)
		destroy_workqueue(pmm_drain_wq);
	kmem_cache_destroy(pmm_queued_cache);
	return -ENOMEM;
}

/* After every process is gone but for the drain work's references. */
void pmm_registry_exit(void)
{
	destroy_workqueue(pmm_drain_wq);	/* runs what is queued */
	rcu_barrier();		/* kfree_rcu of the last processes */
	kmem_cache_destroy(pmm_queued_cache);
}

/* What struct pmm_proc takes: kzalloc rounds it up to its slab's size. */
static size_t proc_bytes(void)
{
	return pmm_kmalloc_size_roundup(sizeof(struct pmm_proc));
}

/* The leader's comm, parent, credentials and dumpable state, for readers. */
static void proc_set_identity(struct pmm_proc *p, struct task_struct *leader)
{
	struct pid *parent;
	const struct cred *cred, *old_cred;
	struct task_struct *t;
	struct mm_struct *mm;
	bool dumpable;

	get_task_comm(p->comm, leader);
	rcu_read_lock();
	parent = get_pid(task_tgid(rcu_dereference(leader->real_parent)));
	rcu_read_unlock();
	put_pid(p->parent);
	p->parent = parent;
	cred = get_task_cred(leader);
	old_cred = p->cred;
	p->cred = cred;
	if (old_cred)
		put_cred(old_cred);
	rcu_read_lock();
	for_each_thread(leader, t) {
		task_lock(t);
		mm = t->mm;
		if (mm)
			dumpable = pmm_task_dumpable(t, mm);
		task_unlock(t);
		if (mm) {
			p->dumpable = dumpable;
			break;
		}
	}
	rcu_read_unlock();
}

/*
 * Refreshes the identity of a running process (exec changes comm and
 * credentials, reparenting the parent). Called with p->lock held.
 */
void pmm_proc_refresh(struct pmm_proc *p)
{
	struct task_struct *leader;

	lockdep_assert_held(&p->lock);
	if (p->state != PMM_STATE_RUNNING)
		return;
	leader = get_pid_task(p->pid, PIDTYPE_TGID);
	if (!leader)
		return;
	if (atomic_read(&leader->signal->live))
		proc_set_identity(p, leader);
	put_task_struct(leader);
}

/* A per-pid read of an exited entry postpones its expiry. */
void pmm_proc_touch(struct pmm_proc *p)
{
	if (READ_ONCE(p->expires))	/* 0 is "running": never store it */
		WRITE_ONCE(p->expires, (jiffies + READ_ONCE(pmm_cfg.exited_ttl_s) *
					(unsigned long)HZ) ?: 1);
}

static void pmm_proc_drain(struct work_struct *work);

struct pmm_proc *pmm_proc_alloc(struct task_struct *task)
{
	struct task_struct *leader = task->group_leader;
	struct mm_struct *mm;
	struct pmm_proc *p;

	p = kzalloc(proc_bytes(), GFP_KERNEL_ACCOUNT);
	if (!p)
		return NULL;
	if (pmm_blocks_alloc(p)) {
		kfree(p);
		return NULL;
	}
	pmm_kmem_add(proc_bytes());
	refcount_set(&p->ref, 1);
	mutex_init(&p->lock);
	init_llist_head(&p->inbox);
	INIT_WORK(&p->drain, pmm_proc_drain);
	mm = get_task_mm(task);
	if (mm) {
		p->memcg = get_mem_cgroup_from_mm(mm);
		mmput(mm);
	}
	get_random_bytes(&p->hkey, sizeof(p->hkey));
	p->pid = get_pid(task_tgid(task));
	p->owner = current_euid();
	p->start_time_ns = leader->start_boottime;
	p->monitor_start_ns = ktime_get_boottime_ns();
	p->state = PMM_STATE_RUNNING;
	proc_set_identity(p, leader);
	return p;
}

static void inbox_free(struct pmm_proc *p, struct pmm_queued *q)
{
	atomic_sub(q->count, &p->inbox_records);
	kmem_cache_free(pmm_queued_cache, q);
	pmm_kmem_add(-(long)kmem_cache_size(pmm_queued_cache));
}

/* Frees the tables (and queued records); p itself stays. */
static void pmm_proc_free_tables(struct pmm_proc *p)
{
	struct pmm_queued *q, *next;

	llist_for_each_entry_safe(q, next, llist_del_all(&p->inbox), node)
		inbox_free(p, q);
	pmm_blocks_free(p);
	pmm_sites_free(p);
	pmm_objects_free(p);
	if (p->ring) {
		pmm_kmem_add(-(long)(p->ring_size * sizeof(*p->ring)));
		kvfree(p->ring);
		p->ring = NULL;
		p->ring_size = 0;
	}
}

/*
 * Frees a stopped (or expired, or unloading) process's tables now, whoever
 * still holds a reference to it: a reader keeps only the small struct.
 * p->stopped is set, so nothing fills them again.
 */
void pmm_proc_retire(struct pmm_proc *p)
{
	pmm_proc_lock(p);
	p->stopped = true;
	pmm_proc_free_tables(p);
	pmm_proc_unlock(p);
}

/* Drops a reference; the last one frees p. Sleeps. */
void pmm_proc_put(struct pmm_proc *p)
{
	if (!refcount_dec_and_test(&p->ref))
		return;
	pmm_proc_free_tables(p);
	put_pid(p->pid);
	put_pid(p->parent);
	put_cred(p->cred);
	mem_cgroup_put(p->memcg);
	pmm_kmem_add(-(long)proc_bytes());
	kfree_rcu(p, rcu);
}

void pmm_proc_publish(struct pmm_proc *p)
{
	lockdep_assert_held(&pmm_lock);
	hash_add_rcu(pmm_hash, &p->hnode, (unsigned long)p->pid);
}

void pmm_proc_unpublish(struct pmm_proc *p)
{
	lockdep_assert_held(&pmm_lock);
	hash_del_rcu(&p->hnode);
}

/* The entry of a thread group, no reference taken. */
struct pmm_proc *pmm_proc_find_pid(struct pid *pid)
{
	struct pmm_proc *p;

	lockdep_assert_held(&pmm_lock);
	hash_for_each_possible(pmm_hash, p, hnode, (unsigned long)pid)
		if (p->pid == pid)
			return p;
	return NULL;
}

static struct pmm_proc *pmm_proc_lookup_current(void)
{
	struct pid *me = task_tgid(current);
	struct pmm_proc *p;

	hash_for_each_possible_rcu(pmm_hash, p, hnode, (unsigned long)me)
		if (p->pid == me)
			return p;
	return NULL;
}

/* The caller's entry with a reference, or NULL; takes no global lock. */
struct pmm_proc *pmm_proc_get_current(void)
{
	struct pmm_proc *p;

	rcu_read_lock();
	p = pmm_proc_lookup_current();
	if (p && !refcount_inc_not_zero(&p->ref))
		p = NULL;
	rcu_read_unlock();
	return p;
}

bool pmm_current_monitored(void)
{
	bool ret;

	rcu_read_lock();
	ret = pmm_proc_lookup_current();
	rcu_read_unlock();
	return ret;
}

/* Applies (or, once stopped, drops) the queued records, oldest first. */
static void inbox_drain(struct pmm_proc *p)
{
	struct pmm_queued *q, *next;
	struct llist_node *list;

	lockdep_assert_held(&p->lock);
	if (llist_empty(&p->inbox))
		return;		/* the usual case: no atomic exchange */
	list = llist_del_all(&p->inbox);
	llist_for_each_entry_safe(q, next, llist_reverse_order(list), node) {
		if (!p->stopped)
			pmm_apply_records(p, q->rec, q->count);
		inbox_free(p, q);
	}
}

void pmm_proc_lock(struct pmm_proc *p)
{
	mutex_lock(&p->lock);
	inbox_drain(p);
}

bool pmm_proc_trylock(struct pmm_proc *p)
{
	if (!mutex_trylock(&p->lock))
		return false;
	inbox_drain(p);
	return true;
}

/*
 * Releases the lock, then applies what was queued meanwhile. A sender queues
 * before it tries the lock and a holder looks at the inbox after it let go
 * (a full barrier each side), so one of the two always sees the other: no
 * batch is left behind for long. The rounds are bounded so that a sender
 * does not work for the others for ever; what is left goes to the drain
 * work.
 */
static void pmm_proc_kick(struct pmm_proc *p);

void pmm_proc_unlock(struct pmm_proc *p)
{
	int rounds = 4;

	mutex_unlock(&p->lock);
	for (;;) {
		smp_mb();	/* the unlock before the look at the inbox */
		if (llist_empty(&p->inbox) || !mutex_trylock(&p->lock))
			return;
		if (!rounds--) {
			mutex_unlock(&p->lock);
			pmm_proc_kick(p);	/* the rest is the drain's */
			return;
		}
		inbox_drain(p);
		mutex_unlock(&p->lock);
	}
}

/* Has the drain work apply what is queued; it holds a reference meanwhile. */
static void pmm_proc_kick(struct pmm_proc *p)
{
	refcount_inc(&p->ref);
	if (!queue_work(pmm_drain_wq, &p->drain))
		pmm_proc_put(p);	/* queued already: not the last reference */
}

/* The drain work: applies the inbox, charged to the process's cgroup. */
static void pmm_proc_drain(struct work_struct *work)
{
	struct pmm_proc *p = container_of(work, struct pmm_proc, drain);
	struct mem_cgroup *old = pmm_set_active_memcg(p->memcg);

	pmm_proc_lock(p);
	pmm_proc_unlock(p);
	pmm_set_active_memcg(old);
	pmm_proc_put(p);
}

/* A reader's lock: it applies nothing (see the inbox in pmm_int.h). */
void pmm_proc_lock_read(struct pmm_proc *p)
{
	mutex_lock(&p->lock);
}

/* The same, once what was queued before is applied (per-pid reads). */
void pmm_proc_lock_fresh(struct pmm_proc *p)
{
	if (!llist_empty(&p->inbox)) {
		pmm_proc_kick(p);
		flush_work(&p->drain);
	}
	mutex_lock(&p->lock);
}

/* A reader lets go; what was queued meanwhile goes to the drain work. */
void pmm_proc_unlock_read(struct pmm_proc *p)
{
	mutex_unlock(&p->lock);
	smp_mb();	/* the unlock before the look at the inbox */
	if (!llist_empty(&p->inbox))
		pmm_proc_kick(p);
}

/*
 * Queues n checked records for the lock's holder; false when the inbox is
 * full or memory is short (then the caller waits for the lock).
 */
bool pmm_proc_queue(struct pmm_proc *p, const struct pmm_record *r, u32 n)
{
	struct pmm_queued *q;

	if (WARN_ON_ONCE(n > PMM_CHUNK) ||
	    atomic_read(&p->inbox_records) >= PMM_INBOX_MAX)
		return false;
	q = kmem_cache_alloc(pmm_queued_cache, GFP_KERNEL | __GFP_NOWARN);
	if (!q)
		return false;
	memcpy(q->rec, r, n * sizeof(*r));
	q->count = n;
	atomic_add(n, &p->inbox_records);
	atomic64_add(n, &pmm_records_queued);
	pmm_kmem_add(sizeof(*q));
	llist_add(&q->node, &p->inbox);	/* a full barrier */
	/* the holder may have looked before the add: try to apply it now */
	if (pmm_proc_trylock(p))
		pmm_proc_unlock(p);
	return true;
}

/* The figures of p for a reader in ns (pid and ppid numbered there). */
void pmm_fill_pid_info(struct pmm_proc *p, struct pmm_pid_info *info,
		       struct pid_namespace *ns)
{
	lockdep_assert_held(&p->lock);
	memset(info, 0, sizeof(*info));
	pmm_proc_refresh(p);
	info->pid = pid_nr_ns(p->pid, ns);
	info->ppid = pid_nr_ns(p->parent, ns);
	info->state = p->state;
	memcpy(info->comm, p->comm, sizeof(info->comm));
	info->start_time_ns = p->start_time_ns;
	info->monitor_start_ns = p->monitor_start_ns;
	info->exit_time_ns = p->exit_time_ns;
	info->live_blocks = p->nblocks;
	info->live_bytes = p->live_bytes;
	info->records = p->records;
	info->dropped_records = p->dropped;
	info->unmatched_frees = p->stats.unmatched_frees;
	info->older_frees = p->stats.older_frees;
	info->pending_frees = p->npending;
	info->samples = p->nsamples;
	if (p->nsamples && p->ring) {
		struct pmm_sample *s;

		s = &p->ring[(p->nsamples - 1) % p->ring_size];
		info->vm_bytes = s->vm;
		info->rss_bytes = s->rss;
	}
}

/*
 * References to every monitored process from start id from_id on, in start
 * order; *n of them. NULL when memory is short.
 */
struct pmm_proc **pmm_get_all(u64 from_id, u32 *n)
{
	struct pmm_proc **out, *p;
	u32 i = 0;

	*n = 0;
	mutex_lock(&pmm_lock);
	/* no process: ZERO_SIZE_PTR, not NULL, which means no memory */
	out = kmalloc_array(pmm_nprocs, sizeof(*out), GFP_KERNEL);
	if (out) {
		list_for_each_entry(p, &pmm_procs, node) {
			if (p->id < from_id)
				continue;
			refcount_inc(&p->ref);
			out[i++] = p;
		}
	}
	mutex_unlock(&pmm_lock);
	*n = i;
	return out;
}

/* Drops the references procs[from..n) and the array. */
void pmm_put_all(struct pmm_proc **procs, u32 from, u32 n)
{
	for (; from < n; from++)
		pmm_proc_put(procs[from]);
	kfree(procs);
}
