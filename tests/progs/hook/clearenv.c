// SPDX-License-Identifier: GPL-2.0
/*
 * Linked with libclearenv.so, whose constructor empties the environment
 * and allocates before the hook's constructor runs.
 *   clearenv   allocates and frees a block, prints "environ NULL|set"
 */
#include <stdio.h>
#include <stdlib.h>

extern char **environ;

int main(void)
{
	void *volatile p = malloc(48);

	free(p);
	printf("environ %s\n", environ ? "set" : "NULL");
	return 0;
}
