// SPDX-License-Identifier: GPL-2.0
/*
 * pmm-inject: the target's objects, from /proc/PID/maps and each object's
 * .dynsym read from the target's memory (elfmem.c; no file is opened):
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


#include "elfmem.h"
#include "exit_codes.h"
#include "objects.h"
#include "target.h"
#include "tracee.h"

/* The target's memory, for elfmem.c: ctx is its pid. */
static ssize_t read_target(void *ctx, uintptr_t addr, void *buf, size_t len)
{
	struct iovec local = { buf, len }, remote = { (void *)addr, len };

	return process_vm_readv(*(pid_t *)ctx, &local, 1, &remote, 1, 0);
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

/*
 * The target's objects from its maps (the kernel's text: an object is a
 * file's mappings, told apart by device and inode, not by the name its
 * owner gave it), each read from its memory: deny ranges, libc's dl*
 * functions, the unwind tables.
 */
void scan_objects(struct target *t)
{
	struct mem m = { read_target, &t->pid };
	char path[64], line[PATH_MAX + 128];
	int n = 0, i, have_loader = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", t->pid);
	f = fopen(path, "re");
	if (!f)
		die(errno == ENOENT ? EXIT_NO_PROCESS : EXIT_PERMISSION,
		    "cannot read %s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, off, ino;
		char perms[8], dev[16], file[PATH_MAX];
		struct object *o;

		file[0] = '\0';
		if (sscanf(line, "%lx-%lx %7s %lx %15s %lu %4095[^\n]", &lo, &hi, perms, &off,
			   dev, &ino, file) < 7 || file[0] != '/' || ino == 0)
			continue;
		for (i = 0; i < n; i++)
			if (t->objs[i].ino == ino && !strcmp(t->objs[i].dev, dev))
				break;
		if (i == n) {
			if (n == MAX_OBJECTS)
				continue;
			o = &t->objs[n++];
			memset(o, 0, sizeof(*o));
			/* its end, where is_libc and is_loader look */
			snprintf(o->name, sizeof(o->name), "%s", file + (strlen(file) <
				 sizeof(o->name) ? 0 : strlen(file) - sizeof(o->name) + 1));
			snprintf(o->dev, sizeof(o->dev), "%s", dev);
			o->ino = ino;
			o->lo = lo;
			o->text_lo = UINTPTR_MAX;
		}
		o = &t->objs[i];
		if (lo < o->lo)
			o->lo = lo;
		if (hi > o->hi)
			o->hi = hi;
		if (off == 0 && !o->base)
			o->base = lo;
		if (perms[2] == 'x') {
			if (lo < o->text_lo)
				o->text_lo = lo;
			if (hi > o->text_hi)
				o->text_hi = hi;
		}
	}
	fclose(f);
	t->n_objs = n;
	/* its memory is read with ptrace's access (Yama may refuse what the maps allowed) */
	for (i = 0; i < n; i++) {
		unsigned char byte;

		if (t->objs[i].base && m.read(m.ctx, t->objs[i].base, &byte, 1) < 0 &&
		    (errno == EPERM || errno == EACCES))
			perm_denied(t->pid, errno);
		if (t->objs[i].base)
			break;
	}
	for (i = 0; i < n; i++) {
		struct object *o = &t->objs[i];
		struct scan s = { t, is_libc(o->name), 0 };

		if (!o->text_hi)
			continue;
		if (is_loader(o->name)) {
			have_loader = 1;
			add_deny(t, o->text_lo, o->text_hi);
		}
		if (!o->base || elf_image_read(&m, o->lo, o->hi, o->base, &o->img))
			continue;
		o->have_eh = !elf_eh_table(&m, &o->img, &o->eh);
		if (is_loader(o->name))
			continue;
		elf_each_function(&m, &o->img, note_symbol, &s);
		if (s.is_libc)
			t->restorer = find_restorer(t->pid, o->text_lo, o->text_hi);
		if (s.defines_malloc && !s.is_libc)
			add_deny(t, o->text_lo, o->text_hi);	/* an allocator */
		else if (!s.is_libc && t->n_plain < MAX_RANGES)
			t->plain[t->n_plain++] = (struct range){ o->text_lo, o->text_hi };
	}
	if (!have_loader || !t->dlopen || !t->dlsym || !t->dlerror)
		die(EXIT_NOT_DYNAMIC, "process %d has no dynamic loader and glibc's dlopen "
		    "(statically linked, or not glibc 2.34 or later): cannot load the hook",
		    t->pid);
}
