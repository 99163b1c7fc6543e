/* The post-mortem test programs' common part.
 *
 *   PROG [COUNT [exit|sleep]]
 *
 * leaks COUNT blocks (default 10) at the line marked LEAK, allocates once
 * more 150 ms later, says "leaked COUNT" on stdout, then exits (status 0)
 * or sleeps until killed.
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
	/*
	 * As a daemon goes on allocating: the hook sends a thread's buffered
	 * records when one comes 100 ms after the first it holds, so the leak
	 * reaches the module before "leaked" is said (a SIGKILL after it loses
	 * nothing; an idle thread would keep them until its next allocation).
	 */
	usleep(150 * 1000);
	free(malloc(1));
	printf("leaked %ld\n", count);
	fflush(stdout);
	if (argc > 2 && strcmp(argv[2], "sleep") == 0)
		for (;;)
			pause();
	return 0;
}
