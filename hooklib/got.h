/* SPDX-License-Identifier: GPL-2.0 */
/*
 * got.c: pointing a running program's calls of malloc and the others at
 * this library's definitions, through each loaded object's GOT.
 */
#ifndef PMM_GOT_H
#define PMM_GOT_H

#include <stddef.h>

#include "hook.h"

PMM_HIDDEN_BEGIN

#define GOT_MAX_ENTRIES	32

struct got_entry {
	const char *name;	/* the function the program calls */
	void *hook;		/* what its calls should reach */
};

/* Once, before got_redirect: the names and their hooks; each name's
 * current definition (program_sym) is what may be replaced. */
int got_prepare(const struct got_entry *entries, size_t n);
/* Every loaded object's entries for those names, this library's, ld.so's
 * and the vDSO's excepted: the number written (0 when all were done
 * already), or -errno if none could be and one failed. */
int got_redirect(void);

PMM_HIDDEN_END

#endif /* PMM_GOT_H */
