/**
 * @file kvmath.h
 * @brief The memory arithmetic of a KV cache: per token, per request, per GPU.
 *
 * Every token a model has seen leaves one key and one value vector in every
 * layer, for every KV head:
 *
 *     bytes per token = 2 (K and V) x n_layers x n_kv_heads x head_dim x bytes per element
 *
 * A request of t tokens holds t times that, a batch the sum over its
 * requests. What a GPU can hold is what is left after the weights, the
 * activations and a reserve, divided by the bytes of one request. These
 * few multiplications decide how many requests a server can run at once,
 * which is why the course does them exactly, in bytes, and says which unit
 * ("GB" = 10^9 bytes, "GiB" = 2^30 bytes) every rounded figure is in.
 *
 * build/kvcalc is the command-line face of this module; chapter 2's book
 * page checks the source material's figures with it.
 */
#ifndef KVLAB_KVMATH_H
#define KVLAB_KVMATH_H

#include <stdint.h>

#include "err.h"
#include "kv_dtype.h"
#include "model.h"

/** One gigabyte, as disk and GPU vendors count: 10^9 bytes. */
#define KVMATH_GB 1000000000ULL
/** One gibibyte, as memory is addressed: 2^30 bytes. */
#define KVMATH_GIB 1073741824ULL

/** The part of a model's shape that decides its KV cache. */
typedef struct {
    const char *name; /**< e.g. "llama-7b", or the checkpoint path */
    int n_layers;     /**< transformer blocks */
    int n_heads;      /**< query heads (for information: they do not cost cache) */
    int n_kv_heads;   /**< key/value heads; fewer than n_heads means GQA */
    int head_dim;     /**< width of one head */
    int seq_len;      /**< the model's context length, used as the default request length */
} KvShape;

/**
 * Bytes of one element of a dtype, scales not counted.
 * @param dtype  the element type
 * @return 4 (fp32), 2 (fp16, bf16) or 1 (int8, fp8)
 */
unsigned kvmath_dtype_bytes(KvDtype dtype);

/**
 * Name of a dtype as kvcalc accepts it ("fp32", "fp16", "bf16", "int8",
 * "fp8-e4m3", "fp8-e5m2").
 * @param dtype  the element type
 * @return a static string
 */
const char *kvmath_dtype_name(KvDtype dtype);

/**
 * Parses a dtype name (also "f32", "f16", as kvlab's --kv-dtype spells
 * them; "fp8" alone is refused: say which of the two).
 * @param name   the text
 * @param dtype  receives the type
 * @param err    receives the reason on failure
 * @return 0 on success, -1 for an unknown name
 */
int kvmath_dtype_parse(const char *name, KvDtype *dtype, Err *err);

/**
 * Looks up a named model shape: "llama-7b" (32 layers, 32 heads, head_dim
 * 128), "llama-13b" (40, 40, 128), "opt-13b" (40, 40, 128, no GQA),
 * "llama-2-70b" (80 layers, 64 query heads, 8 KV heads, head_dim 128),
 * "smollm2-135m" (30 layers, 9 query heads, 3 KV heads, head_dim 64,
 * context 8192: SmolLM2-135M-Instruct's GGUF file). Case does not matter.
 * @param name   preset name
 * @param shape  receives the shape
 * @return 0 if known, -1 otherwise
 */
int kvmath_preset(const char *name, KvShape *shape);

/**
 * Comma-separated preset names, for help texts and error messages.
 * @return a static string
 */
const char *kvmath_preset_names(void);

/**
 * The KV shape of a checkpoint's configuration.
 * @param cfg   the seven header values
 * @param name  what to call it (e.g. the file name; not copied)
 * @return the shape
 */
KvShape kvmath_shape_from_config(const ModelConfig *cfg, const char *name);

/**
 * 2 x n_layers x n_kv_heads x (head_dim x element bytes + scale bytes):
 * the scale is int8's 4 bytes per head of each row, 0 for the others.
 * @param s      the shape
 * @param dtype  element type
 * @return bytes of K and V for one token
 */
uint64_t kvmath_bytes_per_token(const KvShape *s, KvDtype dtype);

/**
 * KV bytes of one request of @p tokens tokens.
 * @param s       the shape
 * @param dtype   element type
 * @param tokens  sequence length (prompt and generated)
 * @return bytes
 */
uint64_t kvmath_bytes_per_request(const KvShape *s, KvDtype dtype, uint64_t tokens);

/** A GPU's memory and what is spent before any KV cache (all in bytes). */
typedef struct {
    uint64_t gpu_bytes;         /**< memory of the device */
    uint64_t weights_bytes;     /**< model weights */
    uint64_t activations_bytes; /**< activations kept free for the forward pass */
    uint64_t reserve_bytes;     /**< kept back for the system, fragmentation, ... */
} KvBudget;

/**
 * Bytes left for KV after the weights, activations and reserve.
 * @param b     the budget
 * @param left  receives the bytes left
 * @param err   receives the reason when they exceed the GPU
 * @return 0 on success, -1 when nothing is left
 */
int kvmath_kv_bytes_left(const KvBudget *b, uint64_t *left, Err *err);

/**
 * How many requests of @p request_bytes each fit in @p left bytes (rounded
 * down: a request either has its memory or does not run).
 * @param left           bytes available for KV
 * @param request_bytes  bytes of one request, more than 0
 * @return whole requests
 */
uint64_t kvmath_requests_that_fit(uint64_t left, uint64_t request_bytes);

/**
 * Fraction of a reservation of @p reserved tokens that holds no token when
 * a request uses @p used of them: (reserved - used) / reserved.
 * @param used      tokens actually held
 * @param reserved  tokens reserved, more than 0
 * @return a number in [0, 1] (0 when used >= reserved)
 */
double kvmath_unused_fraction(uint64_t used, uint64_t reserved);

#endif
