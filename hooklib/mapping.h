/* SPDX-License-Identifier: GPL-2.0 */
/*
 * mapping.c: mmap, mmap64, munmap and mremap while monitored, which the
 * entry points (interpose.c) call when their common case does not apply.
 */
#ifndef PMM_MAPPING_H
#define PMM_MAPPING_H

#include <sys/types.h>

#include "hook.h"
#include "site.h"

PMM_HIDDEN_BEGIN

/* fn is libc's mmap or mmap64. */
void *hook_mmap(void *(*fn)(void *, size_t, int, int, int, off_t), void *addr, size_t len,
		int prot, int flags, int fd, off_t off, const struct src *s);
int hook_munmap(void *addr, size_t len);
void *hook_mremap(void *old, size_t old_len, size_t len, int flags, void *want,
		  const struct src *s);

PMM_HIDDEN_END

#endif /* PMM_MAPPING_H */
