// SPDX-License-Identifier: GPL-2.0
/*
 * pmm-inject: loads libpmmhook.so into a running process and attaches it
 * (attach.c's pmm_attach), without a restart and without gdb.
 *
 *   pmm-inject [--lib PATH] [--timeout MS] [--allow-seccomp] PID [PMM_X=V...]
 *   pmm-inject [--lib PATH] [--status-fd N] --exec [PMM_X=V...] -- PROG [ARG...]
 *
 * --exec starts PROG with the hook attached at its entry point, with no
 * LD_PRELOAD (startup.c), and exits with its status. --status-fd N: one
 * line there, "pid PID" once PROG runs monitored, "exited MESSAGE" if it
 * ended before its entry point, or "error MESSAGE" (our refusal, which
 * then goes there instead of stderr): pmctl run --no-preload reads it.
 * Where N is a socket, PROG waits at its entry point after "pid PID" until
 * the reader answers (a byte, or closes it; 10 s at most): pmctl saves its
 * maps then, which a program that ends at once would not leave it time for.
 *
 * One thread of the target is stopped at a time, never the whole process:
 * a thread found at a safe point runs dlopen, dlsym and pmm_attach as
 * function calls (ptrace: its registers set for the call, a return address
 * of 0 that faults back to us), while the others run on, so any lock they
 * hold is released as usual. Safe: the thread is not inside the allocator
 * or the loader, nor called from them (no frame of its call chain, unwound
 * by libunwind, is in them: ld.so, the malloc family's and dl* functions of
 * every object that defines them, and the whole of an allocator other than
 * libc's; where the chain cannot be unwound, its stack is scanned).
 * Its registers, extended state included, are restored after; a system
 * call the stop interrupted is restarted as the kernel would (and one that
 * would return EINTR for the stop alone is restarted too), so the program
 * sees no EINTR, errno or register of ours. Where the library's path is
 * not that file in the target's mount namespace, a copy is loaded from a
 * memfd the target makes (/proc/self/fd/N).
 *
 * Nothing the target names is opened: its objects are read from its memory
 * (elfmem.c), its call chains unwound in a confined child (unwinder.c), its
 * memfd taken by pidfd_getfd and checked before a byte is written.
 *
 * Its parts, each with its header: this file (the process: checks, its
 * threads, main), objects.c (the target's objects: what a safe point must
 * avoid, libc's dlopen), attach_thread.c (one thread: stopped, judged, made
 * to call, restored), unwinder.c, startup.c (--exec: a program started
 * with the hook, attached at its entry point); tracee.c, shared with
 * pmm-scan, what any ptrace of a process needs. target.h's struct target,
 * main's, is passed to each; none keeps a global another file reads.
 *
 * Exit codes: exit_codes.h's EXIT_*, each with one line on stderr; the target
 * is left as it was by every refusal.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <elf.h>
#include <linux/openat2.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attach_thread.h"
#include "exit_codes.h"
#include "objects.h"
#include "startup.h"
#include "target.h"
#include "tracee.h"
#include "unwinder.h"

/*
 * Is lib the same file at the same path in the target's mount namespace?
 * Resolved inside its root (an absolute link there stays there) without
 * magic links, and not opened (O_PATH: a FIFO or device there is not
 * touched). 1 yes, 0 no (not there, another file), or dies if the target's
 * root is not ours to see.
 */
static int same_file_there(const struct target *t)
{
	struct open_how how = {
		.flags = O_PATH | O_CLOEXEC,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	char root[64];
	struct stat a, b;
	int dir, fd, same;

	if (stat(t->lib, &a))
		die(EXIT_USAGE, "%s: %s", t->lib, strerror(errno));
	snprintf(root, sizeof(root), "/proc/%d/root", t->pid);
	dir = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0 && (errno == EACCES || errno == EPERM))
		perm_denied(t->pid, errno);	/* its root is not ours to see */
	if (dir < 0)
		return 0;
	fd = (int)syscall(SYS_openat2, dir, t->lib, &how, sizeof(how));
	same = fd >= 0 && !fstat(fd, &b) && S_ISREG(b.st_mode) && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
	if (fd >= 0)
		close(fd);
	close(dir);
	return same;
}

static void check_target(struct target *t, int allow_seccomp)
{
	char buf[64];

	t->pidfd = open_target(t->pid);
	if (status_field(t->pid, "State", buf, sizeof(buf)) && (buf[0] == 'Z' || buf[0] == 'X'))
		die(EXIT_GONE, "process %d has exited", t->pid);
	if (status_field(t->pid, "TracerPid", buf, sizeof(buf)) && strcmp(buf, "0"))
		die(EXIT_TRACED, "process %d is traced already (by %s): a debugger or another "
		    "attach", t->pid, buf);
	if (status_field(t->pid, "Seccomp", buf, sizeof(buf)) && strcmp(buf, "0")) {
		if (!strcmp(buf, "1"))
			die(EXIT_SECCOMP, "process %d runs in strict seccomp mode: it cannot "
			    "load a library", t->pid);
		if (!allow_seccomp)
			die(EXIT_SECCOMP, "process %d has a seccomp filter, which could refuse "
			    "or kill the calls the attach makes (open, mmap, ioctl); "
			    "--allow-seccomp to try anyway", t->pid);
	}
	/* not there, or another file there (a container): a copy, in a memfd */
	t->via_memfd = !same_file_there(t);
}


/*
 * Whether thread tid of pid still runs: not gone, and not a thread that
 * has exited and is not reaped yet (ptrace refuses one with EPERM, and a
 * program whose threads come and go has such a thread now and then).
 */
static int thread_lives(pid_t pid, pid_t tid)
{
	char path[96], st[512], *c;
	FILE *f;
	int lives;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	lives = fgets(st, sizeof(st), f) && (c = strrchr(st, ')')) && c[1] == ' ' &&
		c[2] != 'Z' && c[2] != 'X' && c[2] != 'x';
	fclose(f);
	return lives;
}

static void usage(void)
{
	fprintf(stderr, "usage: %s [--lib PATH] [--timeout MS] [--allow-seccomp] PID "
		"[PMM_X=V...]\n       %s [--lib PATH] [--status-fd N] --exec [PMM_X=V...] "
		"-- PROG [ARG...]\n", tracee_program_name(), tracee_program_name());
	exit(EXIT_USAGE);
}

int main(int argc, char **argv)
{
	static const struct tracee_program program = {
		.name = "pmm-inject", .verb = "attach",
		.no_process = EXIT_NO_PROCESS, .permission = EXIT_PERMISSION, .gone = EXIT_GONE,
	};
	struct target t = { .hold_fd = -1 };
	char conf[2048] = "", why[512] = "", lib[PATH_MAX];
	long timeout_ms = 2000;
	int i, allow_seccomp = 0, result = 0, tried = 0, exec_mode = 0, status_fd = -1;
	uint64_t deadline, stopped_ms = 0;
	pid_t tids[4096];

	tracee_program_set(&program);
	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--lib") && i + 1 < argc)
			t.lib = argv[++i];
		else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
			timeout_ms = atol(argv[++i]);
		else if (!strcmp(argv[i], "--allow-seccomp"))
			allow_seccomp = 1;
		else if (!strcmp(argv[i], "--status-fd") && i + 1 < argc)
			status_fd = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--exec")) {
			exec_mode = 1;
			i++;
			break;
		} else {
			usage();
		}
	}
	if (status_fd >= 0 && fcntl(status_fd, F_SETFD, FD_CLOEXEC))
		status_fd = -1;	/* not open: say it on stderr */
	die_to_status_fd(status_fd);
	if (exec_mode) {
		/* the settings up to --, then the program */
		if (allow_seccomp)
			usage();
	} else if (i >= argc || atoi(argv[i]) <= 0 || timeout_ms <= 0) {
		usage();
	} else {
		t.pid = atoi(argv[i++]);
	}
	for (; i < argc && !(exec_mode && !strcmp(argv[i], "--")); i++) {
		if (strncmp(argv[i], "PMM_", 4) || !strchr(argv[i], '=') || strchr(argv[i], '\n') ||
		    strlen(conf) + strlen(argv[i]) + 2 > sizeof(conf))
			die(EXIT_USAGE, "bad setting %s (PMM_NAME=VALUE)", argv[i]);
		strcat(conf, argv[i]);
		strcat(conf, "\n");
	}
	if (!t.lib) {
		/* beside this program (hooklib/), or PREFIX/lib from PREFIX/libexec/pmm */
		ssize_t n = readlink("/proc/self/exe", lib, sizeof(lib) - 32);

		if (n <= 0)
			die(EXIT_USAGE, "cannot find this program's path: --lib PATH");
		lib[n] = '\0';
		*strrchr(lib, '/') = '\0';
		strcat(lib, "/libpmmhook.so");
		if (access(lib, F_OK)) {
			*strrchr(lib, '/') = '\0';
			strcat(lib, "/../../lib/libpmmhook.so");
		}
		t.lib = realpath(lib, NULL);
		if (!t.lib)
			die(EXIT_USAGE, "%s: %s (--lib PATH)", lib, strerror(errno));
	}
	if (t.lib[0] != '/')
		die(EXIT_USAGE, "--lib %s: an absolute path, please", t.lib);
	if (exec_mode) {
		if (i + 1 >= argc)
			usage();	/* no -- PROG */
		if (access(t.lib, R_OK))
			die(EXIT_USAGE, "%s: %s", t.lib, strerror(errno));
		exec_program(&t, conf, argv + i + 1, status_fd);
	}
	check_target(&t, allow_seccomp);
	scan_objects(&t);
	unwinder_start(&t);
	if (t.via_memfd && (!t.memfd_create || !t.close))
		die(EXIT_NO_LIBRARY, "%s is not that file in process %d's mount namespace (a "
		    "container?), and its libc has no memfd_create to load a copy: install the "
		    "hook there at that path, or use its path there with --lib", t.lib, t.pid);

	deadline = now_ms() + (uint64_t)timeout_ms;
	do {
		int n = list_threads(t.pid, tids, (int)(sizeof(tids) / sizeof(tids[0])));

		if (n <= 0)
			die(EXIT_GONE, "process %d exited", t.pid);
		for (i = 0; i < n && now_ms() <= deadline; i++) {
			struct user_regs_struct r;
			uint64_t t0 = now_ms();
			int e = stop_thread(tids[i]);

			if (e == -EPERM && thread_lives(t.pid, tids[i]))
				perm_denied(t.pid, EPERM);
			if (e)
				continue;	/* gone or exiting meanwhile */
			tried++;
			if (!ptrace(PTRACE_GETREGS, tids[i], 0, &r) && safe_point(&t, tids[i], &r)) {
				restart_eintr(t.pid, tids[i], &r);
				ptrace(PTRACE_SETREGS, tids[i], 0, &r);
				e = attach_thread(&t, tids[i], conf, &result, why, sizeof(why));
				stopped_ms = now_ms() - t0;
				if (e == EXIT_GONE)
					die(EXIT_GONE, "process %d exited during the attach", t.pid);
				if (e == EXIT_LOAD_FAILED || e == EXIT_NO_LIBRARY)
					die(e, "loading %s into process %d failed: %s", t.lib, t.pid,
					    why[0] ? why : "the call did not return");
				if (e)
					die(e, "attach failed");
				if (result < 0)
					die(EXIT_ATTACH_FAILED, "the hook in process %d refused: %s",
					    t.pid, result == -EALREADY ?
					    "it is preloaded already (pmctl start is enough)" :
					    result == -EBUSY ? "it is monitored now (pmctl stop first)" :
					    result == -ENOENT ? "there is no /dev/pmm in its mount "
					    "namespace (a container? bind-mount it there)" :
					    strerror(-result));
				printf("attached to %d: %d entries redirected, thread %d stopped "
				       "%llu ms%s\n", t.pid, result, tids[i],
				       (unsigned long long)stopped_ms, t.via_memfd ?
				       " (the library loaded from a memfd: its path is not that "
				       "file in the process's mount namespace)" : "");
				return EXIT_ATTACHED;
			}
			restart_eintr(t.pid, tids[i], &r);
			ptrace(PTRACE_SETREGS, tids[i], 0, &r);
			ptrace(PTRACE_DETACH, tids[i], 0, 0);
		}
		usleep(10000);
	} while (now_ms() <= deadline);
	die(EXIT_NO_SAFE_POINT, "no thread of process %d was at a safe point (outside the "
	    "allocator and the loader) within %ld ms (%d stops)", t.pid, timeout_ms, tried);
	return EXIT_NO_SAFE_POINT;
}
