/**
 * @file buddy_arena.h
 * @brief Chapter 3 extension: the regions of a batch placed by the buddy
 *        allocator of buddy.h instead of first fit (`--arena buddy`).
 *
 * **Adds** the glue between the chapter's regions and buddy.h: a region of
 * n positions takes the block of the power of two of slots above n (one
 * slot holds one token's K/V in every layer), and the books count in bytes
 * as the core's do. The rounding is part of what the request holds, so in
 * the breakdown it is internal fragmentation (never filled); the holes no
 * block fits count as external fragmentation exactly as with first fit.
 * Everything else (policies, admission, growth, requeues) is the core's.
 *
 * **Turned on by** `--arena buddy` (BatchingState.buddy set).
 *
 * **Taught in** book/ch03-batching.md, "Extension: the buddy arena".
 *
 * **Where the core calls it**: once, in arena_ops()
 * (chapters/ch03-batching/regions.c), behind `--arena buddy`: it asks
 * buddy_arena_ops() for the allocator's operations (::ArenaOps) instead
 * of first fit's, and from then on reaches the buddy allocator only
 * through them (placing, freeing, the free pieces, the budget's largest
 * region, refusals and rejections, opening and closing its books).
 */
#ifndef KVLAB_CH03_BUDDY_ARENA_H
#define KVLAB_CH03_BUDDY_ARENA_H

#include "batching.h"
#include "buddy.h"

/**
 * The buddy allocator's operations over the chapter's regions: blocks of a
 * power of two of positions (buddy_block_slots()), its own books in
 * b->buddy (opened beside the core's arena, which keeps the capacity),
 * and its own words for a budget or a request that no block holds.
 * @return the operations (static: never freed)
 */
const ArenaOps *buddy_arena_ops(void);

#endif
