// SPDX-License-Identifier: GPL-2.0
/*
 * The one line the hook may write on stderr, when it gives up (the device
 * is missing or refuses) and everything passes straight to libc: one
 * write(2) of a line built on the stack, no stdio, no malloc.
 *
 * Owns: g_noticed.
 */
#include <errno.h>

#include "env.h"
#include "notice.h"

static int g_noticed;		/* the one stderr line was written */

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

	if (g_quiet || __atomic_exchange_n(&g_noticed, 1, __ATOMIC_RELAXED))
		return;
	if (err)
		say(with_err, sizeof(with_err) / sizeof(with_err[0]));
	else
		say(without, sizeof(without) / sizeof(without[0]));
}

void notice(const char *what, int err, const char *then)
{
	notice_line(what, "", err, then);
}

void notice_open(const char *path, int err)
{
	notice_line("cannot open ", path, err, "; allocations pass through to libc");
}
