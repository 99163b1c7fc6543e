/* SPDX-License-Identifier: GPL-2.0 */
/*
 * env.c: the PMM_* settings, read once by pmm_init, and the environment
 * they are read from (before libc has set environ, if need be).
 */
#ifndef PMM_ENV_H
#define PMM_ENV_H

#include "hook.h"

/*
 * Records per thread buffer: 8 batches (PMM_RECORD_LOG takes PMM_MAX_BATCH at
 * a time), 1.5 MiB mmap'd per thread, touched only as far as a thread fills
 * it in a flush period; PMM_BUFFER=N takes N (TBUF_MIN_RECORDS at least,
 * TBUF_RECORDS at most) where memory counts more than cpu. The longer a
 * record waits in the buffer, the likelier its block dies there and the pair
 * never reaches the module's tables (cancel_buffered): a bigger buffer costs
 * memory and saves the module work.
 */
#define TBUF_RECORDS	(8 * PMM_MAX_BATCH)
#define TBUF_MIN_RECORDS	512

enum { UNWIND_AUTO = 0, UNWIND_FP = 1, UNWIND_EH = 2 };

PMM_HIDDEN_BEGIN

extern int g_follow_fork;	/* PMM_FOLLOW_FORK: a forked child asks START_PID 0 */
extern int g_depth;		/* PMM_DEPTH: frames per site, 1..PMM_MAX_FRAMES */
extern int g_unwind;		/* PMM_UNWIND: UNWIND_*, the walker for depth > 1 */
extern int g_fastpath;		/* PMM_FASTPATH=0: exact mode without its fast paths */
extern uint64_t g_sample;	/* PMM_SAMPLE bytes, 0: exact */
extern uint32_t g_tbuf_records;	/* PMM_BUFFER: records a thread buffers */
extern int g_clock_mono;	/* PMM_CLOCK=mono: stamps are CLOCK_MONOTONIC */

/* Sets the settings above; returns the environment they came from (NULL in
 * secure-execution mode), for the caller's PMM_START and the fake device. */
char **settings_read(void);
/* Sets the settings above from env (NULL: the defaults). */
void settings_apply(char **env);

const char *env_get(char **env, const char *name);
/* v as a decimal number: dflt if empty or absent, -1 if not a number. */
long num_of(const char *v, long dflt);
long env_num(char **env, const char *name, long dflt);
/* A switch: 1/true/yes/on 1, 0/false/no/off 0 (any case), dflt if empty or
 * absent; a value that is none of these gets one line on stderr (unless
 * PMM_QUIET) and dflt. */
int env_flag(char **env, const char *name, int dflt);

PMM_HIDDEN_END

#endif /* PMM_ENV_H */
