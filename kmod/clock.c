// SPDX-License-Identifier: GPL-2.0
/*
 * pmm: the clock page (uapi/pmm.h, PMM_CLOCK_OFFSET). One page, mapped
 * read-only into every process that asks, holding CLOCK_MONOTONIC_COARSE.
 * A timer refreshes it every jiffy while at least one mapping exists (the
 * count clock_maps, atomic), and stops at its next tick after the last one
 * goes.
 *
 * The mapping can never become writable or executable (VM_MAYWRITE and
 * VM_MAYEXEC are cleared), never grows (VM_DONTEXPAND: mremap to a larger
 * size fails), and its page is provided on each fault, so that after
 * MADV_DONTNEED, or a move by mremap, the next read maps it again instead
 * of raising SIGBUS.
 */
#include <linux/mm.h>
#include <linux/timer.h>
#include <linux/timekeeping.h>
#include "pmm_int.h"

static struct page *clock_page;
static struct pmm_clock *clock_data;
static atomic_t clock_maps = ATOMIC_INIT(0);
static struct timer_list clock_timer;

static void clock_set(void)
{
	WRITE_ONCE(clock_data->mono_ns, ktime_get_coarse_ns());
}

static void clock_tick(struct timer_list *unused)
{
	clock_set();
	if (atomic_read(&clock_maps))
		mod_timer(&clock_timer, jiffies + 1);
}

/*
 * A mapping appears (mmap, fork, mremap's copy). The tick that saw no
 * mapping does not re-arm, so the 0 -> 1 step arms it again.
 */
static void clock_vma_open(struct vm_area_struct *vma)
{
	if (atomic_inc_return(&clock_maps) == 1)
		mod_timer(&clock_timer, jiffies + 1);
}

static void clock_vma_close(struct vm_area_struct *vma)
{
	atomic_dec(&clock_maps);
}

static vm_fault_t clock_vma_fault(struct vm_fault *vmf)
{
	if (vmf->pgoff != PMM_CLOCK_OFFSET >> PAGE_SHIFT)
		return VM_FAULT_SIGBUS;
	get_page(clock_page);
	vmf->page = clock_page;
	return 0;
}

static const struct vm_operations_struct clock_vm_ops = {
	.open = clock_vma_open,
	.close = clock_vma_close,
	.fault = clock_vma_fault,
};

int pmm_clock_mmap(struct file *file, struct vm_area_struct *vma)
{
	if (vma->vm_pgoff != PMM_CLOCK_OFFSET >> PAGE_SHIFT ||
	    vma->vm_end - vma->vm_start != PMM_CLOCK_SIZE)
		return -EINVAL;
	if (vma->vm_flags & (VM_WRITE | VM_EXEC))
		return -EPERM;
	pmm_vm_flags_mod(vma, VM_DONTEXPAND | VM_DONTDUMP,
			 VM_MAYWRITE | VM_MAYEXEC);
	clock_set();
	vma->vm_ops = &clock_vm_ops;
	clock_vma_open(vma);
	return 0;
}

int pmm_clock_init(void)
{
	BUILD_BUG_ON(PMM_CLOCK_SIZE != PAGE_SIZE);
	BUILD_BUG_ON(PMM_CLOCK_OFFSET & ~PAGE_MASK);
	clock_page = alloc_page(GFP_KERNEL | __GFP_ZERO);
	if (!clock_page)
		return -ENOMEM;
	clock_data = page_address(clock_page);
	timer_setup(&clock_timer, clock_tick, 0);
	return 0;
}

/* No mapping is left: each holds the device file, which holds the module. */
void pmm_clock_exit(void)
{
	pmm_timer_shutdown_sync(&clock_timer);
	__free_page(clock_page);
}
