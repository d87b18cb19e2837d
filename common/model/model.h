/**
 * @file model.h
 * @brief Llama checkpoints: the configuration, the weights, and loading them.
 *
 * Three on-disk formats are understood. A GGUF file (llama.cpp's format,
 * what SmolLM2-135M-Instruct ships in; recognised by its magic "GGUF") is
 * read with gguf.h: the shape comes from its `llama.*` metadata keys and
 * each tensor keeps the type it is stored in (see quant.h), so a Q4_1
 * model takes 5 bits per weight in memory, not 32. Two formats from
 * llama2.c, all f32:
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
#include "gguf.h"
#include "quant.h"

/** RoPE base of the llama2.c models (their files do not store it). */
#define MODEL_DEFAULT_ROPE_THETA 10000.0f
/** RMSNorm epsilon of the llama2.c models. */
#define MODEL_DEFAULT_RMS_EPS 1e-5f
/** Most transformer blocks a model may have (Llama 3.1 405B has 126). */
#define MODEL_MAX_LAYERS 256

/** The seven numbers of a checkpoint header: the shape of a model. */
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

/** The tensors of one transformer block, as stored. */
typedef struct {
    const float *rms_att; /**< [dim] */
    WeightMatrix wq;      /**< [dim][dim] (out x in) */
    WeightMatrix wk;      /**< [kv_dim][dim] */
    WeightMatrix wv;      /**< [kv_dim][dim] */
    WeightMatrix wo;      /**< [dim][dim] */
    const float *rms_ffn; /**< [dim] */
    WeightMatrix w1;      /**< [hidden_dim][dim] (gate) */
    WeightMatrix w2;      /**< [dim][hidden_dim] (down) */
    WeightMatrix w3;      /**< [hidden_dim][dim] (up) */
} LayerWeights;

/** Read-only views of every tensor; matrices are [rows][cols], row-major. */
typedef struct {
    WeightMatrix token_embedding;          /**< [vocab_size][dim] */
    LayerWeights layers[MODEL_MAX_LAYERS]; /**< [n_layers] used */
    const float *rms_final;                /**< [dim] */
    WeightMatrix wcls;                     /**< [vocab_size][dim]; may be token_embedding */
} ModelWeights;

/** Checkpoint format of a loaded file. */
typedef enum { MODEL_FORMAT_LEGACY, MODEL_FORMAT_AK42_V1, MODEL_FORMAT_GGUF } ModelFormat;

/** A loaded model: its shape, its weights, and the mapping behind them. */
typedef struct {
    ModelConfig cfg;         /**< the shape */
    float rope_theta;        /**< RoPE base: llama.rope.freq_base, or 10000 for llama2.c files */
    float rms_eps;           /**< RMSNorm epsilon: llama.attention.layer_norm_rms_epsilon, or 1e-5 */
    ModelWeights w;          /**< views of the tensors */
    ModelFormat format;      /**< which file format it was read from */
    int shared_classifier;   /**< 1 when wcls is the embedding table */
    size_t weight_bytes;     /**< bytes of the tensors the forward pass reads, as stored now */
    size_t weight_f32_bytes; /**< the same tensors in f32 (= weight_bytes for an f32 model) */
    unsigned stored_types;   /**< bit (1 << t) set for each WeightType the file stores matrices in */
    void *map;               /**< mmap of a llama2.c file, or NULL */
    size_t map_bytes;        /**< length of that mapping */
    GgufFile gguf;           /**< a GGUF file, open (its metadata holds the tokenizer); zeroed otherwise */
    float *dequantized;      /**< model_dequantize(): the f32 copy of the matrices, or NULL */
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
 * Memory-maps a checkpoint file and checks it: for llama2.c files, that
 * its size is exactly what the header implies; for GGUF, the reader's
 * checks (gguf_open()), then the architecture (llama), every required key,
 * and every tensor's presence, shape and type.
 * @param m     receives the model
 * @param path  checkpoint file (GGUF, legacy or ak42 v1)
 * @param err   receives the reason on failure
 * @return 0 on success, -1 on failure (nothing to free then)
 */
int model_load(Model *m, const char *path, Err *err);

/**
 * Parses a checkpoint that is already in memory (a synthetic model), in
 * any of the three formats. The image must outlive the model; it is not
 * copied and not charged to the ledger (its creator charged it).
 * @param m      receives the model
 * @param image  the bytes of a checkpoint file, 4-byte aligned
 * @param bytes  size of the image
 * @param err    receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int model_open_image(Model *m, const void *image, size_t bytes, Err *err);

/**
 * Turns every matrix into f32 (what `--weight-dtype f32` asks for): one
 * buffer, charged to weights, holds the exact dequantization (quant.h) of
 * every matrix not already f32, and the views point into it. The forward
 * pass then runs the f32 matmul(). Does nothing for an f32 model.
 * @param m    a loaded model
 * @param err  receives the reason on failure (out of memory)
 * @return 0 on success, -1 on failure (the model is unchanged then)
 */
int model_dequantize(Model *m, Err *err);

/**
 * The storage types of a model's matrices, for people: "f32", or
 * "Q4_1 + Q8_0 (dequantized to f32)" after model_dequantize().
 * @param m    a loaded model
 * @param buf  output buffer
 * @param n    its size
 * @return buf
 */
const char *model_weight_types(const Model *m, char *buf, size_t n);

/**
 * Unmaps the file (if any) and clears the model.
 * @param m  a model from model_load() or model_open_image(), or a zeroed one
 */
void model_free(Model *m);

#endif
