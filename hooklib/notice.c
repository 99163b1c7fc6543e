// SPDX-License-Identifier: GPL-2.0
/*
 * The one line the hook may write on stderr, when it gives up (the device
 * is missing or refuses) and everything passes straight to libc: one
 * write(2) of a line built on the stack, no stdio, no malloc. A line said
 * while the hook starts is said once per process tree (told_above).
 *
 * Owns: g_quiet, g_noticed, g_starting.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>

#include "notice.h"

int g_quiet;
static int g_noticed;		/* the one stderr line was written */
static int g_starting;		/* pmm_init runs (notice_starting) */

static const char *err_name(int err)
{
	switch (err) {
	case ENOENT: return "no such file (is pmm.ko loaded?)";
	case EACCES: return "permission denied";
	case EPERM: return "operation not permitted";
	case ENODEV: return "no such device (module unloaded?)";
	case ENXIO: return "no such device or address";
	case EBADF: return "bad file descriptor";
	case ENOTTY: return "not a pmm device";
	case EINVAL: return "invalid argument";
	case EIO: return "input/output error";
	case EMFILE: return "too many open files";
	default: return "error";
	}
}

/* n in decimal, ending at end (which it NUL-terminates); its first digit. */
static char *decimal(char *end, unsigned long n)
{
	*end = '\0';
	do {
		*--end = (char)('0' + n % 10);
		n /= 10;
	} while (n);
	return end;
}

/* A line of /proc/PID/maps up to its path: range, perms, offset, dev, inode. */
#define MAPS_HEAD	128

/*
 * fn(line, arg) for each line of /proc/PID/maps (pid 0: this process's),
 * cut at MAPS_HEAD - 1 bytes, until fn returns nonzero: that value, or 0
 * (also when the file cannot be read: another user's, no /proc).
 */
static int maps_each(pid_t pid, int (*fn)(const char *line, void *arg), void *arg)
{
	char path[32] = "/proc/self/maps", buf[1024], line[MAPS_HEAD], num[12];
	size_t len = 0;
	ssize_t n, i;
	int fd, r = 0;

	if (pid) {
		strcpy(path, "/proc/");
		strcat(path, decimal(num + sizeof(num) - 1, (unsigned long)pid));
		strcat(path, "/maps");
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	while (!r) {
		n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		for (i = 0; i < n && !r; i++) {
			if (buf[i] != '\n') {
				if (len < sizeof(line) - 1)
					line[len++] = buf[i];
				continue;
			}
			line[len] = '\0';
			len = 0;
			r = fn(line, arg);
		}
		if (n <= 0)
			break;
	}
	close(fd);
	return r;
}

/* A maps line's "dev inode" ("08:01 1234567"): its length, 0 if no file. */
static size_t file_id(const char *line, const char **id)
{
	const char *p = line;
	int field;

	*id = line;
	for (field = 0; field < 4; field++) {	/* to the inode */
		p = strchr(p, ' ');
		if (!p)
			return 0;
		if (field == 2)
			*id = p + 1;
		p++;
	}
	if (*p == '0' || *p < '0' || *p > '9')
		return 0;	/* inode 0: anonymous */
	while (*p >= '0' && *p <= '9')
		p++;
	return (size_t)(p - *id);
}

struct lib_id {
	uintptr_t addr;		/* in this library's text */
	char id[64];		/* its file's "dev inode" */
};

static int lib_line(const char *line, void *arg)
{
	struct lib_id *me = arg;
	uintptr_t lo = 0, hi = 0, *v = &lo;
	const char *id, *p;
	size_t n;

	for (p = line; *p && *p != ' '; p++) {
		if (*p == '-') {
			v = &hi;
			continue;
		}
		*v = *v << 4 | (uintptr_t)(*p <= '9' ? *p - '0' : (*p | 0x20) - 'a' + 10);
	}
	if (me->addr < lo || me->addr >= hi)
		return 0;
	n = file_id(line, &id);
	if (!n || n >= sizeof(me->id))
		return -1;
	memcpy(me->id, id, n);
	me->id[n] = '\0';
	return 1;
}

static int same_file(const char *line, void *arg)
{
	const char *want = arg, *id;
	size_t n = file_id(line, &id);

	return n && n == strlen(want) && !memcmp(id, want, n);
}

/*
 * Every process of a pipeline, a script or `git status` (its children
 * inherit LD_PRELOAD) finds the same missing device as it starts; the user
 * needs to hear it once. A process is silent when its parent, or its
 * process group's leader (the first of a pipeline that a shell with job
 * control started), has this very library (its file) loaded: that one
 * said it, or was told to keep quiet, or was silent because the one above
 * it said it, and so on up to the process the user started. A later
 * command, its parent the user's shell, says it again; so does a process
 * whose leader has already exited (nothing of it is left to tell).
 *
 * Nothing is written anywhere: the program's environment is its own to
 * pass on (a marker there would change what its children see), and a
 * marker file would outlive the process. /proc/PID/maps is read only when
 * there is a line to say. An image exec'd in the same process (env PROG)
 * says it again, its parent being the process's.
 */
static int told_above(void)
{
	struct lib_id me = { (uintptr_t)told_above, "" };
	pid_t ppid = getppid(), pgid = getpgrp();

	if (maps_each(0, lib_line, &me) != 1)
		return 0;
	if (ppid > 1 && maps_each(ppid, same_file, me.id))
		return 1;
	return pgid > 1 && pgid != ppid && pgid != getpid() &&
	       maps_each(pgid, same_file, me.id);
}

void say(const char *const parts[], size_t nparts)
{
	char line[256];
	size_t n = 0, i;
	int saved = errno;
	ssize_t w;

	if (g_quiet)
		return;
	for (i = 0; i < nparts; i++)
		for (const char *s = parts[i]; *s && n < sizeof(line) - 1; s++)
			line[n++] = *s;
	line[n++] = '\n';
	w = write(STDERR_FILENO, line, n);
	(void)w;
	errno = saved;
}

/* "pmm: what what2: <err's name> (errno N)then" (notice.h). */
static void notice_line(const char *what, const char *what2, int err, const char *then)
{
	char num[12];
	const char *with_err[] = { "pmm: ", what, what2, ": ", err_name(err), " (errno ",
				   decimal(num + sizeof(num) - 1, (unsigned int)err), ")", then };
	const char *without[] = { "pmm: ", what, what2, then };
	int saved = errno;

	if (g_quiet || __atomic_exchange_n(&g_noticed, 1, __ATOMIC_RELAXED))
		return;
	/* pmm_init's: the preloaded hook starting, as its whole tree does */
	if (__atomic_load_n(&g_starting, __ATOMIC_ACQUIRE) && told_above()) {
		errno = saved;
		return;
	}
	errno = saved;
	if (err)
		say(with_err, sizeof(with_err) / sizeof(with_err[0]));
	else
		say(without, sizeof(without) / sizeof(without[0]));
}

void notice_starting(int starting)
{
	__atomic_store_n(&g_starting, starting, __ATOMIC_RELEASE);
}

void notice(const char *what, int err, const char *then)
{
	notice_line(what, "", err, then);
}

void notice_open(const char *path, int err)
{
	notice_line("cannot open ", path, err, "; allocations pass through to libc");
}
