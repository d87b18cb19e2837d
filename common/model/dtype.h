/**
 * @file dtype.h
 * @brief Element types of K/V caches and weights on the device (f32, f16,
 *        bf16), and exact host conversions between them.
 *
 * The CPU path always computes in f32. The CUDA path may store K/V (and
 * weights) in 16-bit types; to test it, the CPU references round their
 * inputs exactly as the device stores them, with the conversions here
 * (round to nearest, ties to even: what `__float2half_rn` and
 * `__float2bfloat16_rn` do), so that a kernel and its reference see the
 * very same values and differ only in the order of their arithmetic.
 */
#ifndef KVLAB_DTYPE_H
#define KVLAB_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/** Element type of a stored tensor. */
typedef enum {
    DTYPE_F32 = 0, /**< IEEE single: 8 exponent bits, 24 significant bits */
    DTYPE_F16,     /**< IEEE half: 5 exponent bits, 11 significant bits, max 65504 */
    DTYPE_BF16,    /**< bfloat16: f32's 8 exponent bits, 8 significant bits */
    DTYPE_COUNT
} Dtype;

/**
 * Bytes of one element.
 * @param t  the type
 * @return 4 or 2
 */
size_t dtype_bytes(Dtype t);

/**
 * Name as the command line spells it: "f32", "f16", "bf16".
 * @param t  the type
 * @return a static string
 */
const char *dtype_name(Dtype t);

/**
 * Parses "f32", "f16" or "bf16".
 * @param text  the name
 * @param out   receives the type
 * @param err   receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int dtype_parse(const char *text, Dtype *out, Err *err);

/**
 * f32 to IEEE half, rounding to nearest even; overflow gives infinity,
 * tiny values become subnormals or zero.
 * @param f  the value
 * @return the half's bits
 */
uint16_t dtype_f32_to_f16(float f);

/**
 * IEEE half to f32 (exact).
 * @param h  the half's bits
 * @return the value
 */
float dtype_f16_to_f32(uint16_t h);

/**
 * f32 to bfloat16, rounding to nearest even.
 * @param f  the value
 * @return the bfloat16's bits
 */
uint16_t dtype_f32_to_bf16(float f);

/**
 * bfloat16 to f32 (exact).
 * @param b  the bfloat16's bits
 * @return the value
 */
float dtype_bf16_to_f32(uint16_t b);

/**
 * Converts f32 values to a stored type.
 * @param dst  [n] elements of type @p t
 * @param src  [n] f32
 * @param n    count
 * @param t    destination type
 */
void dtype_from_f32(void *dst, const float *src, size_t n, Dtype t);

/**
 * Converts stored values back to f32 (exact).
 * @param dst  [n] f32
 * @param src  [n] elements of type @p t
 * @param n    count
 * @param t    source type
 */
void dtype_to_f32(float *dst, const void *src, size_t n, Dtype t);

/**
 * Rounds f32 values in place to what storing them as @p t keeps
 * (identity for f32).
 * @param x  [n] values
 * @param n  count
 * @param t  storage type
 */
void dtype_round(float *x, size_t n, Dtype t);

#endif
