/**
 * @file model.h
 * @brief Llama checkpoints: the configuration, the weights, and loading them.
 *
 * Two on-disk formats from llama2.c are understood:
 *
 * - **legacy** (what `stories260K.bin` uses): seven little-endian int32
 *   header values, then fp32 tensors in the order of ::ModelWeights, then the
 *   legacy RoPE tables, then the classifier if it is not shared. A negative
 *   vocab_size in the header means "unshared classifier present".
 * - **ak42 version 1**: a 256-byte header (magic `ak42`, version, the same
 *   seven values, a shared-classifier flag), then fp32 tensors grouped as
 *   norms first, then embeddings, then the matrices.
 *
 * The file is memory-mapped, never copied: the weights are read-only views
 * into the mapping, and the ledger charges the mapped bytes to weights.
 */
#ifndef KVLAB_MODEL_H
#define KVLAB_MODEL_H

#include <stddef.h>

#include "err.h"

/** The seven numbers of a checkpoint header. */
typedef struct {
    int dim;        /**< width of the residual stream */
    int hidden_dim; /**< width of the SwiGLU feed-forward layer */
    int n_layers;   /**< transformer blocks */
    int n_heads;    /**< query heads */
    int n_kv_heads; /**< key/value heads; fewer than n_heads means GQA */
    int vocab_size; /**< tokens in the vocabulary (always positive here) */
    int seq_len;    /**< longest sequence the model was trained for */
} ModelConfig;

/**
 * Width of one attention head.
 * @param c  model shape
 * @return dim / n_heads
 */
static inline int model_head_dim(const ModelConfig *c) { return c->dim / c->n_heads; }
/**
 * Width of one token's K (or V) row.
 * @param c  model shape
 * @return n_kv_heads * head_dim
 */
static inline int model_kv_dim(const ModelConfig *c) { return c->n_kv_heads * model_head_dim(c); }
/**
 * Query heads that share one KV head (1 without GQA).
 * @param c  model shape
 * @return n_heads / n_kv_heads
 */
static inline int model_kv_mul(const ModelConfig *c) { return c->n_heads / c->n_kv_heads; }

/**
 * Most tokens a sequence can hold, prompt included: seq_len + 1. Positions
 * 0..seq_len-1 are fed through the model; the token sampled at the last one
 * ends the sequence without ever being fed (llama2.c's `run` does the same,
 * so a run to the end of the context prints the same bytes).
 * @param c  model shape
 * @return seq_len + 1
 */
static inline int model_max_tokens(const ModelConfig *c) { return c->seq_len + 1; }

/**
 * Bytes of K and V one token occupies in a cache:
 * 2 (K and V) x n_layers x n_kv_heads x head_dim x bytes per element.
 * @param c          model shape
 * @param elem_bytes bytes per stored element (4 for fp32, 2 for fp16)
 * @return bytes per token
 */
size_t model_kv_bytes_per_token(const ModelConfig *c, size_t elem_bytes);

/** Read-only views of every tensor; shapes are [rows][cols], row-major. */
typedef struct {
    const float *token_embedding; /**< [vocab_size][dim] */
    const float *rms_att;         /**< [n_layers][dim] */
    const float *wq;              /**< [n_layers][dim][dim] (out x in) */
    const float *wk;              /**< [n_layers][kv_dim][dim] */
    const float *wv;              /**< [n_layers][kv_dim][dim] */
    const float *wo;              /**< [n_layers][dim][dim] */
    const float *rms_ffn;         /**< [n_layers][dim] */
    const float *w1;              /**< [n_layers][hidden_dim][dim] */
    const float *w2;              /**< [n_layers][dim][hidden_dim] */
    const float *w3;              /**< [n_layers][hidden_dim][dim] */
    const float *rms_final;       /**< [dim] */
    const float *wcls;            /**< [vocab_size][dim]; may alias token_embedding */
} ModelWeights;

/** Checkpoint format of a loaded file. */
typedef enum { MODEL_FORMAT_LEGACY, MODEL_FORMAT_AK42_V1 } ModelFormat;

/** A loaded model: its shape, its weights, and the mapping behind them. */
typedef struct {
    ModelConfig cfg;       /**< the shape from the header */
    ModelWeights w;        /**< views of the tensors */
    ModelFormat format;    /**< which file format it was read from */
    int shared_classifier; /**< 1 when wcls is the embedding table */
    size_t weight_bytes;   /**< bytes of the tensors the forward pass reads */
    void *map;             /**< mmap of the file, or NULL for an in-memory image */
    size_t map_bytes;      /**< length of the mapping (the whole file) */
} Model;

/**
 * Checks a header for values the forward pass cannot run: non-positive or
 * absurd sizes, heads that do not divide dim, an odd head size (RoPE
 * rotates pairs), n_heads not a multiple of n_kv_heads.
 * @param c    the configuration (vocab_size already made positive)
 * @param err  receives the reason
 * @return 0 when usable, -1 otherwise
 */
int model_config_validate(const ModelConfig *c, Err *err);

/**
 * Reads and validates only the header of a checkpoint (for tools that need
 * the shape, not the weights).
 * @param path  checkpoint file
 * @param cfg   receives the configuration
 * @param err   receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int model_read_config(const char *path, ModelConfig *cfg, Err *err);

/**
 * Memory-maps a checkpoint file and checks that its size is exactly what
 * the header implies.
 * @param m     receives the model
 * @param path  checkpoint file (legacy or ak42 v1)
 * @param err   receives the reason on failure
 * @return 0 on success, -1 on failure (nothing to free then)
 */
int model_load(Model *m, const char *path, Err *err);

/**
 * Parses a checkpoint that is already in memory (a synthetic model). The
 * image must outlive the model; it is not copied and not charged to the
 * ledger (its creator charged it).
 * @param m      receives the model
 * @param image  the bytes of a checkpoint file, 4-byte aligned
 * @param bytes  size of the image
 * @param err    receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int model_open_image(Model *m, const void *image, size_t bytes, Err *err);

/**
 * Unmaps the file (if any) and clears the model.
 * @param m  a model from model_load() or model_open_image(), or a zeroed one
 */
void model_free(Model *m);

#endif
