// SPDX-License-Identifier: GPL-2.0
/*
 * A target that turns what pmm-scan reads into a weapon
 * (tests/host/test_unreachable.py, run as nobody): its own heap and the
 * hook's registry made to lie. pmm-scan must neither crash nor hang, and
 * call nothing lost that it cannot prove.
 *
 *   unreach_hostile heap       chunk headers overwritten with garbage
 *   unreach_hostile tcache     a tcache list that loops, a count that lies
 *   unreach_hostile registry   the hook's registry (preloaded) rewritten
 *
 * Prints "ready" and waits for stdin's end.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void *g_keep[256];

static uint64_t rnd(void)
{
	static uint64_t s = 0x9e3779b97f4a7c15ULL;

	s ^= s << 13;
	s ^= s >> 7;
	s ^= s << 17;
	return s;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "heap";
	char c;
	int i;

	for (i = 0; i < 256; i++)
		g_keep[i] = malloc(32 + (size_t)(i % 16) * 16);
	for (i = 0; i < 256; i += 3) {
		free(g_keep[i]);
		g_keep[i] = NULL;
	}
	if (!strcmp(mode, "heap")) {
		/* sizes of chunks in use and free: random, huge, zero, unaligned */
		for (i = 1; i < 255; i += 5) {
			uint64_t *hdr = (uint64_t *)(g_keep[i] ? g_keep[i] : g_keep[i + 1]) - 2;

			hdr[1] = i % 4 == 0 ? 0 : i % 4 == 1 ? ~0ULL : i % 4 == 2 ? rnd() : 17;
			hdr[0] = rnd();
		}
	} else if (!strcmp(mode, "tcache")) {
		/* a freed chunk whose next pointer is itself (mangled or not) */
		uintptr_t freed[86];

		for (i = 0; i < 255; i += 3) {
			freed[i / 3] = (uintptr_t)g_keep[i + 1];
			free(g_keep[i + 1]);
			g_keep[i + 1] = NULL;
		}
		/* after the last free: glibc checks its lists at the next */
		for (i = 0; i < 85; i++)
			*(volatile uint64_t *)freed[i] = i % 2 ? freed[i] ^ (freed[i] >> 12) : freed[i];
	} else if (!strcmp(mode, "registry")) {
		uint64_t *reg = dlsym(RTLD_DEFAULT, "pmm_scan_registry");
		uintptr_t page;

		if (!reg) {
			fprintf(stderr, "no pmm_scan_registry: preload the hook\n");
			return 2;
		}
		page = (uintptr_t)reg & ~4095UL;
		if (mprotect((void *)page, 8192, PROT_READ | PROT_WRITE))
			return 3;
		/* the version's fields kept; every address and count a lie */
		for (i = 2; i < 24; i++)
			reg[i] = i % 3 == 0 ? ~0ULL - 4096 : i % 3 == 1 ? (uintptr_t)&reg[i] : rnd();
	}
	if (write(1, "ready\n", 6) != 6)	/* no malloc after the lies */
		return 4;
	while (read(0, &c, 1) > 0)
		;
	return 0;
}
