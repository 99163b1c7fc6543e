/* The post-mortem test programs' common part.
 *
 *   PROG [COUNT [exit|sleep]]
 *
 * leaks COUNT blocks (default 10) at the line marked LEAK, says
 * "leaked COUNT" on stdout, then exits (status 0) or sleeps until killed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline long pm_count(int argc, char **argv)
{
	return argc > 1 ? strtol(argv[1], NULL, 0) : 10;
}

static inline int pm_finish(int argc, char **argv, long count)
{
	printf("leaked %ld\n", count);
	fflush(stdout);
	if (argc > 2 && strcmp(argv[2], "sleep") == 0)
		for (;;)
			pause();
	return 0;
}
