// SPDX-License-Identifier: GPL-2.0
/*
 * malloc's entry point takes each size from a per-thread budget and records
 * nothing until it is spent; exact mode keeps it spent. Sizes of 2^63 and
 * more (which fail), and size 0, must not leave it with bytes to spare:
 * each is followed by allocations that exact mode must all record.
 *   budget ROUNDS    each round: one of the huge sizes, 10 x malloc(40),
 *                    malloc(0); all freed. Exit 0, or 2 if a huge one did
 *                    not fail.
 */
#include <stdint.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	static volatile size_t huge[] = {
		SIZE_MAX, (size_t)1 << 63, ((size_t)1 << 63) + 4096, SIZE_MAX - 4095,
	};
	int rounds = argc > 1 ? atoi(argv[1]) : 4;
	void *p[11];
	/* stored: gcc 16 folds a malloc whose result is only tested to "succeeded" */
	void *volatile failed;

	for (int r = 0; r < rounds; r++) {
		failed = malloc(huge[r % 4]);
		if (failed)
			return 2;
		for (int i = 0; i < 10; i++)
			p[i] = malloc(40);
		p[10] = malloc(0);
		for (int i = 0; i < 11; i++)
			free(p[i]);
	}
	return 0;
}
