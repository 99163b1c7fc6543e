/* (c) C, -g -O1, then stripped: its debug info only in a separate file,
 * debug/.build-id/xx/rest.debug (found by build-id). */
#include "pm.h"

void *volatile sink;

__attribute__((noinline)) void keep_record(long i)
{
	sink = malloc(64 + (size_t)(i & 1)); /* LEAK: stripped */
}

int main(int argc, char **argv)
{
	long count = pm_count(argc, argv);

	for (long i = 0; i < count; i++)
		keep_record(i);
	return pm_finish(argc, argv, count);
}
