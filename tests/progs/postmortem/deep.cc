// (b) C++, -g -O0: a leak through operator new eight calls deep (none
// inlined); the hook does not interpose operator new, so the site's first
// frame is in libstdc++ and the user's line is the second.
#include "pm.h"

struct Block {
	char data[56];
};

Block *volatile sink;

void level8(long i) { sink = new Block; /* LEAK: deep */ (void)i; }
void level7(long i) { level8(i); }
void level6(long i) { level7(i); }
void level5(long i) { level6(i); }
void level4(long i) { level5(i); }
void level3(long i) { level4(i); }
void level2(long i) { level3(i); }
void level1(long i) { level2(i); }

int main(int argc, char **argv)
{
	long count = pm_count(argc, argv);

	for (long i = 0; i < count; i++)
		level1(i);
	return pm_finish(argc, argv, count);
}
