// SPDX-License-Identifier: GPL-2.0
/*
 * pmm-scan: the running process, read before it is stopped. Its objects
 * come from its maps (told apart by device and inode, never opened) and
 * their dynamic symbols from its memory (elfmem.c): libpmmhook.so is the
 * object that defines pmm_scan_registry, whatever its path (a memfd
 * after an attach into a container); the clone runs at a syscall
 * instruction of libc's code. The hook's mode is read here too, so a
 * process that is not in exact mode is refused without a stop.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "../inject/elfmem.h"
#include "../inject/tracee.h"
#include "../scanreg.h"
#include "exit_codes.h"
#include "target.h"

#define MAX_OBJECTS	512
#define TEXT_MAX	(64 << 20)

struct object {
	char base_name[64];
	uint64_t dev, ino;
	uint64_t lo, hi, base;
	uint64_t text_lo, text_hi;
};

static ssize_t read_live(void *ctx, uintptr_t addr, void *buf, size_t len)
{
	struct iovec local = { buf, len }, remote = { (void *)addr, len };

	return process_vm_readv(*(pid_t *)ctx, &local, 1, &remote, 1, 0);
}

struct find {
	uint64_t addr;
	size_t size;
};

static void find_registry(void *arg, const char *name, uintptr_t addr, size_t size)
{
	struct find *f = arg;

	if (!strcmp(name, "pmm_scan_registry")) {
		f->addr = addr;
		f->size = size;
	}
}

/*
 * A syscall instruction (0f 05) in [lo, hi) of the target's code, one
 * followed by a trap (ud2, int3, hlt) preferred: the copy resumes after it
 * only if we die between its creation and PTRACE_O_EXITKILL.
 */
static uint64_t find_syscall(pid_t pid, uint64_t lo, uint64_t hi)
{
	static uint8_t buf[1 << 16];
	uint64_t a, any = 0;

	if (hi <= lo || hi - lo > TEXT_MAX)
		return 0;
	for (a = lo; a < hi; a += sizeof(buf) - 4) {
		size_t len = hi - a < sizeof(buf) ? hi - a : sizeof(buf);
		ssize_t got = read_live(&pid, a, buf, len);
		size_t i;

		if (got < 4)
			break;
		for (i = 0; i + 4 <= (size_t)got; i++) {
			if (buf[i] != 0x0f || buf[i + 1] != 0x05)
				continue;
			if ((buf[i + 2] == 0x0f && buf[i + 3] == 0x0b) || buf[i + 2] == 0xcc ||
			    buf[i + 2] == 0xf4)
				return a + i;
			if (!any)
				any = a + i;
		}
		if ((size_t)got < len)
			break;
	}
	return any;
}

static const char *base_name(const char *path)
{
	const char *b = strrchr(path, '/');

	return b ? b + 1 : path;
}

/* pid 1 of its own pid namespace (NSpid's last field): the kernel refuses
 * CLONE_PARENT there. */
static int namespace_init(pid_t pid)
{
	char buf[256], *last;

	if (!status_field(pid, "NSpid", buf, sizeof(buf)))
		return pid == 1;
	last = strrchr(buf, '\t');
	last = last ? last + 1 : buf;
	if (strrchr(last, ' '))
		last = strrchr(last, ' ') + 1;
	return atoi(last) == 1;
}

void target_inspect(struct target_info *t)
{
	static struct object objs[MAX_OBJECTS];
	pid_t live = t->pid, tids[2];
	struct mem m = { read_live, &live };
	char path[64], line[PATH_MAX + 128];
	uint64_t libc_lo = 0, libc_hi = 0, other_lo = 0, other_hi = 0;
	int n = 0, i;
	FILE *f;

	/* a main thread that left (pthread_exit) has no memory: another's is read */
	if (status_field(t->pid, "State", path, sizeof(path)) && path[0] == 'Z' &&
	    list_tids(t->pid, tids, 2) == 2)
		live = tids[0] == t->pid ? tids[1] : tids[0];
	t->is_init = namespace_init(t->pid);
	snprintf(path, sizeof(path), "/proc/%d/task/%d/maps", t->pid, live);
	f = fopen(path, "re");
	if (!f && (errno == EACCES || errno == EPERM))
		perm_denied(t->pid, errno);
	if (!f)
		die(errno == ENOENT ? EXIT_NO_PROCESS : EXIT_FAILED, "cannot read %s: %s", path,
		    strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, off, ino;
		unsigned int major, minor;
		char perms[8], file[PATH_MAX];
		struct object *o;

		file[0] = '\0';
		if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu %4095[^\n]", &lo, &hi, perms, &off,
			   &major, &minor, &ino, file) < 8 || file[0] != '/' || ino == 0)
			continue;
		for (i = 0; i < n; i++)
			if (objs[i].ino == ino && objs[i].dev == ((uint64_t)major << 32 | minor))
				break;
		if (i == n) {
			if (n == MAX_OBJECTS)
				continue;
			o = &objs[n++];
			memset(o, 0, sizeof(*o));
			snprintf(o->base_name, sizeof(o->base_name), "%.63s", base_name(file));
			o->dev = (uint64_t)major << 32 | minor;
			o->ino = ino;
			o->lo = lo;
			o->text_lo = UINT64_MAX;
		}
		o = &objs[i];
		if (lo < o->lo)
			o->lo = lo;
		if (hi > o->hi)
			o->hi = hi;
		if (off == 0 && !o->base)
			o->base = lo;
		if (perms[2] == 'x' && lo < o->text_lo)
			o->text_lo = lo;
		if (perms[2] == 'x' && hi > o->text_hi)
			o->text_hi = hi;
	}
	fclose(f);
	if (n) {
		uint8_t byte;

		errno = 0;
		if (read_live(&live, objs[0].lo, &byte, 1) != 1 && (errno == EPERM || errno == EACCES))
			perm_denied(t->pid, errno);
	}
	for (i = 0; i < n; i++) {
		struct object *o = &objs[i];
		struct elf_image img;
		struct find found = { 0, 0 };

		if (!strncmp(o->base_name, "ld-linux", 8) || !strncmp(o->base_name, "ld-musl", 7))
			t->dynamic = 1;
		if (o->text_hi && !strcmp(o->base_name, "libc.so.6")) {
			libc_lo = o->text_lo;
			libc_hi = o->text_hi;
		} else if (o->text_hi && !other_hi) {
			other_lo = o->text_lo;
			other_hi = o->text_hi;
		}
		if (!o->base || elf_image_read(&m, o->lo, o->hi, o->base, &img))
			continue;
		if (!t->registry && !elf_each_object(&m, &img, find_registry, &found) &&
		    found.addr && found.size >= sizeof(struct pmm_scanreg)) {
			t->registry = found.addr;
			t->hook_dev = o->dev;
			t->hook_ino = o->ino;
		}
	}
	t->syscall_insn = find_syscall(live, libc_lo, libc_hi);
	if (!t->syscall_insn)
		t->syscall_insn = find_syscall(live, other_lo, other_hi);
	if (t->registry) {
		struct pmm_scanreg reg;
		uint16_t mode;

		if (read_live(&live, t->registry, &reg, sizeof(reg)) == sizeof(reg) &&
		    reg.magic == PMM_SCANREG_MAGIC && reg.version == PMM_SCANREG_VERSION &&
		    read_live(&live, reg.mode, &mode, sizeof(mode)) == sizeof(mode))
			t->mode = mode;
		else
			t->registry = 0;	/* another version: not ours to read */
	}
}
