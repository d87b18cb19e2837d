/**
 * @file parking.h
 * @brief Chapter 5: parking, the pool's blocks that no table holds but the
 *        prefix cache keeps for the K/V they still hold.
 *
 * Chapter 4's pool is a free stack and reference counts: a block is held
 * or free. A cache above it needs a third state. When the last holder of a
 * block the cache has registered lets go, the block is **parked**: it has
 * no holder and counts as free (block_pool_available() counts
 * BlockPool.n_parked), but it stays off the free stack with its K/V, so
 * that a later request whose leading tokens match can take it back as it
 * is. When the scheduler is short of blocks, the cache evicts one: it goes
 * back on the free stack and what it held is forgotten. These three keep
 * the pool's books whole: every block is held, parked, or on the free
 * stack. Chapter 4 itself never parks a block.
 */
#ifndef KVLAB_CH05_PARKING_H
#define KVLAB_CH05_PARKING_H

#include "block_pool.h"

/**
 * The last holder of @p block lets go, but the block stays off the free
 * stack with its K/V: a cache above the pool keeps it (reference count
 * 1 -> 0, n_parked + 1).
 * @param p      the pool
 * @param block  a block with exactly one holder
 */
void block_pool_park(BlockPool *p, int block);

/**
 * A parked block is handed out again as it is, K/V included: it gets one
 * holder (n_parked - 1).
 * @param p      the pool
 * @param block  a parked block
 */
void block_pool_hold_parked(BlockPool *p, int block);

/**
 * A parked block goes back on the free stack: what it held is forgotten
 * (n_parked - 1, n_free + 1).
 * @param p      the pool
 * @param block  a parked block
 */
void block_pool_free_parked(BlockPool *p, int block);

#endif
