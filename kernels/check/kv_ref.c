#include "kv_ref.h"

#include <string.h>

#include "ops.h"

void kv_write_reference(void *k_layer, void *v_layer, Dtype t, const float *k, const float *v,
                        const long long *slots, int n, int kv_dim)
{
    size_t row_bytes = (size_t)kv_dim * dtype_bytes(t);
    for (int i = 0; i < n; i++) {
        if (slots[i] < 0)
            continue;
        size_t at = (size_t)slots[i] * row_bytes;
        dtype_from_f32((char *)k_layer + at, k + (size_t)i * kv_dim, (size_t)kv_dim, t);
        dtype_from_f32((char *)v_layer + at, v + (size_t)i * kv_dim, (size_t)kv_dim, t);
    }
}

long long paged_row(const int *block_table, int block_size, int t)
{
    return (long long)block_table[t / block_size] * block_size + t % block_size;
}

void paged_attention_reference(float *out, const float *q, const float *keys, const float *values,
                               const int *block_table, int block_size, int n_pos, int stride, int head_dim,
                               float *scores)
{
    for (int t = 0; t < n_pos; t++)
        scores[t] = attention_score(q, keys + paged_row(block_table, block_size, t) * stride, head_dim);
    softmax(scores, n_pos);
    memset(out, 0, (size_t)head_dim * sizeof(float));
    for (int t = 0; t < n_pos; t++)
        attention_accumulate(out, scores[t], values + paged_row(block_table, block_size, t) * stride, head_dim);
}

void kv_block_copy_reference(void *k_cache, void *v_cache, const int *pairs, int n_pairs, int n_layers,
                             long long layer_rows, int block_size, size_t row_bytes)
{
    size_t run = (size_t)block_size * row_bytes, layer_bytes = (size_t)layer_rows * row_bytes;
    for (int p = 0; p < n_pairs; p++)
        for (int l = 0; l < n_layers; l++) {
            char *k = (char *)k_cache + l * layer_bytes, *v = (char *)v_cache + l * layer_bytes;
            memmove(k + (size_t)pairs[2 * p + 1] * run, k + (size_t)pairs[2 * p] * run, run);
            memmove(v + (size_t)pairs[2 * p + 1] * run, v + (size_t)pairs[2 * p] * run, run);
        }
}
