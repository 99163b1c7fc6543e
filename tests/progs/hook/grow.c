// SPDX-License-Identifier: GPL-2.0
/*
 * Blocks grown by realloc, the way string builders grow them.
 *   grow ROUNDS   each round: malloc(777), realloc to 1555, then 2333, free;
 *                 then one more block grown to 1555 and kept. Prints the
 *                 kept block's first and last address ("0x... 0x..."); exit 2
 *                 if an allocation failed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 4;
	uintptr_t first;
	char *p, *q;

	for (int r = 0; r < rounds; r++) {
		q = realloc(malloc(777), 1555);
		p = q ? realloc(q, 2333) : NULL;
		if (!p)
			return 2;
		free(p);
	}
	p = malloc(777);
	first = (uintptr_t)p;
	q = realloc(p, 1555);
	if (!first || !q)
		return 2;
	printf("0x%lx %p\n", (unsigned long)first, (void *)q);
	return 0;
}
