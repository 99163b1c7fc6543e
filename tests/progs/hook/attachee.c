// SPDX-License-Identifier: GPL-2.0
/*
 * A program to attach to (pmm-inject): it prints "ready PID", then runs
 * ROUNDS rounds, each blocked in one system call (epoll_wait, nanosleep,
 * read of a pipe, poll, futex through a condition variable: the kinds a
 * stop interrupts) and then doing allocation work whose result it prints
 * at the end. Any EINTR, short sleep or wrong sum says the attach changed
 * what it does.
 *
 *   attachee ROUNDS [threads N] [dlopen LIB AT] [leak AT] [wait AT] [until-stdin]
 *            [seccomp] [older N] [dlmopen LIB] [deepbind LIB] [sigqueue]
 *            [small-stack] [preload LIB] [in-loader] [segv-handler] [via-pointers]
 *   attachee windows N
 *
 * threads N: N more threads hammering malloc/free (their counts are
 * printed); dlopen LIB AT: from round AT, calls LIB's attachee_alloc(n)
 * (loaded then) and frees what it returns; leak AT: from round AT, keeps
 * one 4000-byte block a round, from a site of its own (leaking_site);
 * wait AT: at round AT, first reads a line from stdin (a test attaches, then
 * lets it go on); until-stdin: ends early, after the round in which stdin
 * became readable (a line, or its end);
 * seccomp: installs an allow-all seccomp filter first;
 * older N: N blocks allocated before "ready", released in round AT of wait
 * (0 without one), after its wait: the even ones freed, the odd ones grown by realloc, then freed
 * at the end (blocks older than an attach);
 * dlmopen LIB: loads LIB lazily bound in a new namespace before "ready",
 * where it allocates (attachee_keep), and frees in round AT of wait (0
 * without one), after its wait (attachee_release); deepbind LIB: the same
 * with dlopen(RTLD_LAZY | RTLD_DEEPBIND), in the program's namespace;
 * preload LIB: the same with dlopen(RTLD_NOW);
 * sigqueue: counts the SIGRTMIN it receives, those sent by sigqueue with
 * the value 42 apart from any other (a signal an attach held and sent
 * again would be one), and prints both at the end;
 * small-stack: waits for its wait line (wait AT) on a stack of 32 KiB of
 * its own (makecontext), where dlopen could run off the end, once there
 * saying "waiting on a small stack";
 * in-loader: waits for it in a callback of dl_iterate_phdr, which holds
 * the loader's lock meanwhile, saying "waiting in the loader";
 * segv-handler: installs a SIGSEGV handler (as a JVM or a crash reporter
 * does) and says at the end whether it is still there;
 * via-pointers: each round's malloc and free are called through pointers
 * the program took (built -no-pie, bin/attachee-nopie: the executable's PLT
 * entries stand for them, and libc's own calls reach the definitions).
 *
 * windows N: a window at a time, on commands read from stdin (a test
 * attaches and stops around each): "run" starts N threads hammering
 * malloc/free, each keeping its last 16 blocks; "hold" stops them (their
 * exit sends their records) and prints "held" and the blocks they kept
 * (address:size, 16 per thread); "free" frees those in a thread of its own
 * (its exit sends the frees) and prints "freed"; "end" ends (status 0).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

static volatile int g_stop;
static void *(*volatile g_malloc_ptr)(size_t);
static void (*volatile g_free_ptr)(void *);
static volatile sig_atomic_t g_queued, g_other;

static void on_segv(int sig, siginfo_t *si, void *uc)
{
	_exit(99);
}

static void on_rtmin(int sig, siginfo_t *si, void *uc)
{
	if (si->si_code == SI_QUEUE && si->si_value.sival_int == 42)
		g_queued++;
	else
		g_other++;
}
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;

static void fail(const char *what)
{
	printf("FAIL %s: %s\n", what, strerror(errno));
	exit(1);
}

static void *hammer(void *arg)
{
	unsigned long n = 0, sum = 0;
	void *keep[16] = { 0 };

	while (!g_stop) {
		char *p = malloc(16 + n % 200);

		if (!p)
			fail("malloc");
		p[0] = (char)n;
		sum += (unsigned char)p[0];
		free(keep[n % 16]);
		keep[n % 16] = p;
		n++;
	}
	for (n = 0; n < 16; n++)
		free(keep[n]);
	*(unsigned long *)arg = sum;
	return NULL;
}

#define WINDOW_KEEP	16

struct window_thread {
	pthread_t tid;
	void *keep[WINDOW_KEEP];
	size_t size[WINDOW_KEEP];
};

static struct window_thread g_window[64];
static volatile int g_window_stop;

static void *window_hammer(void *arg)
{
	struct window_thread *w = arg;
	unsigned long n = 0;

	while (!g_window_stop) {
		size_t size = 16 + n % 200;
		char *p = malloc(size);

		if (!p)
			fail("malloc");
		p[0] = (char)n;
		free(w->keep[n % WINDOW_KEEP]);
		w->keep[n % WINDOW_KEEP] = p;
		w->size[n % WINDOW_KEEP] = size;
		n++;
	}
	return NULL;
}

static void *window_free(void *arg)
{
	int i, j, n = *(int *)arg;

	for (i = 0; i < n; i++)
		for (j = 0; j < WINDOW_KEEP; j++) {
			free(g_window[i].keep[j]);
			g_window[i].keep[j] = NULL;
		}
	return NULL;
}

static int windows(int n)
{
	char cmd[32];
	pthread_t t;
	int i, j;

	if (n < 1 || n > 64)
		n = 8;
	printf("ready %d\n", getpid());
	fflush(stdout);
	while (fgets(cmd, sizeof(cmd), stdin)) {
		if (!strcmp(cmd, "run\n")) {
			g_window_stop = 0;
			for (i = 0; i < n; i++)
				if (pthread_create(&g_window[i].tid, NULL, window_hammer, &g_window[i]))
					fail("pthread_create");
			printf("running\n");
		} else if (!strcmp(cmd, "hold\n")) {
			g_window_stop = 1;
			for (i = 0; i < n; i++)
				pthread_join(g_window[i].tid, NULL);
			printf("held");
			for (i = 0; i < n; i++)
				for (j = 0; j < WINDOW_KEEP; j++)
					printf(" %lx:%zu", (unsigned long)g_window[i].keep[j],
					       g_window[i].size[j]);
			printf("\n");
		} else if (!strcmp(cmd, "free\n")) {
			if (pthread_create(&t, NULL, window_free, &n) || pthread_join(t, NULL))
				fail("pthread_create");
			printf("freed\n");
		} else if (!strcmp(cmd, "end\n")) {
			return 0;
		}
		fflush(stdout);
	}
	return 1;
}

static ucontext_t g_main_ctx, g_small_ctx;

static void wait_line(void)
{
	char line[16];

	if (!fgets(line, sizeof(line), stdin))
		fail("stdin");
}

/* says where it waits (a test attaches only once it is there), then waits */
static void wait_line_at(const char *where)
{
	printf("waiting %s\n", where);
	fflush(stdout);
	wait_line();
}

static int wait_in_callback(struct dl_phdr_info *info, size_t size, void *arg)
{
	wait_line_at("in the loader");
	return 1;	/* one object is enough */
}

static void wait_line_on_small_stack(void)
{
	wait_line_at("on a small stack");
}

/* wait_line on a 32 KiB stack of its own, then back */
static void wait_on_small_stack(void)
{
	size_t size = 32 * 1024;
	void *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (stack == MAP_FAILED || getcontext(&g_small_ctx))
		fail("small stack");
	g_small_ctx.uc_stack.ss_sp = stack;
	g_small_ctx.uc_stack.ss_size = size;
	g_small_ctx.uc_link = &g_main_ctx;
	makecontext(&g_small_ctx, wait_line_on_small_stack, 0);
	if (swapcontext(&g_main_ctx, &g_small_ctx))
		fail("swapcontext");
	munmap(stack, size);
}

__attribute__((noinline)) static void *leaking_site(void)
{
	void *p = malloc(4000);

	__asm__ volatile("" : "+r"(p));	/* a call, not a tail call: the site is here */
	return p;
}

static long elapsed_ms(const struct timespec *a)
{
	struct timespec b;

	clock_gettime(CLOCK_MONOTONIC, &b);
	return (b.tv_sec - a->tv_sec) * 1000 + (b.tv_nsec - a->tv_nsec) / 1000000;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 10, threads = 0, dl_at = -1, leak_at = -1;
	int wait_at = -1, until_stdin = 0, older_n = 0, small_stack = 0, in_loader = 0;
	int segv_handler = 0, via_pointers = 0;
	void (*ns_release)(void) = NULL;
	const char *ns_lib = NULL;
	int deepbind = 0;	/* 1: RTLD_DEEPBIND, 2: neither that nor dlmopen */
	char **older = NULL;
	void *(*lib_alloc)(size_t) = NULL;
	const char *lib = NULL;
	unsigned long sums[64] = { 0 }, total = 0;
	pthread_t tid[64];
	int ep, pipefd[2], i, r;
	long short_sleeps = 0;

	if (argc > 2 && !strcmp(argv[1], "windows"))
		return windows(atoi(argv[2]));
	for (i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "dlopen") && i + 2 < argc) {
			lib = argv[++i];
			dl_at = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "leak") && i + 1 < argc)
			leak_at = atoi(argv[++i]);
		else if (!strcmp(argv[i], "wait") && i + 1 < argc)
			wait_at = atoi(argv[++i]);
		else if (!strcmp(argv[i], "dlmopen") && i + 1 < argc)
			ns_lib = argv[++i];
		else if (!strcmp(argv[i], "deepbind") && i + 1 < argc) {
			ns_lib = argv[++i];
			deepbind = 1;
		} else if (!strcmp(argv[i], "preload") && i + 1 < argc) {
			ns_lib = argv[++i];
			deepbind = 2;
		}
		else if (!strcmp(argv[i], "small-stack"))
			small_stack = 1;
		else if (!strcmp(argv[i], "in-loader"))
			in_loader = 1;
		else if (!strcmp(argv[i], "via-pointers")) {
			/* taken in code: a non-PIE executable's PLT entry stands for them */
			g_malloc_ptr = malloc;
			g_free_ptr = free;
			via_pointers = 1;
		}
		else if (!strcmp(argv[i], "segv-handler")) {
			struct sigaction sa;

			memset(&sa, 0, sizeof(sa));
			sa.sa_sigaction = on_segv;
			sa.sa_flags = SA_SIGINFO;
			sigaction(SIGSEGV, &sa, NULL);
			segv_handler = 1;
		}
		else if (!strcmp(argv[i], "sigqueue")) {
			struct sigaction sa;

			memset(&sa, 0, sizeof(sa));
			sa.sa_sigaction = on_rtmin;
			sa.sa_flags = SA_SIGINFO | SA_RESTART;
			sigaction(SIGRTMIN, &sa, NULL);
		} else if (!strcmp(argv[i], "older") && i + 1 < argc)
			older_n = atoi(argv[++i]);
		else if (!strcmp(argv[i], "until-stdin"))
			until_stdin = 1;
		else if (!strcmp(argv[i], "seccomp")) {
			struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
			struct sock_fprog prog = { 1, &allow };

			if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
			    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
				fail("seccomp");
		}
	}
	if (threads > 64)
		threads = 64;
#ifdef ATTACHEE_STATIC
	(void)lib;
	(void)dl_at;
#endif
	if (older_n > 0) {
		older = calloc((size_t)older_n, sizeof(*older));
		for (i = 0; older && i < older_n; i++)
			if (!(older[i] = malloc(32 + i % 500)))
				fail("malloc");
		if (!older)
			fail("calloc");
	}
#ifndef ATTACHEE_STATIC
	if (ns_lib) {
		void *h = deepbind == 2 ? dlopen(ns_lib, RTLD_NOW) :
			  deepbind ? dlopen(ns_lib, RTLD_LAZY | RTLD_DEEPBIND) :
				     dlmopen(LM_ID_NEWLM, ns_lib, RTLD_LAZY);
		void (*keep)(int) = h ? (void (*)(int))dlsym(h, "attachee_keep") : NULL;

		ns_release = h ? (void (*)(void))dlsym(h, "attachee_release") : NULL;
		if (!keep || !ns_release) {
			printf("FAIL dlmopen: %s\n", dlerror());
			return 1;
		}
		keep(!deepbind);
	}
#else
	(void)ns_lib;
	(void)deepbind;
#endif
	ep = epoll_create1(0);
	if (ep < 0 || pipe(pipefd))
		fail("setup");
	for (i = 0; i < threads; i++)
		if (pthread_create(&tid[i], NULL, hammer, &sums[i]))
			fail("pthread_create");
	printf("ready %d\n", getpid());
	fflush(stdout);
	for (r = 0; r < rounds; r++) {
		struct epoll_event ev;
		struct timespec t0, ts = { 0, 20 * 1000000 };
		struct pollfd pfd = { pipefd[0], POLLIN, 0 };
		char c = 'x';

		if (until_stdin && r != wait_at) {
			struct pollfd in = { 0, POLLIN, 0 };

			if (poll(&in, 1, 0) > 0)
				break;
		}
		if (r == wait_at && small_stack)
			wait_on_small_stack();
		else if (r == wait_at && in_loader)
			dl_iterate_phdr(wait_in_callback, NULL);
		else if (r == wait_at)
			wait_line();
		if (ns_release && r == (wait_at >= 0 ? wait_at : 0))
			ns_release();
		for (i = 0; r == (wait_at >= 0 ? wait_at : 0) && i < older_n; i++) {
			if (i % 2 == 0) {
				free(older[i]);
				older[i] = NULL;
			} else if (!(older[i] = realloc(older[i], 5000 + i))) {
				fail("realloc");
			}
		}
		clock_gettime(CLOCK_MONOTONIC, &t0);
		switch (r % 5) {
		case 0:
			if (epoll_wait(ep, &ev, 1, 20) != 0)
				fail("epoll_wait");
			break;
		case 1:
			if (nanosleep(&ts, NULL))
				fail("nanosleep");
			break;
		case 2:
			if (write(pipefd[1], &c, 1) != 1 || read(pipefd[0], &c, 1) != 1)
				fail("pipe");
			if (poll(&pfd, 1, 20) != 0)
				fail("poll");
			break;
		case 3: {
			struct timespec until;

			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_nsec += 20 * 1000000;
			if (until.tv_nsec >= 1000000000) {
				until.tv_sec++;
				until.tv_nsec -= 1000000000;
			}
			pthread_mutex_lock(&g_lock);
			i = pthread_cond_timedwait(&g_cond, &g_lock, &until);
			pthread_mutex_unlock(&g_lock);
			if (i != ETIMEDOUT) {
				errno = i;
				fail("pthread_cond_timedwait");
			}
			break;
		}
		default:
			if (usleep(20000))
				fail("usleep");
		}
		if (elapsed_ms(&t0) < 19)
			short_sleeps++;
		for (i = 0; i < 2000; i++) {
			char *p = via_pointers ? g_malloc_ptr(24 + i % 300) : malloc(24 + i % 300);
			char *q = strdup("attachee");

			if (!p || !q)
				fail("malloc");
			p[0] = (char)i;
			total += (unsigned char)p[0] + strlen(q);
			p = realloc(p, 400 + i % 100);
			if (via_pointers) {
				g_free_ptr(q);	/* libc's malloc, the program's free */
				g_free_ptr(p);
			} else {
				free(q);
				free(p);
			}
		}
#ifndef ATTACHEE_STATIC
		if (lib && r == dl_at) {
			void *h = dlopen(lib, RTLD_NOW);

			lib_alloc = h ? (void *(*)(size_t))dlsym(h, "attachee_alloc") : NULL;
			if (!lib_alloc) {
				printf("FAIL dlopen: %s\n", dlerror());
				return 1;
			}
		}
#endif
		if (lib_alloc)
			for (i = 0; i < 100; i++)
				free(lib_alloc(70001 + i));
		if (leak_at >= 0 && r >= leak_at && !leaking_site())
			fail("leak");
	}
	for (i = 0; i < older_n; i++)
		free(older[i]);
	free(older);
	g_stop = 1;
	for (i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);
	printf("total %lu short_sleeps %ld threads %d\n", total, short_sleeps, threads);
	if (g_queued || g_other)
		printf("signals queued %d other %d\n", (int)g_queued, (int)g_other);
	if (segv_handler) {
		struct sigaction now;

		sigaction(SIGSEGV, NULL, &now);
		printf("SIGSEGV handler %s\n", now.sa_sigaction == on_segv ? "kept" : "lost");
	}
	for (i = 0; i < threads; i++)
		if (!sums[i])
			printf("thread %d did nothing\n", i);
	return 0;
}
