// SPDX-License-Identifier: GPL-2.0
/*
 * Growth of kind LEAK: every 10 ms it allocates 20 blocks of 1000 bytes
 * at leak_request(), writes them and keeps them all (a linked list through
 * the blocks), about 1.9 MiB/s of live heap, from a first SIGUSR2 until
 * SECS seconds or a second one (kinds.h).
 *
 *   kind_leak SECS
 */
#include "kinds.h"

struct node {
	struct node *next;
	char data[1000 - sizeof(struct node *)];
};

__attribute__((noinline)) static struct node *leak_request(struct node *head)
{
	struct node *n = malloc(sizeof(*n));

	if (!n)
		return head;
	memset(n->data, 0x5a, sizeof(n->data));
	n->next = head;
	g_own_live += sizeof(*n);
	return n;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 10, end;
	struct node *head = NULL;
	int i;

	kinds_start();
	end = kinds_wait_start(secs);
	while (kinds_growing(end)) {
		for (i = 0; i < 20; i++)
			head = leak_request(head);
		kinds_tick(10000);
	}
	return kinds_hold() + (head == NULL);
}
