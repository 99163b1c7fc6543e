// SPDX-License-Identifier: GPL-2.0
/*
 * pmm: process memory monitor. Module init and exit, and the global state:
 * the list of monitored processes and the configuration (pmm_lock), the
 * global counters (atomic).
 */
#include <linux/module.h>
#include <linux/init.h>
#include "pmm_int.h"

/* Protects pmm_procs, pmm_nprocs, pmm_next_id, pmm_cfg and hash updates. */
DEFINE_MUTEX(pmm_lock);
LIST_HEAD(pmm_procs);
u32 pmm_nprocs;
u64 pmm_next_id;
struct pmm_cfg pmm_cfg = {
	.interval_ms = PMM_DEF_INTERVAL_MS,
	.scan = 1,
	.max_pids = PMM_DEF_MAX_PIDS,
	.max_blocks = PMM_DEF_MAX_BLOCKS,
	.max_sites = PMM_DEF_MAX_SITES,
	.max_samples = PMM_DEF_MAX_SAMPLES,
	.max_pids_per_uid = PMM_DEF_MAX_PIDS_PER_UID,
	.exited_ttl_s = PMM_DEF_EXITED_TTL_S,
};

atomic64_t pmm_records_accepted = ATOMIC64_INIT(0);
atomic64_t pmm_records_dropped = ATOMIC64_INIT(0);
atomic64_t pmm_unmatched_frees = ATOMIC64_INIT(0);
atomic64_t pmm_older_frees = ATOMIC64_INIT(0);
atomic64_t pmm_kmem_bytes = ATOMIC64_INIT(0);
atomic64_t pmm_records_queued = ATOMIC64_INIT(0);

static void pmm_free_all(void)
{
	struct pmm_proc *p, *tmp;

	mutex_lock(&pmm_lock);
	list_for_each_entry_safe(p, tmp, &pmm_procs, node) {
		pmm_proc_unpublish(p);
		list_del(&p->node);
		pmm_nprocs--;
		p->stopped = true;
		pmm_proc_put(p);
	}
	put_pid(pmm_cfg.last_start);
	put_pid(pmm_cfg.last_stop);
	pmm_cfg.last_start = NULL;
	pmm_cfg.last_stop = NULL;
	mutex_unlock(&pmm_lock);
}

static int __init pmm_init(void)
{
	int ret;

	ret = pmm_sites_init();
	if (ret)
		return ret;
	ret = pmm_objects_init();
	if (ret)
		goto out_sites_exit;
	ret = pmm_pairing_init();
	if (ret)
		goto out_objects_exit;
	ret = pmm_registry_init();
	if (ret)
		goto out_pairing_exit;
	ret = pmm_access_init();
	if (ret)
		goto out_registry_exit;
	ret = pmm_genl_init();
	if (ret)
		goto out_access_exit;
	ret = pmm_procfs_init();
	if (ret)
		goto out_genl_exit;
	ret = pmm_sampler_init();
	if (ret)
		goto out_procfs_exit;
	ret = pmm_dev_init();
	if (ret)
		goto out_sampler_exit;
	pr_info("loaded (abi %d)\n", PMM_ABI_VERSION);
	return 0;

out_sampler_exit:
	pmm_sampler_exit();
out_procfs_exit:
	pmm_procfs_exit();
out_genl_exit:
	pmm_genl_exit();
out_access_exit:
	pmm_access_exit();
out_registry_exit:
	pmm_registry_exit();
out_pairing_exit:
	pmm_pairing_exit();
out_objects_exit:
	pmm_objects_exit();
out_sites_exit:
	pmm_sites_exit();
	return ret;
}

/*
 * The mirror of init, but for the processes: they go after the interfaces
 * (nothing can start one any more), and the registry's drain work may still
 * free their tables, so pairing's, objects' and sites' caches go last.
 */
static void __exit pmm_exit(void)
{
	pmm_dev_exit();
	pmm_sampler_exit();
	pmm_procfs_exit();
	pmm_genl_exit();
	pmm_free_all();
	pmm_access_exit();
	pmm_registry_exit();
	pmm_pairing_exit();
	pmm_objects_exit();
	pmm_sites_exit();
	pr_info("unloaded\n");
}

module_init(pmm_init);
module_exit(pmm_exit);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("pmm: process memory monitor");
MODULE_AUTHOR("pmm developers");
