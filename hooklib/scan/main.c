// SPDX-License-Identifier: GPL-2.0
/*
 * pmm-scan: which of a running process's blocks it can no longer reach
 * (`pmctl unreachable`, which runs it), libmemunreachable's way: every
 * thread stopped just long enough to copy its registers and make a copy
 * of the process that never runs (snapshot.c), then a conservative mark
 * and sweep of the copy (sweep.c) with the module's block table as the
 * heap, while the process runs on.
 *
 *   pmm-scan [--device-fd N | --blocks FILE] [--age MS] [--allow-seccomp] PID
 *
 * --device-fd N: /dev/pmm, open on N (pmctl opens it); the table is read
 * before the stop and after. --blocks FILE: the table from a file of
 * struct pmm_block instead (tests and benchmarks without the module).
 * --age MS: younger blocks are never lost (default 1000, at least 50).
 *
 * The sweep reads only the copy, through its /proc/PID/mem, in a child
 * that holds nothing else: as nobody when we are root, not dumpable, no
 * new privileges, a memory limit and a system call filter that allows no
 * open; the target wrote every byte it reads. Output: report.c's JSON.
 * Exit codes: exit_codes.h's EXIT_*, each refusal one line on stderr; the
 * target is left as it was by every one of them.
 *
 * Its parts, each with its own header: main.c (options, checks, the order
 * of things), target.c (the running process: its objects, the hook's registry, a
 * syscall instruction), snapshot.c (every thread stopped, a copy made by
 * a clone system call, the threads let go), table.c (the module's block
 * table, the hook's unsent records), snapmem.c (the copy's maps and
 * memory, read through /proc/PID/mem), glibc.c (glibc's heaps walked chunk
 * by chunk), sweep.c (mark and sweep, valgrind's categories), report.c
 * (the JSON that pmctl reads). tracee.c and elfmem.c come from ../inject/;
 * xalloc.c ends the scan when memory runs out. exit_codes.h: its exit
 * codes; result.h: the objects and what the scan found.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../kmod/uapi/pmm.h"
#include "../inject/tracee.h"
#include "../scanreg.h"
#include "exit_codes.h"
#include "glibc.h"
#include "report.h"
#include "result.h"
#include "snapmem.h"
#include "snapshot.h"
#include "sweep.h"
#include "table.h"
#include "target.h"
#include "xalloc.h"

#define AGE_MIN_MS	50		/* records' stamps run up to a few jiffies off */
#define SWEEP_TIMEOUT_S	600
#define WINDOWS_CAP	(8UL << 20)	/* the copy's memory kept: heaps are walked in order */



static void usage(void)
{
	fprintf(stderr, "usage: %s [--device-fd N | --blocks FILE] [--age MS] [--allow-seccomp] "
		"PID\n", tracee_program_name());
	exit(EXIT_USAGE);
}

static long number(const char *s, long lo, long hi)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		usage();
	return v;
}

/* Allowed in the sweep: reading the descriptors it has, writing its
 * output, memory (sysinfo: qsort's); no open, no exec, no signals sent. */
static int confine(void)
{
	static const int allowed[] = {
		SYS_read, SYS_pread64, SYS_write, SYS_lseek, SYS_fstat, SYS_newfstatat,
		SYS_mmap, SYS_munmap, SYS_mremap, SYS_mprotect, SYS_brk, SYS_madvise,
		SYS_rt_sigprocmask, SYS_rt_sigreturn, SYS_futex, SYS_clock_gettime,
		SYS_getpid, SYS_gettid, SYS_sysinfo, SYS_exit, SYS_exit_group,
	};
	return allow_only_syscalls(allowed, sizeof(allowed) / sizeof(allowed[0]));
}

static void drop_privileges(uint64_t memory)
{
	struct rlimit mem = { memory, memory }, none = { 0, 0 };

	if (geteuid() == 0 &&
	    (setgroups(0, NULL) || setresgid(65534, 65534, 65534) ||
	     setresuid(65534, 65534, 65534)))
		die(EXIT_FAILED, "the sweep could not drop its privileges: %s", strerror(errno));
	/* not dumpable: no other process of nobody's may ptrace it and use its descriptors */
#ifdef PMM_SCAN_SANITIZED
	mem.rlim_cur = mem.rlim_max = RLIM_INFINITY;	/* ASan's shadow is terabytes */
#endif
	if (prctl(PR_SET_DUMPABLE, 0) || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
	    setrlimit(RLIMIT_AS, &mem) || setrlimit(RLIMIT_NPROC, &none))
		die(EXIT_FAILED, "the sweep could not confine itself: %s", strerror(errno));
	/* a first line of output before the filter, which allows stdio no fstat */
	setvbuf(stdout, NULL, _IOFBF, 1 << 16);
#ifdef PMM_SCAN_SANITIZED
	return;	/* the sanitizers' reports open files: the test build is not filtered */
#endif
	if (confine())
		die(EXIT_FAILED, "the sweep could not install its system call filter: %s",
		    strerror(errno));
}

struct options {
	pid_t pid;
	int dev_fd;
	const char *blocks;
	uint64_t age_ns;
	int allow_seccomp;
};

static void check_target(const struct options *o, struct target_info *t)
{
	char buf[64];
	pid_t tids[2];

	t->pid = o->pid;
	t->pidfd = open_target(o->pid);
	/* a zombie main thread with others running (pthread_exit) is a live process */
	if (status_field(o->pid, "State", buf, sizeof(buf)) && (buf[0] == 'Z' || buf[0] == 'X') &&
	    list_tids(o->pid, tids, 2) < 2)
		die(EXIT_GONE, "process %d has exited", o->pid);
	if (status_field(o->pid, "TracerPid", buf, sizeof(buf)) && strcmp(buf, "0"))
		die(EXIT_TRACED, "process %d is traced already (by %s): a debugger or an attach in "
		    "progress", o->pid, buf);
	if (status_field(o->pid, "Seccomp", buf, sizeof(buf)) && strcmp(buf, "0") &&
	    !o->allow_seccomp)
		die(EXIT_SECCOMP, "process %d has a seccomp filter, which could refuse the clone "
		    "the snapshot makes or kill the process for it; --allow-seccomp to try anyway",
		    o->pid);
	target_inspect(t);
	if (!t->dynamic)
		die(EXIT_STATIC, "process %d is statically linked: no hook can be in it, so pmm "
		    "has no exact block table of it", o->pid);
	if (t->is_init)
		die(EXIT_NO_FORK, "process %d is pid 1 of its pid namespace: the kernel refuses it "
		    "a child of its parent (CLONE_PARENT), and a child of its own would be its to "
		    "reap; not scanned", o->pid);
	if (!t->registry && o->dev_fd >= 0)
		die(EXIT_NOT_EXACT, "process %d has no libpmmhook.so with a scan registry (not "
		    "hooked, or an older hook): monitor it with `pmctl attach` or `pmctl run`, "
		    "without --sample", o->pid);
	if (t->registry && t->mode == PMM_SCANREG_MODE_SAMPLED)
		die(EXIT_NOT_EXACT, "process %d is monitored in sampled mode, whose table holds a "
		    "sample of its blocks: reachability needs them all (pmctl stop %d, then "
		    "pmctl attach %d without --sample)", o->pid, o->pid, o->pid);
	if (t->registry && t->mode != PMM_SCANREG_MODE_EXACT)
		die(EXIT_NOT_EXACT, "process %d's hook is not in exact mode (not monitored now: "
		    "pmctl start %d, or attach without --sample)", o->pid, o->pid);
	if (!t->syscall_insn)
		die(EXIT_UNSUPPORTED, "no syscall instruction found in process %d's code", o->pid);
}

/* The sweep, in the confined child: its JSON on stdout; exits. */
static __attribute__((noreturn)) void run_sweep(const struct options *o,
						const struct target_info *t, struct snapshot *s,
						const struct table *t0, const struct table *t2,
						struct snapmem *m, uint64_t memory_limit)
{
	struct records pending = { 0 };
	struct ranges excluded = { 0 };
	struct result res;
	struct obj *objs;
	size_t n;
	uint64_t start;

	drop_privileges(memory_limit);
	start = now_us();
	memset(&res, 0, sizeof(res));
	res.pid = o->pid;
	res.snapshot_ns = s->t1_ns;
	res.age_ns = o->age_ns;
	res.threads = s->n;
	res.longest_stop_us = s->longest_stop_us;
	res.fork_us = s->fork_us;
	res.stop_all_us = s->stop_all_us;
	snapmem_init_cache(m, WINDOWS_CAP);
	if (t->registry)
		registry_read(m, t->registry, &pending, &excluded, &res);
	objs = objects_build(t0, t2, &pending, s->t1_ns, m, &n, &res);
	res.table_us = now_us() - start;
	glibc_walk(m, &objs, &n, &excluded, &res);
	res.walk_us = now_us() - start - res.table_us;
	sweep(m, objs, n, s, &excluded, o->age_ns, &res);
	res.read_bytes = m->bytes_read;
	res.scan_us = now_us() - start;
	report(&res, objs, n, m);
	exit(EXIT_SCANNED);
}

static uint64_t heap_bytes(const struct table *t)
{
	uint64_t sum = 0;
	size_t i;

	for (i = 0; i < t->n; i++)
		sum += t->b[i].size;
	return sum;
}

static void wake(int sig)
{
	(void)sig;
}

int main(int argc, char **argv)
{
	static const struct tracee_program program = {
		.name = "pmm-scan", .verb = "scan",
		.no_process = EXIT_NO_PROCESS, .permission = EXIT_PERMISSION, .gone = EXIT_GONE,
	};
	struct options o = { .dev_fd = -1, .age_ns = 1000000000ULL };
	struct target_info t;
	struct snapshot s;
	struct table t0 = { 0 }, t2 = { 0 };
	struct snapmem m;
	char path[64];
	uint64_t limit;
	pid_t sweeper, w;
	int i, st;

	tracee_program_set(&program);
	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--device-fd") && i + 1 < argc)
			o.dev_fd = (int)number(argv[++i], 0, 1 << 20);
		else if (!strcmp(argv[i], "--blocks") && i + 1 < argc)
			o.blocks = argv[++i];
		else if (!strcmp(argv[i], "--age") && i + 1 < argc)
			o.age_ns = (uint64_t)number(argv[++i], AGE_MIN_MS, 365L * 86400 * 1000) *
				   1000000ULL;
		else if (!strcmp(argv[i], "--allow-seccomp"))
			o.allow_seccomp = 1;
		else
			usage();
	}
	if (i != argc - 1 || (o.dev_fd >= 0) == !!o.blocks)
		usage();
	o.pid = (pid_t)number(argv[i], 1, 1 << 30);
	if (o.dev_fd >= 0 && fcntl(o.dev_fd, F_SETFD, FD_CLOEXEC))
		die(EXIT_USAGE, "--device-fd %d: not open", o.dev_fd);
	memset(&t, 0, sizeof(t));
	check_target(&o, &t);
	if (o.blocks)
		table_load(o.blocks, &t0);
	else
		table_read(o.dev_fd, o.pid, &t0);
	memset(&s, 0, sizeof(s));
	s.pid = o.pid;
	snapshot_take(&s, t.syscall_insn);
	if (!o.blocks)
		table_read(o.dev_fd, o.pid, &t2);
	memset(&m, 0, sizeof(m));
	snprintf(path, sizeof(path), "/proc/%d/mem", s.child);
	m.fd = open(path, O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof(path), "/proc/%d/pagemap", s.child);
	m.pagemap = open(path, O_RDONLY | O_CLOEXEC);
	if (m.fd < 0 || snapmem_maps(&m, s.child)) {
		int err = errno;

		snapshot_drop(&s);
		die(err == EACCES || err == EPERM ? EXIT_PERMISSION : EXIT_UNSUPPORTED,
		    "cannot read the copy of process %d (/proc/%d/mem, smaps): %s", o.pid,
		    s.child, strerror(err));
	}
	/* the windows, the graph (at most a 4-byte edge a word of the heap),
	 * 200-odd bytes a block, and room */
	limit = WINDOWS_CAP + heap_bytes(&t0) / 2 + (uint64_t)(t0.n + t2.n) * 512 + (1ULL << 30);
	fflush(NULL);
	sweeper = fork();
	if (sweeper < 0) {
		snapshot_drop(&s);
		die(EXIT_FAILED, "fork: %s", strerror(errno));
	}
	if (sweeper == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (o.dev_fd >= 0)
			close(o.dev_fd);
		close(t.pidfd);
		run_sweep(&o, &t, &s, &t0, o.blocks ? &t0 : &t2, &m, limit);
	}
	close(m.fd);
	if (m.pagemap >= 0)
		close(m.pagemap);
	{
		struct sigaction sa;

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = wake;	/* no SA_RESTART: the wait below ends */
		sigaction(SIGALRM, &sa, NULL);
	}
	alarm(SWEEP_TIMEOUT_S);
	w = waitpid(sweeper, &st, 0);
	if (w != sweeper)
		kill(sweeper, SIGKILL);
	snapshot_drop(&s);
	if (w != sweeper)
		die(EXIT_FAILED, "the sweep did not end within %d s", SWEEP_TIMEOUT_S);
	if (WIFSIGNALED(st))
		die(EXIT_FAILED, "the sweep failed (signal %d%s)", WTERMSIG(st),
		    WTERMSIG(st) == SIGSYS ? ": a system call its filter refuses" : "");
	return WEXITSTATUS(st);
}
