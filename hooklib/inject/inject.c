// SPDX-License-Identifier: GPL-2.0
/*
 * pmm-inject: loads libpmmhook.so into a running process and attaches it
 * (attach.c's pmm_attach), without a restart and without gdb.
 *
 *   pmm-inject [--lib PATH] [--timeout MS] [--allow-seccomp] PID [PMM_X=V...]
 *
 * One thread of the target is stopped at a time, never the whole process:
 * a thread found at a safe point runs dlopen, dlsym and pmm_attach as
 * function calls (ptrace: its registers set for the call, a return address
 * of 0 that faults back to us), while the others run on, so any lock they
 * hold is released as usual. Safe: the thread is not inside the allocator
 * or the loader, nor called from them (its stack holds no return address
 * into them: ld.so, the malloc family's and dl* functions of every object
 * that defines them, and the whole of an allocator other than libc's).
 * Its registers, extended state included, are restored after; a system
 * call the stop interrupted is restarted as the kernel would (and one that
 * would return EINTR for the stop alone is restarted too), so the program
 * sees no EINTR, errno or register of ours.
 *
 * Exit codes: the EXIT_* below, each with one line on stderr; the target
 * is left as it was by every refusal.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <elf.h>
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

enum {
	EXIT_ATTACHED = 0,
	EXIT_USAGE = 2,
	EXIT_NO_PROCESS = 3,	/* no such process */
	EXIT_PERMISSION = 4,	/* ptrace refused: permission, Yama */
	EXIT_TRACED = 5,	/* traced already (a debugger, another attach) */
	EXIT_NOT_DYNAMIC = 6,	/* no dynamic loader: static, or not glibc */
	EXIT_NO_LIBRARY = 7,	/* the library's path is not the same file there */
	EXIT_SECCOMP = 8,	/* a seccomp filter could refuse or kill the calls */
	EXIT_NO_SAFE_POINT = 9,	/* no thread at a safe point in time */
	EXIT_LOAD_FAILED = 10,	/* dlopen or dlsym failed in the target */
	EXIT_ATTACH_FAILED = 11,	/* pmm_attach refused (its errno) */
	EXIT_GONE = 12,		/* the target exited meanwhile */
};

#define MAX_RANGES	256
#define STACK_SCAN	(256 * 1024)	/* bytes of stack above sp searched */
#define CALL_TIMEOUT_MS	10000
#define SCRATCH		4096		/* below the red zone: the calls' strings */

struct range {
	uintptr_t lo, hi;
};

struct target {
	pid_t pid;
	struct range deny[MAX_RANGES];
	int n_deny;
	struct range plain[MAX_RANGES];	/* code of the program's own */
	int n_plain;
	uintptr_t dlopen, dlsym, dlerror;	/* in the target */
	const char *lib;
};

static const char *g_prog = "pmm-inject";

static void die(int code, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", g_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A line of /proc/PID/status: its value after "Key:", or NULL. */
static char *status_field(pid_t pid, const char *key, char *buf, size_t size)
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

/* ---- the target's objects ------------------------------------------------ */

struct object {
	char path[PATH_MAX];
	uintptr_t base;		/* the mapping at file offset 0 */
	uintptr_t text_lo, text_hi;
	int special;		/* libc, ld.so or an allocator */
};

/* The ELF file of an object as the target sees it (its mount namespace). */
static int open_in_target(pid_t pid, const char *path)
{
	char p[PATH_MAX + 64];

	if (snprintf(p, sizeof(p), "/proc/%d/root%.*s", pid, PATH_MAX - 1, path) >= (int)sizeof(p))
		return -1;
	return open(p, O_RDONLY | O_CLOEXEC);
}

/*
 * Calls fn for each defined function symbol of the object's .dynsym:
 * name, address in the target, size.
 */
static void each_symbol(pid_t pid, const struct object *o,
			void (*fn)(void *arg, const char *name, uintptr_t addr, size_t size),
			void *arg)
{
	int fd = open_in_target(pid, o->path);
	Elf64_Ehdr eh;
	Elf64_Shdr *sh = NULL;
	char *strtab = NULL;
	Elf64_Sym *syms = NULL;
	size_t i, nsyms = 0;
	uintptr_t bias;

	if (fd < 0)
		return;
	if (pread(fd, &eh, sizeof(eh), 0) != sizeof(eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) ||
	    eh.e_shnum == 0 || eh.e_shnum > 4096)
		goto out;
	sh = calloc(eh.e_shnum, sizeof(*sh));
	if (!sh || pread(fd, sh, eh.e_shnum * sizeof(*sh), (off_t)eh.e_shoff) !=
		   (ssize_t)(eh.e_shnum * sizeof(*sh)))
		goto out;
	for (i = 0; i < eh.e_shnum; i++) {
		Elf64_Shdr *s = &sh[i], *str;

		if (s->sh_type != SHT_DYNSYM || s->sh_link >= eh.e_shnum ||
		    s->sh_size > (64 << 20))
			continue;
		str = &sh[s->sh_link];
		if (str->sh_size > (64 << 20))
			continue;
		syms = malloc(s->sh_size);
		strtab = malloc(str->sh_size + 1);
		if (!syms || !strtab ||
		    pread(fd, syms, s->sh_size, (off_t)s->sh_offset) != (ssize_t)s->sh_size ||
		    pread(fd, strtab, str->sh_size, (off_t)str->sh_offset) != (ssize_t)str->sh_size)
			goto out;
		strtab[str->sh_size] = '\0';
		nsyms = s->sh_size / sizeof(Elf64_Sym);
		break;
	}
	/* a shared object's symbols are offsets from its base; an executable's
	 * (ET_EXEC) are addresses */
	bias = eh.e_type == ET_DYN ? o->base : 0;
	for (i = 0; i < nsyms; i++) {
		Elf64_Sym *s = &syms[i];

		if (s->st_shndx == SHN_UNDEF || ELF64_ST_TYPE(s->st_info) != STT_FUNC ||
		    s->st_name >= (Elf64_Word)-1)
			continue;
		fn(arg, strtab + s->st_name, bias + s->st_value, s->st_size);
	}
out:
	free(syms);
	free(strtab);
	free(sh);
	close(fd);
}

static const char *const g_denied[] = {
	"malloc", "free", "calloc", "realloc", "reallocarray", "posix_memalign",
	"aligned_alloc", "memalign", "valloc", "pvalloc", "malloc_usable_size",
	"malloc_trim", "mallinfo", "mallinfo2", "malloc_stats", "malloc_info", "mallopt",
	"dlopen", "dlmopen", "dlclose", "dlsym", "dlvsym", "dladdr", "dladdr1", "dlinfo",
	"dlerror", "dl_iterate_phdr", "_dl_find_object", "__libc_dlopen_mode",
	"__libc_dlsym", "__libc_dlclose", "fork", "_Fork", "vfork", "pthread_create",
	"exit", "__cxa_finalize", "__cxa_thread_atexit_impl",
	NULL,
};

static void add_deny(struct target *t, uintptr_t lo, uintptr_t hi)
{
	if (t->n_deny < MAX_RANGES && hi > lo) {
		t->deny[t->n_deny].lo = lo;
		t->deny[t->n_deny].hi = hi;
		t->n_deny++;
	}
}

struct scan {
	struct target *t;
	int is_libc;
	int defines_malloc;
};

static void note_symbol(void *arg, const char *name, uintptr_t addr, size_t size)
{
	struct scan *s = arg;
	int i;

	if (s->is_libc) {
		if (!strcmp(name, "dlopen"))
			s->t->dlopen = addr;
		else if (!strcmp(name, "dlsym"))
			s->t->dlsym = addr;
		else if (!strcmp(name, "dlerror"))
			s->t->dlerror = addr;
	}
	for (i = 0; g_denied[i]; i++) {
		if (!strcmp(name, g_denied[i])) {
			add_deny(s->t, addr, addr + (size ? size : 1));
			if (!strcmp(name, "malloc"))
				s->defines_malloc = 1;
		}
	}
}

static int is_loader(const char *path)
{
	const char *b = strrchr(path, '/');

	b = b ? b + 1 : path;
	return !strncmp(b, "ld-linux", 8) || !strncmp(b, "ld-musl", 7) || !strncmp(b, "ld.so", 5);
}

static int is_libc(const char *path)
{
	const char *b = strrchr(path, '/');

	b = b ? b + 1 : path;
	return !strcmp(b, "libc.so.6");
}

/* The target's objects from its maps: deny ranges, libc's dl* functions. */
static void scan_objects(struct target *t)
{
	char path[64], line[PATH_MAX + 128];
	struct object objs[256];
	int n = 0, i, have_loader = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", t->pid);
	f = fopen(path, "re");
	if (!f)
		die(errno == ENOENT ? EXIT_NO_PROCESS : EXIT_PERMISSION,
		    "cannot read %s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, off;
		char perms[8], file[PATH_MAX];

		file[0] = '\0';
		if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %4095[^\n]", &lo, &hi, perms, &off,
			   file) < 4 || file[0] != '/')
			continue;
		for (i = 0; i < n; i++)
			if (!strcmp(objs[i].path, file))
				break;
		if (i == n) {
			if (n == (int)(sizeof(objs) / sizeof(objs[0])))
				continue;
			memset(&objs[n], 0, sizeof(objs[n]));
			snprintf(objs[n].path, sizeof(objs[n].path), "%s", file);
			objs[n].text_lo = UINTPTR_MAX;
			n++;
		}
		if (off == 0 && !objs[i].base)
			objs[i].base = lo;
		if (perms[2] == 'x') {
			if (lo < objs[i].text_lo)
				objs[i].text_lo = lo;
			if (hi > objs[i].text_hi)
				objs[i].text_hi = hi;
		}
	}
	fclose(f);
	for (i = 0; i < n; i++) {
		struct scan s = { t, is_libc(objs[i].path), 0 };

		if (!objs[i].text_hi)
			continue;
		if (is_loader(objs[i].path)) {
			have_loader = 1;
			add_deny(t, objs[i].text_lo, objs[i].text_hi);
			continue;
		}
		each_symbol(t->pid, &objs[i], note_symbol, &s);
		if (s.defines_malloc && !s.is_libc)
			add_deny(t, objs[i].text_lo, objs[i].text_hi);	/* an allocator */
		else if (!s.is_libc && t->n_plain < MAX_RANGES)
			t->plain[t->n_plain++] = (struct range){ objs[i].text_lo, objs[i].text_hi };
	}
	if (!have_loader || !t->dlopen || !t->dlsym || !t->dlerror)
		die(EXIT_NOT_DYNAMIC, "process %d has no dynamic loader and glibc's dlopen "
		    "(statically linked, or not glibc 2.34 or later): cannot load the hook",
		    t->pid);
}

/* ---- one thread --------------------------------------------------------- */

struct saved {
	struct user_regs_struct regs;
	unsigned char xstate[16384];
	struct iovec xiov;
};

static int in_ranges(const struct range *r, int n, uintptr_t a)
{
	int i;

	for (i = 0; i < n; i++)
		if (a >= r[i].lo && a < r[i].hi)
			return 1;
	return 0;
}

static ssize_t peek(pid_t tid, uintptr_t addr, void *buf, size_t len)
{
	struct iovec local = { buf, len }, remote = { (void *)addr, len };

	return process_vm_readv(tid, &local, 1, &remote, 1, 0);
}

static int poke(pid_t tid, uintptr_t addr, const void *buf, size_t len)
{
	struct iovec local = { (void *)buf, len }, remote = { (void *)addr, len };

	return process_vm_writev(tid, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}

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
 * slots hold stale addresses (main's, the loader's start-up calls).
 */
static int safe_point(const struct target *t, pid_t tid, const struct user_regs_struct *r)
{
	static uint64_t stack[STACK_SCAN / 8];
	ssize_t got;
	size_t i;

	if (in_ranges(t->deny, t->n_deny, r->rip))
		return 0;
	if (in_ranges(t->plain, t->n_plain, r->rip))
		return 1;
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

static const long g_eintr_on_stop[] = {
	SYS_epoll_wait, SYS_epoll_pwait,
#ifdef SYS_epoll_pwait2
	SYS_epoll_pwait2,
#endif
	SYS_rt_sigtimedwait, SYS_semtimedop, SYS_io_getevents,
};

/* A signal is pending for the thread that it does not block. */
static int signal_pending(pid_t pid, pid_t tid)
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
 * a signal is pending: its handler may be what the program waits for.
 */
static void restart_eintr(pid_t pid, pid_t tid, struct user_regs_struct *r)
{
	size_t i;

	if ((long long)r->rax != -EINTR || (long long)r->orig_rax < 0 || signal_pending(pid, tid))
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
static int wait_stop(pid_t tid, uint64_t deadline_ms)
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
static int stop_thread(pid_t tid)
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

struct pending {
	int sig[8];
	int n;
};

/*
 * Calls fn(a, b) in the stopped thread, on its stack below sp; its return
 * value, or sets *err. Signals that arrive meanwhile are held in p for the
 * end (delivered after the registers are back).
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
			wait_stop(tid, 0);
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

static int attach_thread(struct target *t, pid_t tid, const char *conf, int *result,
			 char *why, size_t why_len)
{
	static struct saved s;
	struct pending p = { .n = 0 };
	uintptr_t sp, path_at, name_at, conf_at;
	size_t path_len = strlen(t->lib) + 1, conf_len = strlen(conf) + 1;
	uint64_t h, fn, msg;
	int err = 0, i;

	if (save(tid, &s))
		return EXIT_GONE;
	/* below the red zone and what the strings take */
	sp = s.regs.rsp - 128 - SCRATCH;
	path_at = sp;
	name_at = path_at + path_len;
	conf_at = name_at + sizeof("pmm_attach");
	if (path_len + sizeof("pmm_attach") + conf_len > SCRATCH - 64)
		return EXIT_USAGE;
	if (poke(tid, path_at, t->lib, path_len) ||
	    poke(tid, name_at, "pmm_attach", sizeof("pmm_attach")) ||
	    poke(tid, conf_at, conf, conf_len))
		return EXIT_GONE;
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
	if (restore(tid, &s) && !err)
		err = EXIT_GONE;
	ptrace(PTRACE_DETACH, tid, 0, 0);
	for (i = 0; i < p.n; i++)
		syscall(SYS_tgkill, t->pid, tid, p.sig[i]);
	return err;
}

/* ---- the process -------------------------------------------------------- */

static void perm_denied(pid_t pid, int err)
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
		die(EXIT_PERMISSION, "ptrace of process %d refused (%s; "
		    "kernel.yama.ptrace_scope is %s: %s)", pid, strerror(err), scope,
		    !strcmp(scope, "3") ? "no process may be attached to" :
		    !strcmp(scope, "2") ? "only CAP_SYS_PTRACE may attach" :
		    "only a parent or CAP_SYS_PTRACE may attach");
	die(EXIT_PERMISSION, "ptrace of process %d refused (%s): attach as its user or root",
	    pid, strerror(err));
}

static void check_target(struct target *t, int allow_seccomp)
{
	char buf[64], p1[PATH_MAX + 64];
	struct stat a, b;

	if (kill(t->pid, 0) && errno == ESRCH)
		die(EXIT_NO_PROCESS, "no process %d", t->pid);
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
	if (stat(t->lib, &a))
		die(EXIT_USAGE, "%s: %s", t->lib, strerror(errno));
	snprintf(p1, sizeof(p1), "/proc/%d/root%s", t->pid, t->lib);
	if (stat(p1, &b) && (errno == EACCES || errno == EPERM))
		perm_denied(t->pid, errno);	/* its root is not ours to see */
	if (stat(p1, &b))
		die(EXIT_NO_LIBRARY, "%s is not there in process %d's mount namespace (%s; "
		    "a container?): install the hook there at that path, or use its path "
		    "there with --lib", t->lib, t->pid, strerror(errno));
	if (a.st_dev != b.st_dev || a.st_ino != b.st_ino)
		die(EXIT_NO_LIBRARY, "%s is another file in process %d's mount namespace "
		    "(device %lx inode %lu there, %lx %lu here; a container?): install the hook "
		    "there at that path, or use its path there with --lib", t->lib, t->pid,
		    (unsigned long)b.st_dev, (unsigned long)b.st_ino, (unsigned long)a.st_dev,
		    (unsigned long)a.st_ino);
}

/* Threads sleeping in a system call first: they are the likeliest safe. */
static int list_threads(pid_t pid, pid_t *tids, int max)
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

static void usage(void)
{
	fprintf(stderr, "usage: %s [--lib PATH] [--timeout MS] [--allow-seccomp] PID "
		"[PMM_X=V...]\n", g_prog);
	exit(EXIT_USAGE);
}

int main(int argc, char **argv)
{
	struct target t = { 0 };
	char conf[2048] = "", why[512] = "", lib[PATH_MAX];
	long timeout_ms = 2000;
	int i, allow_seccomp = 0, result = 0, tried = 0;
	uint64_t deadline, stopped_ms = 0;
	pid_t tids[4096];

	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--lib") && i + 1 < argc)
			t.lib = argv[++i];
		else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
			timeout_ms = atol(argv[++i]);
		else if (!strcmp(argv[i], "--allow-seccomp"))
			allow_seccomp = 1;
		else
			usage();
	}
	if (i >= argc || atoi(argv[i]) <= 0 || timeout_ms <= 0)
		usage();
	t.pid = atoi(argv[i++]);
	for (; i < argc; i++) {
		if (strncmp(argv[i], "PMM_", 4) || !strchr(argv[i], '=') || strchr(argv[i], '\n') ||
		    strlen(conf) + strlen(argv[i]) + 2 > sizeof(conf))
			die(EXIT_USAGE, "bad setting %s (PMM_NAME=VALUE)", argv[i]);
		strcat(conf, argv[i]);
		strcat(conf, "\n");
	}
	if (!t.lib) {
		/* next to this program: hooklib/inject/.. or an installed libexec */
		ssize_t n = readlink("/proc/self/exe", lib, sizeof(lib) - 32);

		if (n <= 0)
			die(EXIT_USAGE, "cannot find this program's path: --lib PATH");
		lib[n] = '\0';
		*strrchr(lib, '/') = '\0';
		strcat(lib, "/../libpmmhook.so");
		t.lib = realpath(lib, NULL);
		if (!t.lib)
			die(EXIT_USAGE, "%s: %s (--lib PATH)", lib, strerror(errno));
	}
	if (t.lib[0] != '/')
		die(EXIT_USAGE, "--lib %s: an absolute path, please", t.lib);
	check_target(&t, allow_seccomp);
	scan_objects(&t);

	deadline = now_ms() + (uint64_t)timeout_ms;
	do {
		int n = list_threads(t.pid, tids, (int)(sizeof(tids) / sizeof(tids[0])));

		if (n <= 0)
			die(EXIT_GONE, "process %d exited", t.pid);
		for (i = 0; i < n && now_ms() <= deadline; i++) {
			struct user_regs_struct r;
			uint64_t t0 = now_ms();
			int e = stop_thread(tids[i]);

			if (e == -EPERM)
				perm_denied(t.pid, EPERM);
			if (e)
				continue;	/* gone meanwhile */
			tried++;
			if (!ptrace(PTRACE_GETREGS, tids[i], 0, &r) && safe_point(&t, tids[i], &r)) {
				restart_eintr(t.pid, tids[i], &r);
				ptrace(PTRACE_SETREGS, tids[i], 0, &r);
				e = attach_thread(&t, tids[i], conf, &result, why, sizeof(why));
				stopped_ms = now_ms() - t0;
				if (e == EXIT_GONE)
					die(EXIT_GONE, "process %d exited during the attach", t.pid);
				if (e == EXIT_LOAD_FAILED)
					die(e, "loading %s into process %d failed: %s", t.lib, t.pid,
					    why[0] ? why : "the call did not return");
				if (e)
					die(e, "attach failed");
				if (result < 0)
					die(EXIT_ATTACH_FAILED, "the hook in process %d refused: %s",
					    t.pid, result == -EALREADY ?
					    "it is preloaded already (pmctl start is enough)" :
					    result == -EBUSY ? "it is monitored now (pmctl stop first)" :
					    strerror(-result));
				printf("attached to %d: %d entries redirected, thread %d stopped "
				       "%llu ms\n", t.pid, result, tids[i],
				       (unsigned long long)stopped_ms);
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
