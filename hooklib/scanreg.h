/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The registry pmm-scan reads (scan/, `pmctl unreachable`): where the hook
 * keeps addresses of blocks, which a reachability scan must not count as
 * references, and the records its threads have not sent yet, which the
 * module's block table does not show. pmm-scan finds it through the
 * library's dynamic symbol pmm_scan_registry, in a copy of the process
 * (the snapshot), and checks every address and count in it.
 *
 * Only this header is shared with pmm-scan: fixed-width fields, addresses
 * as uint64_t, a version to grow by.
 */
#ifndef PMM_SCANREG_H
#define PMM_SCANREG_H

#include <stdint.h>

#define PMM_SCANREG_MAGIC	0x31676572736d6d70ULL	/* "pmmsreg1" */
#define PMM_SCANREG_VERSION	1
#define PMM_SCANREG_THREADS	4096
#define PMM_SCANREG_TABLES	4

/* A thread whose buffer is mapped: its state (struct tstate, in its TLS)
 * and the buffer's mapping. addr 0: a free slot. */
struct pmm_scanreg_thread {
	uint64_t state;
	uint64_t buf;
	uint64_t bytes;
};

struct pmm_scanreg_range {
	uint64_t addr;
	uint64_t len;
};

struct pmm_scanreg {
	uint64_t magic;			/* PMM_SCANREG_MAGIC */
	uint32_t version;		/* PMM_SCANREG_VERSION */
	uint32_t record_size;		/* sizeof(struct pmm_record) */
	uint64_t mode;			/* &g_fast.mode: uint16_t, hook.h's MODE_* */
	uint64_t epoch;			/* &g_epoch: uint32_t */
	uint64_t threads;		/* struct pmm_scanreg_thread[nthreads] */
	uint64_t overflow;		/* uint32_t: buffers mapped while every slot was taken */
	uint64_t fork_marker;		/* a pointer to the hook's one MADV_WIPEONFORK page */
	uint32_t nthreads;
	/* in struct tstate: the buffer, its record count, their epoch */
	uint32_t off_buf, off_n, off_gen;
	uint32_t reserved;
	/* the hook's own tables of block addresses: never references */
	struct pmm_scanreg_range tables[PMM_SCANREG_TABLES];
};

/* hook.h's modes, as pmm-scan reads them */
#define PMM_SCANREG_MODE_EXACT		2
#define PMM_SCANREG_MODE_SAMPLED	3

#ifdef PMM_HOOK_H	/* the hook's side (scanreg.c), after hook.h */
PMM_HIDDEN_BEGIN
struct tstate;
/* A thread's buffer was mapped (bytes at buf) / is about to be unmapped. */
void scanreg_add(const struct tstate *t, const void *buf, uint64_t bytes);
void scanreg_del(const struct tstate *t);
/* A forked child: only the calling thread exists, and keeps its slot. */
void scanreg_fork(const struct tstate *t);
PMM_HIDDEN_END
#endif

#endif /* PMM_SCANREG_H */
