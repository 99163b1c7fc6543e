// SPDX-License-Identifier: GPL-2.0
/*
 * The PMM_* settings: read once, when the hook starts, without malloc or
 * stdio (the first hook may come before libc is initialised), and ignored
 * in secure-execution mode.
 *
 * Owns: the settings (g_follow_fork, g_depth, g_unwind, g_fastpath,
 * g_sample, g_tbuf_records, g_clock_mono); PMM_QUIET sets notice.c's
 * g_quiet.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/auxv.h>

#include "env.h"
#include "notice.h"

int g_follow_fork;
int g_depth = 1;
int g_unwind = UNWIND_AUTO;
int g_fastpath = 1;
uint64_t g_sample;
uint32_t g_tbuf_records = TBUF_RECORDS;
int g_clock_mono;

extern char **environ;
extern void *__libc_stack_end __attribute__((weak));

/*
 * The environment the settings are read from. environ is still NULL when
 * the first allocation comes before libc's own initialisation, from a
 * .preinit_array function (glibc 2.36 sets it in libc's init, which runs
 * after them), and getenv then finds nothing. The initial environment is
 * where the kernel put it, after argv on the first stack, whose start
 * ld.so exports as __libc_stack_end: argc, argv[argc], NULL, envp[], NULL
 * (ld.so run as a command shifts them in place). No malloc, no system call.
 *
 * But environ is NULL after clearenv() too, and what the program (an
 * earlier library's constructor) cleared must stay cleared. libc's init
 * sets program_invocation_name to argv[0] with environ; before it, it is
 * libc's own "": so the stack is read only while it is not argv[0]. With
 * no argv[0] (an empty argv, before Linux 5.18) nothing tells, and the
 * stack is not read.
 */
static char **init_env(void)
{
	const long *sp;
	char **argv;
	long argc;

	if (environ)
		return environ;
	if (!&__libc_stack_end || !__libc_stack_end)
		return NULL;
	sp = __libc_stack_end;
	argc = sp[0];
	argv = (char **)(sp + 1);
	if (argc < 1 || argc > (1L << 24) || argv[argc] || !argv[0])
		return NULL;
	if (!program_invocation_name || program_invocation_name == argv[0] ||
	    program_invocation_name[0])
		return NULL;	/* libc set environ, and the program cleared it */
	return argv + argc + 1;
}

const char *env_get(char **env, const char *name)
{
	size_t n = strlen(name);

	for (; env && *env; env++)
		if (!strncmp(*env, name, n) && (*env)[n] == '=')
			return *env + n + 1;
	return NULL;
}

long num_of(const char *v, long dflt)
{
	long n = 0;

	if (!v || !*v)
		return dflt;
	for (; *v; v++) {
		if (*v < '0' || *v > '9' || n > (LONG_MAX - 9) / 10)
			return -1;
		n = n * 10 + (*v - '0');
	}
	return n;
}

long env_num(char **env, const char *name, long dflt)
{
	return num_of(env_get(env, name), dflt);
}

/* "4096", "512K", "1M", "1G" (K = 1024; a trailing B or iB allowed): bytes;
 * dflt if empty or absent, -1 if not a size. */
static long size_of(const char *v, long dflt)
{
	long n = 0, unit = 1;
	const char *d = v;

	if (!v || !*v)
		return dflt;
	for (; *v >= '0' && *v <= '9'; v++) {
		if (n > (LONG_MAX - 9) / 10)
			return -1;
		n = n * 10 + (*v - '0');
	}
	if (v == d)
		return -1;
	switch (*v) {
	case 'k': case 'K': unit = 1L << 10; v++; break;
	case 'm': case 'M': unit = 1L << 20; v++; break;
	case 'g': case 'G': unit = 1L << 30; v++; break;
	}
	if (unit > 1 && *v == 'i')
		v++;
	if (*v == 'B' || *v == 'b')
		v++;
	if (*v || n > LONG_MAX / unit)
		return -1;
	return n * unit;
}

static int same_word(const char *a, const char *b)
{
	for (; *a && *b; a++, b++)
		if ((*a | 0x20) != *b)
			return 0;
	return !*a && !*b;
}

/* One line on stderr for a setting the hook cannot use (env.h). */
static void bad_setting(const char *name, const char *value, const char *want,
			const char *then)
{
	const char *parts[] = { "pmm: ", name, "=", value, ": not ", want, "; ", then };

	say(parts, sizeof(parts) / sizeof(parts[0]));
}

int env_flag(char **env, const char *name, int dflt)
{
	const char *v = env_get(env, name);

	if (!v || !*v)
		return dflt;
	if (same_word(v, "1") || same_word(v, "true") || same_word(v, "yes") ||
	    same_word(v, "on"))
		return 1;
	if (same_word(v, "0") || same_word(v, "false") || same_word(v, "no") ||
	    same_word(v, "off"))
		return 0;
	bad_setting(name, v, "1, true, yes or on, nor 0, false, no or off", "ignored");
	return dflt;
}

char **settings_read(void)
{
	char **env;
	int secure;

	/*
	 * Secure-execution mode (set-user-ID and the like): the invoking
	 * user's environment must not steer the program, as glibc ignores
	 * MALLOC_* there. Every PMM_* is ignored, and the hook says nothing:
	 * it starts unmonitored, as without PMM_START.
	 */
	secure = getauxval(AT_SECURE) != 0;
	env = secure ? NULL : init_env();
	settings_apply(env);
	g_quiet |= secure;
	return env;
}

void settings_apply(char **env)
{
	const char *u;
	long v;

	g_quiet = 0;	/* PMM_QUIET's own bad value is said */
	g_quiet = env_flag(env, "PMM_QUIET", 0);
	g_follow_fork = env_flag(env, "PMM_FOLLOW_FORK", 0);
	v = env_num(env, "PMM_DEPTH", 1);
	if (v < 1 || v > PMM_MAX_FRAMES) {
		bad_setting("PMM_DEPTH", env_get(env, "PMM_DEPTH"), "a depth from 1 to 32",
			    "depth 1");
		v = 1;
	}
	g_depth = (int)v;
	u = env_get(env, "PMM_UNWIND");
	if (u && !strcmp(u, "fp"))
		g_unwind = UNWIND_FP;
	else if (u && !strcmp(u, "eh"))
		g_unwind = UNWIND_EH;
	else
		g_unwind = UNWIND_AUTO;
	if (u && *u && g_unwind == UNWIND_AUTO)
		bad_setting("PMM_UNWIND", u, "fp or eh", "frame pointers, then libgcc's unwinder");
	g_fastpath = env_flag(env, "PMM_FASTPATH", 1);
	/* exact mode is the expensive one: a bad size must not fall back to it unsaid */
	v = size_of(env_get(env, "PMM_SAMPLE"), 0);
	if (v < 0)
		bad_setting("PMM_SAMPLE", env_get(env, "PMM_SAMPLE"),
			    "a size in bytes (or with K, M or G)", "exact mode");
	g_sample = v > 0 ? (uint64_t)v : 0;
	v = env_num(env, "PMM_BUFFER", TBUF_RECORDS);
	if (v < 0) {
		bad_setting("PMM_BUFFER", env_get(env, "PMM_BUFFER"), "a number of records",
			    "the default");
	} else {	/* a number out of range takes the nearest bound, said */
		g_tbuf_records = v < TBUF_MIN_RECORDS ? TBUF_MIN_RECORDS :
				 v > TBUF_RECORDS ? TBUF_RECORDS : (uint32_t)v;
		if (g_tbuf_records != v)
			bad_setting("PMM_BUFFER", env_get(env, "PMM_BUFFER"),
				    "a number of records from 512 to 32768", "the nearest of the two");
	}
	/* PMM_CLOCK=mono|logical (tests; logical is the address clock, the default) */
	u = env_get(env, "PMM_CLOCK");
	g_clock_mono = u && !strcmp(u, "mono");
}
