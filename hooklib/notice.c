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

void notice(const char *what, int err, const char *then)
{
	char num[12];
	size_t k = sizeof(num);
	unsigned int e = (unsigned int)err;
	const char *with_err[] = { "pmm: ", what, ": ", err_name(err), " (errno ", NULL, ")",
				   then };
	const char *without[] = { "pmm: ", what, then };

	if (g_quiet || __atomic_exchange_n(&g_noticed, 1, __ATOMIC_RELAXED))
		return;
	num[--k] = '\0';
	do {
		num[--k] = (char)('0' + e % 10);
		e /= 10;
	} while (e && k);
	with_err[5] = num + k;	/* the number, written above */
	if (err)
		say(with_err, sizeof(with_err) / sizeof(with_err[0]));
	else
		say(without, sizeof(without) / sizeof(without[0]));
}
