/**
 * @file kv_dtype.h
 * @brief Smaller K/V entries: the element types a CPU K/V cache may store
 *        (`--kv-dtype`), one stored row's layout, and attention that reads
 *        a stored row directly.
 *
 * Every K/V cache in the course stores, for each token and layer, one key
 * row and one value row of kv_dim = n_kv_heads x head_dim numbers. Until
 * now they were f32, 4 bytes each. Serving engines store them smaller:
 *
 * | --kv-dtype | element | beside each head of each row | bytes per head of 64 | what it keeps |
 * |---|---|---|---:|---|
 * | f32 | 4 B IEEE single | | 256 | everything (the default, today's bits) |
 * | f16 | 2 B IEEE half | | 128 | 11 significant bits, range 6e-8 to 65504 |
 * | bf16 | 2 B bfloat16 | | 128 | 8 significant bits, f32's range |
 * | int8 | 1 B integer -127..127 | one f32 scale | 68 | 255 levels spread over the head's own largest magnitude |
 * | fp8-e4m3 | 1 B OFP8 E4M3 | | 64 | 4 significant bits, range 2^-9 to 448, saturating |
 * | fp8-e5m2 | 1 B OFP8 E5M2 | | 64 | 3 significant bits, range 2^-16 to 57344, saturating |
 *
 * **int8** is symmetric (zero is code 0, no offset), with one scale per
 * (token, KV head): scale = max |x| / 127 over the head's head_dim values,
 * code = x / scale rounded to nearest (ties to even) and saturated to
 * -127..127, value = code x scale. Why that granularity: a row is written
 * once, when its token is computed, and never again, so a scale that
 * depends only on the row can be fixed at that moment and stored beside
 * it, like llama.cpp's Q8_0 keeps one scale per 32 values; one head is the
 * unit attention reads (a query head reads one KV head of each row), and
 * its values share one softmax or one weighted sum. A scale per channel,
 * across tokens, is the other well-known choice (KIVI: per-channel for
 * keys, whose outlier channels are large in every token, per-token for
 * values), but a channel's scale then depends on tokens not yet seen:
 * KIVI keeps the newest tokens in full precision and quantizes them a
 * group at a time. The scale costs 4 bytes per head_dim values: 6% at 64,
 * 3% at 128, 50% on stories260K's heads of 8.
 *
 * **fp8** has no scale here (vLLM's default, a scale of 1.0): K/V values
 * of the models in this course stay far inside E4M3's 448, and the
 * conversion saturates what does not (common/model/dtype.h).
 *
 * **f16, bf16** round to nearest even as the CUDA path's stores do
 * (`__float2half_rn`), so `--kv-dtype f16` means the same bytes on both;
 * a value past 65504 becomes an infinity there as it does on the device.
 *
 * ## A stored row
 *
 * A row is one token's K (or V) in one layer, every KV head of it, as the
 * caches lay it out:
 *
 *     f32, f16, bf16, fp8   [n_heads][head_dim] elements
 *     int8                  [n_heads][head_dim] codes, then [n_heads] f32 scales
 *
 * so that a row's scales travel with it: a cache (chapter 2) or a block
 * (chapter 4) is an array of whole rows, and copying a row copies its
 * scales.
 *
 * ## Reading a stored row
 *
 * kv_attention_score() and kv_attention_accumulate() take the stored row
 * itself. They turn the query head's head_dim values into f32 (exactly:
 * every element type converts to f32 without rounding; int8 is one
 * rounded multiplication, code x scale) into a buffer of one head on the
 * stack, and hand it to ops.h's attention_score() and
 * attention_accumulate(). So a stored row is read in place, one row at a
 * time inside the attention loop, never gathered into an f32 copy of the
 * cache, and the arithmetic is the f32 reference's, in its order: the
 * attention over stored rows is, bit for bit, attention_reference() over
 * the values the rows hold (tests/test_kv_dtype.c checks it for every
 * type).
 */
#ifndef KVLAB_KV_DTYPE_H
#define KVLAB_KV_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "err.h"
#include "model.h"

/** Element type of a K/V cache (`--kv-dtype`; kvcalc's and kvsim's `--dtype`). */
typedef enum {
    KV_DTYPE_FP32 = 0, /**< f32, 4 bytes: the default */
    KV_DTYPE_FP16,     /**< IEEE half, 2 bytes */
    KV_DTYPE_BF16,     /**< bfloat16, 2 bytes */
    KV_DTYPE_INT8,     /**< symmetric int8, 1 byte, and one f32 scale per (token, KV head) */
    KV_DTYPE_FP8_E4M3, /**< OFP8 E4M3, 1 byte */
    KV_DTYPE_FP8_E5M2, /**< OFP8 E5M2, 1 byte */
    KV_DTYPE_COUNT
} KvDtype;

/** Widest head a non-f32 row can be read from: the stack buffer of one head (1 KiB). */
#define KV_DTYPE_HEAD_DIM_MAX 256

/** Largest int8 code; codes are -127..127 (symmetric: -128 is never used). */
#define KV_INT8_MAX 127

/**
 * Name as `--kv-dtype` spells it.
 * @param t  the type
 * @return "f32", "f16", "bf16", "int8", "fp8-e4m3" or "fp8-e5m2" ("?" otherwise)
 */
const char *kv_dtype_name(KvDtype t);

/**
 * Parses a name as kv_dtype_name() spells it.
 * @param text  the name
 * @param out   receives the type
 * @param err   receives the reason on failure
 * @return 0 on success, -1 for an unknown name
 */
int kv_dtype_parse(const char *text, KvDtype *out, Err *err);

/**
 * Bytes of one element (a code, for int8), scales not counted.
 * @param t  the type
 * @return 4, 2 or 1
 */
size_t kv_dtype_elem_bytes(KvDtype t);

/**
 * Bytes stored beside each head of each row: int8's scale.
 * @param t  the type
 * @return 4 for int8, 0 for the others
 */
size_t kv_dtype_scale_bytes(KvDtype t);

/**
 * Bytes of one head of one row, its scale included.
 * @param t         the type
 * @param head_dim  values per head
 * @return head_dim x element bytes + scale bytes
 */
size_t kv_dtype_head_bytes(KvDtype t, int head_dim);

/**
 * K/V bytes of one token in every layer, scales included: the course's
 * formula, 2 x n_layers x n_kv_heads x (head_dim x element bytes + scale
 * bytes).
 * @param c  model shape
 * @param t  the type
 * @return bytes
 */
size_t kv_dtype_bytes_per_token(const ModelConfig *c, KvDtype t);

/**
 * The per-head part of the formula, for the memory tables:
 * "8 head_dim x 4 B", or "(8 head_dim x 1 B + 4 B scale)" for int8.
 * @param buf       output
 * @param n         its size
 * @param t         the type
 * @param head_dim  values per head
 * @return buf
 */
const char *kv_dtype_head_formula(char *buf, size_t n, KvDtype t, int head_dim);

/**
 * The device's element type of the same name (the CUDA path stores f32,
 * f16 and bf16).
 * @param t    the type
 * @param out  receives the device type
 * @return 0, or -1 when the device has no such type (int8, fp8)
 */
int kv_dtype_to_device(KvDtype t, Dtype *out);

/**
 * The K/V type of a device element type.
 * @param t  f32, f16 or bf16
 * @return the same type as a ::KvDtype
 */
KvDtype kv_dtype_from_device(Dtype t);

/** How one token's K (or V) in one layer is stored. */
typedef struct {
    KvDtype type; /**< element type */
    int n_heads;  /**< KV heads in the row */
    int head_dim; /**< values per head */
} KvRowFormat;

/**
 * Describes a row, refusing a head too wide for the non-f32 reads
 * (::KV_DTYPE_HEAD_DIM_MAX).
 * @param f         receives the format
 * @param t         element type
 * @param n_heads   KV heads per row, at least 1
 * @param head_dim  values per head, at least 1
 * @param err       receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kv_row_format_init(KvRowFormat *f, KvDtype t, int n_heads, int head_dim, Err *err);

/**
 * Bytes of one stored row, scales included.
 * @param f  the format
 * @return n_heads x kv_dtype_head_bytes()
 */
size_t kv_row_bytes(const KvRowFormat *f);

/**
 * int8's scale for one head: its largest magnitude over 127 (0 for a head
 * of zeros).
 * @param x  [n] the head's values
 * @param n  head_dim
 * @return max |x_i| / 127
 */
float kv_int8_scale(const float *x, int n);

/**
 * One int8 code: x / scale rounded to nearest, ties to even, saturated to
 * -127..127. Saturation matters when x / scale rounds past 127, as it can
 * when the scale itself was rounded (a head of subnormal values) or came
 * from other values; a NaN gives 0. Never undefined behaviour.
 * @param x      the value
 * @param scale  the head's scale
 * @return the code
 */
int8_t kv_int8_code(float x, float scale);

/**
 * Stores one row: converts (rounding to nearest even, saturating where the
 * type does) and, for int8, computes each head's scale and writes it
 * after the codes.
 * @param row  [kv_row_bytes(f)] receives the stored row
 * @param x    [n_heads x head_dim] f32 values
 * @param f    the format
 */
void kv_row_store(void *row, const float *x, const KvRowFormat *f);

/**
 * Reads a whole row back as f32: what the row holds, exactly (int8: code
 * x scale, one rounded multiplication).
 * @param x    [n_heads x head_dim] receives the values
 * @param row  [kv_row_bytes(f)] a stored row
 * @param f    the format
 */
void kv_row_load(float *x, const void *row, const KvRowFormat *f);

/**
 * Reads one head of a stored row back as f32, exactly as kv_row_load()
 * does (int8: code x the head's scale).
 * @param dst   [head_dim] receives the values
 * @param row   [kv_row_bytes(f)] a stored row
 * @param head  KV head of the row
 * @param f     the format
 */
void kv_row_load_head(float *dst, const unsigned char *row, int head, const KvRowFormat *f);

/**
 * Attention score of a query head against one head of a stored key row:
 * attention_score() (ops.h) of the values the row holds, read in place.
 * @param q     [head_dim] the query head
 * @param row   a stored key row
 * @param head  KV head of the row
 * @param f     the format
 * @return q . k / sqrt(head_dim), in dot()'s order
 */
float kv_attention_score(const float *q, const void *row, int head, const KvRowFormat *f);

/**
 * out += a x v for one head of a stored value row: attention_accumulate()
 * (ops.h) of the values the row holds, read in place.
 * @param out   [head_dim] the running weighted sum
 * @param a     attention weight
 * @param row   a stored value row
 * @param head  KV head of the row
 * @param f     the format
 */
void kv_attention_accumulate(float *out, float a, const void *row, int head, const KvRowFormat *f);

/**
 * Causal attention of one query head over @p n_pos stored rows, evenly
 * spaced (a contiguous cache): attention_reference() over the values the
 * rows hold, bit for bit, reading each row in place.
 * @param out     [head_dim] receives the output
 * @param q       [head_dim] the query head
 * @param keys    the first key row ([n_pos] rows, @p stride bytes apart)
 * @param values  the first value row, same layout
 * @param n_pos   positions attended
 * @param stride  bytes from one row to the next
 * @param head    KV head read
 * @param f       the rows' format
 * @param scores  [n_pos] scratch
 */
void kv_attention_rows(float *out, const float *q, const unsigned char *keys, const unsigned char *values, int n_pos,
                       size_t stride, int head, const KvRowFormat *f, float *scores);

#endif
