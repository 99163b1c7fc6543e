// SPDX-License-Identifier: GPL-2.0
/*
 * A program with the hook linked in (secure-real, secure-fake), which the
 * tests copy and make set-user-ID: in secure-execution mode the loader
 * ignores LD_PRELOAD, and the hook must ignore the PMM_* variables.
 *   secure   allocates and frees a block, prints "AT_SECURE N"
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/auxv.h>

int main(void)
{
	void *volatile p = malloc(48);

	free(p);
	printf("AT_SECURE %lu\n", getauxval(AT_SECURE));
	return 0;
}
