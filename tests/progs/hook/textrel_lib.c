// SPDX-License-Identifier: GPL-2.0
/*
 * A library with text relocations (-z notext): its tables of malloc and
 * free, placed in .rodata, are R_X86_64_64 entries in a segment loaded
 * read-only (as a non-PIC object's would be), so
 * an attach must make the page writable to redirect them, and give it its
 * protection back. attachee's "preload LIB" loads it before the attach:
 * attachee_keep allocates through the table then, attachee_release after
 * the attach frees those and allocates one block of 77777 bytes (recorded
 * if the entry was redirected).
 */
#include <stdlib.h>

/* in a section without write (the compiler would make it writable) */
__asm__(".section .rodata.textrel, \"a\"\n"
	".balign 8\n"
	"textrel_alloc: .quad malloc\n"
	"textrel_free: .quad free\n"
	".previous\n");
extern void *(*const textrel_alloc[1])(size_t) __attribute__((visibility("hidden")));
extern void (*const textrel_free[1])(void *) __attribute__((visibility("hidden")));

void attachee_keep(int dup);
void attachee_release(void);

static void *g_kept[16];

void attachee_keep(int dup)
{
	int i;

	(void)dup;
	for (i = 0; i < 16; i++)
		g_kept[i] = textrel_alloc[0](200 + i);
}

void attachee_release(void)
{
	int i;

	for (i = 0; i < 16; i++)
		textrel_free[0](g_kept[i]);
	g_kept[0] = textrel_alloc[0](77777);
	textrel_free[0](g_kept[0]);
}
