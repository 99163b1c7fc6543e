/* (e) a shared library built without -g and stripped: only its dynamic
 * symbols name its code (libpm-nodebug.so+0x... (leak_in_lib+0x...)). */
#include <stdlib.h>

void *volatile nodebug_sink;

__attribute__((noinline)) void leak_in_lib(long count)
{
	for (long i = 0; i < count; i++)
		nodebug_sink = malloc(96); /* LEAK: nodebug */
}
