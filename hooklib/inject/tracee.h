/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A process and its threads under ptrace, as pmm-inject and pmm-scan (../scan/)
 * both handle them: the process pinned by a pidfd, refusals that say why,
 * its threads listed, one stopped (PTRACE_SEIZE, PTRACE_INTERRUPT), its
 * memory read and written, and a system call that a stop interrupted
 * restarted as the kernel restarts it. Both programs build tracee.c.
 */
#ifndef PMM_TRACEE_H
#define PMM_TRACEE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open	434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd	438
#endif

/* Who speaks: each program's name for messages, the verb a refusal
 * advises ("attach", "scan"), its exit codes for tracee.c's refusals. */
struct tracee_program {
	const char *name;
	const char *verb;
	int no_process, permission, gone;
};
/* Set by each program's main before anything here can refuse. */
void tracee_program_set(const struct tracee_program *p);
/* The program's name, for its own messages. */
const char *tracee_program_name(void);
/* Where die() says its message: "error MESSAGE" on fd, or with fd -1 (the
 * default) "NAME: MESSAGE" on stderr. */
void die_to_status_fd(int fd);

__attribute__((noreturn, format(printf, 2, 3))) void die(int code, const char *fmt, ...);
/* CLOCK_MONOTONIC, in ms, us or ns */
uint64_t now_ms(void);
uint64_t now_us(void);
uint64_t now_ns(void);
/* A line of /proc/PID/status: its value after "Key:", or NULL. */
char *status_field(pid_t pid, const char *key, char *buf, size_t size);
/* ptrace of pid refused with err: dies saying why (Yama's scope, or the user). */
__attribute__((noreturn)) void perm_denied(pid_t pid, int err);
/* A pidfd of pid (-1 before Linux 5.3), or dies: no process, a thread, another
 * pid namespace, not permitted. */
int open_target(pid_t pid);
/* pid's threads, those asleep in a system call first; -1 if it is gone. */
int list_threads(pid_t pid, pid_t *tids, int max);
/* pid's threads as /proc lists them, nothing else read (a stop is running). */
int list_tids(pid_t pid, pid_t *tids, int max);

ssize_t peek(pid_t tid, uintptr_t addr, void *buf, size_t len);
int poke(pid_t tid, uintptr_t addr, const void *buf, size_t len);
/* Waits for tid's next stop: its status, -1 if it exited, -2 past deadline_ms. */
int wait_stop(pid_t tid, uint64_t deadline_ms);
/* Seizes and stops tid; 0, or -errno of the seize. */
int stop_thread(pid_t tid);
/* A signal is pending for the thread that it does not block. */
int signal_pending(pid_t pid, pid_t tid);
/*
 * The stop made a system call fail with EINTR that the kernel would have
 * restarted after a signal (epoll_wait and the like): r is set to run it
 * again, unless a signal is pending or rip does not follow a syscall.
 */
void restart_eintr(pid_t pid, pid_t tid, struct user_regs_struct *r);
/* A seccomp filter that kills the process at any system call not in nrs
 * (n of them, at most 64), or at an x86_64 one of another ABI; prctl's result. */
int allow_only_syscalls(const int *nrs, size_t n);

#endif /* PMM_TRACEE_H */
