// SPDX-License-Identifier: GPL-2.0
/*
 * pmm: generic netlink family PMM_GENL_NAME. Events go to the multicast
 * group "events", which only CAP_NET_ADMIN may join (the family lives in the
 * initial network namespace alone: the initial user namespace's capability),
 * as taskstats' listeners of every task's exit: they describe every
 * monitored process of every user, so their pids are those of the initial
 * pid namespace. PMM_CMD_GET_PIDS dumps the monitored processes to a
 * CAP_NET_ADMIN requester, only those it may read (access.c, with its
 * socket's and its own credentials), numbered in its pid namespace. A
 * process's figures are copied under its lock (as a reader); nothing is
 * sent with a lock held, and the dump runs outside genl_mutex.
 *
 * Attributes of each event (types as in uapi/pmm.h):
 *   SAMPLE   PID START_TIME TIME VM RSS RSS_ANON RSS_FILE RSS_SHMEM
 *            LIVE_BYTES LIVE_BLOCKS, CGROUP_USAGE when it has a memory
 *            cgroup, and after its first heap report ALLOCATOR HEAP_TIME
 *            HEAP_MAPPED HEAP_IN_USE HEAP_FREE HEAP_TOP HEAP_RETAINED
 *   EXITED   PID START_TIME TIME(exit) COMM STATE
 *   STARTED, STOPPED  PID START_TIME TIME COMM PPID
 *   DROPPED  PID START_TIME DROPPED (total; at most once per sample tick)
 *   SITES    PID START_TIME TIME, then up to PMM_SITES_TOP nested SITE
 *            (SITE_ID LIVE_BYTES LIVE_BLOCKS), largest live bytes first,
 *            every PMM_SITES_EVERY samples
 *   GET_PIDS PID PPID COMM STATE START_TIME LIVE_BYTES LIVE_BLOCKS DROPPED
 */
#include <linux/slab.h>
#include <linux/sort.h>
#include <linux/pid_namespace.h>
#include <net/genetlink.h>
#include <net/netlink.h>
#include <net/sock.h>
#include "pmm_int.h"

static const struct nla_policy pmm_genl_policy[PMM_A_MAX + 1] = {
	[PMM_A_PID] = { .type = NLA_U32 },
	[PMM_A_START_TIME] = { .type = NLA_U64 },
	[PMM_A_TIME] = { .type = NLA_U64 },
	[PMM_A_VM] = { .type = NLA_U64 },
	[PMM_A_RSS] = { .type = NLA_U64 },
	[PMM_A_RSS_ANON] = { .type = NLA_U64 },
	[PMM_A_RSS_FILE] = { .type = NLA_U64 },
	[PMM_A_RSS_SHMEM] = { .type = NLA_U64 },
	[PMM_A_COMM] = { .type = NLA_NUL_STRING, .len = PMM_COMM_LEN - 1 },
	[PMM_A_LIVE_BYTES] = { .type = NLA_U64 },
	[PMM_A_LIVE_BLOCKS] = { .type = NLA_U64 },
	[PMM_A_DROPPED] = { .type = NLA_U64 },
	[PMM_A_STATE] = { .type = NLA_U32 },
	[PMM_A_PPID] = { .type = NLA_U32 },
	[PMM_A_SITE] = { .type = NLA_NESTED },
	[PMM_A_SITE_ID] = { .type = NLA_U32 },
	[PMM_A_CGROUP_USAGE] = { .type = NLA_U64 },
	[PMM_A_ALLOCATOR] = { .type = NLA_U32 },
	[PMM_A_HEAP_TIME] = { .type = NLA_U64 },
	[PMM_A_HEAP_MAPPED] = { .type = NLA_U64 },
	[PMM_A_HEAP_IN_USE] = { .type = NLA_U64 },
	[PMM_A_HEAP_FREE] = { .type = NLA_U64 },
	[PMM_A_HEAP_TOP] = { .type = NLA_U64 },
	[PMM_A_HEAP_RETAINED] = { .type = NLA_U64 },
};

static int pmm_genl_dump_pids(struct sk_buff *skb, struct netlink_callback *cb);

static const struct genl_small_ops pmm_genl_ops[] = {
	{
		.cmd = PMM_CMD_GET_PIDS,
		.dumpit = pmm_genl_dump_pids,
		.flags = GENL_ADMIN_PERM,
	},
};

enum { PMM_MCGRP_EVENTS };

static const struct genl_multicast_group pmm_genl_mcgrps[] = {
	[PMM_MCGRP_EVENTS] = {
		.name = PMM_GENL_MCGRP_EVENTS,
		.flags = PMM_GENL_MCGRP_FLAGS,
	},
};

static struct genl_family pmm_genl_family __ro_after_init = {
	.name = PMM_GENL_NAME,
	.version = PMM_GENL_VERSION,
	.maxattr = PMM_A_MAX,
	.policy = pmm_genl_policy,
	.module = THIS_MODULE,
	/* the dump takes only the module's locks: not under genl_mutex */
	.parallel_ops = true,
	.small_ops = pmm_genl_ops,
	.n_small_ops = ARRAY_SIZE(pmm_genl_ops),
	.mcgrps = pmm_genl_mcgrps,
	.n_mcgrps = ARRAY_SIZE(pmm_genl_mcgrps),
};

static bool pmm_genl_listening(void)
{
	return genl_has_listeners(&pmm_genl_family, &init_net,
				  PMM_MCGRP_EVENTS);
}

static int put_u64(struct sk_buff *skb, int attr, u64 v)
{
	return nla_put_u64_64bit(skb, attr, v, PMM_A_PAD);
}

/* Events carry pids of the initial namespace (the group's readers are). */
static int put_id(struct sk_buff *skb, struct pmm_proc *p)
{
	if (nla_put_u32(skb, PMM_A_PID, pid_nr(p->pid)) ||
	    put_u64(skb, PMM_A_START_TIME, p->start_time_ns))
		return -EMSGSIZE;
	return 0;
}

static void pmm_genl_send(struct sk_buff *skb, void *hdr)
{
	genlmsg_end(skb, hdr);
	pmm_genl_multicast(&pmm_genl_family, skb, PMM_MCGRP_EVENTS);
}

static struct sk_buff *pmm_genl_new(u8 cmd, size_t size, void **hdr)
{
	struct sk_buff *skb;

	skb = genlmsg_new(size, GFP_KERNEL);
	if (!skb)
		return NULL;
	*hdr = genlmsg_put(skb, 0, 0, &pmm_genl_family, 0, cmd);
	if (!*hdr) {
		nlmsg_free(skb);
		return NULL;
	}
	return skb;
}

void pmm_genl_proc_event(u8 cmd, struct pmm_proc *p)
{
	char comm[TASK_COMM_LEN];
	struct sk_buff *skb;
	pid_t ppid;
	u64 t;
	void *hdr;

	if (!pmm_genl_listening())
		return;
	skb = pmm_genl_new(cmd, NLMSG_DEFAULT_SIZE, &hdr);
	if (!skb)
		return;
	pmm_proc_lock_read(p);
	pmm_proc_refresh(p);
	t = cmd == PMM_CMD_EXITED ? p->exit_time_ns : ktime_get_boottime_ns();
	memcpy(comm, p->comm, sizeof(comm));
	ppid = pid_nr(p->parent);
	pmm_proc_unlock_read(p);
	if (put_id(skb, p) || put_u64(skb, PMM_A_TIME, t) ||
	    nla_put_string(skb, PMM_A_COMM, comm))
		goto out_free;
	if (cmd == PMM_CMD_EXITED) {
		if (nla_put_u32(skb, PMM_A_STATE, PMM_STATE_EXITED))
			goto out_free;
	} else if (nla_put_u32(skb, PMM_A_PPID, ppid)) {
		goto out_free;
	}
	pmm_genl_send(skb, hdr);
	return;

out_free:
	nlmsg_free(skb);
}

/* A sample's heap report, if it has one. */
static int put_heap(struct sk_buff *skb, const struct pmm_heap *h)
{
	if (h->allocator == PMM_ALLOC_NONE)
		return 0;
	if (nla_put_u32(skb, PMM_A_ALLOCATOR, h->allocator) ||
	    put_u64(skb, PMM_A_HEAP_TIME, h->time_ns) ||
	    put_u64(skb, PMM_A_HEAP_MAPPED, h->mapped) ||
	    put_u64(skb, PMM_A_HEAP_IN_USE, h->in_use) ||
	    put_u64(skb, PMM_A_HEAP_FREE, h->free) ||
	    put_u64(skb, PMM_A_HEAP_TOP, h->top) ||
	    put_u64(skb, PMM_A_HEAP_RETAINED, h->retained))
		return -EMSGSIZE;
	return 0;
}

void pmm_genl_sample(struct pmm_proc *p, const struct pmm_sample *s)
{
	struct sk_buff *skb;
	void *hdr;

	if (!pmm_genl_listening())
		return;
	skb = pmm_genl_new(PMM_CMD_SAMPLE, NLMSG_DEFAULT_SIZE, &hdr);
	if (!skb)
		return;
	if (put_id(skb, p) || put_u64(skb, PMM_A_TIME, s->time_ns) ||
	    put_u64(skb, PMM_A_VM, s->vm) || put_u64(skb, PMM_A_RSS, s->rss) ||
	    put_u64(skb, PMM_A_RSS_ANON, s->rss_anon) ||
	    put_u64(skb, PMM_A_RSS_FILE, s->rss_file) ||
	    put_u64(skb, PMM_A_RSS_SHMEM, s->rss_shmem) ||
	    put_u64(skb, PMM_A_LIVE_BYTES, s->live_bytes) ||
	    put_u64(skb, PMM_A_LIVE_BLOCKS, s->live_blocks) ||
	    ((s->flags & PMM_SAMPLE_F_MEMCG) &&
	     put_u64(skb, PMM_A_CGROUP_USAGE, s->cgroup_usage)) ||
	    put_heap(skb, &s->heap)) {
		nlmsg_free(skb);
		return;
	}
	pmm_genl_send(skb, hdr);
}

void pmm_genl_dropped(struct pmm_proc *p, u64 dropped)
{
	struct sk_buff *skb;
	void *hdr;

	if (!pmm_genl_listening())
		return;
	skb = pmm_genl_new(PMM_CMD_DROPPED, NLMSG_DEFAULT_SIZE, &hdr);
	if (!skb)
		return;
	if (put_id(skb, p) || put_u64(skb, PMM_A_DROPPED, dropped)) {
		nlmsg_free(skb);
		return;
	}
	pmm_genl_send(skb, hdr);
}

struct pmm_top_site {
	u64 bytes;
	u64 blocks;
	u32 id;
};

static int top_cmp(const void *a, const void *b)
{
	const struct pmm_top_site *x = a, *y = b;

	if (x->bytes != y->bytes)
		return x->bytes < y->bytes ? 1 : -1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* Fills top with the sites of most live bytes; returns how many. */
static u32 pmm_top_sites(struct pmm_proc *p, struct pmm_top_site *top)
{
	struct pmm_site_stats *s;
	u64 slot = 0;
	u32 n = 0, i, min;

	pmm_proc_lock_read(p);
	for (s = pmm_site_at(p, &slot); s; ++slot, s = pmm_site_at(p, &slot)) {
		if (!s->live_blocks)
			continue;
		if (n < PMM_SITES_TOP) {
			i = n++;
		} else {
			for (min = 0, i = 1; i < n; i++)
				if (top[i].bytes < top[min].bytes)
					min = i;
			if (top[min].bytes >= s->live_bytes)
				continue;
			i = min;
		}
		top[i].bytes = s->live_bytes;
		top[i].blocks = s->live_blocks;
		top[i].id = s->desc.site;
	}
	pmm_proc_unlock_read(p);
	sort(top, n, sizeof(*top), top_cmp, NULL);
	return n;
}

void pmm_genl_sites(struct pmm_proc *p)
{
	struct pmm_top_site *top;
	struct sk_buff *skb;
	struct nlattr *nest;
	void *hdr;
	u32 n, i;

	if (!pmm_genl_listening())
		return;
	top = kmalloc_array(PMM_SITES_TOP, sizeof(*top), GFP_KERNEL);
	if (!top)
		return;
	n = pmm_top_sites(p, top);
	skb = pmm_genl_new(PMM_CMD_SITES, NLMSG_GOODSIZE, &hdr);
	if (!skb)
		goto out_free_top;
	if (put_id(skb, p) ||
	    put_u64(skb, PMM_A_TIME, ktime_get_boottime_ns()))
		goto out_free_skb;
	for (i = 0; i < n; i++) {
		nest = nla_nest_start(skb, PMM_A_SITE);
		if (!nest)
			goto out_free_skb;
		if (nla_put_u32(skb, PMM_A_SITE_ID, top[i].id) ||
		    put_u64(skb, PMM_A_LIVE_BYTES, top[i].bytes) ||
		    put_u64(skb, PMM_A_LIVE_BLOCKS, top[i].blocks)) {
			nla_nest_cancel(skb, nest);
			goto out_free_skb;
		}
		nla_nest_end(skb, nest);
	}
	pmm_genl_send(skb, hdr);
	kfree(top);
	return;

out_free_skb:
	nlmsg_free(skb);
out_free_top:
	kfree(top);
}

/* The requester's socket's opener, for access checks; NULL for none. */
static const struct file *requester_file(struct netlink_callback *cb)
{
	struct sock *sk = NETLINK_CB(cb->skb).sk;

	return sk && sk->sk_socket ? sk->sk_socket->file : NULL;
}

static bool dump_may_access(struct pmm_proc *p, const struct file *file)
{
	return file ? pmm_may_access(p, file) :
		      pmm_cred_may_read(p, current_cred());
}

/*
 * cb->args[0]: the start order id of the next process to dump. Runs in the
 * context of the process reading the socket: its pid namespace numbers.
 */
static int pmm_genl_dump_pids(struct sk_buff *skb, struct netlink_callback *cb)
{
	struct pid_namespace *ns = task_active_pid_ns(current);
	const struct file *file = requester_file(cb);
	struct pmm_pid_info info;
	char comm[TASK_COMM_LEN];
	struct pmm_proc **all, *p;
	u32 n, i;
	void *hdr;

	all = pmm_get_all(cb->args[0], &n);
	for (i = 0; i < n; i++) {
		p = all[i];
		if (!pid_nr_ns(p->pid, ns) || !dump_may_access(p, file))
			continue;
		pmm_proc_lock_read(p);
		pmm_fill_pid_info(p, &info, ns);
		memcpy(comm, p->comm, sizeof(comm));
		pmm_proc_unlock_read(p);
		hdr = genlmsg_put(skb, NETLINK_CB(cb->skb).portid,
				  cb->nlh->nlmsg_seq, &pmm_genl_family,
				  NLM_F_MULTI, PMM_CMD_GET_PIDS);
		if (!hdr)
			break;
		if (nla_put_u32(skb, PMM_A_PID, info.pid) ||
		    nla_put_u32(skb, PMM_A_PPID, info.ppid) ||
		    nla_put_string(skb, PMM_A_COMM, comm) ||
		    nla_put_u32(skb, PMM_A_STATE, info.state) ||
		    put_u64(skb, PMM_A_START_TIME, info.start_time_ns) ||
		    put_u64(skb, PMM_A_LIVE_BYTES, info.live_bytes) ||
		    put_u64(skb, PMM_A_LIVE_BLOCKS, info.live_blocks) ||
		    put_u64(skb, PMM_A_DROPPED, info.dropped_records)) {
			genlmsg_cancel(skb, hdr);
			break;
		}
		genlmsg_end(skb, hdr);
		cb->args[0] = p->id + 1;
	}
	pmm_put_all(all, 0, n);
	return skb->len;
}

int pmm_genl_init(void)
{
	return genl_register_family(&pmm_genl_family);
}

void pmm_genl_exit(void)
{
	genl_unregister_family(&pmm_genl_family);
}
