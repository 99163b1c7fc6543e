// SPDX-License-Identifier: GPL-2.0
/*
 * A process and its threads under ptrace (tracee.h), shared by pmm-inject
 * and pmm-scan.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tracee.h"

static struct tracee_program g_program;
static int g_status_fd = -1;

void tracee_program_set(const struct tracee_program *p)
{
	g_program = *p;
}

const char *tracee_program_name(void)
{
	return g_program.name;
}

void die_to_status_fd(int fd)
{
	g_status_fd = fd;
}

void die(int code, const char *fmt, ...)
{
	char msg[PATH_MAX + 512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (g_status_fd >= 0)
		dprintf(g_status_fd, "error %s\n", msg);
	else
		fprintf(stderr, "%s: %s\n", g_program.name, msg);
	exit(code);
}

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

uint64_t now_ms(void)
{
	return now_us() / 1000;
}

/* A line of /proc/PID/status: its value after "Key:", or NULL. */
char *status_field(pid_t pid, const char *key, char *buf, size_t size)
{
	char path[64], line[512];
	size_t n = strlen(key);
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "re");
	if (!f)
		return NULL;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, key, n) && line[n] == ':') {
			char *v = line + n + 1;

			while (*v == ' ' || *v == '\t')
				v++;
			v[strcspn(v, "\n")] = '\0';
			snprintf(buf, size, "%s", v);
			fclose(f);
			return buf;
		}
	}
	fclose(f);
	return NULL;
}

void perm_denied(pid_t pid, int err)
{
	char scope[16] = "";
	FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");

	if (f) {
		if (!fgets(scope, sizeof(scope), f))
			scope[0] = '\0';
		fclose(f);
		scope[strcspn(scope, "\n")] = '\0';
	}
	if (scope[0] && strcmp(scope, "0"))
		die(g_program.permission, "ptrace of process %d refused (%s; "
		    "kernel.yama.ptrace_scope is %s: %s)", pid, strerror(err), scope,
		    !strcmp(scope, "3") ? "no process may be attached to" :
		    !strcmp(scope, "2") ? "only CAP_SYS_PTRACE may attach" :
		    "only a parent or CAP_SYS_PTRACE may attach");
	die(g_program.permission, "ptrace of process %d refused (%s): %s as its user or root",
	    pid, strerror(err), g_program.verb);
}

/*
 * A descriptor of the process (pidfd): signals and descriptors taken through
 * it reach this process, not one that reused its pid. Refusals say what the
 * kernel said.
 */
int open_target(pid_t pid)
{
	char path[64], buf[64];
	struct stat st;
	int err, fd;

	fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd >= 0)
		return fd;
	err = errno;
	if (err == ENOSYS) {
		/* before 5.3: no pidfd, and no memfd copy (pidfd_getfd) */
		if (kill(pid, 0) && errno == ESRCH)
			die(g_program.no_process, "no process %d", pid);
		return -1;
	}
	if (err == EINVAL && status_field(pid, "Tgid", buf, sizeof(buf)))
		die(g_program.no_process, "%d is a thread of process %s, not a process: %s %s",
		    pid, buf, g_program.verb, buf);
	snprintf(path, sizeof(path), "/proc/%d", pid);
	if (err == ESRCH && !stat(path, &st))
		die(g_program.no_process, "process %d is in /proc but not in this pid namespace "
		    "(/proc is another namespace's): %s it from the process's pid "
		    "namespace", pid, g_program.verb);
	if (err == ESRCH)
		die(g_program.no_process, "no process %d", pid);
	die(g_program.permission, "process %d: %s", pid, strerror(err));
}

int list_tids(pid_t pid, pid_t *tids, int max)
{
	char path[64];
	struct dirent *d;
	int n = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	dir = opendir(path);
	if (!dir)
		return -1;
	while ((d = readdir(dir)) && n < max)
		if (atoi(d->d_name) > 0)
			tids[n++] = (pid_t)atoi(d->d_name);
	closedir(dir);
	return n;
}

/* Threads sleeping in a system call first: they are the likeliest safe. */
int list_threads(pid_t pid, pid_t *tids, int max)
{
	char path[64];
	struct dirent *d;
	int n = 0, sleeping = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	dir = opendir(path);
	if (!dir)
		return -1;
	while ((d = readdir(dir)) && n < max) {
		char stat_path[96], st[512], *c;
		pid_t tid = (pid_t)atoi(d->d_name);
		FILE *f;

		if (tid <= 0)
			continue;
		tids[n] = tid;
		snprintf(stat_path, sizeof(stat_path), "/proc/%d/task/%d/stat", pid, tid);
		f = fopen(stat_path, "re");
		if (f && fgets(st, sizeof(st), f) && (c = strrchr(st, ')')) && c[2] == 'S') {
			tids[n] = tids[sleeping];
			tids[sleeping++] = tid;
		}
		if (f)
			fclose(f);
		n++;
	}
	closedir(dir);
	return n;
}

ssize_t peek(pid_t tid, uintptr_t addr, void *buf, size_t len)
{
	struct iovec local = { buf, len }, remote = { (void *)addr, len };

	return process_vm_readv(tid, &local, 1, &remote, 1, 0);
}

int poke(pid_t tid, uintptr_t addr, const void *buf, size_t len)
{
	struct iovec local = { (void *)buf, len }, remote = { (void *)addr, len };

	return process_vm_writev(tid, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}

static const long g_eintr_on_stop[] = {
	SYS_epoll_wait, SYS_epoll_pwait,
#ifdef SYS_epoll_pwait2
	SYS_epoll_pwait2,
#endif
	SYS_rt_sigtimedwait, SYS_semtimedop, SYS_io_getevents,
};

/* A signal is pending for the thread that it does not block. */
int signal_pending(pid_t pid, pid_t tid)
{
	char path[96], line[256];
	unsigned long long pnd = 0, shd = 0, blk = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, tid);
	f = fopen(path, "re");
	if (!f)
		return 1;
	while (fgets(line, sizeof(line), f)) {
		sscanf(line, "SigPnd: %llx", &pnd);
		sscanf(line, "ShdPnd: %llx", &shd);
		sscanf(line, "SigBlk: %llx", &blk);
	}
	fclose(f);
	return ((pnd | shd) & ~blk) != 0;
}

/*
 * The stop made a system call fail with EINTR that a signal alone would
 * have restarted (epoll_wait and the like fail so even without a
 * handler): set it to run again, as the kernel restarts the others. Not if
 * a signal is pending: its handler may be what the program waits for, nor
 * unless the two bytes before rip are the syscall instruction that made it.
 */
void restart_eintr(pid_t pid, pid_t tid, struct user_regs_struct *r)
{
	uint8_t insn[2];
	size_t i;

	if ((long long)r->rax != -EINTR || (long long)r->orig_rax < 0 || signal_pending(pid, tid))
		return;
	if (peek(tid, r->rip - 2, insn, sizeof(insn)) != sizeof(insn) ||
	    insn[0] != 0x0f || insn[1] != 0x05)
		return;
	for (i = 0; i < sizeof(g_eintr_on_stop) / sizeof(g_eintr_on_stop[0]); i++) {
		if ((long long)r->orig_rax == g_eintr_on_stop[i]) {
			r->rax = r->orig_rax;
			r->rip -= 2;
			return;
		}
	}
}

/* Waits for tid's next stop; its status, or -1 if it exited. */
int wait_stop(pid_t tid, uint64_t deadline_ms)
{
	int status;

	for (;;) {
		pid_t w = waitpid(tid, &status, __WALL | WNOHANG);

		if (w == tid) {
			if (WIFEXITED(status) || WIFSIGNALED(status))
				return -1;
			return status;
		}
		if (w < 0 && errno != EINTR)
			return -1;
		if (deadline_ms && now_ms() > deadline_ms)
			return -2;
		usleep(200);
	}
}

/* Seizes and stops tid; 0, or -errno of the seize. */
int stop_thread(pid_t tid)
{
	int status;

	if (ptrace(PTRACE_SEIZE, tid, 0, 0))
		return -errno;
	if (ptrace(PTRACE_INTERRUPT, tid, 0, 0))
		return -errno;
	for (;;) {
		status = wait_stop(tid, now_ms() + 2000);
		if (status < 0)
			return status == -2 ? -ETIMEDOUT : -ESRCH;
		if (WIFSTOPPED(status) && status >> 16 == PTRACE_EVENT_STOP)
			return 0;
		/* a signal on its way: let it go, the interrupt stop follows */
		if (WIFSTOPPED(status) && ptrace(PTRACE_CONT, tid, 0, WSTOPSIG(status)))
			return -ESRCH;
	}
}

int allow_only_syscalls(const int *nrs, size_t n)
{
	struct sock_filter f[5 + 2 * 64];
	struct sock_fprog prog = { 0, f };
	size_t i, k = 0;

	if (n > 64)
		return -1;
	f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
					      offsetof(struct seccomp_data, arch));
	f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
					      offsetof(struct seccomp_data, nr));
	for (i = 0; i < n; i++) {
		f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
						      (unsigned int)nrs[i], 0, 1);
		f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	}
	f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
	prog.len = (unsigned short)k;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}
