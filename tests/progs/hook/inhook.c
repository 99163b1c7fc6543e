// SPDX-License-Identifier: GPL-2.0
/*
 * A signal handler that runs inside the hook: the fake device raises
 * SIGUSR1 there (PMM_FAKE_RAISE=batch:N while it sends a batch, claim:N
 * while it claims a site's slot).
 *   inhook jump         the handler allocates a block of 200 bytes (kept)
 *                       and leaves the hook with siglongjmp; main allocates
 *                       and frees blocks of 48 bytes until it has, then
 *                       1000 blocks of 48 bytes and 5000 of 56, from the
 *                       same function, and prints "jumped"
 *   inhook jump-alt     the same, the handler on an alternate signal stack
 *                       below the thread's stack (static)
 *   inhook jump-thread  the same in a thread whose stack is static and
 *                       whose alternate signal stack (mmap) lies above it
 *   inhook maps         main maps two anonymous regions of 64 KiB; the
 *                       handler unmaps the first and mremaps the second to
 *                       128 KiB, and returns; main unmaps that one and
 *                       prints "maps FIRST SECOND MOVED" (hex)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define REGION	(64 * 1024)

static sigjmp_buf back;
static void *volatile kept;
static volatile int handled;
static int maps;
static void *first, *second, *volatile moved;
static char alt_low[64 * 1024] __attribute__((aligned(16)));
static char thread_stack[1024 * 1024] __attribute__((aligned(4096)));

__attribute__((noinline)) static void churn(size_t size, int n)
{
	for (int i = 0; i < n; i++) {
		void *volatile p = malloc(size);

		free(p);
	}
}

static void on_usr1(int sig)
{
	(void)sig;
	handled = 1;
	if (maps) {
		munmap(first, REGION);
		moved = mremap(second, REGION, 2 * REGION, MREMAP_MAYMOVE);
		return;
	}
	kept = malloc(200);
	siglongjmp(back, 1);
}

static int on_alt_stack(void *base, size_t size)
{
	stack_t ss = { .ss_sp = base, .ss_size = size };

	return sigaltstack(&ss, NULL);
}

static void *work(void *arg)
{
	if (arg && on_alt_stack(mmap(NULL, 64 * 1024, PROT_READ | PROT_WRITE,
				     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), 64 * 1024))
		return "sigaltstack";
	if (sigsetjmp(back, 1) == 0) {
		for (int i = 0; i < 100000; i++)
			churn(48, 1);
		return "no signal";
	}
	churn(48, 1000);
	churn(56, 5000);
	return NULL;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "jump";
	struct sigaction sa = { .sa_handler = on_usr1 };
	const char *err;

	sigemptyset(&sa.sa_mask);
	if (!strcmp(mode, "jump-alt")) {
		if (on_alt_stack(alt_low, sizeof(alt_low)))
			return 1;
		sa.sa_flags = SA_ONSTACK;
	} else if (!strcmp(mode, "jump-thread")) {
		sa.sa_flags = SA_ONSTACK;
	}
	if (sigaction(SIGUSR1, &sa, NULL))
		return 1;
	if (!strcmp(mode, "maps")) {
		maps = 1;
		first = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			     -1, 0);
		second = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			      -1, 0);
		for (int i = 0; i < 100000 && !handled; i++)
			churn(48, 1);
		if (!handled || moved == MAP_FAILED)
			return 1;
		munmap(moved, 2 * REGION);
		printf("maps %p %p %p\n", first, second, moved);
		return 0;
	}
	if (!strcmp(mode, "jump-thread")) {
		pthread_attr_t attr;
		pthread_t th;
		void *ret;

		if (pthread_attr_init(&attr) ||
		    pthread_attr_setstack(&attr, thread_stack, sizeof(thread_stack)) ||
		    pthread_create(&th, &attr, work, "alt above") || pthread_join(th, &ret))
			return 1;
		err = ret;
	} else {
		err = work(NULL);
	}
	if (err) {
		printf("%s\n", err);
		return 1;
	}
	printf("jumped\n");
	return 0;
}
