/* SPDX-License-Identifier: GPL-2.0 */
/*
 * buffer.c: each thread's records. record() writes one into the thread's
 * buffer (a free first cancels its allocation's record still there), and
 * the buffer goes to the module in PMM_RECORD_LOG batches (flush), merged
 * where that pays. Records that cannot wait for a buffer (a signal
 * handler's, a thread's after its buffer is gone) go alone.
 */
#ifndef PMM_BUFFER_H
#define PMM_BUFFER_H

#include "clock.h"
#include "hook.h"
#include "mode.h"
#include "tags.h"
#include "thread_state.h"

PMM_HIDDEN_BEGIN

/*
 * A buffer is sent once it holds this many frees of blocks that another
 * thread allocated. Their pairs reach the module from two threads in either
 * order, and it keeps the early side: frees as pending, allocations at one
 * address (ping-pong between two threads reuses one address) as a cluster
 * whose probes grow with its length. Both are bounded at PMM_MAX_BATCH, as
 * they were when a buffer was one batch, which held at most this many.
 */
#define CROSS_MAX	(PMM_MAX_BATCH / 2)

/* Maps the thread's buffer (and gives the thread its id); 0 if it cannot. */
int tbuf_get(struct tstate *t);
/* Sends the thread's buffer and empties it (the guard held). */
void flush(struct tstate *t);
/* One record in a batch of its own. */
void send_one(const struct pmm_record *r);
/* Sampled: sends the buffer if its first record waited FLUSH_NS. */
void sampled_poll(struct tstate *t);
/* The thread's buffer holds records of epoch e: it may take exact's key. */
void exact_ready(struct tstate *t, unsigned int e);
struct old_block;
/* record() for a signal handler's call that interrupted the hook. */
void record_alone(uint16_t op, const void *ptr, const void *prev, uint64_t size,
		  uint32_t site, uint32_t weight, uint64_t now, const struct old_block *old);
/* At init: the key whose destructor flushes an exiting thread's buffer. */
int buffer_key_create(void);

/*
 * Whether the record at i of this thread's buffer is the allocation of ptr
 * with tag, still live: its index, or NOT_BUFFERED. Only a record of an
 * allocation at ptr with the tag is it: the tag is the allocation's stamp,
 * and stamps at one address only grow.
 */
static inline uint32_t buffered_at(const struct tstate *t, uint32_t i, uint64_t ptr, int64_t tag)
{
	const struct pmm_record *r;

	if (tag < 0 || i >= t->n)
		return NOT_BUFFERED;
	r = &t->buf[i];
	if (r->ptr != ptr || r->op == PMM_OP_FREE ||
	    (r->flags & (PMM_REC_F_FREED | PMM_REC_F_FAILED)) ||
	    (int64_t)(r->time_ns & TAG_MASK) != tag)
		return NOT_BUFFERED;
	return i;
}

/* Where in this thread's buffer the allocation of ptr with tag (slot:
 * ptr's) waits, still live, or NOT_BUFFERED. */
static inline uint32_t buffered_alloc(const struct tstate *t, const struct tag_slot *slot,
				      uint64_t ptr, int64_t tag)
{
	return buffered_at(t, __atomic_load_n(&slot->at, __ATOMIC_RELAXED), ptr, tag);
}

/*
 * What a record that frees the block at ptr needs of its slot, read while
 * the block is still the caller's: once libc has released it, another
 * thread may allocate at its address and write the slot (the general
 * path's realloc records after libc's call).
 */
struct old_block {
	int64_t tag;		/* slot_tag, or -1 */
	uint32_t at;		/* the slot's buffer index then */
	uint16_t older;		/* older_flag then */
};

static inline struct old_block old_block_of(uint64_t ptr)
{
	const struct tag_slot *slot = tag_slot_of(ptr);
	struct old_block b;

	b.tag = slot_tag(slot, ptr);
	b.at = __atomic_load_n(&slot->at, __ATOMIC_RELAXED);
	b.older = older_flag(ptr);
	return b;
}

/*
 * A free of ptr, whose allocation has tag (slot: ptr's): 1 if it cancelled
 * against that allocation's record in this thread's buffer (buffered_alloc).
 */
static inline int cancel_buffered(struct tstate *t, const struct tag_slot *slot, uint64_t ptr,
				  int64_t tag)
{
	uint32_t i = buffered_alloc(t, slot, ptr, tag);

	if (i == NOT_BUFFERED)
		return 0;
	t->buf[i].flags |= PMM_REC_F_FREED;
	return 1;
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
 * One record. old: the freed block's slot as read before libc's call
 * (old_block_of), for a FREE of ptr or a REALLOC's prev; NULL: read now.
 * t NULL: record_alone.
 */
static inline __attribute__((always_inline)) void
record_old(struct tstate *t, uint16_t op, const void *ptr, const void *prev,
	   uint64_t size, uint32_t site, uint32_t weight, uint64_t now,
	   const struct old_block *old)
{
	unsigned int e = __atomic_load_n(&g_epoch, __ATOMIC_RELAXED);
	struct pmm_record one, *r;
	struct tag_slot *slot = NULL;	/* ptr's, for a heap record */
	struct tag_slot *tagged = NULL;	/* the slot whose tag the record carries */
	uint16_t flags = 0;
	int64_t tag = -1;
	uint32_t i;

	if (!t) {
		record_alone(op, ptr, prev, size, site, weight, now, old);
		return;
	}
	if (unlikely(t->gen != e)) {
		t->gen = e;
		tbuf_reset(t);
	}
	if (unlikely(!t->buf))
		tbuf_get(t);	/* and the thread's id; without it, records go alone */
	if (ptr && !pmm_op_is_map(op))
		slot = tag_slot_of((uintptr_t)ptr);
	if (op == PMM_OP_FREE && slot) {
		tag = old ? old->tag : slot_tag(slot, (uintptr_t)ptr);
		i = old ? buffered_at(t, old->at, (uintptr_t)ptr, tag) :
			  buffered_alloc(t, slot, (uintptr_t)ptr, tag);
		if (i != NOT_BUFFERED) {
			t->buf[i].flags |= PMM_REC_F_FREED;
			return;
		}
		tagged = slot;
	} else if (op == PMM_OP_REALLOC && prev) {
		/* before ptr's entry replaces it */
		tagged = tag_slot_of((uintptr_t)prev);
		tag = old ? old->tag : slot_tag(tagged, (uintptr_t)prev);
		i = old ? buffered_at(t, old->at, (uintptr_t)prev, tag) :
			  buffered_alloc(t, tagged, (uintptr_t)prev, tag);
		/*
		 * The old block's allocation still in the buffer: it cancels
		 * as a free would (FREED), and this record says so, keeping
		 * prev_ptr for display; it may cancel and merge in turn.
		 */
		if (ptr && i != NOT_BUFFERED) {
			t->buf[i].flags |= PMM_REC_F_FREED;
			flags = PMM_REC_F_PREV_FREED;
			tag = -1;
		}
	}
	if (tag >= 0 && __atomic_load_n(&tagged->owner, __ATOMIC_RELAXED) != t->id &&
	    ++t->cross >= CROSS_MAX)
		t->full = t->n + 1;	/* sent with this record */
	if (!now)	/* a free's, after the cancel check: none if cancelled */
		now = slot ? stamp_slot(t, slot) : pmm_op_is_map(op) ? stamp_map(t) : stamp_none(t);
	if (!ptr && op != PMM_OP_FREE && op != PMM_OP_MUNMAP)
		flags = PMM_REC_F_FAILED;
	if (tag >= 0)
		flags |= PMM_REC_F_TAGGED;
	else if (tagged && !flags)	/* an untagged free, or realloc's of prev */
		flags = old ? old->older :
			older_flag(op == PMM_OP_FREE ? (uintptr_t)ptr : (uintptr_t)prev);
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

static inline __attribute__((always_inline)) void
record(struct tstate *t, uint16_t op, const void *ptr, const void *prev,
       uint64_t size, uint32_t site, uint32_t weight, uint64_t now)
{
	record_old(t, op, ptr, prev, size, site, weight, now, NULL);
}

PMM_HIDDEN_END

#endif /* PMM_BUFFER_H */
