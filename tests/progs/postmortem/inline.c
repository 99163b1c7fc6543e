/* (a) C, -g -O1: the leak is in a helper inlined into its caller, so the
 * frame holds an inlined call (addr2line -i: helper, then caller). */
#include "pm.h"

void *volatile sink;

static inline __attribute__((always_inline)) void *new_buffer(size_t size)
{
	return malloc(size); /* LEAK: inline */
}

__attribute__((noinline)) void fill_buffers(long count)
{
	for (long i = 0; i < count; i++)
		sink = new_buffer(48); /* CALL: inline */
}

int main(int argc, char **argv)
{
	long count = pm_count(argc, argv);

	fill_buffers(count);
	return pm_finish(argc, argv, count);
}
