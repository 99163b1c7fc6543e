/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The kernel APIs that changed between the kernels pmm builds on (5.10 to
 * the newest), each behind one wrapper. Which variant a kernel has is found
 * at build time: Kbuild compiles each probes/<NAME>.c against the target's
 * headers first and writes pmm_probes.h with HAVE_<NAME> for those that
 * compiled (distributions backport, so version numbers would lie). The
 * version is checked only for the floor.
 *
 * A kernel with neither variant of an API stops the build before the
 * module's files are compiled, with one "pmm: ..." line naming the API.
 */
#ifndef PMM_COMPAT_H
#define PMM_COMPAT_H

#include <linux/version.h>
#include <linux/fs.h>
#include <linux/memcontrol.h>
#include <linux/mm.h>
#include <linux/mount.h>
#include <linux/overflow.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/sched/coredump.h>
#include <linux/sched/mm.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/string_helpers.h>
#include <linux/timer.h>
#include <net/genetlink.h>
#include <net/sock.h>
#include "pmm_probes.h"

#if LINUX_VERSION_CODE < KERNEL_VERSION(5, 10, 0)
#error "pmm: needs Linux 5.10 or newer"
#endif

#ifdef HAVE_TASK_EXEC_STATE
#include <linux/sched/exec_state.h>
#endif

/* What has no variant in this file for the kernel built against. */
#if !defined(HAVE_GET_DUMPABLE) && !defined(HAVE_TASK_EXEC_STATE)
#error "pmm: kernel has no get_dumpable() nor task_struct.exec_state (dumpable state)"
#endif
#if !defined(HAVE_MM_USER_NS) && !defined(HAVE_TASK_EXEC_STATE)
#error "pmm: kernel has no mm_struct.user_ns nor task_struct.exec_state (ptrace's user_ns)"
#endif
#if !defined(HAVE_GENL_MCAST_CAP_NET_ADMIN) && !defined(HAVE_NETLINK_BROADCAST_FILTERED)
#error "pmm: kernel has no GENL_MCAST_CAP_NET_ADMIN nor netlink_broadcast_filtered()"
#endif

/*
 * Charges the caller's __GFP_ACCOUNT allocations to memcg; returns the
 * previous one. set_active_memcg's per-cpu variable for interrupts was not
 * exported before 5.11: the callers run in process context, where it is
 * current's field.
 */
static inline struct mem_cgroup *pmm_set_active_memcg(struct mem_cgroup *memcg)
{
#if defined(HAVE_EXPORT_INT_ACTIVE_MEMCG) || !defined(CONFIG_MEMCG)
	return set_active_memcg(memcg);
#else
	struct mem_cgroup *old = current->active_memcg;

	current->active_memcg = memcg;
	return old;
#endif
}

/*
 * The usage in bytes of mm's memory cgroup (memory.current in v2,
 * memory.usage_in_bytes in v1); false when it is in none but the root
 * (whose counter v2 does not keep) or memcg is off.
 */
static inline bool pmm_memcg_usage(struct mm_struct *mm, u64 *bytes)
{
#ifdef CONFIG_MEMCG
	struct mem_cgroup *memcg = get_mem_cgroup_from_mm(mm);
	bool ok = memcg && memcg->memory.parent;

	if (ok)
		*bytes = (u64)page_counter_read(&memcg->memory) << PAGE_SHIFT;
	mem_cgroup_put(memcg);
	return ok;
#else
	return false;
#endif
}

/*
 * The path f was opened by, as /proc/PID/maps shows it: since 6.8 a mapped
 * overlayfs file is its backing file, whose f_path is in the layer's
 * private mount, and file_user_path() is the overlay's.
 */
static inline const struct path *pmm_file_user_path(struct file *f)
{
#ifdef HAVE_FILE_USER_PATH
	return file_user_path(f);
#else
	return &f->f_path;
#endif
}

/* Opens name under mnt's root (5.15: file_open_root_mnt). */
static inline struct file *pmm_file_open_root_mnt(struct vfsmount *mnt,
						  const char *name, int flags,
						  umode_t mode)
{
#ifdef HAVE_FILE_OPEN_ROOT_MNT
	return file_open_root_mnt(mnt, name, flags, mode);
#else
	return file_open_root(mnt->mnt_root, mnt, name, flags, mode);
#endif
}

/* The size kmalloc(size) really takes (6.1: kmalloc_size_roundup). */
static inline size_t pmm_kmalloc_size_roundup(size_t size)
{
#ifdef HAVE_KMALLOC_SIZE_ROUNDUP
	return kmalloc_size_roundup(size);
#else
	unsigned int i;

	if (size > KMALLOC_MAX_CACHE_SIZE)
		return PAGE_SIZE << get_order(size);
	i = kmalloc_index(size);
	if (i == 1)
		return 96;
	if (i == 2)
		return 192;
	return (size_t)1 << i;
#endif
}

/* krealloc of n elements of size, NULL on overflow (5.13: krealloc_array). */
static inline void *__must_check pmm_krealloc_array(void *p, size_t n,
						    size_t size, gfp_t flags)
{
#ifdef HAVE_KREALLOC_ARRAY
	return krealloc_array(p, n, size, flags);
#else
	size_t bytes;

	if (unlikely(check_mul_overflow(n, size, &bytes)))
		return NULL;
	return krealloc(p, bytes, flags);
#endif
}

/*
 * Stops a timer for good (6.2, backported to 6.1: timer_shutdown_sync). Where
 * it is missing, del_timer_sync: nothing re-arms the callers' timers once
 * they stop it.
 */
static inline void pmm_timer_shutdown_sync(struct timer_list *timer)
{
#ifdef HAVE_TIMER_SHUTDOWN_SYNC
	timer_shutdown_sync(timer);
#else
	del_timer_sync(timer);
#endif
}

/* The VMA that contains addr, or NULL (5.14: vma_lookup). */
static inline struct vm_area_struct *pmm_vma_lookup(struct mm_struct *mm,
						    unsigned long addr)
{
#ifdef HAVE_VMA_LOOKUP
	return vma_lookup(mm, addr);
#else
	struct vm_area_struct *vma = find_vma(mm, addr);

	return vma && vma->vm_start <= addr ? vma : NULL;
#endif
}

/*
 * Sets and clears flags of a VMA being mapped (6.3: vm_flags is read-only,
 * vm_flags_set/vm_flags_clear; 6.19: a bitmap behind the same calls).
 */
static inline void pmm_vm_flags_mod(struct vm_area_struct *vma,
				    vm_flags_t set, vm_flags_t clear)
{
#ifdef HAVE_VM_FLAGS_SET
	vm_flags_clear(vma, clear);
	vm_flags_set(vma, set);
#else
	vma->vm_flags = (vma->vm_flags & ~clear) | set;
#endif
}

/*
 * s with non-ASCII and non-printable bytes and backslashes in octal (5.13:
 * seq_escape_str with ESCAPE_NAP and ESCAPE_APPEND).
 */
static inline void pmm_seq_escape_nap(struct seq_file *m, const char *s)
{
#ifdef HAVE_SEQ_ESCAPE_STR_NAP
	seq_escape_str(m, s, ESCAPE_OCTAL | ESCAPE_NAP | ESCAPE_APPEND, "\\");
#else
	unsigned char c;

	for (; *s; s++) {
		c = *s;
		if (c >= 0x20 && c < 0x7f && c != '\\')
			seq_putc(m, c);
		else
			seq_printf(m, "\\%03o", c);
	}
#endif
}

/*
 * Is t's process dumpable by its owner (SUID_DUMP_USER)? mm is t's, held
 * (task_lock) or t is current. 7.2 keeps it in the task's exec_state.
 */
static inline bool pmm_task_dumpable(struct task_struct *t,
				     struct mm_struct *mm)
{
#if defined(HAVE_GET_DUMPABLE)
	return get_dumpable(mm) == SUID_DUMP_USER;
#elif defined(HAVE_TASK_EXEC_STATE)
	bool ok;

	rcu_read_lock();
	ok = rcu_dereference(t->exec_state)->dumpable == TASK_DUMPABLE_OWNER;
	rcu_read_unlock();
	return ok;
#endif
}

/*
 * The user namespace current's mm was made in (ptrace's check for a
 * non-dumpable process). 7.2 keeps it in the task's exec_state, which only
 * current's own exec replaces.
 */
static inline struct user_namespace *pmm_current_mm_user_ns(void)
{
#if defined(HAVE_MM_USER_NS)
	return current->mm->user_ns;
#elif defined(HAVE_TASK_EXEC_STATE)
	return rcu_dereference_protected(current->exec_state, true)->user_ns;
#endif
}

/*
 * The events group is for CAP_NET_ADMIN holders (6.6, backported to 6.1:
 * GENL_MCAST_CAP_NET_ADMIN refuses the join). Where the kernel cannot refuse
 * a join, pmm_genl_multicast delivers only to sockets whose opener held it.
 */
#ifdef HAVE_GENL_MCAST_CAP_NET_ADMIN
#define PMM_GENL_MCGRP_FLAGS GENL_MCAST_CAP_NET_ADMIN
#else
#define PMM_GENL_MCGRP_FLAGS 0
/* Non-zero: not delivered to dsk. */
static inline int pmm_genl_deny(struct sock *dsk, struct sk_buff *skb,
				void *data)
{
	bool ok;

	/* sock_orphan clears sk_socket under this lock before the file goes */
	read_lock_bh(&dsk->sk_callback_lock);
	ok = dsk->sk_socket && dsk->sk_socket->file &&
	     file_ns_capable(dsk->sk_socket->file, &init_user_ns,
			     CAP_NET_ADMIN);
	read_unlock_bh(&dsk->sk_callback_lock);
	return !ok;
}
#endif

static inline void pmm_genl_multicast(const struct genl_family *family,
				      struct sk_buff *skb, unsigned int group)
{
#ifdef HAVE_GENL_MCAST_CAP_NET_ADMIN
	genlmsg_multicast(family, skb, 0, group, GFP_KERNEL);
#else
	group += family->mcgrp_offset;
	NETLINK_CB(skb).dst_group = group;
	netlink_broadcast_filtered(init_net.genl_sock, skb, 0, group,
				   GFP_KERNEL, pmm_genl_deny, NULL);
#endif
}

#endif /* PMM_COMPAT_H */
