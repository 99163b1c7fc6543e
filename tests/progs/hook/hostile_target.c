// SPDX-License-Identifier: GPL-2.0
/*
 * A process that turns what pmm-inject reads against it (tests/host/
 * test_attach.py, run as nobody):
 *
 *   hostile_target fifo DIR LIB      maps a copy of LIB from DIR, unlinks it and
 *                                    leaves a FIFO where its maps line points
 *                                    ("DIR/lib.so (deleted)")
 *   hostile_target devlink DIR LIB   the same, with a symlink to /dev/zero there
 *   hostile_target wildsym FILE      maps FILE (an object whose .dynsym names
 *                                    lie past its string table) as code
 *   hostile_target memfd VICTIM      its libc's memfd_create returns an O_PATH
 *                                    descriptor of VICTIM, a file it may not write
 *
 * Prints "ready" once set up, then allocates and sleeps until killed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int copy_file(const char *from, const char *to)
{
	char buf[65536];
	int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0755);
	ssize_t n;

	if (in < 0 || out < 0)
		return -1;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n)
			return -1;
	close(in);
	close(out);
	return n;
}

/* LIB copied to DIR/lib.so and loaded; then the file is gone, a trap in its place */
static int swap_for(const char *dir, const char *lib, int fifo)
{
	char path[4096], trap[4200];

	snprintf(path, sizeof(path), "%s/lib.so", dir);
	snprintf(trap, sizeof(trap), "%s (deleted)", path);
	if (copy_file(lib, path) || !dlopen(path, RTLD_NOW))
		return -1;
	if (unlink(path))
		return -1;
	return fifo ? mkfifo(trap, 0666) : symlink("/dev/zero", trap);
}

static int map_code(const char *file)
{
	int fd = open(file, O_RDONLY);
	struct stat st;

	if (fd < 0 || fstat(fd, &st))
		return -1;
	return mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) ==
	       MAP_FAILED ? -1 : 0;
}

/* memfd_create, as pmm-inject finds it in libc, answers with fd: mov $fd, %eax; ret */
static int lie_about_memfd(const char *victim)
{
	unsigned char *fn = dlsym(RTLD_DEFAULT, "memfd_create");
	uintptr_t page = (uintptr_t)fn & ~(uintptr_t)4095;
	int fd = open(victim, O_PATH);

	if (!fn || fd < 0 || mprotect((void *)page, 8192, PROT_READ | PROT_WRITE | PROT_EXEC))
		return -1;
	fn[0] = 0xb8;
	memcpy(fn + 1, &fd, 4);
	fn[5] = 0xc3;
	return mprotect((void *)page, 8192, PROT_READ | PROT_EXEC);
}

int main(int argc, char **argv)
{
	int ok;

	if (argc < 3)
		return 2;
	if (!strcmp(argv[1], "fifo") && argc == 4)
		ok = swap_for(argv[2], argv[3], 1);
	else if (!strcmp(argv[1], "devlink") && argc == 4)
		ok = swap_for(argv[2], argv[3], 0);
	else if (!strcmp(argv[1], "wildsym"))
		ok = map_code(argv[2]);
	else if (!strcmp(argv[1], "memfd"))
		ok = lie_about_memfd(argv[2]);
	else
		return 2;
	if (ok) {
		perror(argv[1]);
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		free(malloc(64));
		usleep(1000);
	}
}
