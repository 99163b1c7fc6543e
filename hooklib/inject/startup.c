// SPDX-License-Identifier: GPL-2.0
/*
 * pmm-inject --exec: a program started with the hook attached, without
 * LD_PRELOAD. Its environment is left as it is, so the programs it runs
 * do not inherit the hook.
 *
 * The program is forked, seized (PTRACE_O_EXITKILL: if we die before it is
 * attached, it dies too) and let exec; at the exec stop an int3 replaces
 * the first byte of its entry point (AT_ENTRY). When it traps there, ld.so
 * has loaded and initialised every library, its one thread holds no lock
 * and is in none of them, and none of the program's own code has run: the
 * byte is put back, and attach_thread.c's attach_thread makes the same calls the
 * attach of a running process makes (dlopen, dlsym, pmm_attach) from the
 * entry point, restores every register and detaches. Its constructors,
 * main and everything after are monitored.
 *
 * We stay its parent, as a shell would, and exit with its status (killed
 * by a signal: killed by the same one). A signal sent to us by a process
 * (SIGINT, SIGTERM, SIGHUP) is passed on; one a terminal sends to its
 * foreground group reaches the program by itself. One that comes while the
 * program is being started waits (blocked) until it is seized, then reaches
 * it as a traced signal and ends it before or at its entry point: passed to
 * a child that had no pid in g_child yet, or that still ran our handler
 * before its exec, it was lost, and the program ran on.
 *
 * Refused before it runs: a static program (no PT_INTERP), a set-user-ID
 * one when we are not root (traced, it would run without its privileges),
 * a script that env runs (env would be monitored, not the program env
 * execs). Refused after the exec, the program killed at its entry point
 * and never run: no glibc dlopen, a hook that failed to load or refused.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "attach_thread.h"
#include "exit_codes.h"
#include "objects.h"
#include "startup.h"
#include "target.h"
#include "tracee.h"

static volatile pid_t g_child;
static volatile int g_child_fd = -1;	/* its pidfd: never a process that reused its pid */
static const int g_forwarded[] = { SIGINT, SIGTERM, SIGHUP };

/*
 * PROG as execvp finds it, into out: 0, or ENOENT (nowhere), EACCES (found,
 * but not executable by us).
 */
static int find_program(const char *prog, char *out, size_t len)
{
	const char *path = getenv("PATH"), *p, *end;
	int err = ENOENT;

	if (strchr(prog, '/')) {
		snprintf(out, len, "%s", prog);
		return access(out, F_OK) ? errno : access(out, X_OK) ? EACCES : 0;
	}
	if (!path)
		path = "/bin:/usr/bin";	/* glibc's execvp without PATH */
	for (p = path; ; p = end + 1) {
		struct stat st;
		int n;

		end = strchrnul(p, ':');
		/* an empty entry is the current directory */
		n = end == p ? snprintf(out, len, "%s", prog) :
			       snprintf(out, len, "%.*s/%s", (int)(end - p), p, prog);
		if (n < (int)len && !stat(out, &st) && S_ISREG(st.st_mode)) {
			if (!access(out, X_OK))
				return 0;
			err = EACCES;
		}
		if (!*end)
			break;
	}
	return err;
}

/* fd's ELF has a PT_INTERP: 1; static: 0; not an ELF: -1; not x86-64: -2. */
static int elf_dynamic(int fd)
{
	Elf64_Ehdr eh;
	Elf64_Phdr ph;
	int i;

	if (pread(fd, &eh, sizeof(eh), 0) != sizeof(eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG))
		return -1;
	if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64 ||
	    eh.e_phentsize != sizeof(ph))
		return -2;
	for (i = 0; i < eh.e_phnum; i++) {
		if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + i * sizeof(ph))) != sizeof(ph))
			return -1;
		if (ph.p_type == PT_INTERP)
			return 1;
	}
	return 0;
}

/*
 * Dies unless what path runs can be attached at its entry point; a #!
 * script's interpreter is what runs (the kernel allows 4 levels).
 */
static void check_program(const char *prog, const char *path, int depth)
{
	char head[256], *interp, *e;
	struct stat st;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC), dyn;

	if (fd < 0)
		return;		/* the exec will say why */
	n = pread(fd, head, sizeof(head) - 1, 0);
	head[n > 0 ? n : 0] = '\0';
	if (n > 2 && head[0] == '#' && head[1] == '!') {
		close(fd);
		interp = head + 2 + strspn(head + 2, " \t");
		interp[strcspn(interp, " \t\n")] = '\0';
		e = strrchr(interp, '/');
		if (e && !strcmp(e + 1, "env"))
			die(EXIT_USAGE, "%s is a script run by env, which would be monitored "
			    "instead of the program env runs: run its interpreter with the "
			    "script (-- INTERPRETER %s); not started", prog, prog);
		if (depth < 4 && interp[0] == '/')
			check_program(prog, interp, depth + 1);
		return;
	}
	/* a script's set-user-ID bit means nothing; an ELF's, traced, is dropped */
	if (!fstat(fd, &st) && geteuid() != 0 &&
	    ((st.st_mode & (S_ISUID | S_ISGID)) ||
	     fgetxattr(fd, "security.capability", NULL, 0) > 0))
		die(EXIT_PERMISSION, "%s is set-user-ID, set-group-ID or has file capabilities: "
		    "traced, it would run without its privileges; not started", path);
	dyn = elf_dynamic(fd);
	close(fd);
	if (!dyn)
		die(EXIT_NOT_DYNAMIC, "%s is statically linked (no dynamic loader): the hook "
		    "cannot be loaded into it; not started", path);
	if (dyn == -2)
		die(EXIT_NOT_DYNAMIC, "%s is not an x86-64 program; not started", path);
	/* not an ELF (-1): the exec says what it is (ENOEXEC) */
}

static void forward(int sig, siginfo_t *si, void *uc)
{
	/* si_code > 0: the kernel's (a terminal's ^C went to the program too) */
	int saved = errno;

	if (si->si_code > 0)
		return;
	if (g_child_fd >= 0)
		syscall(SYS_pidfd_send_signal, g_child_fd, sig, NULL, 0);
	else if (g_child > 0)
		kill(g_child, sig);	/* before 5.3 */
	errno = saved;
}

/* The handler, with the signals blocked (*old: the mask before) until the
 * program is seized: start() unblocks them. */
static void forward_signals(sigset_t *old)
{
	struct sigaction sa = { .sa_sigaction = forward, .sa_flags = SA_SIGINFO | SA_RESTART };
	sigset_t set;
	size_t i;

	sigemptyset(&sa.sa_mask);
	sigemptyset(&set);
	for (i = 0; i < sizeof(g_forwarded) / sizeof(g_forwarded[0]); i++) {
		sigaction(g_forwarded[i], &sa, NULL);
		sigaddset(&set, g_forwarded[i]);
	}
	sigprocmask(SIG_BLOCK, &set, old);
}

/* Ends as the program ended: its exit code, or its signal (no core of ours). */
static __attribute__((noreturn)) void exit_as(int status)
{
	struct rlimit no_core = { 0, 0 };
	sigset_t set;
	int sig;

	if (WIFEXITED(status))
		exit(WEXITSTATUS(status));
	sig = WTERMSIG(status);
	setrlimit(RLIMIT_CORE, &no_core);
	signal(sig, SIG_DFL);
	sigemptyset(&set);
	sigaddset(&set, sig);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	raise(sig);
	exit(128 + sig);	/* one we cannot die of (SIGSTOP's kin) */
}

static void say(int status_fd, const char *word, const char *msg)
{
	if (status_fd >= 0)
		dprintf(status_fd, "%s %s\n", word, msg);
	else
		fprintf(stderr, "%s: %s\n", tracee_program_name(), msg);
}

/* AT_ENTRY of pid's auxiliary vector, or 0. */
static uintptr_t entry_point(pid_t pid)
{
	char path[64];
	uint64_t av[2];
	uintptr_t entry = 0;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/auxv", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	while (fd >= 0 && read(fd, av, sizeof(av)) == sizeof(av) && av[0] != AT_NULL)
		if (av[0] == AT_ENTRY)
			entry = av[1];
	if (fd >= 0)
		close(fd);
	return entry;
}

/* An int3 on the entry point; the word it replaced into *saved. 0 or -1. */
static int plant(pid_t pid, uintptr_t entry, long *saved)
{
	errno = 0;
	*saved = ptrace(PTRACE_PEEKTEXT, pid, entry, 0);
	if (errno)
		return -1;
	return ptrace(PTRACE_POKETEXT, pid, entry, (*saved & ~0xffL) | 0xcc) ? -1 : 0;
}

/* Kills the program we could not attach, and dies with code. */
static __attribute__((noreturn)) void refuse(pid_t pid, int code, const char *msg)
{
	int status;

	kill(pid, SIGKILL);
	ptrace(PTRACE_DETACH, pid, 0, 0);
	while (waitpid(pid, &status, __WALL) < 0 && errno == EINTR)
		;
	die(code, "%s; not started", msg);
}

/*
 * Runs the seized pid up to its entry point, through its exec stop(s):
 * the entry, or 0 if it ended before (*status then says how).
 */
static uintptr_t run_to_entry(pid_t pid, int *status)
{
	struct user_regs_struct r;
	uintptr_t entry = 0;
	long saved = 0;

	*status = 0;
	for (;;) {
		int sig = 0, event;

		if (waitpid(pid, status, __WALL) < 0) {
			if (errno == EINTR)
				continue;
			return 0;
		}
		if (!WIFSTOPPED(*status))
			return 0;
		event = *status >> 16;
		if (event == PTRACE_EVENT_EXEC) {
			/* a new image: its entry (an int3 of an old one went with it) */
			entry = entry_point(pid);
			if (!entry || plant(pid, entry, &saved))
				refuse(pid, EXIT_GONE, "cannot put a breakpoint on the program's "
				       "entry point");
		} else if (event == PTRACE_EVENT_STOP) {
			/* a group stop (SIGSTOP): stays stopped, as untraced */
			ptrace(PTRACE_LISTEN, pid, 0, 0);
			continue;
		} else if (!event && WSTOPSIG(*status) == SIGTRAP && entry &&
			   !ptrace(PTRACE_GETREGS, pid, 0, &r) && r.rip == entry + 1) {
			r.rip = entry;
			if (ptrace(PTRACE_POKETEXT, pid, entry, saved) ||
			    ptrace(PTRACE_SETREGS, pid, 0, &r))
				refuse(pid, EXIT_GONE, "cannot take the breakpoint back");
			return entry;
		} else if (!event) {
			sig = WSTOPSIG(*status);	/* its own: delivered */
		}
		ptrace(PTRACE_CONT, pid, 0, sig);
	}
}

/*
 * The child: waits for the seize, then becomes PROG; tells err_fd why not.
 * Our handler is not its: a signal passed on before the exec ends it.
 */
static __attribute__((noreturn)) void child(const char *path, char **argv, int go_fd,
					    int err_fd, const sigset_t *mask)
{
	size_t i;
	char c;
	int e;

	for (i = 0; i < sizeof(g_forwarded) / sizeof(g_forwarded[0]); i++)
		signal(g_forwarded[i], SIG_DFL);
	sigprocmask(SIG_SETMASK, mask, NULL);
	while (read(go_fd, &c, 1) < 0 && errno == EINTR)
		;
	execv(path, argv);
	e = errno;
	if (write(err_fd, &e, sizeof(e)) != sizeof(e))
		_exit(127);
	_exit(e == ENOENT ? 127 : 126);
}

/*
 * Forks, seizes and lets PROG exec: its pid; *err_fd gets the exec's
 * errno if it fails (the child then ends with 127 or 126), or its end.
 * The forwarded signals are blocked until then; mask: as they were before.
 */
static pid_t start(const char *path, char **argv, int *err_fd, const sigset_t *mask)
{
	int go[2], err[2], e, status;
	pid_t pid;

	if (pipe2(go, O_CLOEXEC) || pipe2(err, O_CLOEXEC))
		die(EXIT_USAGE, "pipe: %s", strerror(errno));
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		die(EXIT_USAGE, "fork: %s", strerror(errno));
	if (pid == 0)
		child(path, argv, go[0], err[1], mask);
	g_child = pid;
	g_child_fd = (int)syscall(SYS_pidfd_open, pid, 0);
	close(go[0]);
	close(err[1]);
	if (ptrace(PTRACE_SEIZE, pid, 0, PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL)) {
		e = errno;
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		die(EXIT_PERMISSION, "ptrace of our own child refused (%s): is "
		    "kernel.yama.ptrace_scope 2 or 3?", strerror(e));
	}
	if (write(go[1], "g", 1) != 1)
		refuse(pid, EXIT_GONE, "the program vanished before its exec");
	close(go[1]);
	/* seized: a signal that came meanwhile stops it, run_to_entry delivers it */
	sigprocmask(SIG_SETMASK, mask, NULL);
	*err_fd = err[0];
	return pid;
}

void exec_program(struct target *t, const char *conf, char **argv, int status_fd)
{
	char path[PATH_MAX], why[512] = "", msg[PATH_MAX + 128];
	int e, status, result = 0, err_fd;
	struct stat st;
	sigset_t mask;
	pid_t pid;

	e = find_program(argv[0], path, sizeof(path));
	if (e)
		die(e == ENOENT ? 127 : 126, "%s: %s", argv[0],
		    e == ENOENT ? "command not found" : strerror(e));
	check_program(argv[0], path, 0);
	forward_signals(&mask);
	pid = start(path, argv, &err_fd, &mask);
	if (!run_to_entry(pid, &status)) {
		if (read(err_fd, &e, sizeof(e)) == sizeof(e))
			die(e == ENOENT ? 127 : 126, "%s: %s", argv[0],
			    e == ENOENT ? "command not found" : strerror(e));
		snprintf(msg, sizeof(msg), "%s ended before its entry point (%s %d): not "
			 "monitored", argv[0], WIFEXITED(status) ? "status" : "signal",
			 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
		say(status_fd, "exited", msg);
		exit_as(status);
	}
	close(err_fd);
	t->pid = pid;
	t->hold_fd = status_fd >= 0 && !fstat(status_fd, &st) && S_ISSOCK(st.st_mode) ?
		     status_fd : -1;
	scan_objects(t);	/* dies without dlopen: EXITKILL ends the program */
	e = attach_thread(t, pid, conf, &result, why, sizeof(why));
	if (e == EXIT_LOAD_FAILED || e == EXIT_NO_LIBRARY) {
		snprintf(msg, sizeof(msg), "loading %s into %s failed: %s", t->lib, argv[0],
			 why[0] ? why : "the call did not return");
		refuse(pid, e, msg);
	}
	if (e)
		refuse(pid, e, "the attach at its entry point failed");
	if (result < 0) {
		snprintf(msg, sizeof(msg), "the hook in %s refused: %s", argv[0],
			 result == -EALREADY ? "it is preloaded already (LD_PRELOAD)" :
			 result == -ENOENT ? "there is no /dev/pmm" : strerror(-result));
		refuse(pid, EXIT_ATTACH_FAILED, msg);
	}
	if (status_fd >= 0) {
		if (t->hold_fd < 0)
			dprintf(status_fd, "pid %d\n", pid);
		close(status_fd);
		die_to_status_fd(-1);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			die(EXIT_GONE, "waiting for %d: %s", pid, strerror(errno));
	exit_as(status);
}
