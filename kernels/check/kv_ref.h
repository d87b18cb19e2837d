/**
 * @file kv_ref.h
 * @brief The CPU reference of the K/V write kernel, which has no CPU
 *        counterpart in ops.h: writing the K/V of a batch into cache slots.
 *
 * Written for clarity, not speed: it is what kernels/kv_write.cu must
 * reproduce, and what `build/kernel-check` and the GPU tests compare it
 * with. A cache layer here is `[rows][kv_dim]`, one row per token slot.
 * The two other K/V kernels are checked against chapter 4's own CPU code
 * on a chapter 4 block pool, whose layout the device pool shares:
 * PagedAttention against paged_attention() (paged.h, the lab's answer),
 * block copy against block_pool_copy() (block_pool.h).
 */
#ifndef KVLAB_KV_REF_H
#define KVLAB_KV_REF_H

#include <stddef.h>

#include "dtype.h"

/**
 * Stores the K and V of n tokens in their slots, converted to @p t:
 * row slots[i] of each layer gets token i. Negative slots are skipped.
 * @param k_layer  [rows][kv_dim] of type t
 * @param v_layer  [rows][kv_dim] of type t
 * @param t        element type of the cache
 * @param k        [n][kv_dim] keys
 * @param v        [n][kv_dim] values
 * @param slots    [n] destination rows
 * @param n        tokens
 * @param kv_dim   row width
 */
void kv_write_reference(void *k_layer, void *v_layer, Dtype t, const float *k, const float *v,
                        const long long *slots, int n, int kv_dim);

#endif
