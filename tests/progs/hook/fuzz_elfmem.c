// SPDX-License-Identifier: GPL-2.0
/*
 * Fuzz of pmm-inject's ELF reader (hooklib/inject/elfmem.c), built with
 * ASan and UBSan: each ELF object named is laid out as a loader maps it
 * (each PT_LOAD's bytes at its vaddr), then mutated again and again where a
 * target would lie (the ELF and program headers, the dynamic section, the
 * hash tables, the symbol and string tables, .eh_frame_hdr) and read as
 * pmm-inject reads a target's memory.
 *
 *   fuzz_elfmem SEED ROUNDS OBJECT...
 *
 * Prints, for each object unmutated, its function count and whether it has
 * an unwind table ("OBJECT functions N eh 1"), then "rounds N". Exit 0, or a
 * sanitizer's report.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../../hooklib/inject/elfmem.h"

#define BASE	0x10000000UL

struct image {
	unsigned char *bytes;
	size_t len;
	size_t base;	/* where file offset 0 lies: the lowest segment's page */
};

static ssize_t read_image(void *ctx, uintptr_t addr, void *buf, size_t len)
{
	const struct image *im = ctx;

	if (addr < BASE || addr - BASE > im->len || len > im->len - (addr - BASE))
		return -1;
	memcpy(buf, im->bytes + (addr - BASE), len);
	return (ssize_t)len;
}

static void count_function(void *arg, const char *name, uintptr_t addr, size_t size)
{
	(*(size_t *)arg) += strlen(name) > 0;
}

/* The object's file laid out as mapped: 0 if it has a PT_LOAD we can place. */
static int load(const char *path, struct image *im)
{
	unsigned char *file;
	Elf64_Ehdr *eh;
	Elf64_Phdr *ph;
	struct stat st;
	size_t end = 0;
	int fd = open(path, O_RDONLY), i;

	if (fd < 0 || fstat(fd, &st) || st.st_size < (off_t)sizeof(*eh))
		return -1;
	file = malloc((size_t)st.st_size);
	if (!file || read(fd, file, (size_t)st.st_size) != st.st_size)
		return -1;
	close(fd);
	eh = (Elf64_Ehdr *)file;
	ph = (Elf64_Phdr *)(file + eh->e_phoff);
	im->base = SIZE_MAX;
	for (i = 0; i < eh->e_phnum; i++) {
		if (ph[i].p_type != PT_LOAD)
			continue;
		if (ph[i].p_vaddr + ph[i].p_memsz > end)
			end = ph[i].p_vaddr + ph[i].p_memsz;
		if (((ph[i].p_vaddr - ph[i].p_offset) & ~0xfffUL) < im->base)
			im->base = (ph[i].p_vaddr - ph[i].p_offset) & ~0xfffUL;
	}
	if (!end || end > (256 << 20))
		return -1;
	im->len = end;
	im->bytes = calloc(1, end);
	for (i = 0; i < eh->e_phnum; i++)
		if (ph[i].p_type == PT_LOAD && ph[i].p_offset + ph[i].p_filesz <= (size_t)st.st_size)
			memcpy(im->bytes + ph[i].p_vaddr, file + ph[i].p_offset, ph[i].p_filesz);
	free(file);
	return 0;
}

static void read_all(const struct image *im, size_t *functions, int *eh)
{
	struct mem m = { read_image, (void *)im };
	struct elf_image img;
	struct eh_table t;

	*functions = 0;
	*eh = 0;
	if (elf_image_read(&m, BASE, BASE + im->len, BASE + im->base, &img))
		return;
	elf_each_function(&m, &img, count_function, functions);
	*eh = !elf_eh_table(&m, &img, &t);
}

/* Where a liar would write: offsets of the structures the reader follows. */
static size_t hot_spot(const struct image *im)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)(im->bytes + im->base);
	const Elf64_Phdr *ph = (const Elf64_Phdr *)(im->bytes + im->base + eh->e_phoff);
	size_t spots[16], n = 0;
	int i;

	spots[n++] = im->base;
	spots[n++] = im->base + eh->e_phoff;
	for (i = 0; i < eh->e_phnum && n < 10; i++) {
		const Elf64_Dyn *d = (const Elf64_Dyn *)(im->bytes + ph[i].p_vaddr);

		if (ph[i].p_type == PT_GNU_EH_FRAME)
			spots[n++] = ph[i].p_vaddr;
		if (ph[i].p_type != PT_DYNAMIC)
			continue;
		spots[n++] = ph[i].p_vaddr;
		/* the tables it points to (offsets in a file not yet relocated) */
		for (; d->d_tag != DT_NULL && n < 16; d++)
			if ((d->d_tag == DT_SYMTAB || d->d_tag == DT_GNU_HASH ||
			     d->d_tag == DT_HASH) && d->d_un.d_ptr < im->len)
				spots[n++] = d->d_un.d_ptr;
	}
	return spots[(size_t)rand() % n] + (size_t)rand() % 512;
}

int main(int argc, char **argv)
{
	static const uint64_t extremes[] = { 0, 1, 0x7f, 0xff, 0xffff, 0x7fffffff, 0xffffffff,
					     0x80000000, BASE, BASE + 8, UINT64_MAX,
					     UINT64_MAX - 7 };
	unsigned long rounds, r;
	int i, k;

	if (argc < 4)
		return 2;
	srand((unsigned int)strtoul(argv[1], NULL, 0));
	rounds = strtoul(argv[2], NULL, 0);
	for (i = 3; i < argc; i++) {
		struct image im, copy;
		size_t functions;
		int eh;

		if (load(argv[i], &im)) {
			fprintf(stderr, "%s: not an ELF object to lay out\n", argv[i]);
			return 2;
		}
		read_all(&im, &functions, &eh);
		printf("%s functions %zu eh %d\n", argv[i], functions, eh);
		copy.len = im.len;
		copy.base = im.base;
		copy.bytes = malloc(im.len);
		for (r = 0; r < rounds; r++) {
			int edits = 1 + rand() % 8;

			memcpy(copy.bytes, im.bytes, im.len);
			for (k = 0; k < edits; k++) {
				size_t at = hot_spot(&im);
				uint64_t v = rand() % 2 ? extremes[(size_t)rand() % 12] :
					     ((uint64_t)rand() << 32) ^ (uint64_t)rand();

				if (at + 8 <= copy.len)
					memcpy(copy.bytes + at, &v, (size_t)(1 + rand() % 8));
			}
			read_all(&copy, &functions, &eh);
		}
		free(copy.bytes);
		free(im.bytes);
	}
	printf("rounds %lu\n", rounds * (unsigned long)(argc - 3));
	return 0;
}
