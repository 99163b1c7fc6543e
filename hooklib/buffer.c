// SPDX-License-Identifier: GPL-2.0
/*
 * Each thread's records (buffer.h). A thread maps its buffer at its first
 * record while monitored; record() writes there, and the buffer is sent
 * when it is full, when its first record has waited FLUSH_NS, when it
 * holds CROSS_MAX frees of other threads' blocks, and when the thread or
 * the process exits. Sent records stay in the buffer until the next ones
 * overwrite them. A record that finds no buffer goes alone (send_one).
 *
 * Owns: the buffers (struct tstate's buf, n, full, cross, first_ns,
 * merge_skip, pin) and g_key. Only the owning thread touches its buffer,
 * with the guard held (thread_state.h).
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "buffer.h"
#include "control.h"
#include "device.h"
#include "env.h"
#include "heap.h"
#include "real.h"
#include "sampled_mode.h"
#include "scanreg.h"

static pthread_key_t g_key;	/* its destructor flushes an exiting thread */

/* The buffer, and one record more for a vfork child to write in vain
 * (flush_later). */
#define TBUF_BYTES	(((g_tbuf_records + 1) * sizeof(struct pmm_record) + 4095) & ~4095UL)
#define MERGE_BITS	10
/* A thread's mapping: its buffer, then merge_freed's table, which is too
 * big for the stack of a hook (the program chose the thread's stack). */
#define TBUF_MAP_BYTES	(TBUF_BYTES + (sizeof(struct merge_slot) << MERGE_BITS))

struct merge_slot {
	uint64_t key;		/* merge_key, 0: empty */
	uint32_t at;		/* the kept record's index */
	uint32_t weight;	/* its weight, written back at the end */
};

/* Every hook keeps errno: this is the only place on the record path that
 * may change it, other than pmm_dev_ioctl and notice, which restore it. */
int tbuf_get(struct tstate *t)
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
	scanreg_add(t, p, TBUF_MAP_BYTES);
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

void flush(struct tstate *t)
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
	if (!t->in_map)
		heap_report_maybe();
}

/* After the buffer is gone (thread or process exit): send one by one. */
void send_one(const struct pmm_record *r)
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

/*
 * The thread's buffer holds records of epoch e (record() has just written
 * one): the fast paths may run, if e is still exact's key. The site cache
 * is emptied first if it is from another epoch (site_of's rule), since the
 * fast path reads it directly.
 */
__attribute__((noinline)) void exact_ready(struct tstate *t, unsigned int e)
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
__attribute__((noinline)) void record_alone(uint16_t op, const void *ptr, const void *prev,
					    uint64_t size, uint32_t site, uint32_t weight, uint64_t now,
					    const struct old_block *old)
{
	struct tag_slot *slot = ptr && !pmm_op_is_map(op) ? tag_slot_of((uintptr_t)ptr) : NULL;
	struct pmm_record r;
	uint16_t flags = 0;
	int64_t tag = -1;

	if (old && ((op == PMM_OP_FREE && slot) || (op == PMM_OP_REALLOC && prev)))
		tag = old->tag;
	else if (op == PMM_OP_FREE && slot)
		tag = slot_tag(slot, (uintptr_t)ptr);
	else if (op == PMM_OP_REALLOC && prev)
		tag = slot_tag(tag_slot_of((uintptr_t)prev), (uintptr_t)prev);
	if (!now)
		now = slot ? stamp_slot(NULL, slot) : pmm_op_is_map(op) ? stamp_map(NULL) :
		      stamp_none(NULL);
	if (!ptr && op != PMM_OP_FREE && op != PMM_OP_MUNMAP)
		flags = PMM_REC_F_FAILED;
	if (tag >= 0)
		flags |= PMM_REC_F_TAGGED;
	else if (!flags && ((op == PMM_OP_FREE && slot) || (op == PMM_OP_REALLOC && prev)))
		flags = old ? old->older :
			older_flag(op == PMM_OP_FREE ? (uintptr_t)ptr : (uintptr_t)prev);
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
		slot_note(slot, (uintptr_t)ptr, now, NOT_BUFFERED, this_thread.id);
	send_one(&r);
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
		scanreg_del(t);
		real.munmap(t->buf, TBUF_MAP_BYTES);
		t->buf = NULL;
	}
	t->exiting = 1;
	guard_drop(t);
	errno = saved;
}

/* Sampled: a record waits at most FLUSH_NS, checked every POLL_EVERY
 * calls (sampled_tick). */
__attribute__((noinline)) void sampled_poll(struct tstate *t)
{
	t->poll = POLL_EVERY;
	if (t->n && (int64_t)(poll_ns() - t->first_ns) > (int64_t)FLUSH_NS) {
		guard_take(t);
		flush(t);
		guard_drop(t);
	}
}

int buffer_key_create(void)
{
	return pthread_key_create(&g_key, thread_exit);
}
