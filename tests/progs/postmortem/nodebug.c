/* (e) calls leak_in_lib of libpm-nodebug.so (linked, found beside it). */
#include "pm.h"

void leak_in_lib(long count);

int main(int argc, char **argv)
{
	long count = pm_count(argc, argv);

	leak_in_lib(count);
	return pm_finish(argc, argv, count);
}
