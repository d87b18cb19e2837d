/**
 * @file quant.h
 * @brief Weight matrices as a file stores them: f32, f16, bf16, and the
 *        block-quantized Q8_0, Q4_0 and Q4_1 of llama.cpp.
 *
 * A quantized row is a sequence of blocks of 32 weights, each with its own
 * scale (and, for Q4_1, its own minimum), both stored as IEEE halves:
 *
 * | type | bytes per block | layout | weight j of the block |
 * |---|---:|---|---|
 * | Q8_0 | 34 | d, q[32] (int8) | q[j] * d |
 * | Q4_0 | 18 | d, qs[16] | (nibble_j - 8) * d |
 * | Q4_1 | 20 | d, m, qs[16] | nibble_j * d + m |
 *
 * where nibble_j is the low 4 bits of qs[j] for j < 16 and the high 4 bits
 * of qs[j - 16] for j >= 16. So Q4_1 spends 5 bits per weight and Q8_0
 * 8.5, against 32 for f32.
 *
 * kvlab computes in f32: a weight is turned back into an f32 exactly as
 * the formula says, one multiplication and (Q4_1) one addition, each
 * rounded to f32, in that order. That is what llama.cpp's reference
 * dequantization and the Python `gguf` package compute, so all three give
 * the same f32 weights bit for bit. The activations are never quantized.
 */
#ifndef KVLAB_QUANT_H
#define KVLAB_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/** Storage type of a weight matrix. */
typedef enum {
    WEIGHT_F32 = 0, /**< IEEE single, 4 bytes */
    WEIGHT_F16,     /**< IEEE half, 2 bytes */
    WEIGHT_BF16,    /**< bfloat16, 2 bytes */
    WEIGHT_Q8_0,    /**< blocks of 32: f16 scale, 32 int8 (34 bytes) */
    WEIGHT_Q4_0,    /**< blocks of 32: f16 scale, 32 4-bit values (18 bytes) */
    WEIGHT_Q4_1,    /**< blocks of 32: f16 scale, f16 minimum, 32 4-bit values (20 bytes) */
    WEIGHT_TYPE_COUNT
} WeightType;

/** Weights per quantization block. */
#define QUANT_BLOCK 32

/**
 * A weight matrix as stored: @p rows rows of @p cols weights, row after
 * row, each row row_bytes long. out = W x multiplies each row with x.
 */
typedef struct {
    const void *data; /**< [rows][row_bytes] */
    WeightType type;  /**< how each row is stored */
    int rows;         /**< output width */
    int cols;         /**< input width (a multiple of 32 for the block types) */
    size_t row_bytes; /**< bytes of one row */
} WeightMatrix;

/**
 * Name of a type: "f32", "f16", "bf16", "Q8_0", "Q4_0", "Q4_1".
 * @param t  the type
 * @return a static string
 */
const char *weight_type_name(WeightType t);

/**
 * Weights per block: 1 for f32/f16/bf16, 32 for the quantized types.
 * @param t  the type
 * @return block length
 */
int weight_type_block_elems(WeightType t);

/**
 * Bytes per block: 4, 2, 2, 34, 18, 20.
 * @param t  the type
 * @return bytes
 */
size_t weight_type_block_bytes(WeightType t);

/**
 * Bytes of a row of @p cols weights (cols a multiple of the block length).
 * @param t     the type
 * @param cols  weights per row
 * @return bytes
 */
size_t weight_row_bytes(WeightType t, int cols);

/**
 * A matrix view of stored rows.
 * @param data  [rows][row_bytes]
 * @param type  storage type
 * @param rows  rows
 * @param cols  weights per row
 * @return the view
 */
WeightMatrix weight_matrix(const void *data, WeightType type, int rows, int cols);

/**
 * Row @p r of a matrix turned into f32, exactly (see the file comment).
 * @param w    the matrix
 * @param r    row index
 * @param out  [cols] receives the weights
 */
void weight_dequantize_row(const WeightMatrix *w, int r, float *out);

/**
 * Stores f32 weights as @p t: nearest-even rounding for f16/bf16; for the
 * block types the usual llama.cpp scheme (Q8_0: d = max|x| / 127; Q4_0:
 * d = -x_maxabs / 8; Q4_1: d = (max - min) / 15, m = min), used to make
 * synthetic quantized models and test data.
 * @param t     target type
 * @param x     [cols] weights
 * @param cols  weights (a multiple of the block length)
 * @param out   [weight_row_bytes(t, cols)] receives the row
 */
void weight_quantize_row(WeightType t, const float *x, int cols, void *out);

/**
 * Parses a type name as weight_type_name() spells it (case-insensitive).
 * @param text  e.g. "q4_1"
 * @param out   receives the type
 * @param err   receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int weight_type_parse(const char *text, WeightType *out, Err *err);

#endif
