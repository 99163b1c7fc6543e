// SPDX-License-Identifier: GPL-2.0
/*
 * Redirecting a running program to the hooks (got.h), for a library that
 * was loaded into it rather than preloaded (attach.c). Every loaded object
 * calls malloc and the others through its global offset table: a
 * JUMP_SLOT relocation's entry for its PLT calls, a GLOB_DAT one where it
 * takes the function's address (and an R_X86_64_64 one where data holds
 * it). got_redirect writes the hook's address into each such entry that
 * holds the program's own function (real.c's program_sym), the address a
 * non-PIE executable that takes it gave it (its PLT entry), or, bound
 * lazily, the object's PLT stub, which would have resolved to it. An entry
 * on a page that is not writable (RELRO, or a text relocation's in a
 * segment loaded without write) is made writable for the write and given
 * its protection back; an unaligned one (text relocations only) is left.
 * An object with any such entry bound elsewhere (RTLD_DEEPBIND to an
 * allocator of its own, its own copy) is left alone whole: its entries
 * still bound lazily would resolve there too, and one redirected would
 * hand that allocator's blocks to libc's free. Objects of other namespaces
 * (dlmopen) are never seen: dl_iterate_phdr reports the caller's only. So
 * the hooks only ever see blocks of the allocator they call.
 *
 * Not this library (its calls are the real functions'), ld.so (its own
 * allocator until libc's is set up, then libc's through pointers) or the
 * vDSO. Each entry is one aligned 8-byte store: a thread that calls
 * through it meanwhile reaches libc or the hook, and either is right (the
 * hooks pass a block they did not record straight to libc).
 *
 * Owns nothing but the table of names below: the entries are the objects'.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>

#include "got.h"
#include "real.h"

#define PAGE		4096UL

struct redirect {
	const char *name;
	void *hook;		/* this library's definition */
	void *real;		/* what the program's calls reach */
	void *canonical;	/* a non-PIE executable's PLT entry for it, if it
				 * takes its address (what data holds), or NULL */
};

static struct redirect g_redirects[GOT_MAX_ENTRIES];
static size_t g_n_redirects;

static uintptr_t g_self_base;	/* this library's load address */

struct walk {
	int entries;		/* entries written */
	int err;		/* first error (-errno) */
	int elsewhere;		/* the object has an entry bound elsewhere */
};

static struct redirect *redirect_of(const char *name)
{
	size_t i;

	for (i = 0; i < g_n_redirects; i++)
		if (!strcmp(g_redirects[i].name, name))
			return &g_redirects[i];
	return NULL;
}

/* d_ptr of a dynamic entry as an address: glibc relocates most of them in
 * place, but not every loader does. */
static uintptr_t dyn_addr(uintptr_t base, ElfW(Addr) v)
{
	return v < base ? base + v : v;
}

/* [lo, hi) of the object's loaded segments, and its RELRO range. */
static void extent(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi,
		   uintptr_t *relro_lo, uintptr_t *relro_hi)
{
	int i;

	*lo = UINTPTR_MAX;
	*hi = 0;
	*relro_lo = *relro_hi = 0;
	for (i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t a = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type == PT_LOAD) {
			if (a < *lo)
				*lo = a;
			if (a + ph->p_memsz > *hi)
				*hi = a + ph->p_memsz;
		} else if (ph->p_type == PT_GNU_RELRO) {
			/* as ld.so protects it: a last partial page stays writable */
			*relro_lo = a & ~(PAGE - 1);
			*relro_hi = (a + ph->p_memsz) & ~(PAGE - 1);
		}
	}
}

/* The entry holds neither the hook, the program's function nor (bound
 * lazily) the object's own PLT stub. */
static int bound_elsewhere(uintptr_t v, const struct redirect *r, uintptr_t lo, uintptr_t hi)
{
	return v != (uintptr_t)r->hook && v != (uintptr_t)r->real &&
	       v != (uintptr_t)r->canonical && !(v >= lo && v < hi);
}

/*
 * The protection of the page that holds a, if it is not writable: RELRO's
 * (read-only once relocated), or that of a segment loaded without write
 * (an entry of a text relocation, DT_TEXTREL); -1 if it is writable.
 */
static int locked_prot(const struct dl_phdr_info *info, uintptr_t a, uintptr_t relro_lo,
		       uintptr_t relro_hi)
{
	int i;

	if (a >= relro_lo && a < relro_hi)
		return PROT_READ;
	for (i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t s = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type != PT_LOAD || a < s || a >= s + ph->p_memsz)
			continue;
		if (ph->p_flags & PF_W)
			return -1;
		return (ph->p_flags & PF_R ? PROT_READ : 0) | (ph->p_flags & PF_X ? PROT_EXEC : 0);
	}
	return -1;
}

/* Writes hook into the entry at slot; 1 if it did, 0 if it was not the
 * program's function, -errno if the page could not be made writable. */
static int write_entry(void **slot, const struct redirect *r, uintptr_t lo, uintptr_t hi,
		       int prot)
{
	uintptr_t page = (uintptr_t)slot & ~(PAGE - 1), v;

	if ((uintptr_t)slot % sizeof(void *))
		return 0;	/* not one store, and it might straddle two pages */
	v = (uintptr_t)__atomic_load_n(slot, __ATOMIC_RELAXED);
	if (v == (uintptr_t)r->hook || bound_elsewhere(v, r, lo, hi))
		return 0;	/* done by an earlier pass, or not ours to change */
	if (prot >= 0 && mprotect((void *)page, PAGE, prot | PROT_READ | PROT_WRITE))
		return -errno;
	__atomic_store_n(slot, r->hook, __ATOMIC_RELAXED);
	if (prot >= 0)
		mprotect((void *)page, PAGE, prot);
	return 1;
}

/* write 0: only notes whether an entry is bound elsewhere. */
static void relocs(const struct dl_phdr_info *info, const ElfW(Rela) *rel, size_t bytes,
		   const ElfW(Sym) *symtab, const char *strtab, int write, struct walk *w)
{
	uintptr_t lo, hi, relro_lo, relro_hi;
	size_t i;

	extent(info, &lo, &hi, &relro_lo, &relro_hi);
	for (i = 0; i < bytes / sizeof(*rel); i++) {
		unsigned long type = ELF64_R_TYPE(rel[i].r_info);
		const struct redirect *r;
		uintptr_t slot;
		int done;

		/* a pointer to the function in data (R_X86_64_64): a table of
		 * allocator functions, such as zlib's or an allocator's own */
		if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT &&
		    !(type == R_X86_64_64 && rel[i].r_addend == 0))
			continue;
		r = redirect_of(strtab + symtab[ELF64_R_SYM(rel[i].r_info)].st_name);
		if (!r || !r->hook || !r->real)
			continue;
		if (!write) {
			void **entry = (void **)(info->dlpi_addr + rel[i].r_offset);

			w->elsewhere |= bound_elsewhere((uintptr_t)__atomic_load_n(entry,
								__ATOMIC_RELAXED), r, lo, hi);
			continue;
		}
		slot = info->dlpi_addr + rel[i].r_offset;
		done = write_entry((void **)slot, r, lo, hi,
				   locked_prot(info, slot, relro_lo, relro_hi));
		if (done > 0)
			w->entries++;
		else if (done < 0 && !w->err)
			w->err = done;
	}
}

static int object(struct dl_phdr_info *info, size_t size, void *arg)
{
	const ElfW(Rela) *rela = NULL, *jmprel = NULL;
	size_t rela_bytes = 0, jmprel_bytes = 0;
	const ElfW(Sym) *symtab = NULL;
	const char *strtab = NULL;
	const ElfW(Dyn) *d = NULL;
	uintptr_t base = info->dlpi_addr;
	struct walk *w = arg;
	int i, write;

	if (base == g_self_base || base == getauxval(AT_BASE) ||
	    (uintptr_t)info->dlpi_phdr == getauxval(AT_SYSINFO_EHDR) + sizeof(ElfW(Ehdr)))
		return 0;
	for (i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			d = (const ElfW(Dyn) *)(base + info->dlpi_phdr[i].p_vaddr);
	for (; d && d->d_tag != DT_NULL; d++) {
		switch (d->d_tag) {
		case DT_SYMTAB:
			symtab = (const ElfW(Sym) *)dyn_addr(base, d->d_un.d_ptr);
			break;
		case DT_STRTAB:
			strtab = (const char *)dyn_addr(base, d->d_un.d_ptr);
			break;
		case DT_RELA:
			rela = (const ElfW(Rela) *)dyn_addr(base, d->d_un.d_ptr);
			break;
		case DT_RELASZ:
			rela_bytes = d->d_un.d_val;
			break;
		case DT_JMPREL:
			jmprel = (const ElfW(Rela) *)dyn_addr(base, d->d_un.d_ptr);
			break;
		case DT_PLTRELSZ:
			jmprel_bytes = d->d_un.d_val;
			break;
		}
	}
	if (!symtab || !strtab)
		return 0;
	w->elsewhere = 0;
	for (write = 0; write <= 1 && !w->elsewhere; write++) {
		if (jmprel)
			relocs(info, jmprel, jmprel_bytes, symtab, strtab, write, w);
		if (rela)
			relocs(info, rela, rela_bytes, symtab, strtab, write, w);
	}
	return 0;
}

int got_prepare(const struct got_entry *entries, size_t n)
{
	Dl_info self;
	size_t i;

	if (n > GOT_MAX_ENTRIES || !dladdr((void *)got_prepare, &self))
		return -EINVAL;
	for (i = 0; i < n; i++) {
		g_redirects[i].name = entries[i].name;
		g_redirects[i].hook = entries[i].hook;
		g_redirects[i].real = program_sym(entries[i].name);
		g_redirects[i].canonical = dlsym(RTLD_DEFAULT, entries[i].name);
		if (g_redirects[i].canonical == g_redirects[i].real)
			g_redirects[i].canonical = NULL;
	}
	g_n_redirects = n;
	__atomic_store_n(&g_self_base, (uintptr_t)self.dli_fbase, __ATOMIC_RELEASE);
	return 0;
}

int got_redirect(void)
{
	struct walk w = { 0, 0, 0 };

	if (!__atomic_load_n(&g_self_base, __ATOMIC_ACQUIRE))
		return -EINVAL;
	dl_iterate_phdr(object, &w);
	return w.err && !w.entries ? w.err : w.entries;
}
