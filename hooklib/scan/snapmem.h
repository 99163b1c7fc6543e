/* SPDX-License-Identifier: GPL-2.0 */
/*
 * snapmem.c: the copy's maps and memory, read through /proc/CHILD/mem
 * into windows kept up to a cap.
 */
#ifndef PMM_SCAN_SNAPMEM_H
#define PMM_SCAN_SNAPMEM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum vma_use {
	USE_ROOT,	/* its words are references (minus objects and exclusions) */
	USE_HEAP,	/* a heap walked chunk by chunk: only objects in it */
	USE_NONE,	/* never scanned: not writable, special, device, empty */
};

struct vma {
	uint64_t lo, hi;
	uint64_t offset;
	char perms[5];
	int anon;		/* no file behind it */
	int named;		/* [heap], [stack], [vdso]...: bracketed name */
	int is_heap;		/* [heap] */
	int is_stack;		/* [stack] */
	int shared;		/* MAP_SHARED */
	int wiped;		/* VmFlags wf: zeros in the copy */
	int io;			/* VmFlags io or pf: no pages to read */
	uint64_t resident;	/* Rss + Swap, bytes */
	uint64_t dev, ino;
	enum vma_use use;
	uint64_t root_lo;	/* a thread stack: roots from here (sp - red zone) */
	int hook;		/* libpmmhook.so's file */
};

struct snapmem {
	int fd;			/* /proc/CHILD/mem */
	int pagemap;		/* /proc/CHILD/pagemap, -1: none */
	struct vma *vmas;
	size_t nvmas;
	/* windows of memory read once and kept, up to cap bytes */
	size_t cap, nwin_max, nwin;
	struct window *win;
	int32_t *bucket;
	size_t nbucket, hand;
	struct window *last;	/* the last window snap_at gave, valid [last_lo, last_hi) */
	uint64_t last_lo, last_hi;
	uint64_t bytes_read, reads, evictions;
};

/* Reads /proc/CHILD/maps and smaps into m (m->fd, m->pagemap opened by
 * the caller); 0, or -1 with errno. */
int snapmem_maps(struct snapmem *m, pid_t child);
void snapmem_init_cache(struct snapmem *m, size_t cap);
struct vma *vma_of(const struct snapmem *m, uint64_t addr);
/*
 * The copy's bytes from addr on, kept in a window: a pointer and how many
 * follow (*avail > 0), or NULL if addr is in no readable mapping (*avail:
 * bytes to skip to the next page).
 */
const uint8_t *snap_at(struct snapmem *m, uint64_t addr, uint64_t *avail);
/* len bytes at addr read now, past the windows; what cannot be read is zeros. */
void snap_pread(struct snapmem *m, uint64_t addr, uint8_t *buf, size_t len);
/* len bytes at addr through the windows; 0, or -1 if any is not there. */
int snap_read(struct snapmem *m, uint64_t addr, void *buf, size_t len);
/*
 * Calls fn on [lo, hi)'s pages that hold anything (present or swapped in
 * the copy; everything where there is no page map), read in pieces past
 * the windows. fn gets the address of the bytes and how many.
 */
void snap_stream(struct snapmem *m, uint64_t lo, uint64_t hi,
		 void (*fn)(void *arg, uint64_t addr, const uint8_t *p, size_t len), void *arg);

#endif /* PMM_SCAN_SNAPMEM_H */
