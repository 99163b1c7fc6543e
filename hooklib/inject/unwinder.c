// SPDX-License-Identifier: GPL-2.0
/*
 * pmm-inject's unwinder: a stopped thread's call chain, followed through the
 * .eh_frame of its objects by libunwind's DWARF interpreter, in a child
 * process that holds nothing but a read-only descriptor of the target's
 * memory. The target wrote the tables it interprets, so the child runs as
 * nobody (when we are root), with no new privileges, not dumpable, a
 * memory limit and a system call filter that allows no open, and each
 * thread gets a time budget. A child that dies or overruns costs only the
 * exact judgement: attach_thread.c falls back to its own stack scan.
 *
 * libunwind is given accessors that read memory and registers and find
 * unwind tables where the loader mapped them (objects.c, elfmem.c): its
 * ptrace back-end would open the files the target's maps name instead.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <libunwind.h>

#include "elfmem.h"
#include "target.h"
#include "tracee.h"
#include "unwinder.h"

#define UNWIND_BUDGET_MS	2000
#define UNWINDER_MEMORY		(512UL << 20)
#define MAX_FRAMES		1024

/* libunwind's remote table search: exported, not declared in its headers */
extern int _Ux86_64_dwarf_search_unwind_table(unw_addr_space_t as, unw_word_t ip,
					      unw_dyn_info_t *di, unw_proc_info_t *pi,
					      int need_unwind_info, void *arg);

struct request {
	pid_t tid;
	struct user_regs_struct regs;
};

struct verdict {
	int safe;		/* 1 safe, 0 not, -1 cannot tell */
	int frames;
	uint64_t ip;		/* where it ended */
};

static pid_t g_child = -1;
static int g_sock = -1;

/* -- in the child ------------------------------------------------------ */

static const struct target *g_t;
static int g_mem = -1;
static struct user_regs_struct g_regs;

static int find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t *pi,
			  int need_unwind_info, void *arg)
{
	int i;

	for (i = 0; i < g_t->n_objs; i++) {
		const struct object *o = &g_t->objs[i];
		unw_dyn_info_t di;

		if (!o->have_eh || ip < o->img.load_lo || ip >= o->img.load_hi)
			continue;
		memset(&di, 0, sizeof(di));
		di.start_ip = o->img.load_lo;
		di.end_ip = o->img.load_hi;
		di.gp = o->eh.gp;
		di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
		di.u.rti.segbase = o->eh.segbase;
		di.u.rti.table_data = o->eh.table;
		/* two 32-bit values a row, counted in words */
		di.u.rti.table_len = o->eh.fde_count * 8 / sizeof(unw_word_t);
		return _Ux86_64_dwarf_search_unwind_table(as, ip, &di, pi, need_unwind_info, arg);
	}
	return -UNW_ENOINFO;
}

/* table-format unwind info is libunwind's to free; we hand out no other */
static void put_unwind_info(unw_addr_space_t as, unw_proc_info_t *pi, void *arg)
{
}

static int no_dyn_info_list(unw_addr_space_t as, unw_word_t *addr, void *arg)
{
	return -UNW_ENOINFO;
}

static int access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val, int write,
		      void *arg)
{
	if (write || addr > (unw_word_t)INT64_MAX - sizeof(*val))
		return -UNW_EINVAL;
	return pread(g_mem, val, sizeof(*val), (off_t)addr) == sizeof(*val) ? 0 : -UNW_EINVAL;
}

static unsigned long long *reg_slot(unw_regnum_t reg)
{
	switch (reg) {
	case UNW_X86_64_RAX: return &g_regs.rax;
	case UNW_X86_64_RDX: return &g_regs.rdx;
	case UNW_X86_64_RCX: return &g_regs.rcx;
	case UNW_X86_64_RBX: return &g_regs.rbx;
	case UNW_X86_64_RSI: return &g_regs.rsi;
	case UNW_X86_64_RDI: return &g_regs.rdi;
	case UNW_X86_64_RBP: return &g_regs.rbp;
	case UNW_X86_64_RSP: return &g_regs.rsp;
	case UNW_X86_64_R8: return &g_regs.r8;
	case UNW_X86_64_R9: return &g_regs.r9;
	case UNW_X86_64_R10: return &g_regs.r10;
	case UNW_X86_64_R11: return &g_regs.r11;
	case UNW_X86_64_R12: return &g_regs.r12;
	case UNW_X86_64_R13: return &g_regs.r13;
	case UNW_X86_64_R14: return &g_regs.r14;
	case UNW_X86_64_R15: return &g_regs.r15;
	case UNW_X86_64_RIP: return &g_regs.rip;
	default: return NULL;
	}
}

static int access_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t *val, int write,
		      void *arg)
{
	unsigned long long *slot = reg_slot(reg);

	if (!slot)
		return -UNW_EBADREG;
	if (write)
		*slot = *val;
	else
		*val = *slot;
	return 0;
}

static int access_fpreg(unw_addr_space_t as, unw_regnum_t reg, unw_fpreg_t *val, int write,
			void *arg)
{
	return -UNW_EBADREG;
}

static int no_resume(unw_addr_space_t as, unw_cursor_t *c, void *arg)
{
	return -UNW_EINVAL;
}

static int no_proc_name(unw_addr_space_t as, unw_word_t addr, char *buf, size_t len,
			unw_word_t *off, void *arg)
{
	return -UNW_ENOINFO;
}

static unw_accessors_t g_accessors = {
	.find_proc_info = find_proc_info,
	.put_unwind_info = put_unwind_info,
	.get_dyn_info_list_addr = no_dyn_info_list,
	.access_mem = access_mem,
	.access_reg = access_reg,
	.access_fpreg = access_fpreg,
	.resume = no_resume,
	.get_proc_name = no_proc_name,
};

static struct verdict judge(unw_addr_space_t as)
{
	struct verdict v = { -1, 0, 0 };
	unw_cursor_t c;
	unw_word_t ip;
	int step;

	if (unw_init_remote(&c, as, NULL))
		return v;
	for (v.frames = 0; v.frames < MAX_FRAMES; v.frames++) {
		if (unw_get_reg(&c, UNW_REG_IP, &ip) < 0)
			break;
		v.ip = ip;
		/* a caller's ip is its return address: the call is before */
		if (in_ranges(g_t->deny, g_t->n_deny, v.frames && ip ? ip - 1 : ip) ||
		    unw_is_signal_frame(&c) > 0) {
			v.safe = 0;
			break;
		}
		step = unw_step(&c);
		if (step <= 0) {
			v.safe = step == 0 ? 1 : -1;
			break;
		}
	}
	return v;
}

/* Allowed: what libunwind and malloc need; no open, no exec, no signals sent. */
static int confine(void)
{
	static const int allowed[] = {
		SYS_read, SYS_write, SYS_pread64, SYS_recvfrom, SYS_sendto, SYS_recvmsg,
		SYS_sendmsg, SYS_mmap, SYS_munmap, SYS_mremap, SYS_mprotect, SYS_brk,
		SYS_madvise, SYS_rt_sigprocmask, SYS_rt_sigreturn, SYS_futex, SYS_getrandom,
		SYS_clock_gettime, SYS_gettid, SYS_getpid, SYS_exit, SYS_exit_group,
	};
	return allow_only_syscalls(allowed, sizeof(allowed) / sizeof(allowed[0]));
}

static int drop_privileges(void)
{
	struct rlimit mem = { UNWINDER_MEMORY, UNWINDER_MEMORY }, none = { 0, 0 };

	if (geteuid() == 0 &&
	    (setgroups(0, NULL) || setresgid(65534, 65534, 65534) ||
	     setresuid(65534, 65534, 65534)))
		return -1;
	/* not dumpable: no other process of nobody's may ptrace us and use g_mem */
	if (prctl(PR_SET_DUMPABLE, 0) || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
	    setrlimit(RLIMIT_AS, &mem) || setrlimit(RLIMIT_NPROC, &none) ||
	    setrlimit(RLIMIT_FSIZE, &none))
		return -1;
	return 0;
}

static __attribute__((noreturn)) void serve(int sock)
{
	unw_addr_space_t as = unw_create_addr_space(&g_accessors, 0);
	struct request req;
	struct verdict v;

	unw_cursor_t c;

	if (!as)
		_exit(1);
	unw_set_caching_policy(as, UNW_CACHE_GLOBAL);
	/* libunwind sets itself up at its first cursor (a pipe, mincore):
	 * before the filter that refuses them */
	unw_init_remote(&c, as, NULL);
	if (drop_privileges() || confine())
		_exit(1);
	while (recv(sock, &req, sizeof(req), 0) == sizeof(req)) {
		g_regs = req.regs;
		v = judge(as);
		if (send(sock, &v, sizeof(v), MSG_NOSIGNAL) != sizeof(v))
			break;
	}
	_exit(0);
}

/* -- in pmm-inject ----------------------------------------------------- */

void unwinder_start(const struct target *t)
{
	char path[64];
	int sv[2], mem, fd;

	snprintf(path, sizeof(path), "/proc/%d/mem", t->pid);
	mem = open(path, O_RDONLY | O_CLOEXEC);
	if (mem < 0)
		return;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
		close(mem);
		return;
	}
	fflush(NULL);
	g_child = fork();
	if (g_child == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		/* nothing of ours but the memory and the socket */
		for (fd = 0; fd < 1024; fd++)
			if (fd != mem && fd != sv[1])
				close(fd);
		g_t = t;
		g_mem = mem;
		serve(sv[1]);
	}
	close(mem);
	close(sv[1]);
	if (g_child < 0)
		close(sv[0]);
	else
		g_sock = sv[0];
}

static void unwinder_stop(void)
{
	if (g_child > 0) {
		kill(g_child, SIGKILL);
		waitpid(g_child, NULL, 0);
	}
	if (g_sock >= 0)
		close(g_sock);
	g_child = -1;
	g_sock = -1;
}

int unwound_safe(pid_t tid, const struct user_regs_struct *r)
{
	struct request req = { tid, *r };
	struct pollfd p;
	struct verdict v;

	if (g_sock < 0)
		return -1;
	p.fd = g_sock;
	p.events = POLLIN;
	if (send(g_sock, &req, sizeof(req), MSG_NOSIGNAL) != sizeof(req) ||
	    poll(&p, 1, UNWIND_BUDGET_MS) != 1 ||
	    recv(g_sock, &v, sizeof(v), 0) != sizeof(v) || v.safe < -1 || v.safe > 1) {
		if (getenv("PMM_INJECT_DEBUG"))
			fprintf(stderr, "thread %d: the unwinder failed or overran its %d ms: "
				"stopped\n", tid, UNWIND_BUDGET_MS);
		unwinder_stop();
		return -1;
	}
	if (v.safe >= 0 && getenv("PMM_INJECT_DEBUG"))
		fprintf(stderr, "thread %d: unwound, %s at frame %d (%#llx)\n", tid,
			v.safe ? "safe" : "unsafe", v.frames, (unsigned long long)v.ip);
	return v.safe;
}
