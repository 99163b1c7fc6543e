// SPDX-License-Identifier: GPL-2.0
/* vm_flags_set() and vm_flags_clear() (6.3: vm_flags read-only) */
#include <linux/mm.h>

void pmm_probe(struct vm_area_struct *vma);
void pmm_probe(struct vm_area_struct *vma)
{
	vm_flags_set(vma, VM_DONTDUMP);
	vm_flags_clear(vma, VM_MAYWRITE);
}
