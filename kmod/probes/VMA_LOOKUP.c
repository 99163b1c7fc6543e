// SPDX-License-Identifier: GPL-2.0
/* vma_lookup() (5.14) */
#include <linux/mm.h>

struct vm_area_struct *pmm_probe(struct mm_struct *mm);
struct vm_area_struct *pmm_probe(struct mm_struct *mm)
{
	return vma_lookup(mm, 0);
}
