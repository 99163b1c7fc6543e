// SPDX-License-Identifier: GPL-2.0
/*
 * pmm-inject's ELF reader (elfmem.h): program headers, the dynamic symbol
 * table and .eh_frame_hdr of an object, read from where the target's loader
 * mapped them. Nothing here opens a file: a path in the target's maps is
 * the target's to choose (a FIFO, a device, a symlink out of its
 * container), its memory is not.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <stdlib.h>
#include <string.h>

#include "elfmem.h"

#define PAGE_MASK_4K	(~(uintptr_t)0xfff)
#define SYM_CHUNK	1024

/* [a, a + len) lies inside the object's mappings */
static int in_image(const struct elf_image *img, uintptr_t a, size_t len)
{
	return a >= img->lo && a <= img->hi && len <= img->hi - a;
}

static int read_in(const struct mem *m, const struct elf_image *img, uintptr_t a, void *buf,
		   size_t len)
{
	if (!in_image(img, a, len))
		return -1;
	return m->read(m->ctx, a, buf, len) == (ssize_t)len ? 0 : -1;
}

int elf_image_read(const struct mem *m, uintptr_t lo, uintptr_t hi, uintptr_t base,
		   struct elf_image *img)
{
	Elf64_Phdr ph[ELFMEM_MAX_PHDRS];
	const Elf64_Phdr *low = NULL;
	Elf64_Ehdr eh;
	int i;

	memset(img, 0, sizeof(*img));
	if (hi <= lo || hi - lo > ELFMEM_MAX_SPAN || base < lo || base >= hi)
		return -1;
	img->lo = lo;
	img->hi = hi;
	img->base = base;
	if (read_in(m, img, base, &eh, sizeof(eh)) || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
	    (eh.e_type != ET_EXEC && eh.e_type != ET_DYN) ||
	    eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 ||
	    eh.e_phnum > ELFMEM_MAX_PHDRS || eh.e_phoff >= hi - base ||
	    read_in(m, img, base + eh.e_phoff, ph, eh.e_phnum * sizeof(Elf64_Phdr)))
		return -1;
	for (i = 0; i < eh.e_phnum; i++)
		if (ph[i].p_type == PT_LOAD && (!low || ph[i].p_vaddr < low->p_vaddr))
			low = &ph[i];
	if (!low || low->p_offset > low->p_vaddr)
		return -1;
	/* the lowest segment's page is where offset 0 was mapped */
	img->bias = base - ((low->p_vaddr - low->p_offset) & PAGE_MASK_4K);
	img->load_lo = UINTPTR_MAX;
	for (i = 0; i < eh.e_phnum; i++) {
		uintptr_t a = img->bias + ph[i].p_vaddr;

		switch (ph[i].p_type) {
		case PT_LOAD:
			if (ph[i].p_memsz > ELFMEM_MAX_SPAN || !in_image(img, a, ph[i].p_memsz))
				continue;	/* the part we read must be mapped */
			if (a < img->load_lo)
				img->load_lo = a;
			if (a + ph[i].p_memsz > img->load_hi)
				img->load_hi = a + ph[i].p_memsz;
			break;
		case PT_DYNAMIC:
			img->n_dynamic = ph[i].p_memsz / sizeof(Elf64_Dyn);
			if (img->n_dynamic > ELFMEM_MAX_DYN)
				img->n_dynamic = ELFMEM_MAX_DYN;
			if (in_image(img, a, img->n_dynamic * sizeof(Elf64_Dyn)))
				img->dynamic = a;
			else
				img->n_dynamic = 0;
			break;
		case PT_GNU_EH_FRAME:
			if (ph[i].p_memsz >= 12 && in_image(img, a, ph[i].p_memsz)) {
				img->eh_frame_hdr = a;
				img->eh_frame_hdr_len = ph[i].p_memsz;
			}
			break;
		}
	}
	if (img->load_lo == UINTPTR_MAX)
		img->load_lo = 0;
	return 0;
}

/*
 * A dynamic entry's address: glibc rewrites them in place to addresses, other
 * loaders (and ld.so's own) leave them as offsets from the object's vaddr 0.
 */
static uintptr_t dyn_addr(const struct elf_image *img, uint64_t v)
{
	return v >= img->lo && v < img->hi ? v : img->bias + v;
}

struct dyn_info {
	uintptr_t symtab, strtab, hash, gnu_hash, pltgot;
	uint64_t strsz, syment;
};

static int read_dynamic(const struct mem *m, const struct elf_image *img, struct dyn_info *d)
{
	static Elf64_Dyn dyn[ELFMEM_MAX_DYN];
	size_t i;

	memset(d, 0, sizeof(*d));
	if (!img->dynamic ||
	    read_in(m, img, img->dynamic, dyn, img->n_dynamic * sizeof(Elf64_Dyn)))
		return -1;
	for (i = 0; i < img->n_dynamic && dyn[i].d_tag != DT_NULL; i++) {
		uint64_t v = dyn[i].d_un.d_val;

		switch (dyn[i].d_tag) {
		case DT_SYMTAB:
			d->symtab = dyn_addr(img, v);
			break;
		case DT_STRTAB:
			d->strtab = dyn_addr(img, v);
			break;
		case DT_STRSZ:
			d->strsz = v;
			break;
		case DT_SYMENT:
			d->syment = v;
			break;
		case DT_HASH:
			d->hash = dyn_addr(img, v);
			break;
		case DT_GNU_HASH:
			d->gnu_hash = dyn_addr(img, v);
			break;
		case DT_PLTGOT:
			d->pltgot = dyn_addr(img, v);
			break;
		}
	}
	return 0;
}

/* Symbols in a DT_GNU_HASH table: past the highest bucket's chain. -1: malformed. */
static long gnu_hash_count(const struct mem *m, const struct elf_image *img, uintptr_t gh)
{
	uint32_t hdr[4], buf[SYM_CHUNK], top = 0, c;
	uintptr_t buckets, chains;
	size_t i, k, n;

	if (read_in(m, img, gh, hdr, sizeof(hdr)) || hdr[0] == 0 || hdr[0] > ELFMEM_MAX_SYMS ||
	    hdr[1] > ELFMEM_MAX_SYMS || hdr[2] > ELFMEM_MAX_SYMS)
		return -1;
	buckets = gh + sizeof(hdr) + (uintptr_t)hdr[2] * 8;
	chains = buckets + (uintptr_t)hdr[0] * 4;
	for (i = 0; i < hdr[0]; i += n) {
		n = hdr[0] - i < SYM_CHUNK ? hdr[0] - i : SYM_CHUNK;
		if (read_in(m, img, buckets + i * 4, buf, n * 4))
			return -1;
		for (k = 0; k < n; k++)
			if (buf[k] > top)
				top = buf[k];
	}
	if (top < hdr[1])
		return hdr[1];
	if (top >= ELFMEM_MAX_SYMS)
		return -1;
	/* the last bucket's chain ends at the entry with bit 0 set */
	for (; top < ELFMEM_MAX_SYMS; top++) {
		if (read_in(m, img, chains + (uintptr_t)(top - hdr[1]) * 4, &c, sizeof(c)))
			return -1;
		if (c & 1)
			return (long)top + 1;
	}
	return -1;
}

static int each_symbol(const struct mem *m, const struct elf_image *img, int type,
		       void (*fn)(void *arg, const char *name, uintptr_t addr, size_t size),
		       void *arg)
{
	static Elf64_Sym syms[SYM_CHUNK];
	struct dyn_info d;
	uint32_t nchain[2];
	char *strtab;
	long nsyms;
	size_t i, j, n;

	if (read_dynamic(m, img, &d) || !d.symtab || !d.strtab || !d.strsz ||
	    d.strsz > ELFMEM_MAX_STRTAB || (d.syment && d.syment != sizeof(Elf64_Sym)))
		return -1;
	if (d.hash)
		nsyms = read_in(m, img, d.hash, nchain, sizeof(nchain)) ? -1 : (long)nchain[1];
	else if (d.gnu_hash)
		nsyms = gnu_hash_count(m, img, d.gnu_hash);
	else
		nsyms = -1;
	if (nsyms < 0 || nsyms > ELFMEM_MAX_SYMS ||
	    !in_image(img, d.symtab, (size_t)nsyms * sizeof(Elf64_Sym)))
		return -1;
	strtab = malloc(d.strsz + 1);
	if (!strtab || read_in(m, img, d.strtab, strtab, d.strsz)) {
		free(strtab);
		return -1;
	}
	strtab[d.strsz] = '\0';
	for (i = 0; i < (size_t)nsyms; i += n) {
		n = (size_t)nsyms - i < SYM_CHUNK ? (size_t)nsyms - i : SYM_CHUNK;
		if (read_in(m, img, d.symtab + i * sizeof(Elf64_Sym), syms, n * sizeof(Elf64_Sym))) {
			free(strtab);
			return -1;
		}
		for (j = 0; j < n; j++) {
			const Elf64_Sym *s = &syms[j];

			if (s->st_shndx == SHN_UNDEF || ELF64_ST_TYPE(s->st_info) != type ||
			    s->st_name >= d.strsz)
				continue;
			fn(arg, strtab + s->st_name, img->bias + s->st_value, s->st_size);
		}
	}
	free(strtab);
	return 0;
}

int elf_each_function(const struct mem *m, const struct elf_image *img,
		      void (*fn)(void *arg, const char *name, uintptr_t addr, size_t size),
		      void *arg)
{
	return each_symbol(m, img, STT_FUNC, fn, arg);
}

int elf_each_object(const struct mem *m, const struct elf_image *img,
		    void (*fn)(void *arg, const char *name, uintptr_t addr, size_t size),
		    void *arg)
{
	return each_symbol(m, img, STT_OBJECT, fn, arg);
}

/* Bytes of a DWARF pointer encoding's value (its low nibble), -1 if unknown. */
static int enc_size(uint8_t enc)
{
	if (enc == 0xff)	/* DW_EH_PE_omit */
		return 0;
	switch (enc & 0x0f) {
	case 0x00:		/* absptr */
	case 0x04:		/* udata8 */
	case 0x0c:		/* sdata8 */
		return 8;
	case 0x03:		/* udata4 */
	case 0x0b:		/* sdata4 */
		return 4;
	}
	return -1;
}

int elf_eh_table(const struct mem *m, const struct elf_image *img, struct eh_table *t)
{
	uint8_t hdr[4];
	uint32_t count;
	struct dyn_info d;
	uintptr_t end;
	int ptr_size;

	memset(t, 0, sizeof(*t));
	if (!img->eh_frame_hdr || read_in(m, img, img->eh_frame_hdr, hdr, sizeof(hdr)))
		return -1;
	ptr_size = enc_size(hdr[1]);
	/* version 1; a 4-byte count; the table of datarel sdata4 pairs that
	 * libunwind's remote search reads */
	if (hdr[0] != 1 || ptr_size < 0 || (hdr[2] != 0x03 && hdr[2] != 0x0b) || hdr[3] != 0x3b)
		return -1;
	end = img->eh_frame_hdr + img->eh_frame_hdr_len;
	t->segbase = img->eh_frame_hdr;
	if (read_in(m, img, t->segbase + 4 + ptr_size, &count, sizeof(count)))
		return -1;
	t->table = t->segbase + 4 + ptr_size + 4;
	t->fde_count = count;
	if (count == 0 || count > ELFMEM_MAX_SYMS * 4 || t->table > end ||
	    (end - t->table) / 8 < count || !in_image(img, t->table, (size_t)count * 8))
		return -1;
	t->gp = read_dynamic(m, img, &d) ? 0 : d.pltgot;
	return 0;
}
