// SPDX-License-Identifier: GPL-2.0
/*
 * Calls every function libpmmhook.so interposes and checks that libc's
 * semantics are kept: alignment, size 0, realloc to 0, NULL frees, calloc
 * overflow (NULL + ENOMEM), bad alignments, anonymous and file mappings,
 * mremap, errno preservation across free. Run it bare and under the hook:
 * both runs must print the same transcript and exit 0.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int failures;

#define CHECK(cond) do {						\
	if (cond) {							\
		printf("ok   %s\n", #cond);				\
	} else {							\
		printf("FAIL %s (line %d)\n", #cond, __LINE__);	\
		failures++;						\
	}								\
} while (0)

static int aligned(const void *p, size_t a)
{
	return ((uintptr_t)p & (a - 1)) == 0;
}

static int all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

int main(void)
{
	size_t huge = SIZE_MAX / 2 + 2;
	void *p, *q;
	char *s;
	int r;

	/* malloc / free */
	p = malloc(100);
	CHECK(p != NULL && aligned(p, 16));
	memset(p, 0xab, 100);
	CHECK(malloc_usable_size(p) >= 100);
	free(p);
	p = malloc(0);
	CHECK(p != NULL);	/* glibc: a unique pointer */
	free(p);
	free(NULL);
	CHECK(malloc_usable_size(NULL) == 0);
	errno = 0;
	CHECK(malloc(SIZE_MAX - 4096) == NULL && errno == ENOMEM);
	errno = 1234;
	p = malloc(64);
	free(p);
	CHECK(errno == 1234);	/* free keeps errno (glibc >= 2.33) */

	/* calloc */
	p = calloc(1000, 8);
	CHECK(p != NULL && all_zero(p, 8000));
	free(p);
	errno = 0;
	CHECK(calloc(huge, 2) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(calloc(SIZE_MAX, SIZE_MAX) == NULL && errno == ENOMEM);
	p = calloc(0, 16);
	CHECK(p != NULL);
	free(p);

	/* realloc */
	s = realloc(NULL, 10);
	CHECK(s != NULL);
	memcpy(s, "abcdefghi", 10);
	s = realloc(s, 100000);
	CHECK(s != NULL && strcmp(s, "abcdefghi") == 0);
	s = realloc(s, 3);
	CHECK(s != NULL && memcmp(s, "abc", 3) == 0);
	errno = 0;
	q = realloc(s, SIZE_MAX - 4096);
	CHECK(q == NULL && errno == ENOMEM && memcmp(s, "abc", 3) == 0);
	q = realloc(s, 0);	/* glibc: frees, returns NULL */
	CHECK(q == NULL);

	/* reallocarray */
	p = reallocarray(NULL, 10, 10);
	CHECK(p != NULL);
	errno = 0;
	q = reallocarray(p, huge, 2);
	CHECK(q == NULL && errno == ENOMEM);
	q = reallocarray(p, 20, 10);
	CHECK(q != NULL);
	free(q);

	/* posix_memalign */
	for (size_t a = sizeof(void *); a <= 65536; a <<= 1) {
		p = NULL;
		r = posix_memalign(&p, a, 33);
		if (r != 0 || !aligned(p, a))
			printf("FAIL posix_memalign(%zu)\n", a), failures++;
		free(p);
	}
	printf("ok   posix_memalign 8..65536\n");
	p = (void *)0x1;
	CHECK(posix_memalign(&p, 3, 16) == EINVAL && p == (void *)0x1);
	CHECK(posix_memalign(&p, 4, 16) == EINVAL);	/* < sizeof(void *) */
	CHECK(posix_memalign(&p, 64, SIZE_MAX - 4096) == ENOMEM);
	r = posix_memalign(&p, 64, 0);
	CHECK(r == 0);
	free(p);

	/* aligned_alloc, memalign */
	p = aligned_alloc(4096, 4096 * 3);
	CHECK(p != NULL && aligned(p, 4096));
	free(p);
	p = aligned_alloc(64, 0);
	CHECK(p != NULL);
	free(p);
	p = memalign(256, 1000);
	CHECK(p != NULL && aligned(p, 256));
	free(p);
	p = memalign(48, 100);	/* glibc rounds a non-power-of-two up */
	CHECK(p != NULL && aligned(p, 64));
	free(p);
	errno = 0;
	CHECK(memalign(64, SIZE_MAX - 4096) == NULL && errno == ENOMEM);

	/* valloc, pvalloc */
	p = valloc(100);
	CHECK(p != NULL && aligned(p, 4096));
	free(p);
	p = pvalloc(100);
	CHECK(p != NULL && aligned(p, 4096) && malloc_usable_size(p) >= 4096);
	free(p);

	/* anonymous and file mappings, mremap */
	p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED && all_zero(p, 1 << 20));
	memset(p, 1, 1 << 20);
	q = mremap(p, 1 << 20, 4 << 20, MREMAP_MAYMOVE);
	CHECK(q != MAP_FAILED && ((unsigned char *)q)[(1 << 20) - 1] == 1);
	CHECK(munmap(q, 4 << 20) == 0);
	errno = 0;
	CHECK(mmap(NULL, 0, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED &&
	      errno == EINVAL);
	errno = 0;
	CHECK(munmap((void *)0x1001, 4096) == -1 && errno == EINVAL);
	{
		int fd = open("/proc/self/exe", O_RDONLY);

		p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
		CHECK(p != MAP_FAILED && memcmp(p, "\177ELF", 4) == 0);
		CHECK(munmap(p, 4096) == 0);
		close(fd);
	}

	/* many blocks, random order */
	{
		void *v[1000];

		for (int i = 0; i < 1000; i++) {
			v[i] = malloc((size_t)(i * 37 % 600) + 1);
			memset(v[i], i & 0xff, (size_t)(i * 37 % 600) + 1);
		}
		for (int i = 0; i < 1000; i++) {
			int j = (i * 7919) % 1000;

			v[j] = realloc(v[j], 2000);
		}
		for (int i = 0; i < 1000; i++)
			free(v[(i * 613) % 1000]);
		printf("ok   1000 blocks malloc/realloc/free\n");
	}

	printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
	return failures ? 1 : 0;
}
