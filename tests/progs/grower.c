// SPDX-License-Identifier: GPL-2.0
/*
 * grower MIB: prints "ready", waits for a line on stdin, maps and touches
 * MIB MiB of anonymous memory (vm and rss_anon grow by exactly that much),
 * prints "grown", then sleeps until killed.
 */
#include <sys/mman.h>
#include "pmmtest.h"

int main(int argc, char **argv)
{
	char line[16];
	size_t len;
	char *p;

	if (argc != 2)
		DIE("usage: grower MIB");
	len = strtoul(argv[1], NULL, 0) << 20;
	setvbuf(stdout, NULL, _IONBF, 0);
	printf("ready\n");
	if (!fgets(line, sizeof(line), stdin))
		DIE("stdin closed");
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		DIE("mmap: %s", strerror(errno));
	memset(p, 0x5a, len);
	printf("grown\n");
	for (;;)
		pause();
}
