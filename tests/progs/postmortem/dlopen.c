/* (d) loads libpm-plugin.so (beside this program) with dlopen(), calls its
 * plugin_leak, and unloads it. */
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>

#include "pm.h"

int main(int argc, char **argv)
{
	char exe[PATH_MAX], lib[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	long count = pm_count(argc, argv);

	if (n < 0)
		return 2;
	exe[n] = '\0';
	snprintf(lib, sizeof(lib), "%s/libpm-plugin.so", dirname(exe));
	void *h = dlopen(lib, RTLD_NOW);
	if (h == NULL) {
		fprintf(stderr, "%s\n", dlerror());
		return 2;
	}
	void (*leak)(long) = (void (*)(long))dlsym(h, "plugin_leak");
	if (leak == NULL)
		return 2;
	leak(count);
	dlclose(h);
	return pm_finish(argc, argv, count);
}
