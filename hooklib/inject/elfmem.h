/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pmm-inject's and pmm-scan's ELF reader: an object as the target's loader
 * mapped it, read from the target's memory, never from a file. The target
 * chooses every byte (and every path its maps name), so each address is
 * checked against the object's own mappings and each count against a bound
 * before it is used. The memory is reached through a reader callback, so
 * that the fuzz harness (tests/progs/hook/fuzz_elfmem.c) drives the same code
 * over a buffer.
 */
#ifndef PMM_ELFMEM_H
#define PMM_ELFMEM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct mem {
	/* len bytes at addr into buf: len, or less if they are not all there */
	ssize_t (*read)(void *ctx, uintptr_t addr, void *buf, size_t len);
	void *ctx;
};

#define ELFMEM_MAX_SPAN		(4ULL << 30)	/* an object's mappings, lo to hi */
#define ELFMEM_MAX_SYMS		(1 << 20)
#define ELFMEM_MAX_STRTAB	(16 << 20)
#define ELFMEM_MAX_PHDRS	128
#define ELFMEM_MAX_DYN		1024

/* An object as mapped: [lo, hi) spans its mappings, base maps file offset 0. */
struct elf_image {
	uintptr_t lo, hi, base;
	uintptr_t bias;			/* added to a p_vaddr: its address */
	uintptr_t dynamic;		/* PT_DYNAMIC's address, 0: none */
	size_t n_dynamic;		/* its entries, at most ELFMEM_MAX_DYN */
	uintptr_t eh_frame_hdr;		/* PT_GNU_EH_FRAME's address, 0: none */
	size_t eh_frame_hdr_len;
	uintptr_t load_lo, load_hi;	/* the PT_LOAD segments' addresses */
};

/* The unwind table of .eh_frame_hdr, as libunwind's remote table wants it. */
struct eh_table {
	uintptr_t segbase;	/* the header's address */
	uintptr_t table;	/* the sorted (start, fde) pairs */
	size_t fde_count;
	uintptr_t gp;		/* DT_PLTGOT, 0: none */
};

/* 0 and *img filled, or -1: not an ELF object we can read there. */
int elf_image_read(const struct mem *m, uintptr_t lo, uintptr_t hi, uintptr_t base,
		   struct elf_image *img);

/*
 * Calls fn for each defined function of the object's dynamic symbol table:
 * its name, address, size. 0, or -1 when the table is absent or malformed
 * (fn may have been called for some symbols before that was found).
 */
int elf_each_function(const struct mem *m, const struct elf_image *img,
		      void (*fn)(void *arg, const char *name, uintptr_t addr, size_t size),
		      void *arg);

/* The same for each defined data object (STT_OBJECT). */
int elf_each_object(const struct mem *m, const struct elf_image *img,
		    void (*fn)(void *arg, const char *name, uintptr_t addr, size_t size),
		    void *arg);

/* 0 and *t filled from .eh_frame_hdr, or -1 (none, or an encoding we do not read). */
int elf_eh_table(const struct mem *m, const struct elf_image *img, struct eh_table *t);

#endif /* PMM_ELFMEM_H */
