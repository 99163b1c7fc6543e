// SPDX-License-Identifier: GPL-2.0
/*
 * Growth of kind OUTSIDE THE HEAP: every 10 ms it maps 64 KiB of
 * anonymous memory (MAP_PRIVATE | MAP_ANONYMOUS) and writes it, about
 * 6 MiB/s, keeping it all (neighbouring mappings merge into one). It
 * maps with the system call itself, as a runtime with its own allocator
 * does (Go's, a JIT's code cache): the hook records the mmap calls that go
 * through libc as heap blocks with their site, and this memory is the kind
 * it cannot see. It grows from a first SIGUSR2 until SECS seconds or a
 * second one (kinds.h).
 *
 *   kind_mmap SECS
 */
#include <sys/mman.h>
#include <sys/syscall.h>

#include "kinds.h"

#define CHUNK (64 * 1024)

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 10, end;
	long p;

	kinds_start();
	end = kinds_wait_start(secs);
	while (kinds_growing(end)) {
		p = syscall(SYS_mmap, NULL, CHUNK, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p != -1)
			memset((void *)p, 0x77, CHUNK);
		kinds_tick(10000);
	}
	return kinds_hold();
}
