// SPDX-License-Identifier: GPL-2.0
/*
 * pmm-inject: one thread of the target, seized and stopped alone (the
 * others run on), judged at a safe point or not, made to call dlopen,
 * dlsym and pmm_attach, and given back its registers and extended state,
 * its interrupted system call restarted.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
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
#include "tracee.h"
#include "unwinder.h"

#define STACK_SCAN	(256 * 1024)	/* bytes of stack above sp searched */
#define CALL_TIMEOUT_MS	10000
#define SCRATCH		4096		/* below the red zone: the calls' strings */
#define STACK_NEED	(64 * 1024)	/* stack below sp that dlopen and pmm_attach may use */

struct saved {
	struct user_regs_struct regs;
	unsigned char xstate[16384];
	struct iovec xiov;
};


/* a is where a call returns to: the instruction before it is a call */
static int after_call(pid_t tid, uintptr_t a)
{
	unsigned char b[7];

	if (peek(tid, a - 7, b, sizeof(b)) != sizeof(b))
		return 0;
	return b[2] == 0xe8 ||				/* call rel32 */
	       (b[5] == 0xff && (b[6] & 0x38) == 0x10) ||	/* call *reg */
	       (b[4] == 0xff && (b[5] & 0x38) == 0x10) ||	/* call *disp8(reg) etc. */
	       (b[1] == 0xff && (b[2] & 0x38) == 0x10) ||	/* call *disp32(reg) */
	       (b[0] == 0xff && (b[1] & 0x38) == 0x10);
}

/*
 * Is the stopped thread at a safe point? Its stack is read upwards from sp
 * to the first return address into the program's own code (any object
 * but libc, ld.so and an allocator): what lies between is the library
 * code it is in, and none of it may be the allocator's or the loader's.
 * Past that frame, words are the program's frames, whose uninitialised
 * slots hold stale addresses (main's, the loader's start-up calls). A
 * thread in the program's own code is read too: a signal handler there may
 * have interrupted malloc, whose frames lie above its signal frame.
 */
/*
 * Bytes of the mapping that holds sp below it: the calls run there. The
 * main thread's [stack] grows as needed; a thread's stack of its own is a
 * fixed mapping (glibc puts a guard page below it), which dlopen must not
 * run off the end of.
 */
static uintptr_t stack_room(pid_t pid, uintptr_t sp)
{
	char path[64], line[512], name[64];
	unsigned long lo, hi;
	uintptr_t room = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		name[0] = '\0';
		if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %63s", &lo, &hi, name) < 2 ||
		    sp < lo || sp >= hi)
			continue;
		/* a stack in the heap (a coroutine's, a sigaltstack malloc'd) has
		 * no bounds to read here */
		room = !strcmp(name, "[stack]") ? UINTPTR_MAX :
		       !strcmp(name, "[heap]") ? 0 : sp - lo;
		break;
	}
	fclose(f);
	return room;
}

int safe_point(const struct target *t, pid_t tid, const struct user_regs_struct *r)
{
	static uint64_t stack[STACK_SCAN / 8];
	ssize_t got;
	size_t i;
	int v;

	if (in_ranges(t->deny, t->n_deny, r->rip))
		return 0;
	if (stack_room(t->pid, r->rsp) < STACK_NEED)
		return 0;
	v = unwound_safe(tid, r);
	if (v >= 0)
		return v;
	got = peek(tid, r->rsp, stack, sizeof(stack));
	if (got <= 0) {
		/* the stack's end is nearer: read what there is, page by page */
		got = 0;
		while ((size_t)got < sizeof(stack) &&
		       peek(tid, r->rsp + got, (char *)stack + got, 4096 - ((r->rsp + got) & 4095)) > 0)
			got += 4096 - ((r->rsp + got) & 4095);
		if (got <= 0)
			return 0;
	}
	/* a signal frame anywhere: the handler may have interrupted malloc, and
	 * its own calls put program return addresses above that */
	for (i = 0; t->restorer && i < (size_t)got / 8; i++)
		if (stack[i] == t->restorer)
			return 0;
	for (i = 0; i < (size_t)got / 8; i++) {
		int deny = in_ranges(t->deny, t->n_deny, stack[i]);

		if (!deny && !in_ranges(t->plain, t->n_plain, stack[i]))
			continue;
		if (!after_call(tid, stack[i]))
			continue;
		if (deny && getenv("PMM_INJECT_DEBUG"))
			fprintf(stderr, "thread %d: %#lx at sp+%#zx\n", tid,
				(unsigned long)stack[i], i * 8);
		return !deny;
	}
	return 1;
}



static int save(pid_t tid, struct saved *s)
{
	s->xiov.iov_base = s->xstate;
	s->xiov.iov_len = sizeof(s->xstate);
	if (ptrace(PTRACE_GETREGS, tid, 0, &s->regs))
		return -1;
	if (ptrace(PTRACE_GETREGSET, tid, NT_X86_XSTATE, &s->xiov))
		return -1;
	return 0;
}

static int restore(pid_t tid, struct saved *s)
{
	if (ptrace(PTRACE_SETREGSET, tid, NT_X86_XSTATE, &s->xiov))
		return -1;
	return ptrace(PTRACE_SETREGS, tid, 0, &s->regs) ? -1 : 0;
}

#define SIG_BIT(s)	(1ULL << ((s) - 1))

struct pending {
	int sig[8];
	int n;
};

/*
 * Calls fn(a, b) in the stopped thread, on its stack below sp; its return
 * value, or sets *err. The thread blocks every signal meanwhile
 * (attach_thread), so they wait in the kernel, siginfo and all; one that
 * stops it all the same (SIGSTOP) is held in p for the end (sent again
 * after the registers are back).
 */
static uint64_t call(pid_t tid, const struct saved *s, uintptr_t sp, uintptr_t fn, uint64_t a,
		     uint64_t b, struct pending *p, int *err)
{
	struct user_regs_struct r = s->regs;
	uint64_t zero = 0, deadline = now_ms() + CALL_TIMEOUT_MS;
	int status;

	sp = (sp & ~15UL) - 8;	/* as after a call: sp + 8 aligned */
	if (poke(tid, sp, &zero, sizeof(zero))) {
		*err = EXIT_GONE;
		return 0;
	}
	r.rip = fn;
	r.rdi = a;
	r.rsi = b;
	r.rsp = sp;
	r.rax = 0;
	r.orig_rax = (unsigned long long)-1;	/* no system call to restart */
	if (ptrace(PTRACE_SETREGS, tid, 0, &r) || ptrace(PTRACE_CONT, tid, 0, 0)) {
		*err = EXIT_GONE;
		return 0;
	}
	for (;;) {
		status = wait_stop(tid, deadline);
		if (status == -1) {
			*err = EXIT_GONE;
			return 0;
		}
		if (status == -2) {
			*err = EXIT_LOAD_FAILED;
			ptrace(PTRACE_INTERRUPT, tid, 0, 0);
			if (wait_stop(tid, now_ms() + 2000) < 0)
				*err = EXIT_GONE;
			return 0;
		}
		if (!WIFSTOPPED(status))
			continue;
		if (WSTOPSIG(status) == SIGSEGV && !(status >> 16)) {
			if (ptrace(PTRACE_GETREGS, tid, 0, &r)) {
				*err = EXIT_GONE;
				return 0;
			}
			if (r.rip == 0)
				return r.rax;	/* back at our return address */
			/* a fault of its own inside the call: nothing to save */
			*err = EXIT_LOAD_FAILED;
			return 0;
		}
		if (!(status >> 16) && p->n < (int)(sizeof(p->sig) / sizeof(p->sig[0])))
			p->sig[p->n++] = WSTOPSIG(status);
		if (ptrace(PTRACE_CONT, tid, 0, 0)) {
			*err = EXIT_GONE;
			return 0;
		}
	}
}

/* A string of the target's, at most len - 1 bytes. */
static void read_string(pid_t tid, uintptr_t a, char *buf, size_t len)
{
	ssize_t n = a ? peek(tid, a, buf, len - 1) : -1;

	buf[n > 0 ? n : 0] = '\0';
	buf[strnlen(buf, len - 1)] = '\0';
}

/*
 * The library's bytes into the memfd the target just made, through a copy of
 * its descriptor (pidfd_getfd), never by opening /proc/PID/fd/N: the number
 * came back from the target, which could have put any file there (an O_PATH
 * descriptor of root's file, say). Written only if the copy is what
 * memfd_create makes: an empty, unlinked, sealable file, open for reading
 * and writing, with the name we gave. 0, or -1 and why.
 */
static int copy_to_memfd(const struct target *t, int fd, const char *name, char *why,
			 size_t why_len)
{
	char buf[65536], link[64], want[300], got[300];
	int in = -1, out, flags, ret = -1;
	ssize_t n = -1, len;
	struct stat st;

	out = t->pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, t->pidfd, fd, 0);
	if (out < 0) {
		snprintf(why, why_len, "taking the process's memfd (pidfd_getfd): %s",
			 strerror(t->pidfd < 0 ? ENOSYS : errno));
		return -1;
	}
	snprintf(link, sizeof(link), "/proc/self/fd/%d", out);
	snprintf(want, sizeof(want), "/memfd:%s (deleted)", name);
	len = readlink(link, got, sizeof(got) - 1);
	got[len > 0 ? len : 0] = '\0';
	flags = fcntl(out, F_GETFL);
	if (fstat(out, &st) || !S_ISREG(st.st_mode) || st.st_nlink != 0 || st.st_size != 0 ||
	    flags < 0 || (flags & O_PATH) || (flags & O_ACCMODE) != O_RDWR ||
	    fcntl(out, F_GET_SEALS) < 0 || strcmp(got, want)) {
		snprintf(why, why_len, "descriptor %d that the process returned from "
			 "memfd_create is not a new memfd (%s): refused", fd, got);
		close(out);
		return -1;
	}
	in = open(t->lib, O_RDONLY | O_CLOEXEC);
	errno = in < 0 ? errno : 0;
	while (in >= 0 && (n = read(in, buf, sizeof(buf))) > 0) {
		if (write(out, buf, (size_t)n) != n) {
			if (!errno)
				errno = ENOSPC;	/* a short write sets none */
			n = -1;
			break;
		}
	}
	if (in >= 0 && n == 0)
		ret = 0;
	else
		snprintf(why, why_len, "copying it into a memfd of the process: %s",
			 strerror(errno));
	if (in >= 0)
		close(in);
	close(out);
	return ret;
}

/* "pid PID" on t->hold_fd, then the reader's answer (a byte or its end), 10 s at most */
static void announce_and_hold(const struct target *t)
{
	struct pollfd p = { .fd = t->hold_fd, .events = POLLIN };
	char c;

	dprintf(t->hold_fd, "pid %d\n", t->pid);
	if (poll(&p, 1, 10000) == 1 && read(t->hold_fd, &c, 1) < 0)
		c = 0;	/* an error is an answer too */
}

int attach_thread(struct target *t, pid_t tid, const char *conf, int *result,
			 char *why, size_t why_len)
{
	static const char memfd_name[] = "libpmmhook.so";
	static struct saved s;
	struct pending p = { .n = 0 };
	/*
	 * Every signal blocked but the synchronous ones: a fault on a blocked
	 * SIGSEGV (the calls' return to address 0) would make the kernel reset
	 * the program's handler to SIG_DFL as it forces it through; they stop
	 * the thread for us to see, and are never delivered.
	 */
	uint64_t mask, all = ~(SIG_BIT(SIGSEGV) | SIG_BIT(SIGBUS) | SIG_BIT(SIGILL) |
			       SIG_BIT(SIGFPE) | SIG_BIT(SIGTRAP) | SIG_BIT(SIGSYS));
	uintptr_t sp, path_at, name_at, conf_at, memfd_name_at;
	char memfd_path[32];
	size_t path_len = strlen(t->lib) + 1, conf_len = strlen(conf) + 1;
	uint64_t h, fn, msg;
	int err = 0, gone = 0, memfd = -1, fd, i;

	if (save(tid, &s) || ptrace(PTRACE_GETSIGMASK, tid, sizeof(mask), &mask) ||
	    ptrace(PTRACE_SETSIGMASK, tid, sizeof(all), &all))
		return EXIT_GONE;
	if (path_len < sizeof(memfd_path))
		path_len = sizeof(memfd_path);
	/* below the red zone and what the strings take */
	sp = s.regs.rsp - 128 - SCRATCH;
	path_at = sp;
	name_at = path_at + path_len;
	conf_at = name_at + sizeof("pmm_attach");
	memfd_name_at = conf_at + conf_len;
	if (path_len + sizeof("pmm_attach") + conf_len + sizeof(memfd_name) > SCRATCH - 64)
		err = EXIT_USAGE;
	else if (poke(tid, path_at, t->lib, strlen(t->lib) + 1) ||
		 poke(tid, name_at, "pmm_attach", sizeof("pmm_attach")) ||
		 poke(tid, conf_at, conf, conf_len) ||
		 poke(tid, memfd_name_at, memfd_name, sizeof(memfd_name)))
		err = EXIT_GONE;
	if (!err && t->via_memfd) {
		/* MFD_CLOEXEC: the program's children do not inherit it; MFD_EXEC
		 * where vm.memfd_noexec would make it not executable (6.3+), and
		 * without it where the flag is not known */
		fd = (int)call(tid, &s, sp, t->memfd_create, memfd_name_at, 0x1 | 0x10, &p, &err);
		if (!err && fd < 0)
			fd = (int)call(tid, &s, sp, t->memfd_create, memfd_name_at, 0x1, &p, &err);
		if (!err)
			memfd = fd;	/* else a call that failed returned nothing */
		if (!err && memfd < 0)
			snprintf(why, why_len, "memfd_create failed in the process");
		if (!err && (memfd < 0 || copy_to_memfd(t, memfd, memfd_name, why, why_len)))
			err = EXIT_NO_LIBRARY;
		snprintf(memfd_path, sizeof(memfd_path), "/proc/self/fd/%d", memfd);
		if (!err && poke(tid, path_at, memfd_path, strlen(memfd_path) + 1))
			err = EXIT_GONE;
	}
	if (err)
		goto out;
	h = call(tid, &s, sp, t->dlopen, path_at, 2 /* RTLD_NOW, local */, &p, &err);
	if (!err && !h) {
		msg = call(tid, &s, sp, t->dlerror, 0, 0, &p, &err);
		read_string(tid, msg, why, why_len);
		err = EXIT_LOAD_FAILED;
	}
	fn = err ? 0 : call(tid, &s, sp, t->dlsym, h, name_at, &p, &err);
	if (!err && !fn) {
		snprintf(why, why_len, "%s has no pmm_attach", t->lib);
		err = EXIT_LOAD_FAILED;
	}
	if (!err)
		*result = (int)call(tid, &s, sp, fn, conf_at, 0, &p, &err);
out:
	/* the mapping keeps the library: its descriptor is not the program's */
	if (memfd >= 0 && err != EXIT_GONE)
		call(tid, &s, sp, t->close, (uint64_t)memfd, 0, &p, &gone);
	if ((restore(tid, &s) || ptrace(PTRACE_SETSIGMASK, tid, sizeof(mask), &mask) ||
	     gone == EXIT_GONE) &&
	    !err)
		err = EXIT_GONE;
	if (!err && *result >= 0 && t->hold_fd >= 0)
		announce_and_hold(t);
	ptrace(PTRACE_DETACH, tid, 0, 0);
	for (i = 0; i < p.n; i++)
		syscall(SYS_tgkill, t->pid, tid, p.sig[i]);
	return err;
}

