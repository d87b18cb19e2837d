/**
 * @file buddy.h
 * @brief Chapter 3 extension: the other arena, a buddy allocator over
 *        token slots, as the PagedAttention paper assumes for its Orca
 *        baselines.
 *
 * **Adds** a second allocator for the regions, beside the core's first fit
 * (kv_arena.h); buddy_arena.h says how the chapter's regions are placed
 * with it.
 *
 * **Turned on by** `--arena buddy`.
 *
 * **Taught in** book/ch03-batching.md, "Extension: the buddy arena".
 *
 * The first-fit arena of kv_arena.h hands out exactly the bytes a region
 * asks for and merges any two neighbouring holes. A **buddy allocator**
 * (Knowlton 1965; Knuth, TAOCP vol. 1, 2.5) keeps the books simpler and
 * pays for it in memory:
 *
 * - every block is a power of two of slots (here one slot holds one
 *   token's K/V in every layer), so a region of 600 tokens takes a block
 *   of 1,024: the rest of the block is lost to rounding;
 * - a block of 2^k slots starts at a multiple of 2^k inside its top-level
 *   block, and its **buddy** is the other half of the block of 2^(k+1) it
 *   was split from (offset XOR 2^k);
 * - an allocation takes the smallest free block that holds it (the lowest
 *   address among equals) and splits it in halves until it has the size it
 *   needs; each upper half becomes a free block;
 * - a freed block merges with its buddy when the buddy is free and whole,
 *   again and again up the tree; two free neighbours that are not buddies
 *   never merge, which is external fragmentation first fit would not have.
 *
 * A pool whose size is not a power of two is cut into top-level blocks,
 * the largest power of two that is left each time (15,728 slots: 8,192 +
 * 4,096 + 2,048 + 1,024 + 256 + 64 + 32 + 16); a top-level block has no
 * buddy. A region larger than the largest top-level block can never be
 * placed.
 *
 * The allocator knows slots, never bytes or K/V: the chapter multiplies
 * by the bytes of one slot. Only the free blocks are listed (in address
 * order); nothing is allocated after buddy_init().
 */
#ifndef KVLAB_CH03_BUDDY_H
#define KVLAB_CH03_BUDDY_H

#include "err.h"

/** A block of 2^order slots starting at slot @c offset. */
typedef struct {
    int offset; /**< first slot */
    int order;  /**< the block holds 2^order slots */
} BuddyBlock;

/** The allocator's books. */
typedef struct BuddyArena {
    int n_slots;          /**< slots in the pool */
    int free_slots;       /**< slots in free blocks */
    BuddyBlock *tops;     /**< [n_tops] the top-level blocks, in address order, each at most half the one before */
    int n_tops;           /**< top-level blocks */
    BuddyBlock *free;     /**< [max_free] free blocks in address order */
    int n_free;           /**< free blocks now */
    int max_free;         /**< room in free[] */
} BuddyArena;

/**
 * Sets up a pool of free top-level blocks (see the file comment). Room for
 * the free list is sized for @p max_regions live regions: each can leave
 * at most one free buddy on every level above it.
 * @param a            receives the allocator
 * @param n_slots      slots in the pool, from 1 to 2^30
 * @param max_regions  most blocks allocated at once, >= 1
 * @param err          receives the reason on failure
 * @return 0 on success, -1 on failure (nothing to free then)
 */
int buddy_init(BuddyArena *a, int n_slots, int max_regions, Err *err);

/**
 * Frees the books.
 * @param a  an initialised or zeroed allocator
 */
void buddy_free(BuddyArena *a);

/**
 * The block a request of @p slots slots takes: the smallest power of two
 * that holds it.
 * @param slots  slots wanted, from 1 to 2^30
 * @return 1, 2, 4, ... >= slots
 */
int buddy_block_slots(int slots);

/**
 * Takes a block for @p slots slots: the smallest free block that holds
 * buddy_block_slots(@p slots), lowest address first, split in halves down
 * to that size.
 * @param a       the allocator
 * @param slots   slots wanted, >= 1
 * @param offset  receives the block's first slot
 * @return the block's size in slots, or -1 when no free block is large
 *         enough (nothing changes)
 */
int buddy_alloc(BuddyArena *a, int slots, int *offset);

/**
 * Gives a block back and merges it with its buddy, repeatedly, while the
 * buddy is free and whole.
 * @param a       the allocator
 * @param offset  the block's first slot (as buddy_alloc() said)
 * @param slots   its size (as buddy_alloc() returned)
 * @param err     receives the reason on failure
 * @return 0 on success, -1 when the block is not one buddy_alloc() could
 *         have returned (size not a power of two, misaligned, outside the
 *         pool) or overlaps free slots (a double free): nothing changes
 */
int buddy_release(BuddyArena *a, int offset, int slots, Err *err);

/**
 * The largest block buddy_alloc() could return now.
 * @param a  the allocator
 * @return slots of the largest free block (0 when none)
 */
int buddy_largest_free(const BuddyArena *a);

/**
 * The largest block the pool can ever hold: its largest top-level block.
 * @param a  the allocator
 * @return slots
 */
int buddy_largest_top(const BuddyArena *a);

/**
 * The largest top-level block of a pool of @p n_slots slots (what
 * buddy_largest_top() returns once it is set up): the largest power of two
 * <= @p n_slots.
 * @param n_slots  slots, >= 1
 * @return slots
 */
int buddy_largest_top_for(int n_slots);

#endif
