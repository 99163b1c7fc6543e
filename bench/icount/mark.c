// SPDX-License-Identifier: GPL-2.0
/*
 * Executes the marker instruction that bench/icount/icount.c (a QEMU plugin)
 * answers with the guest's instruction count so far: "mark start" before a
 * measured run, "mark stop" after it. Elsewhere it is a no-op.
 *
 * Static: no dynamic loader, no shared libraries to map at each start. Its
 * start and exit still cost the guest about 2 M instructions a run, the same
 * every time (a "mark start; mark stop" pair measured 4.03-4.09 M).
 */
#include <stdio.h>
#include <string.h>

/* nopl 0x504d4d00+K(%rax,%rax,1): "PMM" and K in the displacement */
#define MARK(k) asm volatile("nopl 0x504d4d" #k "(%%rax,%%rax,1)" ::: "memory")

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "start")) {
		MARK(01);
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "stop")) {
		MARK(02);
		return 0;
	}
	fprintf(stderr, "usage: mark start|stop\n");
	return 2;
}
