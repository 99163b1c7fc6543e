// SPDX-License-Identifier: GPL-2.0
/*
 * The device, $PMM_DEVICE or /dev/pmm (device.h): opened once at fd 3 or
 * above, checked before every ioctl to be still the file the hook opened,
 * and given up (everything passes straight to libc) when it fails or is
 * gone.
 *
 * Owns: g_fd, g_dev_usable, the device's identity (g_dev_*).
 */
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include "device.h"
#include "env.h"
#include "fakedev.h"
#include "mode.h"
#include "notice.h"

int g_fd = -1;
int g_dev_usable;

/* g_fd's file as dev_open found it (fstat). */
static dev_t g_dev_dev, g_dev_rdev;
static ino_t g_dev_ino;

#ifdef PMM_FAKE_DEV
#define DEV_DEFAULT	"/dev/null"
#else
#define DEV_DEFAULT	"/dev/" PMM_DEVICE_NAME
#endif

/*
 * $PMM_DEVICE, else the default, as pmctl chooses its device (empty: the
 * default): a node made elsewhere (a container's bind mount), or a test's
 * file. env is the settings' (NULL in secure-execution mode, where a path
 * the invoking user chose must not be opened: the default). The fake
 * build opens it too; its answers do not depend on the file.
 */
const char *dev_path(char **env)
{
	const char *p = env_get(env, "PMM_DEVICE");

	return p && *p ? p : DEV_DEFAULT;
}

/*
 * Opens the device at fd 3 or above, close-on-exec: a program started with
 * fds 0-2 closed gets them back from its own next open()s, as POSIX
 * promises, and never finds the device on its stdin, stdout or stderr. Its
 * identity is kept, so that dev_ours can tell it from a file the program
 * later opens at the same number. path: dev_path's. Returns the fd or
 * -errno.
 */
int dev_open(const char *path)
{
	struct stat st;
	int fd = open(path, O_RDWR | O_CLOEXEC), err, high;

	if (fd < 0)
		return -errno;
	if (fd <= STDERR_FILENO) {
		high = fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
		err = errno;
		close(fd);
		if (high < 0)
			return -err;
		fd = high;
	}
	if (fstat(fd, &st) < 0) {
		err = errno;
		close(fd);
		return -err;
	}
	g_dev_dev = st.st_dev;
	g_dev_ino = st.st_ino;
	g_dev_rdev = st.st_rdev;
	return fd;
}

/*
 * fd is still the file dev_open opened. A program may close every fd
 * (closefrom, close_range, a daemon's loop) and open another file that gets
 * the device's number: that file must never see the hook's ioctls. One
 * fstat before each ioctl (per batch, not per record).
 */
int dev_ours(int fd)
{
	struct stat st;

	return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == g_dev_dev &&
	       st.st_ino == g_dev_ino && st.st_rdev == g_dev_rdev;
}

static void dev_lost(void);

int pmm_dev_ioctl(unsigned long cmd, void *arg)
{
	int saved = errno, r, tries = 0;
	int fd = __atomic_load_n(&g_fd, __ATOMIC_RELAXED);

	if (!dev_ours(fd)) {
		dev_lost();
		errno = saved;
		return -EBADF;
	}
	do {
#ifdef PMM_FAKE_DEV
		r = fake_ioctl(fd, cmd, arg);
#else
		r = ioctl(fd, cmd, arg);
#endif
	} while (r < 0 && errno == EINTR && ++tries < 3);
	if (r < 0)
		r = -errno;
	errno = saved;
	return r;
}

/* Everything passes straight to libc from now on; 1 if this call ended it. */
int deactivate(void)
{
	if (!__atomic_exchange_n(&g_dev_usable, 0, __ATOMIC_SEQ_CST))
		return 0;
	__atomic_store_n(&g_exact_key, EXACT_OFF, __ATOMIC_RELEASE);
	set_mode(MODE_PASS);
	return 1;
}

void disable(int err, const char *what)
{
	if (deactivate())
		notice(what, err, "; allocations pass through to libc");
}

/*
 * The program closed the device's fd (and may have opened another file at
 * its number): pass through, quietly, since nothing went wrong that the
 * program should hear of, and never use that number again.
 */
static void dev_lost(void)
{
	__atomic_store_n(&g_fd, -1, __ATOMIC_RELAXED);
	deactivate();
}
