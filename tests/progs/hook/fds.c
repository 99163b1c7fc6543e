// SPDX-License-Identifier: GPL-2.0
/*
 * The hook's device fd and the program's own fds.
 *   fds std FILE          run with fds 0-2 closed: opens FILE three times
 *                         and writes "opened A B C, device D" into it (D: the
 *                         fd >= 3 that links to /dev/null or /dev/pmm, -1 if
 *                         none). POSIX promises A B C = 0 1 2.
 *   fds close|close_range FILE
 *                         3000 blocks of 55 bytes allocated and freed; then
 *                         the device's fd is closed (close, or
 *                         close_range(3, ~0U, 0)) and FILE opened, which
 *                         takes its number; then 3000 blocks of 77 bytes.
 *                         Prints "FILE at N, errno kept" (N: FILE's fd, the
 *                         device's before) or "... errno changed to E".
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The first fd >= 3 that is the hook's device, or -1. */
static int device_fd(void)
{
	char path[64], target[64];
	struct dirent *d;
	DIR *dir = opendir("/proc/self/fd");
	int found = -1;

	if (!dir)
		return -1;
	while ((d = readdir(dir))) {
		int fd = atoi(d->d_name);
		ssize_t n;

		if (fd < 3 || fd == dirfd(dir))
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		n = readlink(path, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = '\0';
		if (!strcmp(target, "/dev/null") || !strcmp(target, "/dev/pmm")) {
			found = fd;
			break;
		}
	}
	closedir(dir);
	return found;
}

static void churn(size_t size, int n, int keep)
{
	static void *blocks[3000];

	for (int i = 0; i < n; i++) {
		blocks[i % 3000] = malloc(size);
		if (!keep)
			free(blocks[i % 3000]);
	}
	if (keep)
		for (int i = 0; i < n && i < 3000; i++)
			free(blocks[i]);
}

int main(int argc, char **argv)
{
	int a, b, c, dev, fd, seen;
	char line[128];

	if (argc != 3)
		return 2;
	if (!strcmp(argv[1], "std")) {
		a = open(argv[2], O_RDWR | O_CREAT | O_TRUNC, 0644);
		b = open(argv[2], O_RDWR);
		c = open(argv[2], O_RDWR);
		dev = device_fd();
		snprintf(line, sizeof(line), "opened %d %d %d, device %d\n", a, b, c, dev);
		return write(a, line, strlen(line)) > 0 ? 0 : 1;
	}
	churn(55, 3000, 0);
	dev = device_fd();
	if (dev < 0)
		return 3;
	if (!strcmp(argv[1], "close_range"))
		syscall(436 /* close_range */, 3U, ~0U, 0U);
	else
		close(dev);
	fd = open(argv[2], O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd != dev)
		return 4;
	errno = EBADF;
	churn(77, 3000, 1);
	seen = errno;
	printf("FILE at %d, ", fd);
	if (seen == EBADF)
		printf("errno kept\n");
	else
		printf("errno changed to %d\n", seen);
	return 0;
}
