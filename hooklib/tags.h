/* SPDX-License-Identifier: GPL-2.0 */
/*
 * tags.c: the tag table, g_tags. Its slots also keep the address clock's
 * last stamp at their addresses (stamp_slot; clock.h has the clock).
 *
 * The last recorded heap allocation at each address (direct-mapped by
 * address, one relaxed 64-bit store per allocation): the address's high
 * bits and the low PMM_ALLOC_TAG_BITS bits of the allocation's time_ns.
 * Two uses:
 *  - tags: a FREE (and a REALLOC's free of its old block) carries the tag of
 *    the allocation it frees, so the kernel pairs it with exactly that block
 *    even when another thread freed and reused the address meanwhile and
 *    its records are still in flight (request/response ping-pong between
 *    threads does this all the time). A collision leaves the free untagged:
 *    the kernel then takes the newest older block.
 *  - short-lived blocks: a free whose allocation still sits in the same
 *    thread's unsent buffer, and is still the last allocation at that
 *    address, cancels against it: the allocation is flagged PMM_REC_F_FREED
 *    and the free is not sent, so the kernel counts both with no table work
 *    (most blocks of most programs die young). The slot also keeps where
 *    in its thread's buffer that allocation was written; the freeing thread
 *    looks there in its own buffer, and the record's address, op and tag
 *    say whether it is that allocation (a slot written by another thread,
 *    or a buffer flushed since, points at some other record). One store
 *    and one compare: the buffer needs no index of its own.
 */
#ifndef PMM_TAGS_H
#define PMM_TAGS_H

#include "clock.h"
#include "hook.h"
#include "thread_state.h"

#define TAG_TABLE_BITS	14
#define SEEN_BITS	20
#define TAG_SLOTS	(1U << TAG_TABLE_BITS)
#define TAG_MASK	((1U << PMM_ALLOC_TAG_BITS) - 1)
#define NOT_BUFFERED	UINT32_MAX	/* tag_slot.at of an allocation sent alone */

PMM_HIDDEN_BEGIN

struct tag_slot {
	uint64_t entry;		/* the last allocation: high bits, tag */
	uint64_t stamp;		/* the last stamp of an event here (address clock) */
	uint32_t at;		/* the last allocation's slot in its thread's buffer */
	uint32_t owner;		/* the last allocation's thread (tstate.id) */
};

extern struct tag_slot g_tags[TAG_SLOTS];

/*
 * The addresses allocated since monitoring began (a byte per address
 * bucket, set by every recorded heap allocation before its pointer is
 * returned, cleared when monitoring starts): a free whose tag is unknown
 * and whose bucket no allocation set frees a block older than monitoring,
 * which a hook attached to a running process (or started late) sees by the
 * thousand. Sent PMM_REC_F_OLDER, it costs the module no lookup and no
 * pending free. Bytes, not bits: racing stores of 1 lose nothing. A bucket
 * shared with a newer allocation only sends the free the ordinary way.
 */
extern uint8_t g_seen[1U << SEEN_BITS];

static inline uint8_t *seen_of(uint64_t ptr)
{
	return &g_seen[((ptr >> 4) ^ (ptr >> (4 + SEEN_BITS))) & ((1U << SEEN_BITS) - 1)];
}

/* PMM_REC_F_OLDER for an untagged free of ptr that no allocation since the start could be. */
static inline uint16_t older_flag(uint64_t ptr)
{
	return __atomic_load_n(seen_of(ptr), __ATOMIC_RELAXED) ? 0 : PMM_REC_F_OLDER;
}

/*
 * The slot: the address's low bits (a run of neighbouring blocks spreads
 * out) xor its next ones, because glibc's per-thread arenas are 64 MiB-
 * aligned (bit 26 up) and their blocks at the same offset would otherwise
 * share a slot, leaving the frees of exactly the blocks that threads pass to
 * each other untagged; bits 26-31 land on the slot's bits 8-13. The entry
 * keeps the high bits, and with the slot they give back the low ones, so a
 * match is still exact. (A multiplicative hash spreads them no better, at
 * more instructions.)
 */
static inline struct tag_slot *tag_slot_of(uint64_t ptr)
{
	return &g_tags[((ptr >> 4) ^ (ptr >> (4 + TAG_TABLE_BITS))) & (TAG_SLOTS - 1)];
}

/* The entry for ptr allocated at time t (never 0 for a valid ptr). */
static inline uint64_t tag_entry(uint64_t ptr, uint64_t t)
{
	return (ptr >> (4 + TAG_TABLE_BITS)) << PMM_ALLOC_TAG_BITS | (t & TAG_MASK);
}

/* The tag of the last recorded allocation at ptr (slot: its slot), or -1. */
static inline int64_t slot_tag(const struct tag_slot *slot, uint64_t ptr)
{
	uint64_t e = __atomic_load_n(&slot->entry, __ATOMIC_RELAXED);

	if (!e || e >> PMM_ALLOC_TAG_BITS != ptr >> (4 + TAG_TABLE_BITS))
		return -1;
	return (int64_t)(e & TAG_MASK);
}


/*
 * An event at an address of slot: stamped after the slot's last one. t
 * NULL: a record made alone (record_alone), after the slot's last stamp
 * and no earlier than the coarse time, but not after the thread's last,
 * whose clock the interrupted code may be updating; stamps need only
 * follow the order of the events at each address, which the slot keeps.
 */
static inline uint64_t stamp_slot(struct tstate *t, struct tag_slot *slot)
{
	uint64_t v, at;

	if (g_clock_mono)
		return now_ns();
	at = __atomic_load_n(&slot->stamp, __ATOMIC_RELAXED);
	if (t) {
		v = next_stamp(t, at);
	} else {
		v = coarse_ns();
		if (v <= at)
			v = at + 1;
	}
	__atomic_store_n(&slot->stamp, v, __ATOMIC_RELAXED);
	return v;
}

/* ptr, allocated at now by thread owner, is the last allocation at its
 * slot; at: its record's position in that thread's buffer (NOT_BUFFERED:
 * sent alone). */
static inline void slot_note(struct tag_slot *slot, uint64_t ptr, uint64_t now, uint32_t at,
			     uint32_t owner)
{
	__atomic_store_n(&slot->entry, tag_entry(ptr, now), __ATOMIC_RELAXED);
	__atomic_store_n(&slot->at, at, __ATOMIC_RELAXED);
	__atomic_store_n(&slot->owner, owner, __ATOMIC_RELAXED);
	__atomic_store_n(seen_of(ptr), 1, __ATOMIC_RELAXED);
}

PMM_HIDDEN_END

#endif /* PMM_TAGS_H */
