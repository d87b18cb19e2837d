/**
 * @file kv_ref.h
 * @brief CPU references for the K/V kernels that have no CPU counterpart in
 *        ops.h: writing K/V into cache slots, attention through a block
 *        table, and copying blocks.
 *
 * They are written for clarity, not speed: each one is what the matching
 * kernel in kernels/ must reproduce, and what `build/kernel-check` and the
 * GPU tests compare it with. A cache layer here has the device's layout,
 * `[rows][kv_dim]`, one row per token slot.
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

/**
 * Row of the cache that holds position @p t of a sequence stored in blocks.
 * @param block_table  the sequence's block ids
 * @param block_size   tokens per block
 * @param t            position
 * @return block_table[t / block_size] * block_size + t % block_size
 */
long long paged_row(const int *block_table, int block_size, int t);

/**
 * Causal attention of one query head over positions 0..n_pos-1 of a
 * sequence whose K/V rows are found through a block table: the same
 * arithmetic as attention_reference(), reading row paged_row(t) for
 * position t.
 * @param out          [head_dim]
 * @param q            [head_dim]
 * @param keys         [rows][stride] the layer's keys, offset to this K/V head's columns
 * @param values       [rows][stride] the same for values
 * @param block_table  the sequence's block ids
 * @param block_size   tokens per block
 * @param n_pos        positions attended (the query's position + 1)
 * @param stride       floats between consecutive rows (kv_dim)
 * @param head_dim     width
 * @param scores       [n_pos] scratch
 */
void paged_attention_reference(float *out, const float *q, const float *keys, const float *values,
                               const int *block_table, int block_size, int n_pos, int stride, int head_dim,
                               float *scores);

/**
 * Copies whole blocks in every layer, for K and V: for each pair
 * (src, dst), rows [src*bs, src*bs + bs) of a layer go to [dst*bs, ...).
 * @param k_cache     [n_layers][layer_rows][row_bytes] bytes
 * @param v_cache     same
 * @param pairs       [n_pairs][2] (src, dst) block ids
 * @param n_pairs     blocks to copy
 * @param n_layers    layers
 * @param layer_rows  rows per layer
 * @param block_size  rows per block
 * @param row_bytes   bytes per row
 */
void kv_block_copy_reference(void *k_cache, void *v_cache, const int *pairs, int n_pairs, int n_layers,
                             long long layer_rows, int block_size, size_t row_bytes);

#endif
