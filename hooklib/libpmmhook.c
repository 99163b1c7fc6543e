// SPDX-License-Identifier: GPL-2.0
/*
 * libpmmhook.so: the pmm LD_PRELOAD interposer.
 *
 *   LD_PRELOAD=/path/to/libpmmhook.so program ...
 *
 * Interposes malloc, free, calloc, realloc, reallocarray, posix_memalign,
 * aligned_alloc, memalign, valloc, pvalloc, malloc_usable_size (passthrough)
 * and mmap/mmap64/munmap/mremap (anonymous mappings only). C++ new/delete
 * reach malloc/free through libstdc++.
 *
 * While the process is monitored by pmm.ko, every allocation event becomes a
 * struct pmm_record in a per-thread buffer that reaches the kernel in one
 * PMM_RECORD_LOG batch when it fills, when the thread exits, at process exit
 * and no later than FLUSH_NS after its first record (checked on the thread's
 * next hook call: the library never starts a thread or a timer of its own).
 *
 * While it is not monitored, a hook is the libc call plus a per-thread
 * countdown: malloc's in bytes (POLL_BYTES), the others' in calls
 * (POLL_EVERY). When one runs out the hook reads the vDSO's coarse
 * CLOCK_MONOTONIC, and once a second (process-wide) it asks the module
 * with PMM_QUERY_SELF whether monitoring has started. No other system call.
 * Each thread sees a start when its countdown runs out.
 *
 * Environment:
 *   PMM_QUIET=1        no line on stderr, ever
 *   PMM_START=1        ask the module to monitor this process (START_PID 0)
 *   PMM_FOLLOW_FORK=1  forked children ask the same
 *   PMM_DEPTH=N        frames per site, 1..32 (default 1: the caller)
 *   PMM_UNWIND=fp|eh   stack walker for N > 1 (default auto: fp, eh when fp
 *                      stops before 3 frames)
 *   PMM_SAMPLE=BYTES   sampled tracking, one sample per BYTES on average
 *   PMM_CLOCK=mono     stamp records with CLOCK_MONOTONIC (default: the
 *                      address clock, see next_stamp(); for tests)
 *   PMM_FASTPATH=0     exact mode without its fast paths (malloc_exact,
 *                      free_exact): tests compare them with the general path
 * They are read once, at init, from the initial environment if init comes
 * before libc has set environ (init_env), and ignored in secure-execution
 * mode (AT_SECURE: set-user-ID and the like).
 *
 * Fork policy (pthread_atfork): the child starts with empty buffers and is
 * not monitored (the parent's buffered records are the parent's to send);
 * it polls like any unmonitored process, and with PMM_FOLLOW_FORK=1 asks to
 * be monitored at once. A vfork child sends nothing and leaves the parent's
 * state as it is (pmm_mine); a child made without fork handlers (_Fork, a
 * raw clone) becomes a forked child where it first sends or polls. exec: the library leaves the environment
 * alone, so LD_PRELOAD (and the PMM_* variables) pass on to the new
 * program, which loads the library afresh; the device is opened O_CLOEXEC,
 * at fd 3 or above.
 *
 * Signal handlers: a hook called by a handler that interrupted the hook
 * records alone (record_alone), without touching the thread's state.
 *
 * Failure policy: /dev/pmm absent, not permitted, or failing mid-run (module
 * unloaded: ENODEV, EBADF, ...): every call passes straight to libc from
 * then on, with at most one "pmm: ..." line on stderr (none with PMM_QUIET);
 * the same, silently, once the program has closed the device's fd
 * (dev_ours). errno is the program's after every hook.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "arena.h"
#include "aset.h"
#include "clock.h"
#include "control.h"
#include "device.h"
#include "env.h"
#include "fakedev.h"
#include "hook.h"
#include "mode.h"
#include "notice.h"
#include "real.h"
#include "sampler.h"
#include "site.h"
#include "tags.h"
#include "thread.h"


/* ---- global state ------------------------------------------------------- */


static int g_init;		/* 0: not started, 1: resolving, 2: done */
static pthread_key_t g_key;	/* its destructor flushes an exiting thread */

/* ---- per-thread buffers --------------------------------------------------- */

/* The buffer, and one record more for a vfork child to write in vain
 * (flush_later). */
#define TBUF_BYTES	(((g_tbuf_records + 1) * sizeof(struct pmm_record) + 4095) & ~4095UL)
#define MERGE_BITS	10
/* A thread's mapping: its buffer, then merge_freed's table, which is too
 * big for the stack of a hook (the program chose the thread's stack). */
#define TBUF_MAP_BYTES	(TBUF_BYTES + (sizeof(struct merge_slot) << MERGE_BITS))

/*
 * A buffer is sent once it holds this many frees of blocks that another
 * thread allocated. Their pairs reach the module from two threads in either
 * order, and it keeps the early side: frees as pending, allocations at one
 * address (ping-pong between two threads reuses one address) as a cluster
 * whose probes grow with its length. Both are bounded at PMM_MAX_BATCH, as
 * they were when a buffer was one batch, which held at most this many.
 */
#define CROSS_MAX	(PMM_MAX_BATCH / 2)

struct merge_slot {
	uint64_t key;		/* merge_key, 0: empty */
	uint32_t at;		/* the kept record's index */
	uint32_t weight;	/* its weight, written back at the end */
};

/*
 * A free of ptr, whose allocation has tag (slot: ptr's): 1 if it cancelled
 * against that allocation's record in this thread's buffer. Only a record
 * of an allocation at ptr with the tag is it: the tag is the allocation's
 * stamp, and stamps at one address only grow.
 */
static inline int cancel_buffered(struct tstate *t, const struct tag_slot *slot, uint64_t ptr,
				  int64_t tag)
{
	uint32_t i = __atomic_load_n(&slot->at, __ATOMIC_RELAXED);
	struct pmm_record *r;

	if (tag < 0 || i >= t->n)
		return 0;
	r = &t->buf[i];
	if (r->ptr != ptr || r->op == PMM_OP_FREE ||
	    (r->flags & (PMM_REC_F_FREED | PMM_REC_F_FAILED)) ||
	    (int64_t)(r->time_ns & TAG_MASK) != tag)
		return 0;
	r->flags |= PMM_REC_F_FREED;
	return 1;
}

/* Every hook keeps errno: this is the only place on the record path that
 * may change it, other than pmm_dev_ioctl and notice, which restore it. */
static int tbuf_get(struct tstate *t)
{
	int saved = errno;
	void *p;

	if (t->exiting)
		return 0;
	p = real.mmap(NULL, TBUF_MAP_BYTES, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		errno = saved;
		return 0;
	}
	t->buf = p;
	tbuf_reset(t);
	if (!t->id) {
		static uint32_t next_id;

		t->id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
	}
	if (!t->keyed) {
		uint64_t mask = pmm_internal_begin();	/* it may malloc */

		t->keyed = 1;
		pthread_setspecific(g_key, t);
		pmm_internal_end(mask);
	}
	errno = saved;
	return 1;
}

/*
 * Most records of most programs are allocations their thread freed again
 * before the batch left (FREED). They only add to their site's counts, so
 * those of one site, op and size become one record whose weight is the sum
 * of theirs (w events of size bytes each: the same counts), and the kernel
 * applies a few records where it would apply many. In place, in order; a
 * record that does not find its key within a few probes is kept as it is.
 * Where it does not pay (few records FREED, or of many sizes), a batch that
 * merged less than an eighth of its records is followed by MERGE_SKIP
 * batches sent as they are.
 */
#define MERGE_PROBES	8
#define MERGE_SKIP	7
#define MERGE_SIZE_LIMIT	(1ULL << 28)

/* FREED, and no old block to free (none, or its allocation FREED too); a
 * size below MERGE_SIZE_LIMIT, so that merge_key is exact. */
static inline int mergeable(const struct pmm_record *r)
{
	if (r->size >= MERGE_SIZE_LIMIT)
		return 0;
	return r->flags == PMM_REC_F_FREED ? !r->prev_ptr :
	       r->flags == (PMM_REC_F_FREED | PMM_REC_F_PREV_FREED);
}

/*
 * Site, size and op in one word: equal keys are equal fields (sizes below
 * MERGE_SIZE_LIMIT, ops below 16), and never 0 (op is not PMM_OP_NONE),
 * which marks an empty slot.
 */
static inline uint64_t merge_key(const struct pmm_record *r)
{
	return (uint64_t)r->site << 32 | r->size << 4 | r->op;
}

/*
 * Adds r's weight to the kept record of its key; 1 if it did. Else r will
 * be kept at out, and a free slot of its key's probes remembers that.
 */
static inline int merge_one(struct merge_slot *tab, const struct pmm_record *r, uint32_t out)
{
	uint64_t key = merge_key(r);
	unsigned int h = (unsigned int)(key * 0x9e3779b97f4a7c15ULL >> (64 - MERGE_BITS));
	unsigned int k;

	for (k = 0; k < MERGE_PROBES; k++, h = (h + 1) & ((1U << MERGE_BITS) - 1)) {
		struct merge_slot *m = &tab[h];

		if (!m->key) {
			m->key = key;
			m->at = out;
			m->weight = r->weight;
			return 0;
		}
		if (m->key == key && m->weight <= UINT32_MAX - r->weight) {
			m->weight += r->weight;
			return 1;
		}
	}
	return 0;
}

static uint32_t merge_freed(struct pmm_record *buf, uint32_t n)
{
	struct merge_slot *tab = (struct merge_slot *)((char *)buf + TBUF_BYTES);
	uint32_t i, out = 0;

	memset(tab, 0, sizeof(*tab) << MERGE_BITS);
	for (i = 0; i < n; i++) {
		if (mergeable(&buf[i]) && merge_one(tab, &buf[i], out))
			continue;
		if (out != i)
			buf[out] = buf[i];
		out++;
	}
	for (i = 0; i < 1U << MERGE_BITS; i++)	/* the kept records' sums */
		if (tab[i].key)
			buf[tab[i].at].weight = tab[i].weight;
	return out;
}

/*
 * A vfork child found the buffer full: from now on each of its records
 * would ask getpid whether it is still the child. Instead the child
 * registers a robust futex list of one word holding its pid, which the
 * kernel marks (FUTEX_OWNER_DIED) when the child exits or execs, however
 * it does: while the word holds the pid, the caller is the child, and no
 * system call says so. The parent finds the word marked at its next
 * record and takes its buffer back. Not if the child has a list of its own
 * already (glibc sets none in a vfork child): then every record asks.
 */
static void vfork_pin(struct tstate *t)
{
	struct robust_list_head *head = NULL;
	int saved = errno;
	size_t len;

	if (syscall(SYS_get_robust_list, 0, &head, &len) == 0 && !head) {
		t->pin.head.list.next = &t->pin.entry;
		t->pin.head.futex_offset = (long)offsetof(struct tstate, pin.word) -
					   (long)offsetof(struct tstate, pin.entry);
		t->pin.head.list_op_pending = NULL;
		t->pin.entry.next = &t->pin.head.list;
		t->pin.word = (uint32_t)syscall(SYS_getpid);
		if (syscall(SYS_set_robust_list, &t->pin.head, sizeof(t->pin.head)) == 0)
			t->pin.pid = (pid_t)t->pin.word;
	}
	errno = saved;
}

/*
 * flush() in a vfork child (see pmm_mine): the buffer is the parent
 * thread's, and so is the heap, so the child's records (blocks it left in
 * the parent's heap included) stay there for the parent to send. The next
 * try is FLUSH_NS later, or when the buffer is full, and then never again
 * (vfork_pin). A full buffer holds g_tbuf_records records and the spare
 * one after them, where the next record is written and dropped here: a
 * child that allocates that much loses its last records, never the
 * parent's.
 */
__attribute__((noinline, cold)) static void flush_later(struct tstate *t)
{
	if (t->n > g_tbuf_records)
		t->n = g_tbuf_records;
	t->full = g_tbuf_records;
	t->first_ns = coarse_ns();
	if (t->n == g_tbuf_records && !t->pin.pid)
		vfork_pin(t);
}

static void flush(struct tstate *t)
{
	struct pmm_record_batch b;
	uint32_t left;
	int err;

	if (!t->n)
		return;
	if (unlikely(!pmm_mine())) {
		flush_later(t);
		return;
	}
	memset(&b, 0, sizeof(b));
	b.records = (uintptr_t)t->buf;
	b.count = t->n;
	tbuf_reset(t);	/* the records stay in the buffer until the next one */
	if (t->gen != __atomic_load_n(&g_epoch, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&g_fast.mode, __ATOMIC_RELAXED) < MODE_MONITORED)
		return;	/* from before a stop or a fork: dropped */
	if (t->merge_skip) {
		t->merge_skip--;
	} else {
		uint32_t n = b.count;

		b.count = merge_freed(t->buf, n);
		if (b.count > n - n / 8)
			t->merge_skip = MERGE_SKIP;	/* it did not pay: try later */
	}
	for (left = b.count; left; left -= b.count) {
		b.count = left < PMM_MAX_BATCH ? left : PMM_MAX_BATCH;
		err = pmm_dev_ioctl(PMM_RECORD_LOG, &b);
		if (err) {
			pmm_dev_refused(-err, "PMM_RECORD_LOG");
			return;	/* the rest is dropped with it */
		}
		b.records += b.count * sizeof(struct pmm_record);
	}
	__atomic_store_n(&g_errors, 0, __ATOMIC_RELAXED);
}

/* After the buffer is gone (thread or process exit): send one by one. */
static void send_one(const struct pmm_record *r)
{
	struct pmm_record_batch b;
	int err;

	if (!pmm_mine())
		return;	/* a vfork child's: the module would refuse it */
	memset(&b, 0, sizeof(b));
	b.records = (uintptr_t)r;
	b.count = 1;
	err = pmm_dev_ioctl(PMM_RECORD_LOG, &b);
	if (err)
		pmm_dev_refused(-err, "PMM_RECORD_LOG");
}

/* The record at at (t->n), stamped now, is written: count it and send the
 * buffer if it is full or its first record waited FLUSH_NS. */
static inline void tbuf_append(struct tstate *t, uint32_t at, uint64_t now)
{
	t->n = at + 1;
	if (!at)
		t->first_ns = now;
	if (unlikely(at + 1 >= t->full || (int64_t)(now - t->first_ns) > (int64_t)FLUSH_NS))
		flush(t);
}

/*
 * The thread's buffer holds records of epoch e (record() has just written
 * one): the fast paths may run, if e is still exact's key. The site cache
 * is emptied first if it is from another epoch (site_of's rule), since the
 * fast path reads it directly.
 */
__attribute__((noinline)) static void exact_ready(struct tstate *t, unsigned int e)
{
	if (!t->buf || t->exiting || e != __atomic_load_n(&g_exact_key, __ATOMIC_ACQUIRE))
		return;
	if (t->site_gen != e) {
		memset(t->site_cache, 0, sizeof(t->site_cache));
		t->site_gen = e;
	}
	t->exact_key = e;
}

/*
 * record() for a signal handler's call that interrupted the hook (the
 * guard held outside pmm_internal). The interrupted code may be half way
 * through an update of the thread's buffer, site cache, clock or sampling
 * state, so none of them is touched: the record is stamped from its
 * address's slot and the coarse time (stamp_slot), a free carries the
 * slot's tag but never cancels against the buffer, an allocation is noted
 * in its slot as sent alone, and the record goes in a PMM_RECORD_LOG of
 * its own (a system call: async-signal-safe). The module pairs it with the
 * records the buffer sends later by their stamps and tags.
 */
__attribute__((noinline)) static void record_alone(uint16_t op, const void *ptr,
						   const void *prev, uint64_t size,
						   uint32_t site, uint32_t weight, uint64_t now)
{
	struct tag_slot *slot = ptr && !op_is_map(op) ? tag_slot_of((uintptr_t)ptr) : NULL;
	struct pmm_record r;
	uint16_t flags = 0;
	int64_t tag = -1;

	if (op == PMM_OP_FREE && slot)
		tag = slot_tag(slot, (uintptr_t)ptr);
	else if (op == PMM_OP_REALLOC && prev)
		tag = slot_tag(tag_slot_of((uintptr_t)prev), (uintptr_t)prev);
	if (!now)
		now = slot ? stamp_slot(NULL, slot) : op_is_map(op) ? stamp_map(NULL) :
		      stamp_none(NULL);
	if (!ptr && op != PMM_OP_FREE && op != PMM_OP_MUNMAP)
		flags = PMM_REC_F_FAILED;
	if (tag >= 0)
		flags |= PMM_REC_F_TAGGED;
	r.ptr = (uintptr_t)ptr;
	r.prev_ptr = (uintptr_t)prev;
	r.size = size;
	r.time_ns = now;
	r.site = site;
	r.weight = weight;
	r.op = op;
	r.flags = flags;
	r.alloc_tag = tag >= 0 ? (uint32_t)tag : 0;
	if (slot && op != PMM_OP_FREE)
		slot_note(slot, (uintptr_t)ptr, now, NOT_BUFFERED, t_st.id);
	send_one(&r);
}

/* t NULL: record_alone. */
static inline __attribute__((always_inline)) void
record(struct tstate *t, uint16_t op, const void *ptr, const void *prev,
		   uint64_t size, uint32_t site, uint32_t weight, uint64_t now)
{
	unsigned int e = __atomic_load_n(&g_epoch, __ATOMIC_RELAXED);
	struct pmm_record one, *r;
	struct tag_slot *slot = NULL;	/* ptr's, for a heap record */
	struct tag_slot *tagged = NULL;	/* the slot whose tag the record carries */
	uint16_t flags = 0;
	int64_t tag = -1;

	if (!t) {
		record_alone(op, ptr, prev, size, site, weight, now);
		return;
	}
	if (unlikely(t->gen != e)) {
		t->gen = e;
		tbuf_reset(t);
	}
	if (unlikely(!t->buf))
		tbuf_get(t);	/* and the thread's id; without it, records go alone */
	if (ptr && !op_is_map(op))
		slot = tag_slot_of((uintptr_t)ptr);
	if (op == PMM_OP_FREE && slot) {
		tag = slot_tag(slot, (uintptr_t)ptr);
		if (cancel_buffered(t, slot, (uintptr_t)ptr, tag))
			return;
		tagged = slot;
	} else if (op == PMM_OP_REALLOC && prev) {
		/* before ptr's entry replaces it */
		tagged = tag_slot_of((uintptr_t)prev);
		tag = slot_tag(tagged, (uintptr_t)prev);
		/*
		 * The old block's allocation still in the buffer: it cancels
		 * as a free would (FREED), and this record says so, keeping
		 * prev_ptr for display; it may cancel and merge in turn.
		 */
		if (ptr && cancel_buffered(t, tagged, (uintptr_t)prev, tag)) {
			flags = PMM_REC_F_PREV_FREED;
			tag = -1;
		}
	}
	if (tag >= 0 && __atomic_load_n(&tagged->owner, __ATOMIC_RELAXED) != t->id &&
	    ++t->cross >= CROSS_MAX)
		t->full = t->n + 1;	/* sent with this record */
	if (!now)	/* a free's, after the cancel check: none if cancelled */
		now = slot ? stamp_slot(t, slot) : op_is_map(op) ? stamp_map(t) : stamp_none(t);
	if (!ptr && op != PMM_OP_FREE && op != PMM_OP_MUNMAP)
		flags = PMM_REC_F_FAILED;
	if (tag >= 0)
		flags |= PMM_REC_F_TAGGED;
	if (unlikely(!t->buf))
		r = &one;
	else
		r = &t->buf[t->n];
	r->ptr = (uintptr_t)ptr;
	r->prev_ptr = (uintptr_t)prev;
	r->size = size;
	r->time_ns = now;
	r->site = site;
	r->weight = weight;
	r->op = op;
	r->flags = flags;
	r->alloc_tag = tag >= 0 ? (uint32_t)tag : 0;
	if (slot && op != PMM_OP_FREE)
		slot_note(slot, (uintptr_t)ptr, now, r != &one ? t->n : NOT_BUFFERED, t->id);
	if (r == &one) {
		send_one(r);
		return;
	}
	tbuf_append(t, t->n, now);
	if (unlikely(t->exact_key != e) && e == __atomic_load_n(&g_exact_key, __ATOMIC_RELAXED))
		exact_ready(t, e);	/* not on every record while the key is off */
}

/* Thread exit (pthread key destructor): flush and drop the buffer. */
static void thread_exit(void *arg)
{
	struct tstate *t = arg;
	int saved = errno;

	guard_take(t);
	t->exact_key = 0;
	if (t->buf) {
		flush(t);
		real.munmap(t->buf, TBUF_MAP_BYTES);
		t->buf = NULL;
	}
	t->exiting = 1;
	guard_drop(t);
	errno = saved;
}

/* ---- what a hook does while monitored (guard held) ----------------------- */

struct src {
	void *ra;		/* the hook's caller */
	void *frame;		/* the hook's frame (frame-pointer walks start here) */
	const char *file;	/* pmm_hooks.h: file, func, line; else NULL */
	const char *func;
	int line;
};

/*
 * A site id. For one-frame sites a per-thread cache of return addresses
 * skips the process-wide table; it is emptied when the epoch changes, so a
 * new epoch still registers each site once. t NULL (a record made alone):
 * the table only, and no stack walk that could lock or allocate.
 */
static inline uint32_t site_of(struct tstate *t, const struct src *s)
{
	unsigned int e = __atomic_load_n(&g_epoch, __ATOMIC_RELAXED);
	unsigned int i = ((uintptr_t)s->ra >> 2) % SITE_CACHE;
	uint32_t id;

	if (s->file)
		return pmm_site_source(s->ra, s->file, s->func, s->line);
	if (!t || g_depth > 1)
		return pmm_site_addr(s->ra, s->frame, !t);
	if (unlikely(t->site_gen != e)) {
		memset(t->site_cache, 0, sizeof(t->site_cache));
		t->site_gen = e;
	}
	if (likely(t->site_cache[i].ra == s->ra))
		return t->site_cache[i].id;
	id = pmm_site_addr(s->ra, s->frame, 0);
	if (id) {	/* a cached entry's id is never 0: the table is tried again */
		/* never a new ra with the old id, should a longjmp stop this */
		t->site_cache[i].ra = NULL;
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		t->site_cache[i].id = id;
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		t->site_cache[i].ra = s->ra;
	}
	return id;
}

__attribute__((noinline)) static void sampled_poll(struct tstate *t)
{
	t->poll = POLL_EVERY;
	if (t->n && (int64_t)(poll_ns() - t->first_ns) > (int64_t)FLUSH_NS) {
		guard_take(t);
		flush(t);
		guard_drop(t);
	}
}

/* Sampled: a record waits at most FLUSH_NS, checked every POLL_EVERY
 * calls. t NULL: an allocation made alone, which buffers nothing. */
static inline void sampled_tick(struct tstate *t)
{
	if (t && poll_due(t))
		sampled_poll(t);
}

/* After an allocation returned p (NULL: failed). mset: also track p as a
 * recorded anonymous mapping. t NULL: made alone (record_alone). */
static inline __attribute__((always_inline)) void
note_alloc(struct tstate *t, uint16_t op, void *p, uint64_t size,
		       const struct src *s, struct aset *mset)
{
	uint32_t weight = 1;

	if (g_sample) {
		if (!p || !sample(t, size, &weight)) {
			sampled_tick(t);
			return;
		}
		if (!set_add(mset ? mset : &g_sampled, p))
			return;
	} else if (mset && p && !set_add(mset, p)) {
		return;
	}
	record(t, op, p, NULL, size, site_of(t, s), weight, 0);
}

/* Before p is freed. t NULL: made alone (record_alone). */
static inline __attribute__((always_inline)) void
note_free(struct tstate *t, uint16_t op, void *p, uint64_t size, struct aset *mset)
{
	if (!p)
		return;
	if (mset || g_sample) {
		if (!set_del(mset ? mset : &g_sampled, p)) {
			if (g_sample)
				sampled_tick(t);
			return;
		}
	}
	record(t, op, p, NULL, size, 0, 1, 0);	/* stamped in record(), unless cancelled */
	if (g_sample)
		sampled_wait(t);
}

/* ---- init ----------------------------------------------------------------- */

/*
 * The big static tables (address sets, site table, tags, bootstrap arena:
 * 3.4 MiB of bss) are touched a few pages at a time, if at all. With
 * transparent huge pages "always" (Debian's default) the first write into a
 * 2 MiB-aligned part of them faults in and clears a whole huge page, at
 * every process start, for memory never used.
 * Done before anything in the bss is written.
 */
static void no_huge_pages(void)
{
	const struct {
		const void *p;
		size_t len;
	} tables[] = {
		{ &g_mapped, sizeof(g_mapped) },
		{ &g_sampled, sizeof(g_sampled) },
		{ g_tags, sizeof(g_tags) },
		{ g_arena, sizeof(g_arena) },
	};
	uintptr_t lo, hi;
	size_t i;

	pmm_site_extent(&lo, &hi);
	for (i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
		if ((uintptr_t)tables[i].p < lo)
			lo = (uintptr_t)tables[i].p;
		if ((uintptr_t)tables[i].p + tables[i].len > hi)
			hi = (uintptr_t)tables[i].p + tables[i].len;
	}
	advise(lo, hi, MADV_NOHUGEPAGE);
}

/*
 * Once, from the library's constructor or from the first hook called before
 * it (another library's constructor, a .preinit_array function). errno is
 * the program's on return, whatever dlsym, dlopen, open or the ioctls did to
 * it; everything it calls that may allocate is the hook's own (internal).
 */
static void pmm_init(void)
{
	struct tstate *t = &t_st;
	int expected = 0, saved = errno, r, fd, resolved;
	uint64_t mask;
	char **env;

	if (__atomic_load_n(&g_init, __ATOMIC_ACQUIRE) == 0)
		no_huge_pages();
	if (!__atomic_compare_exchange_n(&g_init, &expected, 1, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return;
	guard_take(t);
	mask = pmm_internal_begin();
	resolved = real_resolve();
	find_vdso_clock();
	g_pid = (pid_t)syscall(SYS_getpid);
	alone_reseed(g_pid);
	fork_marker_map();

	env = settings_read();
#ifdef PMM_FAKE_DEV
	fake_dev_setup(env, g_pid);
#endif

	if (!resolved) {
		/* cannot happen with glibc; nothing sane to fall back to */
		notice("dlsym(RTLD_NEXT) failed", 0, "");
		abort();
	}
	r = pthread_key_create(&g_key, thread_exit);
	pthread_atfork(NULL, NULL, at_fork_child);

	fd = dev_open();
	if (fd < 0 || r != 0) {
		if (fd >= 0)
			close(fd);
		notice("cannot open /dev/" PMM_DEVICE_NAME, fd < 0 ? -fd : r,
		    "; allocations pass through to libc");
		g_dev_usable = 0;
		set_mode(MODE_PASS);
	} else {
		g_fd = fd;
		g_dev_usable = 1;
		set_mode(MODE_PASS);
		g_next_query = coarse_ns() + QUERY_NS;
		if (env_num(env, "PMM_START", 0) > 0) {
			r = start_self();
			if (r < 0 && r != -EBUSY && r != -EALREADY && r != -EEXIST)
				notice("PMM_START=1: START_PID refused", -r, "");
		}
		r = pmm_dev_ioctl(PMM_QUERY_SELF, NULL);
		if (r == 1)
			start_monitoring();
		else if (r < 0)
			pmm_dev_refused(-r, "PMM_QUERY_SELF");
	}
	__atomic_store_n(&g_init, 2, __ATOMIC_RELEASE);
	pmm_internal_end(mask);
	guard_drop(t);
	errno = saved;
}

__attribute__((constructor)) static void pmm_ctor(void)
{
	pmm_init();
}

/* Process exit: this thread's records go now; later ones one by one. */
__attribute__((destructor)) static void pmm_fini(void)
{
	struct tstate *t = &t_st;

	guard_take(t);
	if (t->buf && g_fast.mode >= MODE_MONITORED)
		flush(t);
	guard_drop(t);
}

/* ---- the hooks ------------------------------------------------------------ */

/* Not monitored: every POLL_EVERY calls, see whether it is time to ask. */
__attribute__((noinline)) static void pass_poll(struct tstate *t)
{
	uint64_t now, next;
	int r;

	t->poll = POLL_EVERY;
	if (g_fast.mode >= MODE_MONITORED)
		return;	/* a nested call while monitored */
	if (__atomic_load_n(&g_init, __ATOMIC_ACQUIRE) != 2)
		return;	/* called from inside init: the device is not open yet */
	t->sampling = 0;
	if (!g_dev_usable) {
		t->poll = INT_MAX;	/* no device: nothing to poll, ever */
		t->budget = UINT64_MAX / 2;
		return;
	}
	t->budget = POLL_BYTES;
	now = poll_ns();
	next = __atomic_load_n(&g_next_query, __ATOMIC_RELAXED);
	if ((int64_t)(now - next) < 0 || !pmm_mine() ||	/* a vfork child: the parent asks */
	    !__atomic_compare_exchange_n(&g_next_query, &next, now + QUERY_NS, 0,
					 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return;
	r = pmm_dev_ioctl(PMM_QUERY_SELF, NULL);
	if (r == 1)
		start_monitoring();
	else if (r < 0)
		pmm_dev_refused(-r, "PMM_QUERY_SELF");
}

static inline void pass_tick(void)
{
	if (poll_due(&t_st))
		pass_poll(&t_st);
}

/* Bootstrap: the real functions are not known yet. 1: use the arena. */
static inline int booting(void)
{
	if (__atomic_load_n(&g_init, __ATOMIC_ACQUIRE) == 0)
		pmm_init();
	return !__atomic_load_n(&g_resolved, __ATOMIC_ACQUIRE);
}

#define SRC(ra_, fr_) { .ra = (ra_), .frame = (fr_) }

/* A signal handler's allocation (enter: ENTER_ALONE). */
__attribute__((noinline)) static void note_alloc_alone(uint16_t op, void *p, uint64_t size,
							const struct src *s)
{
	note_alloc(NULL, op, p, size, s, NULL);
}

static inline __attribute__((always_inline)) void *do_malloc(size_t n, const struct src *s)
{
	struct tstate *t = &t_st;
	void *p;
	int how;

	if (g_fast.mode == MODE_BOOT && booting())
		return arena_alloc(n, 16);
	if (g_fast.mode < MODE_MONITORED || (how = enter(t)) == ENTER_PASS) {
		pass_tick();
		return real.malloc(n);
	}
	p = real.malloc(n);
	if (unlikely(how == ENTER_ALONE)) {
		note_alloc_alone(PMM_OP_MALLOC, p, n, s);
		return p;
	}
	note_alloc(t, PMM_OP_MALLOC, p, n, s, NULL);
	guard_drop(t);
	return p;
}

/*
 * The entry points' common cases (not monitored; sampled with nothing to
 * record) are a few instructions and a jump to libc: the library is built
 * without frame pointers, and everything else, the polls included, is a
 * tail call. A *_slow function's frame then stands where its entry point's
 * would: saved frame pointer, then the caller's return address, which is
 * where a frame-pointer walk starts.
 *
 * malloc_slow: malloc's budget is spent, and this call records: exact, a
 * sample point in these n bytes, or starting. The caller has set the budget.
 */
__attribute__((noinline)) static void *malloc_slow(size_t n, void *ra)
{
	struct src s = SRC(ra, __builtin_frame_address(0));

	return do_malloc(n, &s);
}

/*
 * malloc's budget is spent, and not in exact mode (or mid-change: exact
 * takes the general path here). Not monitored: poll,
 * which grants the next. Sampled with no sample point in these n bytes:
 * the budget stopped short of it because records wait; check their
 * deadline, and go on to the sample point.
 */
__attribute__((noinline)) void *malloc_spent(size_t n, void *ra)
{
	struct tstate *t = &t_st;
	int mode = g_fast.mode;
	int64_t rest;

	if (mode == MODE_PASS) {
		t->budget = 0;
		pass_poll(t);
		return real.malloc(n);
	}
	if (mode != MODE_SAMPLED) {
		t->budget = 0;	/* exact, or starting: every call comes here */
		return malloc_slow(n, ra);
	}
	if (unlikely(t->guard || t->budget + n >= 1ULL << 63)) {
		/*
		 * Not this call's gap to update: a signal handler's call in
		 * the hook (or the hook's own), or one that interrupted a
		 * malloc that had spent the budget before this call took n
		 * (gap_busy). do_malloc decides it.
		 */
		t->budget += n;
		return malloc_slow(n, ra);
	}
	rest = sample_gap_left(t);	/* after these n bytes */
	if (t->sampling && rest > 0 && n <= INT64_MAX) {
		sample_budget(t, rest, t->n != 0);
		if (t->n)
			sampled_poll(t);
		return real.malloc(n);
	}
	t->budget += n;	/* part of the sample gap: sample() takes n */
	return malloc_slow(n, ra);
}

/*
 * Exact mode's fast paths: the thread holds exact's key (exact_ready) and
 * not the guard. They do what note_alloc and note_free do in the commonest
 * cases, with every test that the key answers left out: a malloc whose
 * return address is in the site cache, and a free that cancels against its
 * allocation in the thread's buffer (most frees). Other cases take the
 * general code from where the fast path stands. The guard is
 * held while they touch the buffer, as the general path holds it.
 */
static inline int exact_fast(const struct tstate *t)
{
	return !t->guard && t->exact_key == __atomic_load_n(&g_exact_key, __ATOMIC_RELAXED);
}

/* next_stamp, where the clock page is known to be mapped (exact's key). */
static inline uint64_t exact_stamp(struct tstate *t, uint64_t at)
{
	const struct pmm_clock *k = __atomic_load_n(&g_kclock, __ATOMIC_RELAXED);

	return stamp_from(t, __atomic_load_n(&k->mono_ns, __ATOMIC_RELAXED), at);
}

/* malloc_exact's call whose site is not in the cache: the general path
 * (malloc_exact took the guard). */
__attribute__((noinline)) static void *exact_malloc_miss(size_t n, void *ra)
{
	struct tstate *t = &t_st;
	struct src s = SRC(ra, NULL);	/* one-frame sites: no walk */
	void *p;

	/* malloc_exact's frame is gone: what this calls must run below the
	 * guard's stack pointer (guard_stale) */
	guard_hold(t);
	p = real.malloc(n);
	note_alloc(t, PMM_OP_MALLOC, p, n, &s, NULL);
	t->guard = 0;
	return p;
}

/* malloc_exact's failed call: the record it began is the general path's. */
__attribute__((noinline, cold)) static void exact_malloc_failed(struct tstate *t)
{
	const struct pmm_record *r = &t->buf[t->n];

	record(t, PMM_OP_MALLOC, NULL, NULL, r->size, r->site, 1, 0);
}

/*
 * The record is begun before libc's call (size and site are known) and
 * finished after it from the thread's state, so nothing of the caller's
 * has to outlive the call in a saved register.
 */
__attribute__((noinline)) void *malloc_exact(size_t n, void *ra)
{
	struct tstate *t = &t_st;
	unsigned int i = ((uintptr_t)ra >> 2) % SITE_CACHE;
	struct pmm_record *r;
	struct tag_slot *slot;
	uint64_t now;
	uint32_t at;
	void *p;

	t->budget = 0;	/* exact: every call records */
	if (unlikely(!exact_fast(t)))
		return malloc_slow(n, ra);
	/* before the cache is read: a handler's malloc could replace the entry */
	guard_hold(t);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (unlikely(t->site_cache[i].ra != ra))
		return exact_malloc_miss(n, ra);
	r = &t->buf[t->n];
	r->prev_ptr = 0;
	r->size = n;
	r->site = t->site_cache[i].id;
	r->weight = 1;
	r->op = PMM_OP_MALLOC;
	r->flags = 0;
	r->alloc_tag = 0;
	p = real.malloc(n);
	t = &t_st;
	if (unlikely(!p)) {
		exact_malloc_failed(t);
		t->guard = 0;
		return p;
	}
	at = t->n;
	r = &t->buf[at];
	slot = tag_slot_of((uintptr_t)p);
	now = exact_stamp(t, __atomic_load_n(&slot->stamp, __ATOMIC_RELAXED));
	__atomic_store_n(&slot->stamp, now, __ATOMIC_RELAXED);
	r->ptr = (uintptr_t)p;
	r->time_ns = now;
	slot_note(slot, (uintptr_t)p, now, at, t->id);
	tbuf_append(t, at, now);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	t->guard = 0;
	return p;
}

/* free_exact's free that does not cancel: the general path. */
__attribute__((noinline)) static void exact_free_miss(void *p)
{
	struct tstate *t = &t_st;

	guard_hold(t);
	note_free(t, PMM_OP_FREE, p, 0, NULL);
	t->guard = 0;
	real.free(p);
}

/*
 * free() while exact with no block of the arena: a free that cancels
 * against its allocation in the buffer (free(NULL) has no tag: the general
 * path, which records nothing), where the thread holds exact's key.
 */
void free_exact(void *p)
{
	struct tstate *t = &t_st;
	struct tag_slot *slot;
	int cancelled;

	if (unlikely(!exact_fast(t))) {
		hook_free(p);
		return;
	}
	slot = tag_slot_of((uintptr_t)p);
	guard_hold(t);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);	/* a handler's malloc sees it */
	cancelled = cancel_buffered(t, slot, (uintptr_t)p, slot_tag(slot, (uintptr_t)p));
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	t->guard = 0;
	if (unlikely(!cancelled)) {
		exact_free_miss(p);
		return;
	}
	real.free(p);
}

/*
 * t->budget -= n; 1 if it was more than n (unsigned: a size of 2^63 or more
 * spends it too) and what is left is below 2^63, as every budget is. A
 * spent budget has wrapped to 2^63 or more until the slow path sets it
 * again, and a signal handler's malloc that comes in between must find it
 * spent too: in exact mode it would otherwise pass unrecorded. On x86-64
 * one instruction on the thread's variable and two branches: a compiler
 * loads, compares, subtracts and stores.
 */
static inline __attribute__((always_inline)) int budget_take(size_t n)
{
#ifdef __x86_64__
	asm goto("subq %1, %0\n\t"
		 "jbe %l[spent]\n\t"
		 "js %l[spent]"
		 : : "m"(t_st.budget), "r"(n) : "cc", "memory" : spent);
	return 1;
spent:
	return 0;
#else
	uint64_t left = t_st.budget;

	t_st.budget = left - n;
	return left > n && left - n < (1ULL << 63);
#endif
}

/* Not monitored, or sampled with no sample point in these n bytes:
 * nothing to record until the budget is spent; then the mode's code
 * (g_fast.malloc_spent). */
PMM_EXPORT void *malloc(size_t n)
{
	if (likely(budget_take(n)))
		return real.malloc(n);
	return __atomic_load_n(&g_fast.malloc_spent, __ATOMIC_RELAXED)(n,
								__builtin_return_address(0));
}

/* A signal handler's free (enter: ENTER_ALONE), before the block is. */
__attribute__((noinline)) static void note_free_alone(void *p)
{
	note_free(NULL, PMM_OP_FREE, p, 0, NULL);
}

void hook_free(void *p)
{
	struct tstate *t = &t_st;
	int how;

	if (in_arena(p))
		return;
	if (g_fast.mode == MODE_BOOT && booting())
		return;	/* cannot be ours, cannot be freed yet: leak it */
	if (g_fast.mode < MODE_MONITORED || (how = enter(t)) == ENTER_PASS) {
		real.free(p);
		return;
	}
	if (unlikely(how == ENTER_ALONE)) {
		note_free_alone(p);
		real.free(p);
		return;
	}
	note_free(t, PMM_OP_FREE, p, 0, NULL);
	real.free(p);
	guard_drop(t);
}

/* free() while sampled with no block of the arena. */
void free_sampled(void *p)
{
	if (!__atomic_load_n(set_filter(&g_sampled, p), __ATOMIC_RELAXED)) {
		real.free(p);	/* surely not a sampled block */
		return;
	}
	hook_free(p);
}

/*
 * One jump: to libc's free when not monitored, to the mode's checks
 * otherwise (g_fast.free). A jump through memory the hook writes only when
 * the mode changes, rather than a test of the mode on every call.
 */
PMM_EXPORT void free(void *p)
{
	__atomic_load_n(&g_fast.free, __ATOMIC_RELAXED)(p);
}

static void *do_calloc(size_t n, size_t m, const struct src *s)
{
	struct tstate *t = &t_st;
	size_t bytes;
	void *p;
	int how;

	if (g_fast.mode == MODE_BOOT && booting()) {
		if (__builtin_mul_overflow(n, m, &bytes)) {
			errno = ENOMEM;
			return NULL;
		}
		return arena_alloc(bytes, 16);
	}
	if (g_fast.mode < MODE_MONITORED || (how = enter(t)) == ENTER_PASS) {
		pass_tick();
		return real.calloc(n, m);
	}
	p = real.calloc(n, m);
	if (__builtin_mul_overflow(n, m, &bytes))
		bytes = SIZE_MAX;
	if (unlikely(how == ENTER_ALONE)) {
		note_alloc_alone(PMM_OP_CALLOC, p, bytes, s);
		return p;
	}
	note_alloc(t, PMM_OP_CALLOC, p, bytes, s, NULL);
	guard_drop(t);
	return p;
}

__attribute__((noinline, cold)) static void *calloc_poll(size_t n, size_t m)
{
	pass_poll(&t_st);
	return real.calloc(n, m);
}

__attribute__((noinline)) static void *calloc_slow(size_t n, size_t m, void *ra)
{
	struct src s = SRC(ra, __builtin_frame_address(0));

	return do_calloc(n, m, &s);
}

PMM_EXPORT void *calloc(size_t n, size_t m)
{
	if (likely(g_fast.mode == MODE_PASS)) {
		if (poll_due(&t_st))
			return calloc_poll(n, m);
		return real.calloc(n, m);
	}
	return calloc_slow(n, m, __builtin_return_address(0));
}

/* realloc of a bootstrap-arena block: move it to the real heap. */
static void *arena_realloc(void *p, size_t n, const struct src *s)
{
	size_t old = arena_size(p);
	void *q;

	if (n == 0)
		return NULL;	/* glibc's realloc(p, 0): frees, returns NULL */
	q = do_malloc(n, s);
	if (q)
		memcpy(q, p, old < n ? old : n);
	return q;
}

/*
 * realloc while monitored. Exact: one REALLOC record (prev_ptr: the old
 * block), time taken after the call; realloc(p, 0) that frees is a FREE
 * (time taken before); a failure is a REALLOC with PMM_REC_F_FAILED and
 * prev_ptr 0 (the old block stays). Sampled: the old block's record goes
 * only if it was sampled; the new block is sampled afresh. t NULL: a signal
 * handler's call, recorded alone.
 */
static void *monitored_realloc(struct tstate *t, void *p, size_t n, const struct src *s,
			       void *(*fn)(void *, size_t, size_t), size_t m)
{
	uint64_t before = 0;
	int was = 0, saved;
	uint32_t weight = 1;
	size_t bytes = n;
	void *q;

	if (g_sample && p)
		was = set_del(&g_sampled, p);
	if (p && (!g_sample || was))
		/* the old block's free: before the call */
		before = stamp_slot(t, tag_slot_of((uintptr_t)p));
	if (fn) {
		if (__builtin_mul_overflow(n, m, &bytes))
			bytes = SIZE_MAX;
		q = fn(p, n, m);
	} else {
		q = real.realloc(p, n);
	}
	saved = errno;
	if (!q) {
		if (bytes == 0 && p) {		/* freed */
			if (!g_sample || was)
				record(t, PMM_OP_FREE, p, NULL, 0, 0, 1, before);
			if (was)
				sampled_wait(t);
		} else if (!g_sample) {		/* failed, p intact */
			record(t, PMM_OP_REALLOC, NULL, NULL, bytes, site_of(t, s), 1, 0);
		} else if (was) {
			set_add(&g_sampled, p);
		}
		errno = saved;
		return q;
	}
	if (!g_sample) {
		record(t, PMM_OP_REALLOC, q, p, bytes, site_of(t, s), 1, 0);
	} else if (sample(t, bytes, &weight) && set_add(&g_sampled, q)) {
		record(t, PMM_OP_REALLOC, q, was ? p : NULL, bytes, site_of(t, s), weight, 0);
	} else {
		if (was) {
			record(t, PMM_OP_FREE, p, NULL, 0, 0, 1, before);
			sampled_wait(t);
		}
		sampled_tick(t);
	}
	errno = saved;
	return q;
}

static void *do_realloc(void *p, size_t n, const struct src *s)
{
	struct tstate *t = &t_st;
	void *q;
	int how;

	if (in_arena(p))
		return arena_realloc(p, n, s);
	if (g_fast.mode == MODE_BOOT && booting())
		return p ? NULL : arena_alloc(n, 16);
	if (g_fast.mode < MODE_MONITORED || (how = enter(t)) == ENTER_PASS) {
		pass_tick();
		return real.realloc(p, n);
	}
	if (unlikely(how == ENTER_ALONE))
		return monitored_realloc(NULL, p, n, s, NULL, 0);
	q = monitored_realloc(t, p, n, s, NULL, 0);
	guard_drop(t);
	return q;
}

__attribute__((noinline, cold)) static void *realloc_poll(void *p, size_t n)
{
	pass_poll(&t_st);
	return real.realloc(p, n);
}

__attribute__((noinline)) static void *realloc_slow(void *p, size_t n, void *ra)
{
	struct src s = SRC(ra, __builtin_frame_address(0));

	return do_realloc(p, n, &s);
}

PMM_EXPORT void *realloc(void *p, size_t n)
{
	if (likely(g_fast.mode_no_arena == MODE_PASS)) {
		if (poll_due(&t_st))
			return realloc_poll(p, n);
		return real.realloc(p, n);
	}
	return realloc_slow(p, n, __builtin_return_address(0));
}

PMM_EXPORT void *reallocarray(void *p, size_t n, size_t m)
{
	struct src s = SRC(__builtin_return_address(0), __builtin_frame_address(0));
	struct tstate *t = &t_st;
	size_t bytes;
	void *q;
	int how;

	if (in_arena(p) || (g_fast.mode == MODE_BOOT && booting()) || !real.reallocarray) {
		if (__builtin_mul_overflow(n, m, &bytes)) {
			errno = ENOMEM;
			return NULL;
		}
		return do_realloc(p, bytes, &s);
	}
	if (g_fast.mode < MODE_MONITORED || (how = enter(t)) == ENTER_PASS) {
		pass_tick();
		return real.reallocarray(p, n, m);
	}
	if (unlikely(how == ENTER_ALONE))
		return monitored_realloc(NULL, p, n, &s, real.reallocarray, m);
	q = monitored_realloc(t, p, n, &s, real.reallocarray, m);
	guard_drop(t);
	return q;
}

/* The aligned family: op, alignment, size; boot: from the arena. */
static void *aligned_common(uint16_t op, size_t align, size_t n, const struct src *s)
{
	struct tstate *t = &t_st;
	void *p;
	int how;

	if (g_fast.mode == MODE_BOOT && booting())
		return arena_alloc(n, align ? align : 4096);
	if (g_fast.mode >= MODE_MONITORED && (how = enter(t)) != ENTER_PASS) {
		switch (op) {
		case PMM_OP_ALIGNED_ALLOC: p = real.aligned_alloc(align, n); break;
		case PMM_OP_MEMALIGN: p = real.memalign(align, n); break;
		case PMM_OP_VALLOC: p = real.valloc(n); break;
		default: p = real.pvalloc(n); break;
		}
		if (unlikely(how == ENTER_ALONE)) {
			note_alloc_alone(op, p, n, s);
			return p;
		}
		note_alloc(t, op, p, n, s, NULL);
		guard_drop(t);
		return p;
	}
	pass_tick();
	switch (op) {
	case PMM_OP_ALIGNED_ALLOC: return real.aligned_alloc(align, n);
	case PMM_OP_MEMALIGN: return real.memalign(align, n);
	case PMM_OP_VALLOC: return real.valloc(n);
	default: return real.pvalloc(n);
	}
}

PMM_EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
	struct src s = SRC(__builtin_return_address(0), __builtin_frame_address(0));
	struct tstate *t = &t_st;
	int r, how;

	if (g_fast.mode == MODE_BOOT && booting()) {
		void *p;

		if (align < sizeof(void *) || (align & (align - 1)))
			return EINVAL;
		p = arena_alloc(n, align);
		if (!p)
			return ENOMEM;
		*out = p;
		return 0;
	}
	if (g_fast.mode < MODE_MONITORED || (how = enter(t)) == ENTER_PASS) {
		pass_tick();
		return real.posix_memalign(out, align, n);
	}
	r = real.posix_memalign(out, align, n);
	if (unlikely(how == ENTER_ALONE)) {
		note_alloc_alone(PMM_OP_POSIX_MEMALIGN, r ? NULL : *out, n, &s);
		return r;
	}
	note_alloc(t, PMM_OP_POSIX_MEMALIGN, r ? NULL : *out, n, &s, NULL);
	guard_drop(t);
	return r;
}

PMM_EXPORT void *aligned_alloc(size_t align, size_t n)
{
	struct src s = SRC(__builtin_return_address(0), __builtin_frame_address(0));

	return aligned_common(PMM_OP_ALIGNED_ALLOC, align, n, &s);
}

PMM_EXPORT void *memalign(size_t align, size_t n)
{
	struct src s = SRC(__builtin_return_address(0), __builtin_frame_address(0));

	return aligned_common(PMM_OP_MEMALIGN, align, n, &s);
}

PMM_EXPORT void *valloc(size_t n)
{
	struct src s = SRC(__builtin_return_address(0), __builtin_frame_address(0));

	return aligned_common(PMM_OP_VALLOC, 0, n, &s);
}

PMM_EXPORT void *pvalloc(size_t n)
{
	struct src s = SRC(__builtin_return_address(0), __builtin_frame_address(0));

	return aligned_common(PMM_OP_PVALLOC, 0, n, &s);
}

PMM_EXPORT size_t malloc_usable_size(void *p)
{
	if (in_arena(p))
		return arena_size(p);
	if (g_fast.mode == MODE_BOOT && booting())
		return 0;
	return real.malloc_usable_size(p);
}

/* ---- anonymous mappings ----------------------------------------------------- */

/*
 * A mapping's hook while monitored. With the guard held a mapping made
 * passes (an allocator such as jemalloc maps inside malloc: its memory is
 * the heap's), but an unmapping or mremap of a mapping the hook recorded
 * is recorded alone (a signal handler's; the hook's own calls of others'
 * code pass): otherwise the module would keep the mapping live for good.
 */
static inline int enter_map(struct tstate *t)
{
	return enter(t) == ENTER_TAKEN;
}

static void *do_mmap(void *(*fn)(void *, size_t, int, int, int, off_t), void *addr,
		     size_t len, int prot, int flags, int fd, off_t off, const struct src *s)
{
	struct tstate *t = &t_st;
	void *p;
	int saved;

	if (g_fast.mode == MODE_BOOT && booting())
		return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
	if (g_fast.mode < MODE_MONITORED || !(flags & MAP_ANONYMOUS) || !enter_map(t))
		return fn(addr, len, prot, flags, fd, off);
	p = fn(addr, len, prot, flags, fd, off);
	if (p != MAP_FAILED) {
		saved = errno;
		note_alloc(t, PMM_OP_MMAP, p, len, s, &g_mapped);
		errno = saved;
	}
	guard_drop(t);
	return p;
}

PMM_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	struct src s = SRC(__builtin_return_address(0), __builtin_frame_address(0));

	return do_mmap(real.mmap, addr, len, prot, flags, fd, off, &s);
}

PMM_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	struct src s = SRC(__builtin_return_address(0), __builtin_frame_address(0));

	return do_mmap(real.mmap64, addr, len, prot, flags, fd, off, &s);
}

PMM_EXPORT int munmap(void *addr, size_t len)
{
	struct tstate *t = &t_st;
	int r, saved, how;

	if (g_fast.mode == MODE_BOOT && booting())
		return (int)syscall(SYS_munmap, addr, len);
	if (g_fast.mode < MODE_MONITORED || (how = enter(t)) == ENTER_PASS)
		return real.munmap(addr, len);
	saved = errno;
	note_free(how == ENTER_ALONE ? NULL : t, PMM_OP_MUNMAP, addr, len, &g_mapped);
	errno = saved;
	r = real.munmap(addr, len);
	if (how == ENTER_TAKEN)
		guard_drop(t);
	return r;
}

PMM_EXPORT void *mremap(void *old, size_t old_len, size_t len, int flags, ...)
{
	struct src s = SRC(__builtin_return_address(0), __builtin_frame_address(0));
	struct tstate *t = &t_st, *by;
	void *want = NULL, *p;
	int saved, was, how;
	va_list ap;

	if (flags & MREMAP_FIXED) {
		va_start(ap, flags);
		want = va_arg(ap, void *);
		va_end(ap);
	}
	if (g_fast.mode == MODE_BOOT && booting())
		return (void *)syscall(SYS_mremap, old, old_len, len, flags, want);
	if (g_fast.mode < MODE_MONITORED || (how = enter(t)) == ENTER_PASS)
		return real.mremap(old, old_len, len, flags, want);
	by = how == ENTER_ALONE ? NULL : t;	/* NULL: recorded alone */
	was = set_del(&g_mapped, old);
	p = real.mremap(old, old_len, len, flags, want);
	saved = errno;
	if (was) {
		if (p == MAP_FAILED)
			set_add(&g_mapped, old);
		else if (set_add(&g_mapped, p))
			record(by, PMM_OP_MREMAP, p, old, len, site_of(by, &s), 1, 0);
		else
			record(by, PMM_OP_MUNMAP, old, NULL, old_len, 0, 1, 0);
	}
	errno = saved;
	if (by)
		guard_drop(t);
	return p;
}

/* ---- pmm_hooks.h: file/function/line sites ---------------------------------- */

PMM_EXPORT void *pmm_src_malloc(size_t n, void *caller, const char *file, const char *func,
				int line)
{
	struct src s = { .ra = caller, .file = file, .func = func, .line = line };

	return do_malloc(n, &s);
}

PMM_EXPORT void *pmm_src_calloc(size_t n, size_t m, void *caller, const char *file,
				const char *func, int line)
{
	struct src s = { .ra = caller, .file = file, .func = func, .line = line };

	return do_calloc(n, m, &s);
}

PMM_EXPORT void *pmm_src_realloc(void *p, size_t n, void *caller, const char *file,
				 const char *func, int line)
{
	struct src s = { .ra = caller, .file = file, .func = func, .line = line };

	return do_realloc(p, n, &s);
}

PMM_EXPORT void pmm_src_free(void *p, void *caller, const char *file, const char *func,
			     int line)
{
	(void)caller;
	(void)file;
	(void)func;
	(void)line;
	hook_free(p);
}

#ifdef PMM_FAKE_DEV
/* Tests: a block of the bootstrap arena, such as dlsym may get while the
 * hook starts, for a program to free or reallocate later in any mode. */
PMM_EXPORT void *pmm_fake_arena_alloc(size_t n)
{
	return arena_alloc(n, 16);
}
#endif

/* For tests and tools: flushes the calling thread's buffer now. */
PMM_EXPORT void pmm_flush(void)
{
	struct tstate *t = &t_st;

	if (g_fast.mode < MODE_MONITORED || enter(t) != ENTER_TAKEN)
		return;
	flush(t);
	guard_drop(t);
}
