// SPDX-License-Identifier: GPL-2.0
/*
 * pmm: who may see what. A reader may see a monitored process when it may
 * ptrace-read it (PTRACE_MODE_READ_FSCREDS) and the process has a number in
 * the reader's pid namespace. Both the caller and whoever opened the file
 * descriptor must pass, so that neither an fd handed to a setuid program nor
 * one kept after dropping privileges shows more than its holder may see.
 *
 * The check is the kernel's own, LSMs included: ptrace_may_access() is not
 * exported, but following the magic link /proc/TID/ns/pid runs it
 * (proc_ns_get_link) with the current credentials. So we keep a private
 * proc mount, and open that link of a live thread of the process (O_PATH)
 * with the reader's credentials put in place by override_creds(). A
 * thread, not the thread-group leader: a leader that called pthread_exit()
 * is a zombie with no mm while its process runs on.
 *
 * A process that has exited has no thread to look at: it is judged by the
 * same rules on its last credentials (ptrace's uid/gid match and dumpable,
 * or CAP_SYS_PTRACE in its user namespace; the capability module's subset
 * rule). The other LSMs cannot be asked about a dead process. So is the
 * caller's own process when the credentials are not the caller's (an fd
 * another user opened): ptrace lets a process read itself whatever its
 * credentials, which must not extend to the fd's opener.
 *
 * Reading (not START, STOP or the configuration) is also open to the
 * members of the group reader_gid (a module parameter; none by default):
 * an administrator's grant, as good as CAP_SYS_PTRACE for pmm's reads, so
 * that pmd needs no capability that could write another process.
 *
 * Checks walk /proc and may sleep: run them with no pmm lock held.
 */
#include <linux/fs.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/mount.h>
#include <linux/file.h>
#include <linux/pid.h>
#include <linux/pid_namespace.h>
#include <linux/proc_fs.h>
#include <linux/capability.h>
#include <linux/slab.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include "pmm_int.h"

static struct vfsmount *pmm_proc_mnt;

static unsigned int reader_gid = (unsigned int)-1;
module_param(reader_gid, uint, 0644);
MODULE_PARM_DESC(reader_gid, "members of this group read every monitored process (default: none)");

/* cred is in the reader group (its fsgid or a supplementary group) */
static bool cred_is_reader(const struct cred *cred)
{
	kgid_t gid = make_kgid(&init_user_ns, READ_ONCE(reader_gid));
	const struct cred *old;
	bool in;

	if (!gid_valid(gid))
		return false;
	if (cred == current_cred())
		return in_group_p(gid);
	old = override_creds(cred);
	in = in_group_p(gid);
	revert_creds(old);
	return in;
}

int pmm_access_init(void)
{
	struct file_system_type *proc = get_fs_type("proc");

	if (!proc)
		return -ENODEV;
	/* proc is built in: get_fs_type took no module reference to drop */
	pmm_proc_mnt = kern_mount(proc);
	if (IS_ERR(pmm_proc_mnt))
		return PTR_ERR(pmm_proc_mnt);
	return 0;
}

void pmm_access_exit(void)
{
	kern_unmount(pmm_proc_mnt);
}

/* ptrace_may_access(task, PTRACE_MODE_READ_FSCREDS) with cred. */
static bool task_may_access(struct task_struct *task, const struct cred *cred)
{
	struct pid_namespace *ns = proc_pid_ns(pmm_proc_mnt->mnt_sb);
	const struct cred *old;
	struct file *f;
	char name[32];
	pid_t nr;

	nr = task_pid_nr_ns(task, ns);
	if (!nr)
		return false;
	snprintf(name, sizeof(name), "%d/ns/pid", nr);
	/* O_PATH: the link is followed (and checked), nothing is read */
	old = override_creds(cred);
	f = pmm_file_open_root_mnt(pmm_proc_mnt, name, O_PATH, 0);
	revert_creds(old);
	if (IS_ERR(f))
		return false;
	fput(f);
	/* the number named task, not a task that took it after task died */
	return task_pid_nr_ns(task, ns) == nr;
}

/* A live thread of the group of pid, with a reference; NULL if none. */
static struct task_struct *live_thread(struct pid *pid)
{
	struct task_struct *leader, *t, *found = NULL;

	rcu_read_lock();
	leader = pid_task(pid, PIDTYPE_TGID);
	if (leader && atomic_read(&leader->signal->live)) {
		for_each_thread(leader, t) {
			if (!(t->flags & PF_EXITING)) {
				found = get_task_struct(t);
				break;
			}
		}
	}
	rcu_read_unlock();
	return found;
}

/* CAP_SYS_PTRACE in ns, for cred. */
static bool cred_has_ptrace_cap(const struct cred *cred,
				struct user_namespace *ns)
{
	const struct cred *old = override_creds(cred);
	bool ok = ns_capable_noaudit(ns, CAP_SYS_PTRACE);

	revert_creds(old);
	return ok;
}

/*
 * __ptrace_may_access() and the capability module's
 * cap_ptrace_access_check() for cred on a process whose credentials are tc,
 * dumpable or not (non-dumpable needs CAP_SYS_PTRACE in mm_ns, its mm's
 * user namespace: the initial one once it has exited, as ptrace has it).
 */
static bool rules_may_access(const struct cred *cred, const struct cred *tc,
			     bool dumpable, struct user_namespace *mm_ns)
{
	bool ok;

	ok = (uid_eq(cred->fsuid, tc->euid) && uid_eq(cred->fsuid, tc->suid) &&
	      uid_eq(cred->fsuid, tc->uid) && gid_eq(cred->fsgid, tc->egid) &&
	      gid_eq(cred->fsgid, tc->sgid) && gid_eq(cred->fsgid, tc->gid)) ||
	     cred_has_ptrace_cap(cred, tc->user_ns);
	if (ok && !dumpable)
		ok = cred_has_ptrace_cap(cred, mm_ns);
	if (ok)
		ok = (cred->user_ns == tc->user_ns &&
		      cap_issubset(tc->cap_permitted, cred->cap_effective)) ||
		     cred_has_ptrace_cap(cred, tc->user_ns);
	return ok;
}

/* An exited process, on its last credentials. */
static bool exited_may_access(struct pmm_proc *p, const struct cred *cred)
{
	const struct cred *tc;
	bool dumpable, ok;

	pmm_proc_lock_read(p);
	tc = get_cred(p->cred);
	dumpable = p->dumpable;
	pmm_proc_unlock_read(p);
	ok = rules_may_access(cred, tc, dumpable, &init_user_ns);
	put_cred(tc);
	return ok;
}

/* The caller's own process, for credentials that are not the caller's. */
static bool self_may_access(const struct cred *cred)
{
	struct mm_struct *mm = current->mm;

	if (cred == current_cred())
		return true;	/* introspection, as ptrace allows it */
	return rules_may_access(cred, current_real_cred(),
				mm && pmm_task_dumpable(current, mm),
				mm ? pmm_current_mm_user_ns() : &init_user_ns);
}

/* May cred ptrace-read p (running or exited)? */
static bool cred_may_access(struct pmm_proc *p, const struct cred *cred)
{
	struct task_struct *t;
	bool ok;

	if (p->pid == task_tgid(current))
		return self_may_access(cred);
	t = live_thread(p->pid);
	if (!t)
		return exited_may_access(p, cred);
	ok = task_may_access(t, cred);
	put_task_struct(t);
	return ok;
}

/* May a reader with cred read p (running or exited)? */
bool pmm_cred_may_read(struct pmm_proc *p, const struct cred *cred)
{
	return cred_is_reader(cred) || cred_may_access(p, cred);
}

/*
 * Both the caller and the opener of file may read p (need: PMM_READ), or
 * ptrace it (PMM_CONTROL).
 */
static bool may_access(struct pmm_proc *p, const struct file *file, enum pmm_need need)
{
	bool (*may)(struct pmm_proc *p, const struct cred *cred) =
		need == PMM_READ ? pmm_cred_may_read : cred_may_access;

	if (!may(p, current_cred()))
		return false;
	return file->f_cred == current_cred() || may(p, file->f_cred);
}

bool pmm_may_access(struct pmm_proc *p, const struct file *file)
{
	return may_access(p, file, PMM_READ);
}

/* Both the caller and the opener of file are readers. */
static bool file_is_reader(const struct file *file)
{
	return cred_is_reader(current_cred()) &&
	       (file->f_cred == current_cred() || cred_is_reader(file->f_cred));
}

/* May the holder of file ptrace a live task that may not be monitored (START, lookups)? */
bool pmm_may_access_task(struct task_struct *task, const struct file *file)
{
	struct task_struct *t;
	bool ok;

	if (same_thread_group(task, current))
		return self_may_access(file->f_cred);
	t = live_thread(task_tgid(task));
	if (!t)
		return false;
	ok = task_may_access(t, current_cred());
	if (ok && file->f_cred != current_cred())
		ok = task_may_access(t, file->f_cred);
	put_task_struct(t);
	return ok;
}

/*
 * The number of pid in ns for a reader through file who may read its live
 * process; 0 otherwise (the last START and STOP in the configuration).
 */
pid_t pmm_visible_nr(struct pid *pid, struct pid_namespace *ns,
		     const struct file *file)
{
	struct task_struct *task;
	pid_t nr = pid_nr_ns(pid, ns);

	if (!nr)
		return 0;
	task = get_pid_task(pid, PIDTYPE_TGID);
	if (!task)
		return 0;
	if (!file_is_reader(file) && !pmm_may_access_task(task, file))
		nr = 0;
	put_task_struct(task);
	return nr;
}

/*
 * The thread group of the task numbered nr in ns (a thread's number names
 * its process, as /proc/TID does), held; NULL if none.
 */
struct pid *pmm_tgid_of(pid_t nr, struct pid_namespace *ns)
{
	struct task_struct *task;
	struct pid *tgid = NULL;

	if (nr <= 0)
		return NULL;
	rcu_read_lock();
	task = pid_task(find_pid_ns(nr, ns), PIDTYPE_PID);
	if (task)
		tgid = get_pid(task_tgid(task));
	rcu_read_unlock();
	return tgid;
}

/* -ENOENT if a process nr exists in ns (but has no entry), else -ESRCH. */
static int no_entry(pid_t nr, struct pid_namespace *ns)
{
	struct pid *pid = pmm_tgid_of(nr, ns);

	put_pid(pid);
	return pid ? -ENOENT : -ESRCH;
}

/*
 * The entry that pid number nr (0: the caller) names for the caller, to
 * read or to control (need), with a reference: the entry of the live
 * process with that number if it has one, else the newest exited entry of
 * that number that the caller may read or control (another user's is
 * skipped, as if absent). A running process the
 * caller may not read is -EPERM whether it is monitored or not, so that
 * the answer tells nothing of other users' monitoring.
 */
struct pmm_proc *pmm_get_entry(pid_t nr, const struct file *file, enum pmm_need need,
			       int *err)
{
	struct pid_namespace *ns = task_active_pid_ns(current);
	struct pmm_proc **all, *found = NULL;
	struct task_struct *task = NULL;
	bool live_ok = false;
	struct pid *live;
	u32 n, i;

	if (nr < 0) {
		*err = -EINVAL;
		return NULL;
	}
	live = nr ? pmm_tgid_of(nr, ns) : get_pid(task_tgid(current));
	if (!nr)
		nr = pid_vnr(live);
	if (live)
		task = live_thread(live);
	if (task) {
		live_ok = (need == PMM_READ && file_is_reader(file)) ||
			  pmm_may_access_task(task, file);
		put_task_struct(task);
	} else if (live) {
		/* exiting: no thread to check; its entry is judged as exited */
		put_pid(live);
		live = NULL;
	}
	all = pmm_get_all(0, &n);
	if (!all) {
		put_pid(live);
		*err = -ENOMEM;
		return NULL;
	}
	for (i = 0; live_ok && i < n && !found; i++)
		if (all[i]->pid == live)
			found = all[i];
	/* a dead process's number: its entry's pid is not the live one */
	for (i = n; !found && i-- > 0;)
		if (all[i]->pid != live && pid_nr_ns(all[i]->pid, ns) == nr &&
		    may_access(all[i], file, need))
			found = all[i];
	if (found)
		refcount_inc(&found->ref);
	else if (live && !live_ok)
		*err = -EPERM;
	else
		*err = no_entry(nr, ns);
	pmm_put_all(all, 0, n);
	put_pid(live);
	return found;
}
