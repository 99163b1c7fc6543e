// SPDX-License-Identifier: GPL-2.0-only
/*
 * pmm_badmod: a deliberately broken module that proves the debug-kernel
 * harness (scripts/test-debug.sh) reports bugs. It is never part of pmm.ko.
 *
 *   insmod pmm_badmod.ko mode=ok    does nothing
 *   insmod pmm_badmod.ko mode=uaf   reads a block after freeing it (KASAN)
 *   insmod pmm_badmod.ko mode=leak  allocates a block and forgets it (kmemleak)
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/string.h>

static char *mode = "ok";
module_param(mode, charp, 0444);
MODULE_PARM_DESC(mode, "ok, uaf or leak");

/* Keeps the compiler from proving the read dead or the block unused. */
static volatile char badmod_sink;

static noinline void badmod_uaf(void)
{
	char *p = kmalloc(64, GFP_KERNEL);

	if (!p)
		return;
	memset(p, 0x5a, 64);
	kfree(p);
	badmod_sink = READ_ONCE(p[8]);
}

static noinline void badmod_leak(void)
{
	char *p = kmalloc(128, GFP_KERNEL);

	if (!p)
		return;
	memset(p, 0xa5, 128);
	badmod_sink = p[0];
	/* The only pointer to p dies here: kmemleak must report the block. */
}

static int __init badmod_init(void)
{
	if (!strcmp(mode, "uaf"))
		badmod_uaf();
	else if (!strcmp(mode, "leak"))
		badmod_leak();
	else if (strcmp(mode, "ok"))
		return -EINVAL;
	pr_info("pmm_badmod: loaded, mode=%s\n", mode);
	return 0;
}

static void __exit badmod_exit(void)
{
	pr_info("pmm_badmod: unloaded\n");
}

module_init(badmod_init);
module_exit(badmod_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Deliberately broken module: the debug harness's selftest");
