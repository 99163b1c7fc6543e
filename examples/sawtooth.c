// SPDX-License-Identifier: GPL-2.0
/*
 * sawtooth: a program that does NOT leak but whose memory goes up and down:
 * allocates chunks up to a peak, frees them all, and again (like a GC'd
 * heap or a batch job). For trend tests: the verdict must be "no leak".
 *
 *   sawtooth [-m peak MiB] [-c chunk KiB] [-n cycles (0: forever)] [-s sleep ms per step]
 *
 * Each step allocates one chunk and writes to it (so it is resident).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long peak_mib = 16, chunk_kib = 256, cycles = 3, sleep_ms = 10, c;
	size_t chunk, nchunks;
	void **blocks;
	int opt;

	while ((opt = getopt(argc, argv, "m:c:n:s:")) != -1) {
		switch (opt) {
		case 'm': peak_mib = atol(optarg); break;
		case 'c': chunk_kib = atol(optarg); break;
		case 'n': cycles = atol(optarg); break;
		case 's': sleep_ms = atol(optarg); break;
		default:
			fprintf(stderr, "usage: sawtooth [-m MiB] [-c KiB] [-n cycles] [-s ms]\n");
			return 2;
		}
	}
	if (peak_mib < 1 || chunk_kib < 1 || cycles < 0 || sleep_ms < 0 ||
	    chunk_kib > peak_mib * 1024) {
		fprintf(stderr, "sawtooth: bad arguments\n");
		return 2;
	}
	chunk = (size_t)chunk_kib * 1024;
	nchunks = (size_t)peak_mib * 1024 / (size_t)chunk_kib;
	blocks = calloc(nchunks, sizeof(void *));
	if (!blocks)
		return 1;
	printf("sawtooth: pid %d peak %ld MiB chunks %zu\n", (int)getpid(), peak_mib, nchunks);
	fflush(stdout);
	for (c = 0; cycles == 0 || c < cycles; c++) {
		struct timespec ts = { sleep_ms / 1000, (sleep_ms % 1000) * 1000000L };

		for (size_t i = 0; i < nchunks; i++) {
			blocks[i] = malloc(chunk);
			if (blocks[i])
				memset(blocks[i], (int)i, chunk);
			if (sleep_ms)
				nanosleep(&ts, NULL);
		}
		for (size_t i = 0; i < nchunks; i++)
			free(blocks[i]);
		if (sleep_ms)
			nanosleep(&ts, NULL);
	}
	free(blocks);
	printf("sawtooth: done %ld cycles\n", c);
	return 0;
}
