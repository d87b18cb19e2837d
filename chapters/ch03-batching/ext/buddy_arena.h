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
 * **Where the core calls it** (each behind `if (b->buddy)`, or the arena
 * kind before the state exists): the arena's pieces in
 * chapters/ch03-batching/regions.c (buddy_arena_take(),
 * buddy_arena_give_back(), buddy_arena_free_bytes(),
 * buddy_arena_free_pieces(), buddy_arena_largest_free(),
 * buddy_arena_free_below(), buddy_block_slots()), and in server.c the
 * budget's largest region (buddy_arena_largest_placeable()), its refusal
 * and rejections (buddy_arena_refuse(), buddy_arena_reject()),
 * batching_open() (buddy_arena_open()) and batching_close()
 * (buddy_arena_close()).
 */
#ifndef KVLAB_CH03_BUDDY_ARENA_H
#define KVLAB_CH03_BUDDY_ARENA_H

#include "batching.h"
#include "buddy.h"

/**
 * Makes b->buddy: a buddy allocator over the budget's token slots, for a
 * full batch and the new region of a move in progress.
 * @param b       the chapter (bytes_per_token, max_batch set)
 * @param budget  the KV budget in bytes
 * @param err     receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int buddy_arena_open(BatchingState *b, size_t budget, Err *err);

/**
 * Frees b->buddy (none: nothing).
 * @param b  the chapter
 */
void buddy_arena_close(BatchingState *b);

/**
 * A block for a region of @p tokens positions.
 * @param b       the chapter (b->buddy set)
 * @param tokens  positions the region holds, >= 1
 * @param reg     receives the region (offset in bytes, slots of its block)
 * @return 0 when placed, -1 when no free block holds it
 */
int buddy_arena_take(BatchingState *b, int tokens, KvRegion *reg);

/**
 * A region's block goes back, merging with its buddy.
 * @param b    the chapter (b->buddy set)
 * @param reg  a region buddy_arena_take() placed
 * @param err  receives the reason on a bookkeeping error
 * @return 0 on success, -1 on failure
 */
int buddy_arena_give_back(BatchingState *b, const KvRegion *reg, Err *err);

/**
 * Free bytes: the free blocks' slots.
 * @param b  the chapter (b->buddy set)
 * @return bytes
 */
size_t buddy_arena_free_bytes(const BatchingState *b);

/**
 * Free blocks now.
 * @param b  the chapter (b->buddy set)
 * @return blocks
 */
int buddy_arena_free_pieces(const BatchingState *b);

/**
 * Bytes of the largest free block.
 * @param b  the chapter (b->buddy set)
 * @return bytes
 */
size_t buddy_arena_largest_free(const BatchingState *b);

/**
 * Free bytes in blocks too small for a region of @p bytes.
 * @param b      the chapter (b->buddy set)
 * @param bytes  what was asked
 * @return bytes
 */
size_t buddy_arena_free_below(const BatchingState *b, size_t bytes);

/**
 * The largest region a budget can ever place with blocks: its largest
 * top-level block.
 * @param budget           the KV budget in bytes
 * @param bytes_per_token  bytes of one slot
 * @return bytes (0 when the budget holds no slot)
 */
size_t buddy_arena_largest_placeable(size_t budget, size_t bytes_per_token);

/**
 * batching_check()'s refusal with blocks: the smallest request's block
 * exceeds the budget's largest block.
 * @param run       the run
 * @param policy    --reserve
 * @param smallest  bytes of the smallest request's largest block
 * @param id        that request's id
 * @param err       receives the reason
 * @return 0 when some request fits, -1 otherwise
 */
int buddy_arena_refuse(const ServingRun *run, ReservePolicy policy, size_t smallest, int id, Err *err);

/**
 * Rejects @p r, whose largest block (@p bytes) exceeds the budget's
 * largest block (@p room).
 * @param b      the chapter
 * @param run    the run
 * @param r      the request
 * @param bytes  its largest block in bytes
 * @param room   the budget's largest block in bytes
 */
void buddy_arena_reject(const BatchingState *b, ServingRun *run, Request *r, size_t bytes, size_t room);

#endif
