// SPDX-License-Identifier: GPL-2.0
/*
 * pmm: /proc/pmm/cfg and /proc/pmm/pid (their formats: the README's "Formats").
 *
 * /proc/pmm/cfg (0644) reads one line per setting; a write is one line
 * "KEY value" (KEY: INTERVAL SCAN START_PID STOP_PID MAX_PIDS MAX_BLOCKS
 * MAX_SITES MAX_SAMPLES MAX_PIDS_PER_UID EXITED_TTL, one space, a decimal
 * number, optionally "\n"). Anything else, or a value out of range, is
 * -EINVAL and changes nothing. Writing needs CAP_SYS_ADMIN. START_PID and
 * STOP_PID are shown in the opener's pid namespace, and only when the
 * reader may read that process (else 0).
 *
 * /proc/pmm/pid (0444) lists each monitored process that both the opener of
 * the file and the reader may ptrace, numbered in the opener's pid
 * namespace (processes outside it are not shown):
 *   [n] PID: <pid>, Comp: <comm>, PPID: <ppid>, State: <1|2>, Log count: <blocks>
 * then, only when one of them is non-zero, one summary line
 *   Dropped: <records>, Unmatched frees: <n>, Pending frees: <n>, Older frees: <n>
 * (older frees: of blocks allocated before monitoring began, not errors)
 * then its live blocks in hash-table order (not time order):
 *   {MALLOC @HH:MM:SS} Sz: 100B Pointer: 0x... Caller: 0x... main() 207 demo_daemon.c
 *   {REALLOC @HH:MM:SS} Sz: 200B Prev Pointer: 0x... Pointer: 0x... Caller: 0x...
 * The time is the record's, in UTC; Caller is the site's first frame (0x0 when
 * the site is not described); " func() line file" only when the site has
 * source information. Strings that come from the process (comm, file,
 * function) have non-printable, non-ASCII and backslash characters escaped
 * as \ooo (octal), so that no process can write terminal escapes into a
 * reader's terminal. The iterator keeps its place between reads (O(n) in
 * all) and copies to user space with no lock held. Locks: pmm_lock to find
 * the next process (a reference taken, access checked after), then that
 * process's lock as a reader from ->start to ->stop.
 */
#include <linux/proc_fs.h>
#include <linux/seq_file.h>
#include <linux/uaccess.h>
#include <linux/capability.h>
#include <linux/kernel.h>
#include <linux/time.h>
#include <linux/timekeeping.h>
#include <linux/pid_namespace.h>
#include <linux/string_helpers.h>
#include "pmm_int.h"

static struct proc_dir_entry *pmm_proc_dir;

struct pmm_cfg_key {
	const char *key;
	const char *label;
	u32 bit;
};

static const struct pmm_cfg_key pmm_cfg_keys[] = {
	{ "INTERVAL", "(Scan Interval) :=", PMM_CFG_INTERVAL },
	{ "SCAN", "(Scan on:1/off:0) := ", PMM_CFG_SCAN },
	{ "START_PID", "(Start a monitor):=", PMM_CFG_START_PID },
	{ "STOP_PID", "(Stop a monitor) := ", PMM_CFG_STOP_PID },
	{ "MAX_PIDS", "(Monitored pids limit) := ", PMM_CFG_MAX_PIDS },
	{ "MAX_BLOCKS", "(Live blocks per pid limit) := ", PMM_CFG_MAX_BLOCKS },
	{ "MAX_SITES", "(Sites per pid limit) := ", PMM_CFG_MAX_SITES },
	{ "MAX_SAMPLES", "(Samples per pid limit) := ", PMM_CFG_MAX_SAMPLES },
	{ "MAX_PIDS_PER_UID", "(Monitored pids per user limit) := ",
	  PMM_CFG_MAX_PIDS_PER_UID },
	{ "EXITED_TTL", "(Exited pid kept, seconds) := ", PMM_CFG_EXITED_TTL },
};

static long long pmm_cfg_get(u32 bit, pid_t start, pid_t stop)
{
	switch (bit) {
	case PMM_CFG_INTERVAL:
		return pmm_cfg.interval_ms;
	case PMM_CFG_SCAN:
		return pmm_cfg.scan;
	case PMM_CFG_START_PID:
		return start;
	case PMM_CFG_STOP_PID:
		return stop;
	case PMM_CFG_MAX_PIDS:
		return pmm_cfg.max_pids;
	case PMM_CFG_MAX_BLOCKS:
		return pmm_cfg.max_blocks;
	case PMM_CFG_MAX_SITES:
		return pmm_cfg.max_sites;
	case PMM_CFG_MAX_SAMPLES:
		return pmm_cfg.max_samples;
	case PMM_CFG_MAX_PIDS_PER_UID:
		return pmm_cfg.max_pids_per_uid;
	case PMM_CFG_EXITED_TTL:
		return pmm_cfg.exited_ttl_s;
	}
	return 0;
}

static int pmm_cfg_show(struct seq_file *m, void *v)
{
	struct pid *start_pid, *stop_pid;
	pid_t start, stop;
	unsigned int i;

	mutex_lock(&pmm_lock);
	start_pid = get_pid(pmm_cfg.last_start);
	stop_pid = get_pid(pmm_cfg.last_stop);
	mutex_unlock(&pmm_lock);
	/* only a process the reader may read (checks walk /proc: no lock) */
	start = pmm_visible_nr(start_pid, m->private, m->file);
	stop = pmm_visible_nr(stop_pid, m->private, m->file);
	put_pid(start_pid);
	put_pid(stop_pid);
	mutex_lock(&pmm_lock);
	for (i = 0; i < ARRAY_SIZE(pmm_cfg_keys); i++)
		seq_printf(m, "[\"%s\" %s%lld]\n", pmm_cfg_keys[i].key,
			   pmm_cfg_keys[i].label,
			   pmm_cfg_get(pmm_cfg_keys[i].bit, start, stop));
	mutex_unlock(&pmm_lock);
	return 0;
}

/* The opener's pid namespace numbers START_PID and STOP_PID. */
static int pmm_cfg_open(struct inode *inode, struct file *file)
{
	struct pid_namespace *ns = get_pid_ns(task_active_pid_ns(current));
	int ret = single_open(file, pmm_cfg_show, ns);

	if (ret)
		put_pid_ns(ns);
	return ret;
}

static int pmm_cfg_release(struct inode *inode, struct file *file)
{
	put_pid_ns(((struct seq_file *)file->private_data)->private);
	return single_release(inode, file);
}

static ssize_t pmm_cfg_write(struct file *file, const char __user *ubuf,
			     size_t count, loff_t *ppos)
{
	const struct pmm_cfg_key *k = NULL;
	char buf[64], *val;
	unsigned int i;
	int ret, pid;
	u32 v;

	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	if (!count || count >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, count))
		return -EFAULT;
	buf[count] = '\0';
	if (strlen(buf) != count)
		return -EINVAL;		/* an embedded NUL */
	val = strchr(buf, ' ');
	if (!val)
		return -EINVAL;
	*val++ = '\0';
	for (i = 0; i < ARRAY_SIZE(pmm_cfg_keys); i++)
		if (!strcmp(buf, pmm_cfg_keys[i].key))
			k = &pmm_cfg_keys[i];
	if (!k)
		return -EINVAL;
	if (k->bit == PMM_CFG_START_PID || k->bit == PMM_CFG_STOP_PID) {
		ret = kstrtoint(val, 10, &pid);
		if (ret || pid <= 0)
			return -EINVAL;
		ret = k->bit == PMM_CFG_START_PID ? pmm_start_pid(pid, file) :
						    pmm_stop_pid(pid, file);
		return ret ? ret : count;
	}
	if (kstrtou32(val, 10, &v) || !pmm_cfg_valid(k->bit, v))
		return -EINVAL;
	mutex_lock(&pmm_lock);
	pmm_cfg_apply(k->bit, v);
	mutex_unlock(&pmm_lock);
	pmm_sampler_kick();
	return count;
}

static const struct proc_ops pmm_cfg_ops = {
	.proc_open = pmm_cfg_open,
	.proc_read = seq_read,
	.proc_write = pmm_cfg_write,
	.proc_lseek = seq_lseek,
	.proc_release = pmm_cfg_release,
};

enum pmm_iter_phase { PMM_IT_HEADER, PMM_IT_SUMMARY, PMM_IT_BLOCK };

/*
 * Iterator of /proc/pmm/pid, kept between reads. Between ->start and
 * ->stop, p != NULL means p->lock is held; between reads p holds only a
 * reference. pos is the seq_file index of the element it stands on.
 */
struct pmm_pid_iter {
	struct pmm_proc *p;
	struct file *file;		/* its opener's credentials see */
	struct pid_namespace *ns;	/* the opener's: numbers and who is seen */
	u64 next_id;		/* start order id after p */
	u32 nr;			/* "[nr]" of p */
	enum pmm_iter_phase phase;
	u64 slot;		/* of b in the block tables */
	struct pmm_block_view b;
	loff_t pos;
	u64 real_offset;	/* CLOCK_REALTIME - CLOCK_MONOTONIC */
};

/*
 * Moves to the next process the reader may see and locks it. The access
 * check walks /proc: it runs with no lock held, on a reference.
 */
static bool it_next_proc(struct pmm_pid_iter *it)
{
	struct pmm_proc *p, *found;

	if (it->p) {
		pmm_proc_put(it->p);
		it->p = NULL;
	}
	for (;;) {
		found = NULL;
		mutex_lock(&pmm_lock);
		list_for_each_entry(p, &pmm_procs, node) {
			if (p->id < it->next_id)
				continue;
			refcount_inc(&p->ref);
			found = p;
			break;
		}
		mutex_unlock(&pmm_lock);
		if (!found)
			return false;
		it->next_id = found->id + 1;
		if (pid_nr_ns(found->pid, it->ns) &&
		    pmm_may_access(found, it->file))
			break;
		pmm_proc_put(found);
	}
	it->p = found;
	it->nr++;
	it->phase = PMM_IT_HEADER;
	pmm_proc_lock_read(found);
	pmm_proc_refresh(found);
	return true;
}

static bool it_summary(struct pmm_proc *p)
{
	return p->dropped || p->stats.unmatched_frees || p->npending ||
	       p->stats.older_frees;
}

/* Makes the iterator stand on an existing element; false at the end. */
static bool it_settle(struct pmm_pid_iter *it)
{
	for (;;) {
		if (it->phase == PMM_IT_HEADER)
			return true;
		if (it->phase == PMM_IT_SUMMARY) {
			if (it_summary(it->p))
				return true;
			it->phase = PMM_IT_BLOCK;
			it->slot = 0;
		}
		if (pmm_block_at(it->p, &it->slot, &it->b))
			return true;
		pmm_proc_unlock_read(it->p);
		if (!it_next_proc(it))
			return false;
	}
}

static bool it_advance(struct pmm_pid_iter *it)
{
	it->pos++;
	switch (it->phase) {
	case PMM_IT_HEADER:
		it->phase = PMM_IT_SUMMARY;
		break;
	case PMM_IT_SUMMARY:
		it->phase = PMM_IT_BLOCK;
		it->slot = 0;
		break;
	case PMM_IT_BLOCK:
		/* the lock is held since ->start */
		it->slot++;
		if (pmm_block_at(it->p, &it->slot, &it->b))
			return true;
		pmm_proc_unlock_read(it->p);
		if (!it_next_proc(it))
			return false;
		break;
	}
	return it_settle(it);
}

/* Locks the current process's mutex (sparse does not track mutexes). */
static void *pmm_pid_start(struct seq_file *m, loff_t *ppos)
{
	struct pmm_pid_iter *it = m->private;

	it->real_offset = ktime_get_real_ns() - ktime_get_ns();
	if (*ppos == 0 || *ppos != it->pos) {
		/* from the beginning (first read, rewind or seek) */
		if (it->p) {
			pmm_proc_put(it->p);
			it->p = NULL;
		}
		it->next_id = 0;
		it->nr = 0;
		it->pos = 0;
		if (!it_next_proc(it) || !it_settle(it))
			return NULL;
		while (it->pos < *ppos)
			if (!it_advance(it))
				return NULL;
		return it;
	}
	if (!it->p)
		return NULL;
	/* credentials may have changed since the last read (exec, setuid) */
	if (!pmm_may_access(it->p, it->file)) {
		if (!it_next_proc(it))
			return NULL;
		return it_settle(it) ? it : NULL;
	}
	pmm_proc_lock_read(it->p);
	if (it->p->stopped) {
		pmm_proc_unlock_read(it->p);
		if (!it_next_proc(it))
			return NULL;
	}
	return it_settle(it) ? it : NULL;
}

static void *pmm_pid_next(struct seq_file *m, void *v, loff_t *ppos)
{
	struct pmm_pid_iter *it = m->private;
	bool more = it_advance(it);

	*ppos = it->pos;
	return more ? it : NULL;
}

static void pmm_pid_stop(struct seq_file *m, void *v)
{
	struct pmm_pid_iter *it = m->private;

	if (it->p)
		pmm_proc_unlock_read(it->p);
}

static const char * const pmm_op_names[PMM_OP_NR] = {
	[PMM_OP_MALLOC] = "MALLOC",
	[PMM_OP_CALLOC] = "CALLOC",
	[PMM_OP_REALLOC] = "REALLOC",
	[PMM_OP_FREE] = "FREE",
	[PMM_OP_POSIX_MEMALIGN] = "POSIX_MEMALIGN",
	[PMM_OP_ALIGNED_ALLOC] = "ALIGNED_ALLOC",
	[PMM_OP_MEMALIGN] = "MEMALIGN",
	[PMM_OP_VALLOC] = "VALLOC",
	[PMM_OP_PVALLOC] = "PVALLOC",
	[PMM_OP_MMAP] = "MMAP",
	[PMM_OP_MUNMAP] = "MUNMAP",
	[PMM_OP_MREMAP] = "MREMAP",
};

/* A string of the process's: what a terminal could take for a command is escaped. */
static void pmm_seq_escape(struct seq_file *m, const char *s)
{
	pmm_seq_escape_nap(m, s);
}

static void pmm_show_block(struct seq_file *m, struct pmm_pid_iter *it)
{
	const struct pmm_block_view *b = &it->b;
	struct pmm_site_stats *s;
	struct tm tm;
	u64 caller = 0;

	time64_to_tm(div_u64(b->time_ns + it->real_offset, NSEC_PER_SEC), 0,
		     &tm);
	seq_printf(m, "{%s @%02d:%02d:%02d} Sz: %lluB ",
		   pmm_op_names[b->op] ? pmm_op_names[b->op] : "?",
		   tm.tm_hour, tm.tm_min, tm.tm_sec, b->size);
	if (b->op == PMM_OP_REALLOC || b->op == PMM_OP_MREMAP)
		seq_printf(m, "Prev Pointer: 0x%llx ", b->prev_ptr);
	s = b->site;
	if (s->desc.depth)
		caller = s->desc.frames[0];
	seq_printf(m, "Pointer: 0x%llx Caller: 0x%llx", b->ptr, caller);
	if (s->desc.flags & PMM_SITE_F_SOURCE) {
		seq_putc(m, ' ');
		pmm_seq_escape(m, s->desc.func);
		seq_printf(m, "() %u ", s->desc.line);
		pmm_seq_escape(m, s->desc.file);
	}
	seq_putc(m, '\n');
}

static int pmm_pid_show(struct seq_file *m, void *v)
{
	struct pmm_pid_iter *it = v;
	struct pmm_proc *p = it->p;

	switch (it->phase) {
	case PMM_IT_HEADER:
		seq_printf(m, "[%u] PID: %d, Comp: ", it->nr,
			   pid_nr_ns(p->pid, it->ns));
		pmm_seq_escape(m, p->comm);
		seq_printf(m, ", PPID: %d, State: %u, Log count: %llu\n",
			   pid_nr_ns(p->parent, it->ns), p->state, p->nblocks);
		break;
	case PMM_IT_SUMMARY:
		seq_printf(m, "Dropped: %llu, Unmatched frees: %llu, Pending frees: %u, Older frees: %llu\n",
			   p->dropped, p->stats.unmatched_frees, p->npending,
			   p->stats.older_frees);
		break;
	case PMM_IT_BLOCK:
		pmm_show_block(m, it);
		break;
	}
	return 0;
}

static const struct seq_operations pmm_pid_seq_ops = {
	.start = pmm_pid_start,
	.next = pmm_pid_next,
	.stop = pmm_pid_stop,
	.show = pmm_pid_show,
};

static int pmm_pid_open(struct inode *inode, struct file *file)
{
	struct pmm_pid_iter *it;

	it = __seq_open_private(file, &pmm_pid_seq_ops, sizeof(*it));
	if (!it)
		return -ENOMEM;
	it->file = file;
	it->ns = get_pid_ns(task_active_pid_ns(current));
	return 0;
}

static int pmm_pid_release(struct inode *inode, struct file *file)
{
	struct seq_file *m = file->private_data;
	struct pmm_pid_iter *it = m->private;

	if (it->p)
		pmm_proc_put(it->p);
	put_pid_ns(it->ns);
	return seq_release_private(inode, file);
}

static const struct proc_ops pmm_pid_ops = {
	.proc_open = pmm_pid_open,
	.proc_read = seq_read,
	.proc_lseek = seq_lseek,
	.proc_release = pmm_pid_release,
};

int pmm_procfs_init(void)
{
	pmm_proc_dir = proc_mkdir("pmm", NULL);
	if (!pmm_proc_dir)
		return -ENOMEM;
	if (!proc_create("cfg", 0644, pmm_proc_dir, &pmm_cfg_ops))
		goto out_remove_dir;
	if (!proc_create("pid", 0444, pmm_proc_dir, &pmm_pid_ops))
		goto out_remove_dir;
	return 0;

out_remove_dir:
	remove_proc_subtree("pmm", NULL);
	return -ENOMEM;
}

void pmm_procfs_exit(void)
{
	remove_proc_subtree("pmm", NULL);
}
