/**
 * @file ops.h
 * @brief The CPU math of a Llama block, and the reference for every kernel.
 *
 * Everything here is plain C with a fixed order of summation, so results
 * are bitwise reproducible: they do not depend on the number of threads, on
 * how many tokens share a matmul, or on the vector width the compiler picks
 * (the build uses -ffp-contract=off, so no fused multiply-adds sneak in).
 * That determinism is what lets every chapter produce the same tokens: the
 * chapters change where K and V live, and nothing here can tell.
 */
#ifndef KVLAB_OPS_H
#define KVLAB_OPS_H

#include <math.h>

#include "quant.h"

/**
 * Dot product in kvlab's fixed order, the order of every matmul too: 32
 * partial sums, partial k collecting the products of elements k, k + 32,
 * k + 64, ... in turn over the first n - n%32 elements; then partial k + 16
 * is added to partial k, then k + 8 to k, the eight are combined pairwise
 * ((0+4) + (1+5)) + ((2+6) + (3+7)), and the tail is added in order.
 * Thirty-two independent sums fill two AVX-512 registers (two chains of
 * additions, so one row streams at full speed) without the compiler
 * reassociating anything.
 * @param a  [n]
 * @param b  [n]
 * @param n  length
 * @return the dot product
 */
float dot(const float *a, const float *b, int n);

/**
 * Matrix product over a batch of tokens: out[t][o] = dot(w[o], x[t]).
 * Weights are read once per call, whatever the number of tokens: rows of W
 * are taken four at a time and applied to every token, three tokens at a
 * time with all their partial sums in registers, before moving on. Each
 * output equals dot() of its row and token exactly.
 * @param out       [n_tokens][out_dim]
 * @param x         [n_tokens][in_dim]
 * @param w         [out_dim][in_dim]
 * @param n_tokens  tokens in the batch
 * @param in_dim    input width
 * @param out_dim   output width
 */
void matmul(float *out, const float *x, const float *w, int n_tokens, int in_dim, int out_dim);

/**
 * Matrix product with weights as stored: out[t][o] = W[o] . x[t].
 *
 * f32 weights go through matmul() (so a llama2.c checkpoint gives the same
 * bits as ever). Every other type is turned into f32 one block of 32
 * weights at a time, in registers, exactly as weight_dequantize_row()
 * does, and multiplied with f32 activations (never quantized) in
 * dot()'s order: 32 partial sums, partial k collecting the products of
 * weights k, k + 32, k + 64, ... in turn; then partial k + 16 is added to
 * partial k, then k + 8 to k, then the eight are combined as in dot(), and
 * the weights past the last whole block (f16/bf16 rows only) are added in
 * order. A row is read once, start to end, for up to eight tokens at a
 * time; the threads split the rows. So every output is the same bits
 * whatever the number of tokens, their position in the batch and the
 * number of threads, and equals the dot product in that order of the
 * exactly dequantized row.
 * @param out       [n_tokens][w->rows]
 * @param x         [n_tokens][w->cols]
 * @param w         the weights
 * @param n_tokens  tokens in the batch
 */
void matmul_weights(float *out, const float *x, const WeightMatrix *w, int n_tokens);

/**
 * matmul_weights() of several matrices on the same input, out_i = W_i x
 * (Q, K and V of a layer; its gate and up projections), with one fork and
 * one join of the threads for all of them instead of one per matrix. Every
 * output is the same bits as matmul_weights() gives it alone.
 * @param outs      [n_mats] outputs, out_i [n_tokens][w[i]->rows]
 * @param x         [n_tokens][cols] (every matrix has cols columns)
 * @param w         [n_mats] the weights
 * @param n_mats    how many matrices
 * @param n_tokens  tokens in the batch
 */
void matmul_weights_group(float *const *outs, const float *x, const WeightMatrix *const *w, int n_mats,
                          int n_tokens);

/**
 * RMSNorm with the model's epsilon: out = weight * x / sqrt(mean(x^2) + eps).
 * out may alias x.
 * @param out     [n]
 * @param x       [n]
 * @param weight  [n]
 * @param n       width
 * @param eps     added to the mean square (1e-5 for the llama2.c models)
 */
void rmsnorm_eps(float *out, const float *x, const float *weight, int n, float eps);

/**
 * RMSNorm: out = weight * x / sqrt(mean(x^2) + 1e-5). out may alias x.
 * @param out     [n]
 * @param x       [n]
 * @param weight  [n]
 * @param n       width
 */
void rmsnorm(float *out, const float *x, const float *weight, int n);

/**
 * Softmax in place, stabilised by subtracting the maximum.
 * @param x  [n] scores in, probabilities out
 * @param n  length, at least 1
 */
void softmax(float *x, int n);

/**
 * Rotary position embedding tables with base @p theta: for position p and
 * pair i of a head, angle = p * (1 / theta^(2i/head_dim)), in float.
 * @param cos_out   [seq_len][head_dim/2]
 * @param sin_out   [seq_len][head_dim/2]
 * @param seq_len   positions
 * @param head_dim  head width (even)
 * @param theta     the base (llama.rope.freq_base; 10000 for llama2.c)
 */
void rope_tables_theta(float *cos_out, float *sin_out, int seq_len, int head_dim, float theta);

/**
 * Rotary position embedding tables: for position p and pair i of a head,
 * angle = p / 10000^(2i/head_dim), computed in float exactly as llama2.c.
 * @param cos_out   [seq_len][head_dim/2]
 * @param sin_out   [seq_len][head_dim/2]
 * @param seq_len   positions
 * @param head_dim  head width (even)
 */
void rope_tables(float *cos_out, float *sin_out, int seq_len, int head_dim);

/**
 * Rotates each consecutive pair of every head of @p vec by its position's
 * angles (RoPE).
 * @param vec       [width] one token's q or k, heads back to back
 * @param width     n_heads * head_dim (or n_kv_heads * head_dim)
 * @param head_dim  head width
 * @param cos_row   [head_dim/2] the position's row of the cos table
 * @param sin_row   [head_dim/2] the position's row of the sin table
 */
void rope_rotate(float *vec, int width, int head_dim, const float *cos_row, const float *sin_row);

/**
 * SwiGLU gate: gate[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + e^-x).
 * @param gate  [n] w1 x in, gated activation out
 * @param up    [n] w3 x
 * @param n     hidden width
 */
void swiglu(float *gate, const float *up, int n);

/**
 * out += other, element by element (residual connection).
 * @param out    [n]
 * @param other  [n]
 * @param n      width
 */
void add_inplace(float *out, const float *other, int n);

/* The two attention helpers below are called once per cached position from
 * every chapter's attend; they are defined here, inline, so that the call
 * does not cost more than the handful of multiply-adds it performs. */

/**
 * Scaled attention score of one query head against one key head:
 * dot(q, k, head_dim) / sqrt(head_dim), so in dot()'s order.
 * @param q         [head_dim]
 * @param k         [head_dim]
 * @param head_dim  width
 * @return the score
 */
static inline float attention_score(const float *q, const float *k, int head_dim)
{
    return dot(q, k, head_dim) / sqrtf((float)head_dim);
}

/**
 * out += a * v (one term of the attention-weighted sum of values).
 * @param out       [head_dim]
 * @param a         attention weight
 * @param v         [head_dim]
 * @param head_dim  width
 */
static inline void attention_accumulate(float *out, float a, const float *v, int head_dim)
{
    for (int i = 0; i < head_dim; i++)
        out[i] += a * v[i];
}

/**
 * Plain causal attention of one query head over @p n_pos contiguous keys and
 * values: the CPU reference that every attention variant (cached, batched,
 * paged, CUDA) must reproduce.
 * @param out       [head_dim]
 * @param q         [head_dim] the query head
 * @param keys      [n_pos][stride] key rows; the head's slice starts at offset 0
 * @param values    [n_pos][stride] value rows, same layout
 * @param n_pos     positions attended (the query's position + 1)
 * @param stride    floats between consecutive positions
 * @param head_dim  width
 * @param scores    [n_pos] scratch
 */
void attention_reference(float *out, const float *q, const float *keys, const float *values, int n_pos, int stride,
                         int head_dim, float *scores);

/**
 * Sets the number of threads the parallel loops use (OpenMP builds only).
 * Results never depend on it.
 * @param n  threads; 0 keeps the default (OMP_NUM_THREADS or all cores)
 */
void ops_set_threads(int n);

/**
 * Threads the parallel loops will use.
 * @return 1 in builds without OpenMP
 */
int ops_threads(void);

#endif
