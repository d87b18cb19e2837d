/**
 * @file kv_arena.h
 * @brief Chapter 3's allocator: one contiguous KV arena, first fit, and how
 *        much to reserve per request.
 *
 * Before paging, a server keeps each request's K/V in one contiguous region,
 * reserved when the request is admitted. All regions come from one arena,
 * the whole KV budget, and the arena hands them out **first fit**: the free
 * ranges ("holes") are kept in address order, and a request gets the start
 * of the first hole that is large enough. Freed regions merge with the holes
 * next to them, so two neighbouring holes never exist.
 *
 * Regions differ in size, so holes of every size appear. A request can then
 * be refused although the free bytes add up to more than it needs: none of
 * the holes is large enough on its own. That is **external fragmentation**,
 * and it is the one waste that paging (chapter 4) removes completely.
 *
 * How large a region is depends on the **reservation policy**, which has to
 * decide before the request's length is known:
 *
 * | policy    | tokens reserved at admission                              |
 * |-----------|-----------------------------------------------------------|
 * | `max`     | the model's seq_len (FasterTransformer, Orca-Max)          |
 * | `request` | prompt + max_new_tokens, capped at seq_len (Orca-Oracle-like: what the client asked for) |
 * | `pow2`    | that, rounded up to a power of two, capped at seq_len (Orca-Pow2) |
 * | `grow`    | the prompt and one new token, rounded up to a power of two, at least ::RESERVE_GROW_MIN_TOKENS; doubled (moved to a larger hole, K/V copied) whenever it is full |
 *
 * This module knows bytes and tokens, never weights or K/V values: the
 * capacity simulator (kvsim) drives the same code at 7B/13B scale with no
 * model at all. Nothing here allocates after kv_arena_init().
 */
#ifndef KVLAB_CH03_KV_ARENA_H
#define KVLAB_CH03_KV_ARENA_H

#include <stddef.h>

#include "err.h"

/** A range of arena bytes: a request's region, or a hole. */
typedef struct {
    size_t offset; /**< first byte, from the start of the arena */
    size_t bytes;  /**< length */
} KvRange;

/**
 * The arena's books. Only the holes are listed: everything that is not a
 * hole belongs to some region, and its owner remembers where.
 */
typedef struct {
    size_t capacity;   /**< bytes in the arena (the KV budget) */
    size_t free_bytes; /**< sum of the holes */
    KvRange *holes;    /**< [max_holes] free ranges in address order, never touching each other */
    int n_holes;       /**< holes now */
    int max_holes;     /**< room in holes[]: live regions + 1 can never be exceeded */
} KvArena;

/**
 * Sets up an empty arena: one hole covering all of it. Only the hole list is
 * allocated (charged to kv_metadata); the K/V bytes themselves are the
 * caller's business (or nobody's, in accounting-only mode).
 * @param a            receives the arena
 * @param capacity     bytes it manages, > 0
 * @param max_regions  most regions that will be live at once (each live
 *                     region can split one hole into two)
 * @param err          receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kv_arena_init(KvArena *a, size_t capacity, int max_regions, Err *err);

/**
 * Frees the hole list.
 * @param a  an initialised or zeroed arena
 */
void kv_arena_free(KvArena *a);

/**
 * First fit: takes @p bytes from the start of the first hole (lowest
 * address) that holds them.
 * @param a       the arena
 * @param bytes   size of the region, > 0
 * @param offset  receives where the region starts
 * @return 0 on success, -1 when no single hole is large enough (nothing
 *         changes; the caller can ask kv_arena_largest_hole() why)
 */
int kv_arena_alloc(KvArena *a, size_t bytes, size_t *offset);

/**
 * Gives a region back. It becomes a hole, merged with the holes that touch
 * it on either side.
 * @param a       the arena
 * @param offset  where the region starts (as kv_arena_alloc() said)
 * @param bytes   its size
 * @param err     receives the reason on failure
 * @return 0 on success, -1 if the range is outside the arena or overlaps a
 *         hole (a double free or a wrong size): the books are unchanged
 */
int kv_arena_release(KvArena *a, size_t offset, size_t bytes, Err *err);

/**
 * The largest single allocation that would succeed now.
 * @param a  the arena
 * @return bytes of the largest hole (0 when full)
 */
size_t kv_arena_largest_hole(const KvArena *a);

/**
 * Free bytes that an allocation of @p bytes cannot use: the sum of the holes
 * smaller than it. When an allocation is refused although free_bytes >=
 * @p bytes, this is the external fragmentation that refused it.
 * @param a      the arena
 * @param bytes  the size that was wanted
 * @return bytes in holes smaller than @p bytes
 */
size_t kv_arena_free_in_holes_below(const KvArena *a, size_t bytes);

/**
 * Removes hole @p i from the list, keeping address order (for
 * kv_arena_alloc() and kv_arena_release()).
 * @param a  the arena
 * @param i  index of a hole
 */
void kv_arena_remove_hole(KvArena *a, int i);

/**
 * Inserts @p hole at index @p i, keeping address order (for
 * kv_arena_release()). The caller has checked that n_holes < max_holes.
 * @param a     the arena
 * @param i     where the hole goes, 0..n_holes
 * @param hole  the range
 */
void kv_arena_insert_hole(KvArena *a, int i, KvRange hole);

/**
 * Index of the first hole that starts at or after @p offset.
 * @param a       the arena
 * @param offset  a byte offset
 * @return 0..n_holes (n_holes when every hole starts before @p offset)
 */
int kv_arena_first_hole_after(const KvArena *a, size_t offset);

/** How much K/V memory a request reserves; see the table in kv_arena.h. */
typedef enum {
    RESERVE_MAX,     /**< the model's seq_len */
    RESERVE_REQUEST, /**< prompt + max_new_tokens (capped at seq_len) */
    RESERVE_POW2,    /**< that, rounded up to a power of two (capped at seq_len) */
    RESERVE_GROW     /**< small first, doubled by moving to a larger hole */
} ReservePolicy;

/** Smallest first region under `grow`, in tokens. */
#define RESERVE_GROW_MIN_TOKENS 16

/**
 * Reads a policy name as `--reserve` spells it.
 * @param name    "max", "request", "pow2" or "grow"
 * @param policy  receives the policy
 * @param err     receives the reason on failure
 * @return 0 on success, -1 for an unknown name
 */
int reserve_policy_parse(const char *name, ReservePolicy *policy, Err *err);

/**
 * The policy's name as `--reserve` spells it.
 * @param policy  a policy
 * @return a static string
 */
const char *reserve_policy_name(ReservePolicy policy);

/**
 * The smallest power of two that is >= @p n.
 * @param n  a positive count (at most 2^30)
 * @return 1, 2, 4, ...
 */
int reserve_round_up_pow2(int n);

/**
 * Tokens to reserve when a request is admitted (the chapter's lab).
 * @param policy      the policy
 * @param n_tokens    tokens the request has now: its prompt, plus what it
 *                    generated before it was requeued (grow only)
 * @param max_tokens  prompt + max_new_tokens, capped at seq_len + 1
 *                    (model_max_tokens()): the most tokens it may ever have;
 *                    the last of them is never fed, so no region needs more
 *                    than seq_len positions
 * @param seq_len     the model's longest sequence
 * @return positions the region holds, >= n_tokens, <= seq_len
 */
int reserve_initial_tokens(ReservePolicy policy, int n_tokens, int max_tokens, int seq_len);

/**
 * Under `grow`: the next size of a full region. Doubles @p current until it
 * holds @p needed positions, capped at seq_len.
 * @param current  positions the region holds now
 * @param needed   positions it must hold (> current)
 * @param seq_len  the model's longest sequence
 * @return the new size in positions
 */
int reserve_grown_tokens(int current, int needed, int seq_len);

/**
 * The largest region a request can ever hold under @p policy. A request
 * whose largest region does not fit the whole arena can never run to the end
 * and is rejected up front.
 * @param policy      the policy
 * @param max_tokens  prompt + max_new_tokens, capped at seq_len + 1
 * @param seq_len     the model's longest sequence
 * @return positions, at most seq_len
 */
int reserve_largest_tokens(ReservePolicy policy, int max_tokens, int seq_len);

#endif
