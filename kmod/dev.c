// SPDX-License-Identifier: GPL-2.0
/*
 * pmm: /dev/pmm and its ioctls. Each handler copies its argument in, checks
 * size, reserved fields, flags and counts, and only then locks or allocates.
 * Locks: PMM_RECORD_LOG and PMM_REGISTER_SITE take only the caller's own
 * process's lock (pmm_proc_lock: they apply its queued records too); the
 * reads take a process's lock with pmm_proc_lock_fresh/_read and pmm_lock
 * only inside the registry's list walk. START, STOP and the configuration
 * are control.c's.
 *
 * Choices where the ABI leaves room:
 *  - a read of a pid that has no entry the caller may read: -ENOENT when
 *    such a process exists, -ESRCH when none does (access.c: pmm_get_entry).
 *  - pid 0 means the caller in START/STOP, the read-back ioctls and
 *    PMM_GET_STATS; pid numbers are in the caller's pid namespace.
 *  - PMM_HEAP_REPORT keeps the caller's last report whole or not at all: a
 *    report of bad form changes nothing (-EINVAL).
 *  - batch.accepted counts the valid records taken, including those dropped
 *    for a limit (counted in dropped_records); on -EINVAL it is the index of
 *    the first bad record.
 *  - Cursors: PMM_MONITORED_PIDS: the start order of the next pid;
 *    PMM_READ_BLOCKS and PMM_READ_SITES: the next slot of the block or
 *    site table, so they come in table order; PMM_READ_SAMPLES: the
 *    sequence number of the next sample; PMM_READ_OBJECTS: the index of the
 *    next object (they are only ever added). Under concurrent changes a read
 *    never crashes but may skip or repeat entries (when a table grows
 *    meanwhile).
 */
#include <linux/miscdevice.h>
#include <linux/fs.h>
#include <linux/uaccess.h>
#include <linux/slab.h>
#include <linux/capability.h>
#include <linux/compat.h>
#include <linux/pid.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/pid_namespace.h>
#include <linux/timekeeping.h>
#include "pmm_int.h"

/* Bytes of read-back entries staged per lock hold. */
#define PMM_READ_STAGE	8192

/*
 * copy_from_user() of records, a word at a time: rep movsb, which
 * copy_from_user uses on ERMS CPUs, is emulated byte by byte under QEMU's
 * TCG. A record's six words are copied in one loop pass, not a loop over
 * words (fewer instructions a record: scripts/bench-icount.sh).
 */
#define RECORD_WORDS	(sizeof(struct pmm_record) / sizeof(u64))

static int copy_records(struct pmm_record *dst,
			const struct pmm_record __user *src, u32 n)
{
	const u64 __user *from = (const u64 __user *)src;
	u64 *to = (u64 *)dst;
	u32 i;

	BUILD_BUG_ON(RECORD_WORDS != 6 || sizeof(*dst) % sizeof(u64));
	if (!user_access_begin(from, n * sizeof(*dst)))
		return -EFAULT;
	for (i = 0; i < n; i++, from += RECORD_WORDS, to += RECORD_WORDS) {
		unsafe_get_user(to[0], &from[0], fault);
		unsafe_get_user(to[1], &from[1], fault);
		unsafe_get_user(to[2], &from[2], fault);
		unsafe_get_user(to[3], &from[3], fault);
		unsafe_get_user(to[4], &from[4], fault);
		unsafe_get_user(to[5], &from[5], fault);
	}
	user_access_end();
	return 0;
fault:
	user_access_end();
	return -EFAULT;
}

/* Applies n checked records now, or queues them if another thread holds the lock. */
static int pmm_log_chunk(struct pmm_proc *p, const struct pmm_record *r, u32 n)
{
	if (READ_ONCE(p->stopped))
		return -PMM_ENOTMONITORED_ERRNO;
	if (!pmm_proc_trylock(p)) {
		if (pmm_proc_queue(p, r, n))
			return 0;
		pmm_proc_lock(p);
	}
	if (p->stopped) {
		pmm_proc_unlock(p);
		return -PMM_ENOTMONITORED_ERRNO;
	}
	if (unlikely(current_real_cred() != p->cred_seen)) {
		/* exec or setuid: readers are judged on what it is now */
		pmm_proc_refresh(p);
		p->cred_seen = current_real_cred();
	}
	pmm_apply_records(p, r, n);
	pmm_proc_unlock(p);
	return 0;
}

static long pmm_ioc_record_log(struct pmm_record_batch __user *ub)
{
	struct pmm_record buf[PMM_CHUNK];
	const struct pmm_record __user *ur;
	struct pmm_record_batch b;
	struct pmm_proc *p;
	u32 done = 0, n, i;
	long ret = 0;

	if (copy_from_user(&b, ub, sizeof(b)))
		return -EFAULT;
	if (b.flags || b.reserved)
		return -EINVAL;
	if (!b.count || b.count > PMM_MAX_BATCH)
		return -EINVAL;
	p = pmm_proc_get_current();
	if (!p)
		return -PMM_ENOTMONITORED_ERRNO;
	ur = u64_to_user_ptr(b.records);
	while (done < b.count) {
		n = min_t(u32, b.count - done, PMM_CHUNK);
		if (copy_records(buf, ur + done, n)) {
			ret = -EFAULT;
			break;
		}
		i = pmm_check_records(buf, n);
		ret = pmm_log_chunk(p, buf, i);
		if (ret)
			break;
		done += i;
		if (i < n) {
			ret = -EINVAL;
			break;
		}
	}
	atomic64_add(done, &pmm_records_accepted);
	pmm_proc_put(p);
	if (put_user(done, &ub->accepted) && !ret)
		ret = -EFAULT;
	return ret;
}

static long pmm_ioc_register_site(struct pmm_site __user *us)
{
	u64 loc[PMM_MAX_FRAMES];
	struct pmm_proc *p;
	struct pmm_site *s;
	long ret;

	s = kmalloc(sizeof(*s), GFP_KERNEL);
	if (!s)
		return -ENOMEM;
	ret = -EFAULT;
	if (copy_from_user(s, us, sizeof(*s)))
		goto out_free;
	ret = -EINVAL;
	if (!s->site || (s->flags & ~PMM_SITE_F_ALL) ||
	    s->depth > PMM_MAX_FRAMES)
		goto out_free;
	if (strnlen(s->file, sizeof(s->file)) == sizeof(s->file) ||
	    strnlen(s->func, sizeof(s->func)) == sizeof(s->func))
		goto out_free;
	ret = -PMM_ENOTMONITORED_ERRNO;
	p = pmm_proc_get_current();
	if (!p)
		goto out_free;
	pmm_locate_frames(p, s->frames, s->depth, loc);
	pmm_proc_lock(p);
	ret = p->stopped ? -PMM_ENOTMONITORED_ERRNO :
			   pmm_register_site(p, s, loc);
	pmm_proc_unlock(p);
	pmm_proc_put(p);
out_free:
	kfree(s);
	return ret;
}

/* A heap report's form (uapi/pmm.h: struct pmm_heap); not its truth. */
static bool pmm_heap_valid(const struct pmm_heap *h)
{
	if (h->size != sizeof(*h) || h->time_ns || h->reserved)
		return false;
	if (h->mapped > PMM_HEAP_MAX_BYTES || h->in_use > PMM_HEAP_MAX_BYTES ||
	    h->free > PMM_HEAP_MAX_BYTES || h->top > PMM_HEAP_MAX_BYTES ||
	    h->retained > PMM_HEAP_MAX_BYTES)
		return false;
	switch (h->allocator) {
	case PMM_ALLOC_GLIBC:
		return h->in_use + h->free == h->mapped && h->top <= h->free &&
		       !h->retained;
	case PMM_ALLOC_JEMALLOC:
		return h->in_use <= h->mapped && !h->top;
	default:
		return false;
	}
}

/* The caller's allocator's report; returns the sampling interval in ms. */
static long pmm_ioc_heap_report(struct pmm_heap __user *uh)
{
	struct pmm_proc *p;
	struct pmm_heap h;
	long ret;

	if (copy_from_user(&h, uh, sizeof(h)))
		return -EFAULT;
	if (!pmm_heap_valid(&h))
		return -EINVAL;
	p = pmm_proc_get_current();
	if (!p)
		return -PMM_ENOTMONITORED_ERRNO;
	h.time_ns = ktime_get_boottime_ns();
	pmm_proc_lock(p);
	if (p->stopped) {
		ret = -PMM_ENOTMONITORED_ERRNO;
	} else {
		p->heap = h;
		ret = READ_ONCE(pmm_cfg.interval_ms);
	}
	pmm_proc_unlock(p);
	pmm_proc_put(p);
	return ret;
}

static bool pmm_cfg_counters_zero(const struct pmm_config *c)
{
	return !c->reserved && !c->monitored_pids && !c->records_accepted &&
	       !c->records_dropped && !c->unmatched_frees && !c->kmem_bytes &&
	       !c->records_queued && !c->older_frees && !c->reserved2[0];
}

static u32 pmm_cfg_field(const struct pmm_config *c, u32 bit)
{
	switch (bit) {
	case PMM_CFG_INTERVAL:
		return c->interval_ms;
	case PMM_CFG_SCAN:
		return c->scan;
	case PMM_CFG_MAX_PIDS:
		return c->max_pids;
	case PMM_CFG_MAX_BLOCKS:
		return c->max_blocks_per_pid;
	case PMM_CFG_MAX_SITES:
		return c->max_sites_per_pid;
	case PMM_CFG_MAX_SAMPLES:
		return c->max_samples_per_pid;
	case PMM_CFG_MAX_PIDS_PER_UID:
		return c->max_pids_per_uid;
	case PMM_CFG_EXITED_TTL:
		return c->exited_ttl_s;
	}
	return 0;
}

static long pmm_ioc_set_config(struct file *file, struct pmm_config __user *uc)
{
	const u32 admin = PMM_CFG_ALL & ~(PMM_CFG_START_PID | PMM_CFG_STOP_PID);
	struct pmm_config c;
	u32 bit;
	int ret;

	if (copy_from_user(&c, uc, sizeof(c)))
		return -EFAULT;
	if (c.size != sizeof(c) || (c.set & ~PMM_CFG_ALL) ||
	    !pmm_cfg_counters_zero(&c))
		return -EINVAL;
	if (c.abi_version && c.abi_version != PMM_ABI_VERSION)
		return -EINVAL;
	for (bit = 1; bit & PMM_CFG_ALL; bit <<= 1)
		if ((c.set & bit & admin) &&
		    !pmm_cfg_valid(bit, pmm_cfg_field(&c, bit)))
			return -EINVAL;
	if (((c.set & PMM_CFG_START_PID) && c.start_pid < 0) ||
	    ((c.set & PMM_CFG_STOP_PID) && c.stop_pid < 0))
		return -EINVAL;
	if ((c.set & admin) && !capable(CAP_SYS_ADMIN))
		return -EPERM;
	/* Stop, then start; a failure there leaves the values untouched. */
	if (c.set & PMM_CFG_STOP_PID) {
		ret = pmm_stop_pid(c.stop_pid, file);
		if (ret)
			return ret;
	}
	if (c.set & PMM_CFG_START_PID) {
		ret = pmm_start_pid(c.start_pid, file);
		if (ret)
			return ret;
	}
	if (!(c.set & admin))
		return 0;
	mutex_lock(&pmm_lock);
	for (bit = 1; bit & PMM_CFG_ALL; bit <<= 1)
		if (c.set & bit & admin)
			pmm_cfg_apply(bit, pmm_cfg_field(&c, bit));
	mutex_unlock(&pmm_lock);
	pmm_sampler_kick();
	return 0;
}

static long pmm_ioc_get_config(struct file *file, struct pmm_config __user *uc)
{
	struct pid_namespace *ns = task_active_pid_ns(current);
	struct pid *start, *stop;
	struct pmm_config c;
	u32 size;

	if (get_user(size, &uc->size))
		return -EFAULT;
	if (size != sizeof(c))
		return -EINVAL;
	memset(&c, 0, sizeof(c));
	c.size = sizeof(c);
	mutex_lock(&pmm_lock);
	c.interval_ms = pmm_cfg.interval_ms;
	c.scan = pmm_cfg.scan;
	start = get_pid(pmm_cfg.last_start);
	stop = get_pid(pmm_cfg.last_stop);
	c.max_pids = pmm_cfg.max_pids;
	c.max_blocks_per_pid = pmm_cfg.max_blocks;
	c.max_sites_per_pid = pmm_cfg.max_sites;
	c.max_samples_per_pid = pmm_cfg.max_samples;
	c.max_pids_per_uid = pmm_cfg.max_pids_per_uid;
	c.exited_ttl_s = pmm_cfg.exited_ttl_s;
	c.monitored_pids = pmm_nprocs;
	mutex_unlock(&pmm_lock);
	/* only a process the reader may read (checks walk /proc: no lock) */
	c.start_pid = pmm_visible_nr(start, ns, file);
	c.stop_pid = pmm_visible_nr(stop, ns, file);
	put_pid(start);
	put_pid(stop);
	c.abi_version = PMM_ABI_VERSION;
	c.records_accepted = atomic64_read(&pmm_records_accepted);
	c.records_dropped = atomic64_read(&pmm_records_dropped);
	c.unmatched_frees = atomic64_read(&pmm_unmatched_frees);
	c.kmem_bytes = atomic64_read(&pmm_kmem_bytes);
	c.records_queued = atomic64_read(&pmm_records_queued);
	c.older_frees = atomic64_read(&pmm_older_frees);
	if (copy_to_user(uc, &c, sizeof(c)))
		return -EFAULT;
	return 0;
}

/*
 * The entry pid nr (0: the caller) names for the caller, with a reference;
 * reading an exited entry postpones its expiry.
 */
static struct pmm_proc *pmm_get_readable(pid_t nr, const struct file *file,
					 int *err)
{
	struct pmm_proc *p = pmm_get_entry(nr, file, PMM_READ, err);

	if (p)
		pmm_proc_touch(p);
	return p;
}

/* What a read-back call reads: a process, or the list for its reader. */
struct pmm_read_ctx {
	struct pmm_proc *p;
	const struct file *file;
	struct pid_namespace *ns;
};

/*
 * One read-back kind: fill() stages up to max entries from *cursor into
 * buf under the lock it needs, advances the cursor, sets *total, and
 * returns the count; *done when nothing is left after them.
 */
struct pmm_reader {
	size_t esize;
	u32 (*fill)(const struct pmm_read_ctx *ctx, u64 *cursor, void *buf,
		    u32 max, u64 *total, bool *done);
};

/* Processes the reader may see, in start order; the cursor is a start id. */
static u32 fill_pids(const struct pmm_read_ctx *ctx, u64 *cursor, void *buf,
		     u32 max, u64 *total, bool *done)
{
	struct pmm_pid_info *out = buf;
	struct pmm_proc **all, *p;
	u32 n = 0, nall, i;

	*total = 0;
	*done = true;
	all = pmm_get_all(0, &nall);
	for (i = 0; i < nall; i++) {
		p = all[i];
		if (!pid_nr_ns(p->pid, ctx->ns) || !pmm_may_access(p, ctx->file))
			continue;
		(*total)++;
		if (p->id < *cursor)
			continue;
		if (n == max) {
			*done = false;
			continue;
		}
		pmm_proc_lock_read(p);
		pmm_fill_pid_info(p, &out[n++], ctx->ns);
		pmm_proc_unlock_read(p);
		*cursor = p->id + 1;
	}
	pmm_put_all(all, 0, nall);
	return n;
}

static u32 fill_blocks(const struct pmm_read_ctx *ctx, u64 *cursor, void *buf,
		       u32 max, u64 *total, bool *done)
{
	struct pmm_proc *p = ctx->p;
	struct pmm_block *out = buf;
	struct pmm_block_view b;
	bool more;
	u32 n = 0;

	pmm_proc_lock_fresh(p);
	*total = p->nblocks;
	more = pmm_block_at(p, cursor, &b);
	for (; more && n < max; ++*cursor, more = pmm_block_at(p, cursor, &b)) {
		memset(&out[n], 0, sizeof(out[n]));
		out[n].ptr = b.ptr;
		out[n].prev_ptr = b.prev_ptr;
		out[n].size = b.size;
		out[n].time_ns = b.time_ns;
		out[n].site = b.site->desc.site;
		out[n].weight = b.weight;
		out[n].op = b.op;
		n++;
	}
	*done = !more;
	pmm_proc_unlock_read(p);
	return n;
}

/* Sites in table order; the cursor is a slot of the site table. */
static u32 fill_sites(const struct pmm_read_ctx *ctx, u64 *cursor, void *buf,
		      u32 max, u64 *total, bool *done)
{
	struct pmm_site_stats *out = buf, *s;
	struct pmm_proc *p = ctx->p;
	u32 n = 0;

	pmm_proc_lock_fresh(p);
	*total = p->nsites;
	s = pmm_site_at(p, cursor);
	for (; s && n < max; ++*cursor, s = pmm_site_at(p, cursor))
		out[n++] = *s;
	*done = !s;
	pmm_proc_unlock_read(p);
	return n;
}

static u32 fill_samples(const struct pmm_read_ctx *ctx, u64 *cursor,
			void *buf, u32 max, u64 *total, bool *done)
{
	struct pmm_sample *out = buf;
	struct pmm_proc *p = ctx->p;
	u64 oldest;
	u32 n = 0;

	pmm_proc_lock_fresh(p);
	*total = p->ring ? min_t(u64, p->nsamples, p->ring_size) : 0;
	oldest = p->nsamples - *total;
	if (*cursor < oldest)
		*cursor = oldest;
	while (p->ring && n < max && *cursor < p->nsamples) {
		out[n++] = p->ring[*cursor % p->ring_size];
		(*cursor)++;
	}
	*done = !p->ring || *cursor >= p->nsamples;
	pmm_proc_unlock_read(p);
	return n;
}

/* Objects in obj order; the cursor is the index of the next one. */
static u32 fill_objects(const struct pmm_read_ctx *ctx, u64 *cursor,
			void *buf, u32 max, u64 *total, bool *done)
{
	struct pmm_object *out = buf, *o = NULL;
	struct pmm_proc *p = ctx->p;
	u32 n = 0;

	pmm_proc_lock_read(p);
	*total = p->nobjs;
	while (n < max && (o = pmm_object_at(p, *cursor))) {
		out[n++] = *o;
		(*cursor)++;
	}
	*done = !pmm_object_at(p, *cursor);
	pmm_proc_unlock_read(p);
	return n;
}

static const struct pmm_reader pmm_readers[] = {
	{ sizeof(struct pmm_pid_info), fill_pids },
	{ sizeof(struct pmm_block), fill_blocks },
	{ sizeof(struct pmm_site_stats), fill_sites },
	{ sizeof(struct pmm_sample), fill_samples },
	{ sizeof(struct pmm_object), fill_objects },
};

static long pmm_ioc_read(struct file *file, struct pmm_read __user *ur,
			 const struct pmm_reader *rd, bool per_pid)
{
	struct pmm_read_ctx ctx = {
		.file = file,
		.ns = task_active_pid_ns(current),
	};
	struct pmm_proc *p = NULL;
	struct pmm_read r;
	u32 count = 0, n, per;
	bool done = false;
	void __user *ubuf;
	void *stage;
	int err = 0;

	if (copy_from_user(&r, ur, sizeof(r)))
		return -EFAULT;
	if (r.flags || r.reserved || !r.capacity || r.capacity > PMM_MAX_READ)
		return -EINVAL;
	if (per_pid ? r.pid < 0 : r.pid != 0)
		return -EINVAL;
	if (per_pid) {
		p = pmm_get_readable(r.pid, file, &err);
		if (!p)
			return err;
	}
	ctx.p = p;
	stage = kmalloc(PMM_READ_STAGE, GFP_KERNEL);
	if (!stage) {
		err = -ENOMEM;
		goto out_put;
	}
	per = PMM_READ_STAGE / rd->esize;
	ubuf = u64_to_user_ptr(r.buf);
	while (count < r.capacity && !done) {
		n = rd->fill(&ctx, &r.cursor, stage,
			     min(r.capacity - count, per), &r.total, &done);
		if (copy_to_user(ubuf + (size_t)count * rd->esize, stage,
				 n * rd->esize)) {
			err = -EFAULT;
			goto out_free;
		}
		count += n;
	}
	r.count = count;
	r.done = done;
	if (copy_to_user(ur, &r, sizeof(r)))
		err = -EFAULT;
out_free:
	kfree(stage);
out_put:
	if (p)
		pmm_proc_put(p);
	return err;
}

static long pmm_ioc_get_stats(struct file *file, struct pmm_stats __user *us)
{
	struct pmm_stats *st;
	struct pmm_proc *p;
	s32 pid;
	int err = 0;
	u32 reserved;

	if (get_user(pid, &us->pid) || get_user(reserved, &us->reserved))
		return -EFAULT;
	if (reserved || pid < 0)
		return -EINVAL;
	p = pmm_get_readable(pid, file, &err);
	if (!p)
		return err;
	st = kmalloc(sizeof(*st), GFP_KERNEL);
	if (!st) {
		err = -ENOMEM;
		goto out_put;
	}
	pmm_proc_lock_fresh(p);
	*st = p->stats;
	pmm_proc_unlock_read(p);
	st->pid = pid_vnr(p->pid);
	st->reserved = 0;
	if (copy_to_user(us, st, sizeof(*st)))
		err = -EFAULT;
	kfree(st);
out_put:
	pmm_proc_put(p);
	return err;
}

static long pmm_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	void __user *argp = (void __user *)arg;

	switch (cmd) {
	case PMM_RECORD_LOG:
		return pmm_ioc_record_log(argp);
	case PMM_SET_CONFIG:
		return pmm_ioc_set_config(file, argp);
	case PMM_GET_CONFIG:
		return pmm_ioc_get_config(file, argp);
	case PMM_MONITORED_PIDS:
		return pmm_ioc_read(file, argp, &pmm_readers[0], false);
	case PMM_REGISTER_SITE:
		return pmm_ioc_register_site(argp);
	case PMM_READ_BLOCKS:
		return pmm_ioc_read(file, argp, &pmm_readers[1], true);
	case PMM_READ_SITES:
		return pmm_ioc_read(file, argp, &pmm_readers[2], true);
	case PMM_READ_SAMPLES:
		return pmm_ioc_read(file, argp, &pmm_readers[3], true);
	case PMM_GET_STATS:
		return pmm_ioc_get_stats(file, argp);
	case PMM_QUERY_SELF:
		return pmm_current_monitored();
	case PMM_READ_OBJECTS:
		return pmm_ioc_read(file, argp, &pmm_readers[4], true);
	case PMM_HEAP_REPORT:
		return pmm_ioc_heap_report(argp);
	default:
		return -ENOTTY;
	}
}

static const struct file_operations pmm_fops = {
	.owner = THIS_MODULE,
	.unlocked_ioctl = pmm_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = pmm_clock_mmap,
	.llseek = noop_llseek,
};

static struct miscdevice pmm_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = PMM_DEVICE_NAME,
	.fops = &pmm_fops,
	.mode = 0600,
};

int pmm_dev_init(void)
{
	int ret = pmm_clock_init();

	if (ret)
		return ret;
	ret = misc_register(&pmm_misc);
	if (ret)
		pmm_clock_exit();
	return ret;
}

void pmm_dev_exit(void)
{
	misc_deregister(&pmm_misc);
	pmm_clock_exit();
}
