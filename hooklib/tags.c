// SPDX-License-Identifier: GPL-2.0
/*
 * The tag table (tags.h): one slot per address bucket, written with relaxed
 * stores by every thread, read by the frees at its addresses.
 *
 * Owns: g_tags, g_seen.
 */
#include "tags.h"

struct tag_slot g_tags[TAG_SLOTS] __attribute__((aligned(64)));
uint8_t g_seen[1U << SEEN_BITS] __attribute__((aligned(4096)));
