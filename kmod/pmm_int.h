/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pmm: internal declarations shared by the module's files.
 *
 * Locking:
 *   pmm_lock (mutex)      the list and hash of monitored processes, the
 *                         configuration and pmm_next_id.
 *   pmm_proc.lock (mutex) everything of one process below the line marked
 *                         "protected by lock" in struct pmm_proc.
 * Never take a pmm_proc.lock while holding pmm_lock: a process's lock may
 * be held long by its own records, and that must not stall anyone else's
 * START, STOP, reads or the sampler. Walks of the list take references
 * under pmm_lock and lock each process after dropping it. Access checks
 * (access.c) walk /proc, so they too run with neither lock held.
 * The record path takes only the per-process mutex: it finds its process
 * in pmm_hash under RCU and takes a reference. Take pmm_proc.lock with
 * pmm_proc_lock() and release it with pmm_proc_unlock() (see the inbox).
 *
 * The inbox. A thread whose records find the process's mutex taken does not
 * wait for it: it queues them on the lock-free inbox and returns, and the
 * holder applies them before it lets go (pmm_proc_unlock), as does the
 * process's next sender (pmm_proc_lock). One thread's records keep their
 * order. A waiting thread would otherwise spin on the mutex for as long as
 * the other applies its batch.
 * Only the process's own threads, and its drain work item, apply its
 * records: a reader or the sampler takes the lock with pmm_proc_lock_read
 * and never does a (possibly hostile) process's table work. A reader that
 * leaves records queued hands them to the drain work (an unbound workqueue,
 * charged to the process's memory cgroup); a per-pid read waits for it
 * first (pmm_proc_lock_fresh), so it sees every batch whose ioctl returned.
 */
#ifndef _PMM_INT_H
#define _PMM_INT_H

#include <linux/types.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/refcount.h>
#include <linux/rcupdate.h>
#include <linux/xarray.h>
#include <linux/llist.h>
#include <linux/cred.h>
#include <linux/sched.h>
#include <linux/siphash.h>
#include <linux/workqueue.h>
#include <asm/page.h>
#include "uapi/pmm.h"
#include "compat.h"

#define PMM_DEF_INTERVAL_MS	10000
#define PMM_DEF_MAX_PIDS	64
#define PMM_DEF_MAX_BLOCKS	(16U << 20)
#define PMM_DEF_MAX_SITES	65536
#define PMM_DEF_MAX_SAMPLES	4096
#define PMM_DEF_MAX_PIDS_PER_UID	16
#define PMM_DEF_EXITED_TTL_S	3600

/* Frees that found no block wait this long, at most this many per pid. */
#define PMM_PENDING_MAX		4096
#define PMM_PENDING_AGE_MS	5000
#define PMM_PENDING_BITS	8
#define PMM_PENDING_BUCKETS	BIT(PMM_PENDING_BITS)

/* Queued records per process past which a sender waits for the lock. */
#define PMM_INBOX_MAX		8192
/* Records a sender copies, checks and applies (or queues) at a time. */
#define PMM_CHUNK		16

/* Records queued on the inbox (struct pmm_proc.inbox). */
struct pmm_queued {
	struct llist_node node;
	u32 count;
	struct pmm_record rec[PMM_CHUNK];
};

/* A SITES event every this many samples, with at most this many sites. */
#define PMM_SITES_EVERY		10
#define PMM_SITES_TOP		64

/*
 * Live blocks of one kind that may share an address. Several are normal
 * while records of other threads are in flight: in a request/response
 * ping-pong one thread's buffer can hold an allocation at the same address
 * for every other record before the other thread's frees arrive (the hook
 * sends its buffer once it holds PMM_MAX_BATCH / 2 frees of other threads'
 * blocks, so 2048 here). A cluster this long costs its own process probes.
 */
#define PMM_MAX_SAME_ADDR	PMM_MAX_BATCH

/*
 * No block is farther than this from its home slot in the block table (a
 * cluster of one address's blocks fits, with room for its neighbours), nor
 * a site farther than PMM_SITE_PROBE_MAX in the site table: every probe is
 * bounded, whatever the process learned of its tables' order.
 */
#define PMM_PROBE_MAX		(2 * PMM_MAX_SAME_ADDR)
#define PMM_SITE_PROBE_MAX	64

/*
 * The block table: segments chosen by the top bits of a block's keyed hash
 * (extendible hashing: a directory of 2^dir_bits entries). Each segment is
 * open-addressed in Robin Hood order (a probe stops at an entry nearer its
 * home than the probe is to its own), of any number of slots (a home is
 * scaled, not masked). A segment grows by a quarter once 4/5 full, and
 * splits in two past PMM_SEG_MAX_SLOTS, so that it stays 61-80% full and
 * no growth rehashes more than a segment; it refuses blocks past 19/20.
 * While the table is one segment (up to 8192 blocks) it doubles at half
 * full: probes and moves are shortest there, and a small heap's table is
 * small anyway.
 */
#define PMM_SEG_MAX_SLOTS	16384
#define PMM_SEG_MAX_DEPTH	12

/* Direct-mapped cache of site entries in front of the site table. */
#define PMM_SITE_CACHE		64

/* The site table: open addressing, grown at half full (max_sites <= 2^20). */
#define PMM_SITE_MIN_BITS	6
#define PMM_SITE_MAX_BITS	21

/*
 * One slot of a process's block table: 24 bytes in three words (blocks.h
 * packs and reads them):
 *   w0: ptr (bits 0-47), the site's index bits 0-15 (48-63)
 *   w1: time_ns (0-57), the site's index bits 16-19 (58-61), EXT (62)
 *   w2: size, or with EXT the index of its pmm_block_ext (0-46); op
 *       (47-50); distance from its home slot (51-63)
 * op 0 (PMM_OP_NONE) marks an empty slot: any address (even 0 after a
 * trim) may be used. A block whose weight is not 1, that has a prev_ptr or
 * is 2^47 bytes or more keeps those in a pmm_block_ext (EXT): exact mode's
 * mallocs never need one. Blocks at addresses from 2^48 or with times from
 * 2^58 ns are dropped. Entries move when the table grows or a neighbour is
 * removed: hold no pointer across a change.
 */
struct pmm_block_ent {
	u64 w0;
	u64 w1;
	u64 w2;
};

/* What does not fit a slot; free ones are chained by next_free (index + 1). */
struct pmm_block_ext {
	u64 size;
	u64 prev_ptr;
	u32 weight;
	u32 next_free;
};

#define PMM_EXT_PER_CHUNK	(PAGE_SIZE / sizeof(struct pmm_block_ext))

/* A block as its readers see it (pmm_block_at). */
struct pmm_block_view {
	u64 ptr;
	u64 prev_ptr;
	u64 size;
	u64 time_ns;
	struct pmm_site_stats *site;
	u32 weight;
	u16 op;
};

/* A segment of the block table: n slots, used of them taken. */
struct pmm_bseg {
	struct pmm_block_ent *slot;
	u32 n;
	u32 used;
	u32 grow_at;		/* used that makes it grow */
	u32 depth;		/* the bits of the hash its blocks share */
};

/* A free (or munmap) that arrived before its allocation. */
struct pmm_pending {
	struct hlist_node node;	/* pending hash, keyed by ptr */
	struct list_head fifo;	/* arrival order, for expiry */
	u64 ptr;
	u64 len;		/* MUNMAP: length; FREE: 0 */
	u64 time_ns;
	unsigned long expires;	/* jiffies */
	u32 tag;		/* PMM_REC_F_TAGGED's alloc_tag, or U32_MAX */
	u16 op;			/* PMM_OP_FREE or PMM_OP_MUNMAP */
};

struct pmm_proc {
	struct hlist_node hnode;	/* pmm_hash by pid, RCU, under pmm_lock */
	struct list_head node;		/* pmm_procs, under pmm_lock */
	struct rcu_head rcu;
	refcount_t ref;
	u64 id;				/* order of start, list order */
	struct pid *pid;		/* its thread group's, held: never reused */
	kuid_t owner;			/* euid of who started it (per-user cap) */
	u64 start_time_ns;		/* task start, CLOCK_BOOTTIME */
	u64 monitor_start_ns;
	hsiphash_key_t hkey;		/* seeds its tables' hashes */
	bool stopped;			/* set under pmm_lock (WRITE_ONCE) */
	unsigned long expires;		/* jiffies; 0 while running (READ_ONCE) */

	struct llist_head inbox;	/* struct pmm_queued, newest first */
	atomic_t inbox_records;
	struct work_struct drain;	/* applies the inbox for a reader */
	struct mem_cgroup *memcg;	/* its memory cgroup, held: drain work */

	struct mutex lock;		/* protects all below */
	u32 state;			/* PMM_STATE_* */
	u64 exit_time_ns;
	/* identity, refreshed while it runs (exec, reparenting, setuid) */
	char comm[TASK_COMM_LEN];
	struct pid *parent;		/* parent's thread group, held */
	const struct cred *cred;	/* its credentials, held: access checks */
	const struct cred *cred_seen;	/* a sender's, when cred was refreshed */
	bool dumpable;			/*   after it exited */
	/* tables; segs NULL once stopped (pmm_proc_retire), whoever holds p */
	struct pmm_bseg *segs;		/* nsegs of segs_cap */
	u32 nsegs;
	u32 segs_cap;
	u32 *dir;			/* 1 << dir_bits indices in segs */
	u32 dir_bits;
	u64 nblocks;
	struct pmm_block_ext **ext;	/* ext_chunks of PMM_EXT_PER_CHUNK */
	u32 ext_chunks;
	u32 ext_cap;			/* room in ext for this many chunks */
	u32 ext_free;			/* first free one's index + 1, or 0 */
	struct hlist_head pending[PMM_PENDING_BUCKETS];
	struct list_head pending_fifo;
	u32 npending;
	struct pmm_site_stats **sites;	/* 1 << site_bits slots */
	u32 site_bits;
	struct pmm_site_stats *site_cache[PMM_SITE_CACHE];
	u32 nsites;
	struct pmm_site_stats **site_list;	/* by index, in order of creation */
	u32 site_list_cap;
	struct pmm_obj_ent **objs;	/* objects.c: nobjs of objs_cap */
	u32 nobjs;
	u32 objs_cap;
	struct pmm_sample *ring;	/* ring_size entries, NULL before the first */
	u32 ring_size;
	u64 nsamples;			/* samples taken; ring holds the last ones */
	struct pmm_stats stats;		/* buckets, failed_allocs, unmatched */
	u64 live_bytes;			/* weighted */
	struct pmm_heap heap;		/* last PMM_HEAP_REPORT, size 0: none */
	u64 records;
	u64 dropped;
	u64 dropped_reported;		/* last DROPPED event */
};

struct pmm_cfg {
	u32 interval_ms;
	u32 scan;
	struct pid *last_start;		/* held; shown in each reader's namespace */
	struct pid *last_stop;
	u32 max_pids;
	u32 max_blocks;
	u32 max_sites;
	u32 max_samples;
	u32 max_pids_per_uid;
	u32 exited_ttl_s;
};

/* main.c */
extern struct mutex pmm_lock;
extern struct list_head pmm_procs;
extern struct pmm_cfg pmm_cfg;
extern u32 pmm_nprocs;
extern u64 pmm_next_id;
extern atomic64_t pmm_records_accepted;
extern atomic64_t pmm_records_dropped;
extern atomic64_t pmm_unmatched_frees;
extern atomic64_t pmm_older_frees;
extern atomic64_t pmm_kmem_bytes;
extern atomic64_t pmm_records_queued;

static inline void pmm_kmem_add(long bytes)
{
	atomic64_add(bytes, &pmm_kmem_bytes);
}

/* registry.c: the processes, their lock, inbox and drain work */
int pmm_registry_init(void);
void pmm_registry_exit(void);
struct pmm_proc *pmm_proc_alloc(struct task_struct *task);
void pmm_proc_put(struct pmm_proc *p);
void pmm_proc_retire(struct pmm_proc *p);
struct pmm_proc *pmm_proc_get_current(void);
bool pmm_current_monitored(void);
struct pmm_proc *pmm_proc_find_pid(struct pid *pid);
void pmm_proc_publish(struct pmm_proc *p);
void pmm_proc_unpublish(struct pmm_proc *p);
void pmm_proc_lock(struct pmm_proc *p);
bool pmm_proc_trylock(struct pmm_proc *p);
void pmm_proc_unlock(struct pmm_proc *p);
void pmm_proc_lock_read(struct pmm_proc *p);
void pmm_proc_lock_fresh(struct pmm_proc *p);
void pmm_proc_unlock_read(struct pmm_proc *p);
bool pmm_proc_queue(struct pmm_proc *p, const struct pmm_record *r, u32 n);
void pmm_fill_pid_info(struct pmm_proc *p, struct pmm_pid_info *info,
		       struct pid_namespace *ns);
void pmm_proc_refresh(struct pmm_proc *p);
void pmm_proc_touch(struct pmm_proc *p);
struct pmm_proc **pmm_get_all(u64 from_id, u32 *n);
void pmm_put_all(struct pmm_proc **procs, u32 from, u32 n);

/* pairing.c: blocks, pending frees, the record path */
int pmm_pairing_init(void);
void pmm_pairing_exit(void);
int pmm_blocks_alloc(struct pmm_proc *p);
void pmm_blocks_free(struct pmm_proc *p);
void pmm_apply_records(struct pmm_proc *p, const struct pmm_record *r, u32 n);
u32 pmm_check_records(const struct pmm_record *r, u32 n);
void pmm_expire_pending(struct pmm_proc *p, bool all);
bool pmm_block_at(struct pmm_proc *p, u64 *slot, struct pmm_block_view *v);

/* sites.c */
int pmm_sites_init(void);
void pmm_sites_exit(void);
void pmm_sites_free(struct pmm_proc *p);
struct pmm_site_stats *pmm_site_lookup(struct pmm_proc *p, u32 id);
int pmm_register_site(struct pmm_proc *p, const struct pmm_site *s,
		      const u64 *loc);
struct pmm_site_stats *pmm_site_at(struct pmm_proc *p, u64 *slot);

/* A site's entry: its counters and its index in the process's site_list. */
struct pmm_site_ent {
	struct pmm_site_stats st;
	u32 idx;
};

static inline u32 pmm_site_idx(struct pmm_site_stats *s)
{
	return container_of(s, struct pmm_site_ent, st)->idx;
}

/*
 * The site entry for id, created (undescribed) when new; NULL at the limit.
 * Most records come from a few sites: a direct-mapped cache skips the
 * table's hash (pmm_site_lookup).
 */
static __always_inline struct pmm_site_stats *
site_get(struct pmm_proc *p, u32 id)
{
	struct pmm_site_stats *s = p->site_cache[id % PMM_SITE_CACHE];

	if (likely(s && s->desc.site == id))
		return s;
	return pmm_site_lookup(p, id);
}

/* objects.c: the files a site's frames are in */
struct pmm_obj_ent;
int pmm_objects_init(void);
void pmm_objects_exit(void);
void pmm_locate_frames(struct pmm_proc *p, const u64 *frames, u32 depth,
		       u64 *loc);
struct pmm_object *pmm_object_at(struct pmm_proc *p, u64 index);
void pmm_objects_free(struct pmm_proc *p);

/* access.c: who may see what, and pid numbers in each namespace */
int pmm_access_init(void);
void pmm_access_exit(void);
/* what an access check is for: reading (the reader group passes) or control */
enum pmm_need { PMM_READ, PMM_CONTROL };
bool pmm_cred_may_read(struct pmm_proc *p, const struct cred *cred);
bool pmm_may_access(struct pmm_proc *p, const struct file *file);
bool pmm_may_access_task(struct task_struct *task, const struct file *file);
pid_t pmm_visible_nr(struct pid *pid, struct pid_namespace *ns,
		     const struct file *file);
struct pid *pmm_tgid_of(pid_t nr, struct pid_namespace *ns);
struct pmm_proc *pmm_get_entry(pid_t nr, const struct file *file, enum pmm_need need,
			       int *err);

/* clock.c: the clock page /dev/pmm maps */
int pmm_clock_init(void);
void pmm_clock_exit(void);
int pmm_clock_mmap(struct file *file, struct vm_area_struct *vma);

/* dev.c: /dev/pmm and its ioctls */
int pmm_dev_init(void);
void pmm_dev_exit(void);

/* control.c: START, STOP, expiry, configuration values */
int pmm_start_pid(pid_t nr, const struct file *file);
int pmm_stop_pid(pid_t nr, const struct file *file);
void pmm_expire(struct pmm_proc *p);
bool pmm_cfg_valid(u32 bit, u32 v);
void pmm_cfg_apply(u32 bit, u32 v);

/* sampler.c */
int pmm_sampler_init(void);
void pmm_sampler_exit(void);
void pmm_sampler_kick(void);

/* procfs.c */
int pmm_procfs_init(void);
void pmm_procfs_exit(void);

/* genl.c */
int pmm_genl_init(void);
void pmm_genl_exit(void);
void pmm_genl_proc_event(u8 cmd, struct pmm_proc *p);
void pmm_genl_sample(struct pmm_proc *p, const struct pmm_sample *s);
void pmm_genl_dropped(struct pmm_proc *p, u64 dropped);
void pmm_genl_sites(struct pmm_proc *p);

#endif /* _PMM_INT_H */
