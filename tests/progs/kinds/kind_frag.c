// SPDX-License-Identifier: GPL-2.0
/*
 * Growth of kind RETENTION by fragmentation: the glibc heap grows sparse
 * while the live heap stays flat. Every 100 ms it allocates a burst of
 * 2 KiB blocks, larger than the last by 400 pages a second (whatever a
 * round takes), and writes them; it keeps 64 of them spread evenly
 * through the burst (the last one among them, so the heap's top never
 * comes free to be trimmed), frees the rest and then the last burst's 64
 * in a shuffled order. The live heap's floor stays at 64 blocks while the
 * heap holds each burst's pages: rss grows about 1.6 MiB/s, all of it
 * memory the allocator holds free (mallinfo2's fordblks). A burst is live
 * for a small part of a round (blocks of 2 KiB: few calls, even under
 * TCG), so most samples see the floor. Blocks of 2 KiB are above the fast
 * bins' sizes, so every free goes back to the heap's bins. It grows from a
 * first SIGUSR2 until SECS seconds or a second one (kinds.h).
 *
 *   kind_frag SECS
 */
#include "kinds.h"

#define SIZE 2048
#define KEEP 64
#define MAX_BURST (1 << 20)

static void *g_burst[MAX_BURST], *g_freed[MAX_BURST];

static void shuffle(void **v, size_t n, unsigned int *seed)
{
	size_t i, j;
	void *t;

	for (i = n ? n - 1 : 0; i > 0; i--) {
		j = rand_r(seed) % (i + 1);
		t = v[i];
		v[i] = v[j];
		v[j] = t;
	}
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 10, end, t, last;
	void *kept[KEEP], *old[KEEP];
	size_t n = 256, i, stride, nfree, nold = 0;
	unsigned int seed = 1;

	kinds_start();
	end = kinds_wait_start(secs);
	last = now_s();
	while (kinds_growing(end)) {
		for (i = 0; i < n; i++) {
			g_burst[i] = malloc(SIZE);
			if (g_burst[i])
				memset(g_burst[i], 0xa5, SIZE);
		}
		/* the survivors: every stride-th block, ending with the last */
		stride = n / KEEP;
		nfree = 0;
		for (i = 0; i < n; i++) {
			if ((n - 1 - i) % stride == 0 && (n - 1 - i) / stride < KEEP)
				kept[(n - 1 - i) / stride] = g_burst[i];
			else
				g_freed[nfree++] = g_burst[i];
		}
		shuffle(g_freed, nfree, &seed);
		for (i = 0; i < nfree; i++)
			free(g_freed[i]);
		shuffle(old, nold, &seed);
		for (i = 0; i < nold; i++)
			free(old[i]);
		memcpy(old, kept, sizeof(kept));
		nold = KEEP;
		g_own_live = KEEP * SIZE;
		/* by the time a round took, so that the rate holds however long
		 * a burst takes (a slow machine)
		 */
		t = now_s();
		n += (size_t)((t - last) * 50 * 8 * 4096 / SIZE);
		if (n >= MAX_BURST)
			n = MAX_BURST - 1;
		last = t;
		kinds_tick(100000);
	}
	return kinds_hold();
}
