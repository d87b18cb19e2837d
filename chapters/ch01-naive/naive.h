/**
 * @file naive.h
 * @brief Chapter 1: decoding that keeps nothing and recomputes everything.
 *
 * Every step runs the whole sequence, prompt and generated tokens, through
 * the model again. The keys and values of all positions are computed anew,
 * used by the attention of that one step, and thrown away. The only K/V
 * memory is a transient buffer for one layer of one step (charged to
 * activations, because nothing survives the step).
 *
 * Work per step grows with t (t positions through every matmul, t^2 / 2
 * attention scores), so the total for T tokens grows as T^2: the waste that
 * chapter 2's cache removes.
 *
 * ## Where each idea is
 *
 * | idea | file | function |
 * |---|---|---|
 * | the program: open, generate, report | chapters/ch01-naive/main.c | main() |
 * | the loop: plan a step, forward, sample, print | common/serving/generate.c | generate() |
 * | how many positions a step may skip: none (lab) | solutions/ch01/naive_prepare.c | naive_prepare() |
 * | keep a token's K/V for the rest of the layer (lab) | solutions/ch01/naive_store.c | naive_store() |
 * | causal attention over the positions of this step (lab) | solutions/ch01/naive_attend.c | naive_attend() |
 * | the transient buffers, and the strategy handed to the loop | chapters/ch01-naive/naive.c | naive_kv_init(), naive_strategy() |
 * | the same on the device | chapters/ch01-naive/device.c | naive_device_open() |
 */
#ifndef KVLAB_CH01_NAIVE_H
#define KVLAB_CH01_NAIVE_H

#include "cli.h"
#include "device_kv.h"
#include "err.h"
#include "forward.h"
#include "generate.h"
#include "model.h"

/** The transient K/V of one layer of one step. */
typedef struct {
    ModelConfig cfg; /**< shape of the model (sizes of heads and rows) */
    int capacity;  /**< positions the buffers hold (the model's seq_len) */
    float *keys;   /**< [capacity][kv_dim] keys of the layer being computed */
    float *values; /**< [capacity][kv_dim] values of the layer being computed */
} NaiveKv;

/**
 * Allocates the transient buffers (charged to activations: they live for
 * one layer of one step).
 * @param kv   receives the buffers
 * @param cfg  model shape
 * @param err  receives the reason on failure
 * @return 0 on success, -1 when out of memory
 */
int naive_kv_init(NaiveKv *kv, const ModelConfig *cfg, Err *err);

/**
 * Frees the buffers.
 * @param kv  an initialised or zeroed store
 */
void naive_kv_free(NaiveKv *kv);

/**
 * Chapter 1's answer to "how many positions already have K/V?": none,
 * ever. Every step starts from scratch.
 * @param ctx       a NaiveKv
 * @param n_tokens  tokens in the sequence
 * @param cached    receives the number of positions that need not be run
 * @param err       unused
 * @return 0
 */
int naive_prepare(void *ctx, int n_tokens, int *cached, Err *err);

/**
 * Keeps one token's key and value for the rest of this layer: row e->pos of
 * the transient buffers.
 * @param ctx    a NaiveKv
 * @param layer  layer index (the buffers are reused by every layer)
 * @param e      the token
 * @param k      [kv_dim] its key
 * @param v      [kv_dim] its value
 */
void naive_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v);

/**
 * Causal attention of one query head over positions 0..e->pos:
 * scores = q . k_t / sqrt(head_dim), softmax, then the weighted sum of the
 * values v_t. Query head h reads KV head h / kv_mul (grouped-query
 * attention). Positions after e->pos are never read.
 * @param ctx     a NaiveKv
 * @param layer   layer index
 * @param e       the querying token
 * @param head    query head
 * @param q       [head_dim] query
 * @param out     [head_dim] receives the output
 * @param scores  [seq_len] scratch
 */
void naive_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out, float *scores);

/**
 * Builds the strategy the generation loop uses.
 * @param kv  the store
 * @return the strategy (seam + prepare)
 */
SingleStreamKv naive_strategy(NaiveKv *kv);

/**
 * `--device cuda`: the same transient K/V on the device
 * (device_kv_open_recompute(), a ::DeviceKvOpenFn); a step feeds up to
 * seq_len tokens.
 * @param kv        receives the store
 * @param dev       the device
 * @param cfg       model shape
 * @param kv_type   element type of K/V
 * @param opts      the options (unused)
 * @param n_prompt  prompt length (unused)
 * @param max_step  receives seq_len
 * @param err       receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int naive_device_open(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype kv_type,
                      const CliOptions *opts, int n_prompt, int *max_step, Err *err);

/**
 * This chapter's device store (chapters/ch01-naive/device.c): a
 * transient [seq_len][kv_dim] K and V, reused by every layer of every step
 * (charged to activations). prepare() always answers 0 cached positions.
 * @param kv          receives the store
 * @param dev         the device
 * @param cfg         model shape
 * @param t           element type of K/V
 * @param max_tokens  most entries of a step
 * @param err         receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int device_kv_open_recompute(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, int max_tokens,
                             Err *err);

#endif
