// SPDX-License-Identifier: GPL-2.0
/*
 * pmm-scan's snapshot: every thread of the target seized and interrupted
 * (the task list read again until no new thread appears), their
 * registers copied (general and extended: a pointer may sit in an xmm
 * register), then one of them made to execute a raw clone system call at
 * a syscall instruction of its code: no libc fork, so no atfork handler,
 * no allocator lock, nothing of the program runs. The copy is the child
 * of the target's parent (CLONE_PARENT: the target never sees it exit and
 * its waits cannot reap it), shares the descriptor table instead of
 * taking a reference to each file (CLONE_FILES: a socket the target
 * closes is closed), and is reported to us by PTRACE_O_TRACEFORK, stopped
 * before its first instruction: it never runs, its memory is the snapshot,
 * and PTRACE_O_EXITKILL kills it if we die. The thread's registers and
 * signal mask are put back, a system call the stop interrupted restarts
 * (tracee.c's restart_eintr too), and every thread is let go.
 *
 * The thread that clones blocks every signal meanwhile, so that none is
 * delivered while its registers are ours; they wait in the kernel.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../inject/tracee.h"
#include "exit_codes.h"
#include "snapshot.h"
#include "xalloc.h"

#define STOP_TIMEOUT_MS	2000		/* a thread in D state: give up */

#define XSTATE_MAX	16384

#ifndef CLONE_PARENT
#define CLONE_PARENT	0x00008000
#endif
#ifndef CLONE_FILES
#define CLONE_FILES	0x00000400
#endif

static int have(const struct snapshot *s, pid_t tid)
{
	int i;

	for (i = 0; i < s->n; i++)
		if (s->t[i].tid == tid)
			return 1;
	return 0;
}

/* Every thread let go, its interrupted call restarted; the copy killed if
 * it is not to be kept. */
static void release_all(struct snapshot *s)
{
	int i;

	for (i = 0; i < s->n; i++) {
		struct thread_regs *t = &s->t[i];
		struct user_regs_struct r = t->regs;

		if (t->released_us)
			continue;
		restart_eintr(s->pid, t->tid, &r);
		if (memcmp(&r, &t->regs, sizeof(r)))
			ptrace(PTRACE_SETREGS, t->tid, 0, &r);
		ptrace(PTRACE_DETACH, t->tid, 0, 0);
		t->released_us = now_us();
	}
}

static void kill_child(struct snapshot *s)
{
	if (s->child > 0) {
		kill(s->child, SIGKILL);
		waitpid(s->child, NULL, __WALL);
		s->child = 0;
	}
}

__attribute__((noreturn, format(printf, 3, 4)))
static void fail(struct snapshot *s, int code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	release_all(s);
	kill_child(s);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	die(code, "%s", msg);
}

/* Waits for tid's interrupt stop, passing on signals that come first.
 * 0, -1 gone, -2 too late. */
static int await_stop(pid_t tid, uint64_t deadline_ms)
{
	for (;;) {
		int st = wait_stop(tid, deadline_ms);

		if (st < 0)
			return st;
		if (WIFSTOPPED(st) && st >> 16 == PTRACE_EVENT_STOP)
			return 0;
		/* a signal on its way: delivered, the interrupt stop follows */
		if (WIFSTOPPED(st) && ptrace(PTRACE_CONT, tid, 0, WSTOPSIG(st)))
			return -1;
	}
}

/* Seizes and interrupts every thread of s->pid, until a pass finds none new. */
static void stop_all(struct snapshot *s)
{
	pid_t *tids = xcalloc(MAX_THREADS, sizeof(*tids));
	uint64_t deadline = now_ms() + STOP_TIMEOUT_MS;
	int fresh, i, n, leader_gone = 0;
	char state[16];

	/* a main thread that called pthread_exit stays a zombie while the others
	 * run: it never stops, and there is nothing of it to copy */
	if (status_field(s->pid, "State", state, sizeof(state)) && state[0] == 'Z')
		leader_gone = 1;

	do {
		int first = s->n;

		n = list_tids(s->pid, tids, MAX_THREADS);
		if (n <= 0)
			fail(s, EXIT_GONE, "process %d exited", s->pid);
		fresh = 0;
		for (i = 0; i < n; i++) {
			struct thread_regs *t;

			if (have(s, tids[i]) || (leader_gone && tids[i] == s->pid))
				continue;
			if (ptrace(PTRACE_SEIZE, tids[i], 0, 0)) {
				int err = errno;

				if (err == ESRCH)
					continue;	/* exited meanwhile */
				release_all(s);
				if (err == EPERM)
					perm_denied(s->pid, err);
				die(EXIT_FAILED, "ptrace(PTRACE_SEIZE) of thread %d: %s", tids[i],
				    strerror(err));
			}
			s->t = xrealloc(s->t, (size_t)s->n + 1, sizeof(*s->t));
			t = &s->t[s->n++];
			memset(t, 0, sizeof(*t));
			t->tid = tids[i];
			t->stopped_us = now_us();
			ptrace(PTRACE_INTERRUPT, t->tid, 0, 0);
			fresh++;
		}
		for (i = first; i < s->n; i++) {
			int r = await_stop(s->t[i].tid, deadline);

			if (r == -2)
				fail(s, EXIT_NOT_STOPPED, "thread %d of process %d did not stop "
				     "within %d ms (uninterruptible sleep?): nothing was copied",
				     s->t[i].tid, s->pid, STOP_TIMEOUT_MS);
			if (r == -1) {
				/* gone: it needs no release */
				s->t[i] = s->t[--s->n];
				i--;
			}
		}
	} while (fresh);
	free(tids);
	if (!s->n)
		die(EXIT_GONE, "process %d exited", s->pid);
}

static void copy_registers(struct snapshot *s)
{
	int i;

	for (i = 0; i < s->n; i++) {
		struct thread_regs *t = &s->t[i];
		struct iovec iov;

		if (ptrace(PTRACE_GETREGS, t->tid, 0, &t->regs))
			fail(s, EXIT_GONE, "process %d exited during the stop", s->pid);
		t->xstate = xcalloc(1, XSTATE_MAX);
		iov.iov_base = t->xstate;
		iov.iov_len = XSTATE_MAX;
		t->xlen = ptrace(PTRACE_GETREGSET, t->tid, NT_X86_XSTATE, &iov) ? 0 : iov.iov_len;
	}
}

/* The clone, from thread t: the copy's pid, or -errno. */
static long clone_from(struct snapshot *s, struct thread_regs *t, uint64_t insn)
{
	uint64_t all = ~0ULL, mask = 0;
	struct user_regs_struct r = t->regs;
	uint64_t deadline = now_ms() + 60000;
	unsigned long child = 0;
	long ret;
	int st;

	if (ptrace(PTRACE_GETSIGMASK, t->tid, sizeof(mask), &mask) ||
	    ptrace(PTRACE_SETSIGMASK, t->tid, sizeof(all), &all) ||
	    ptrace(PTRACE_SETOPTIONS, t->tid, 0, PTRACE_O_TRACEFORK))
		return -ESRCH;
	r.rip = insn;
	r.rax = SYS_clone;
	r.rdi = CLONE_PARENT | CLONE_FILES | SIGCHLD;
	r.rsi = 0;		/* the same stack pointer: a copy of the stack */
	r.rdx = 0;
	r.r10 = 0;
	r.r8 = 0;
	r.orig_rax = (unsigned long long)-1;	/* no system call to restart */
	if (ptrace(PTRACE_SETREGS, t->tid, 0, &r) || ptrace(PTRACE_SINGLESTEP, t->tid, 0, 0))
		return -ESRCH;
	st = wait_stop(t->tid, deadline);
	if (st >= 0 && st >> 8 == (SIGTRAP | (PTRACE_EVENT_FORK << 8))) {
		ptrace(PTRACE_GETEVENTMSG, t->tid, 0, &child);
		/* the rest of the system call, to the trap after it */
		if (ptrace(PTRACE_SINGLESTEP, t->tid, 0, 0) == 0)
			st = wait_stop(t->tid, deadline);
	}
	if (st < 0)
		ret = -ESRCH;
	else if (ptrace(PTRACE_GETREGS, t->tid, 0, &r))
		ret = -ESRCH;
	else
		ret = child ? (long)child : (long)r.rax < 0 ? (long)r.rax : -EIO;
	if (st >= 0 && WIFSTOPPED(st) && WSTOPSIG(st) != SIGTRAP)
		ret = ret > 0 ? ret : -EPERM;	/* a signal instead (seccomp's SIGSYS) */
	/* its own registers, mask and options back */
	r = t->regs;
	restart_eintr(s->pid, t->tid, &r);
	if (ptrace(PTRACE_SETREGS, t->tid, 0, &r) ||
	    ptrace(PTRACE_SETSIGMASK, t->tid, sizeof(mask), &mask) ||
	    ptrace(PTRACE_SETOPTIONS, t->tid, 0, 0))
		ret = ret > 0 ? ret : -ESRCH;
	ptrace(PTRACE_DETACH, t->tid, 0, 0);
	t->released_us = now_us();
	return ret;
}

void snapshot_take(struct snapshot *s, uint64_t syscall_insn)
{
	sigset_t block, old;
	uint64_t t0, t_all;
	long child;
	int i, st;

	/* our death by these would leave a thread with our registers */
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGHUP);
	sigaddset(&block, SIGQUIT);
	sigprocmask(SIG_BLOCK, &block, &old);
	t0 = now_us();
	stop_all(s);
	copy_registers(s);
	t_all = now_us();
	s->stop_all_us = t_all - t0;
	s->t1_ns = now_ns();
	/* the leader if it is there: its stack is the biggest, its registers the usual */
	for (i = 0; i < s->n && s->t[i].tid != s->pid; i++)
		;
	if (i == s->n)
		i = 0;
	child = clone_from(s, &s->t[i], syscall_insn);
	s->fork_us = now_us() - t_all;
	if (child > 0) {
		s->child = (pid_t)child;
		/* it starts stopped; past this, our death kills it */
		if (waitpid(s->child, &st, __WALL) != s->child || !WIFSTOPPED(st) ||
		    ptrace(PTRACE_SETOPTIONS, s->child, 0, PTRACE_O_EXITKILL))
			fail(s, EXIT_FAILED, "the copy of process %d did not stop", s->pid);
	}
	release_all(s);
	sigprocmask(SIG_SETMASK, &old, NULL);
	for (i = 0; i < s->n; i++) {
		uint64_t d = s->t[i].released_us - s->t[i].stopped_us;

		if (d > s->longest_stop_us)
			s->longest_stop_us = d;
	}
	if (child == -ENOMEM || child == -EAGAIN)
		die(EXIT_NO_FORK, "process %d could not be copied: clone failed (%s): no room "
		    "for another process (memory overcommit, RLIMIT_NPROC, pids.max)", s->pid,
		    strerror((int)-child));
	if (child == -ESRCH)
		die(EXIT_GONE, "process %d exited during the stop", s->pid);
	if (child < 0)
		die(EXIT_NO_FORK, "process %d could not be copied: clone failed (%s)", s->pid,
		    strerror((int)-child));
}

void snapshot_drop(struct snapshot *s)
{
	kill_child(s);
}
