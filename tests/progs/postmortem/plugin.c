/* (d) a shared library, -g, that pm-dlopen loads with dlopen() and unloads
 * with dlclose() after it leaked: its code is gone from the process. */
#include <stdlib.h>

void *volatile plugin_sink;

__attribute__((noinline)) void plugin_leak(long count)
{
	for (long i = 0; i < count; i++)
		plugin_sink = malloc(80); /* LEAK: plugin */
}
