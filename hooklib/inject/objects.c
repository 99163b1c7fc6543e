// SPDX-License-Identifier: GPL-2.0
/*
 * pmm-inject: the target's objects, from /proc/PID/maps and each object's
 * .dynsym read through /proc/PID/root (the target's mount namespace):
 * the code a safe point must not be in or called from (ld.so, an
 * allocator other than libc, the malloc family and dl* functions of every
 * object), the program's own code (where a stack's library part ends),
 * and libc's dlopen, dlsym and dlerror.
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


#include "inject.h"

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
		else if (!strcmp(name, "memfd_create"))
			s->t->memfd_create = addr;
		else if (!strcmp(name, "close"))
			s->t->close = addr;
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

/*
 * libc's __restore_rt, where a signal handler returns (not in .dynsym): its
 * code, mov $SYS_rt_sigreturn, %rax; syscall, found in libc's text. A
 * word of a thread's stack equal to it is a signal frame.
 */
static uintptr_t find_restorer(pid_t pid, uintptr_t lo, uintptr_t hi)
{
	static const unsigned char code[] = { 0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05 };
	char path[64];
	unsigned char *text;
	uintptr_t found = 0, i;
	int fd;

	if (hi <= lo || hi - lo > (64 << 20))
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/mem", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	text = fd >= 0 ? malloc(hi - lo) : NULL;
	if (text && pread(fd, text, hi - lo, (off_t)lo) == (ssize_t)(hi - lo)) {
		for (i = 0; i + sizeof(code) <= hi - lo; i++) {
			if (!memcmp(text + i, code, sizeof(code))) {
				found = lo + i;
				break;
			}
		}
	}
	free(text);
	if (fd >= 0)
		close(fd);
	return found;
}

/* The target's objects from its maps: deny ranges, libc's dl* functions. */
void scan_objects(struct target *t)
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
		if (s.is_libc)
			t->restorer = find_restorer(t->pid, objs[i].text_lo, objs[i].text_hi);
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

