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

static size_t put(char *buf, size_t at, size_t cap, const char *s)
{
	while (*s && at < cap)
		buf[at++] = *s++;
	return at;
}

void notice(const char *what, int err, const char *then)
{
	char line[200], num[12];
	size_t n = 0, k = sizeof(num);
	unsigned int e = (unsigned int)err;
	ssize_t w;

	int saved = errno;

	if (g_quiet || __atomic_exchange_n(&g_noticed, 1, __ATOMIC_RELAXED))
		return;
	num[--k] = '\0';
	do {
		num[--k] = (char)('0' + e % 10);
		e /= 10;
	} while (e && k);
	n = put(line, n, sizeof(line) - 1, "pmm: ");
	n = put(line, n, sizeof(line) - 1, what);
	if (err) {
		n = put(line, n, sizeof(line) - 1, ": ");
		n = put(line, n, sizeof(line) - 1, err_name(err));
		n = put(line, n, sizeof(line) - 1, " (errno ");
		n = put(line, n, sizeof(line) - 1, num + k);
		n = put(line, n, sizeof(line) - 1, ")");
	}
	n = put(line, n, sizeof(line) - 1, then);
	line[n++] = '\n';
	w = write(STDERR_FILENO, line, n);
	(void)w;
	errno = saved;
}
