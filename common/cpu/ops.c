#include "ops.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__F16C__) || defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include "dtype.h"

/* ------------------------------------------------------------ waiting threads
 *
 * By default libgomp's idle threads spin for a while before they sleep. On
 * a machine whose cores are shared with other work, a spinning thread holds
 * a core that the thread doing the work needs: two threads ran far slower
 * than one (issue 14). Passive waiting (threads sleep at once) fixes that
 * and costs little here, where a parallel region holds a whole matmul.
 *
 * libgomp reads OMP_WAIT_POLICY once, in its own constructor, before
 * main() runs; setenv() in main() would be too late. A function in the
 * executable's .preinit_array runs before the constructors of the shared
 * libraries it loads (the ELF rule glibc follows), so it sets the variable
 * in time. A value the user set (OMP_WAIT_POLICY, or libgomp's own
 * GOMP_SPINCOUNT) is left alone. */
#if defined(_OPENMP) && defined(__ELF__) && defined(__GNUC__)
#include <stdlib.h>

static void prefer_passive_waiting(void)
{
    if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT"))
        setenv("OMP_WAIT_POLICY", "passive", 0);
}

__attribute__((section(".preinit_array"), used)) static void (*const prefer_passive_waiting_entry)(void) =
    prefer_passive_waiting;
#endif

/* Parallel loops pay a fork/join of a few microseconds; below this many
 * multiply-adds a matmul runs on the calling thread only. */
#define PARALLEL_MIN_MACS (1 << 17)

#define LANES 8

/* Combines eight partial sums in a fixed tree: the last step of every dot
 * product (dot(), matmul(), matmul_weights()). */
static inline float combine_lanes(const float acc[LANES])
{
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* The partial sums of one dot product: DOT_LANES of them, partial k
 * collecting the products of elements k, k + 32, k + 64, ... in turn. */
#define DOT_LANES 32

#if defined(__GNUC__)
/* Sixteen lanes as one value: one AVX-512 register (two AVX ones, four SSE
 * ones elsewhere). GCC and Clang do each lane's multiply and add exactly as
 * the scalar loop would: lane l still sums a[j + l] * b[j + l] over j in
 * order, so the bits are the same whatever the vector width. A dot product
 * keeps its 32 partial sums in two of them, lo (partials 0-15) and hi
 * (16-31): two independent chains of additions, so that the latency of one
 * addition (4 cycles) does not bound how fast one row streams. Vectors are
 * loaded with memcpy (no alignment assumed) and never passed to or returned
 * from a non-inlined function, which would change the ABI. */
typedef float Block16 __attribute__((vector_size(16 * sizeof(float))));
typedef int32_t Int16 __attribute__((vector_size(16 * sizeof(int32_t))));
typedef float Lanes __attribute__((vector_size(LANES * sizeof(float)))); /* for elementwise loops */
#define LANES_LOAD(dst, src) memcpy(&(dst), (src), sizeof(Lanes))
#define LANES_STORE(dst, src) memcpy((dst), &(src), sizeof(Lanes))

/* Partial k + 16 onto k, k + 8 onto k, then the tree over eight. */
static inline float combine_block_partials(const Block16 *lo, const Block16 *hi)
{
    float p[16], q[LANES];
    Block16 folded = *lo + *hi;
    memcpy(p, &folded, sizeof p);
    for (int k = 0; k < LANES; k++)
        q[k] = p[k] + p[k + LANES];
    return combine_lanes(q);
}
#else
/* The same fold written on an array of DOT_LANES partial sums (builds
 * without vector extensions). */
static inline float combine_partials(const float p[DOT_LANES])
{
    float q[LANES];
    for (int k = 0; k < LANES; k++)
        q[k] = (p[k] + p[k + 16]) + (p[k + 8] + p[k + 24]);
    return combine_lanes(q);
}
#endif

float dot(const float *a, const float *b, int n)
{
    int j = 0;
    float sum;
#if defined(__GNUC__)
    Block16 lo = {0}, hi = {0}, av, bv;
    for (; j + DOT_LANES <= n; j += DOT_LANES) {
        memcpy(&av, a + j, sizeof av);
        memcpy(&bv, b + j, sizeof bv);
        lo += av * bv;
        memcpy(&av, a + j + 16, sizeof av);
        memcpy(&bv, b + j + 16, sizeof bv);
        hi += av * bv;
    }
    sum = combine_block_partials(&lo, &hi);
#else
    float p[DOT_LANES] = {0};
    for (; j + DOT_LANES <= n; j += DOT_LANES)
        for (int k = 0; k < DOT_LANES; k++)
            p[k] += a[j + k] * b[j + k];
    sum = combine_partials(p);
#endif
    for (; j < n; j++)
        sum += a[j] * b[j];
    return sum;
}

/* ------------------------------------------------------------ f32 matmul
 *
 * The kernel takes ROW_TILE rows of W and up to TOKEN_TILE_F32 tokens at once
 * and keeps the 32 partial sums of every (row, token) pair in registers:
 * each weight vector loaded is used for every token of the tile, each
 * token vector for every row. Per pair, the arithmetic is exactly dot()'s,
 * whichever tile the pair falls in, so the bits do not depend on the batch
 * size or on how the rows are split among threads. Each tile of rows is
 * used for all the tokens before the next is read: the weights come from
 * memory once per call. */

#define ROW_TILE 4
#define TOKEN_TILE_F32 3 /* 4 x 3 pairs x 2 vectors of sums + 4 of weights + 1: within 32 registers */

#if defined(__GNUC__)
static inline __attribute__((always_inline)) void rows_times_tokens_f32(const float *w, int in_dim, const float *x,
                                                                        float *out, long out_stride, const int nr,
                                                                        const int nt, const int prefetch)
{
    Block16 acc[ROW_TILE][TOKEN_TILE_F32][2];
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++)
            acc[r][t][0] = acc[r][t][1] = (Block16){0};
    int j = 0;
    for (; j + DOT_LANES <= in_dim; j += DOT_LANES)
        for (int h = 0; h < 2; h++) {
            Block16 wv[ROW_TILE], xv;
            for (int r = 0; r < nr; r++) {
                if (prefetch)
                    __builtin_prefetch(w + (long)(nr + r) * in_dim + j + 16 * h, 0, 3);
                memcpy(&wv[r], w + (long)r * in_dim + j + 16 * h, sizeof xv);
            }
            for (int t = 0; t < nt; t++) {
                memcpy(&xv, x + (long)t * in_dim + j + 16 * h, sizeof xv);
                for (int r = 0; r < nr; r++)
                    acc[r][t][h] += wv[r] * xv;
            }
        }
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++) {
            float sum = combine_block_partials(&acc[r][t][0], &acc[r][t][1]);
            for (int k = j; k < in_dim; k++)
                sum += w[(long)r * in_dim + k] * x[(long)t * in_dim + k];
            out[t * out_stride + r] = sum;
        }
}
#else
static void rows_times_tokens_f32(const float *w, int in_dim, const float *x, float *out, long out_stride,
                                  const int nr, const int nt, const int prefetch)
{
    (void)prefetch;
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++)
            out[t * out_stride + r] = dot(w + (long)r * in_dim, x + (long)t * in_dim, in_dim);
}
#endif

/* nr rows (1 or ROW_TILE) against all the tokens, TOKEN_TILE_F32 at a time.
 * The switch hands the kernel constant counts, so each case compiles to a
 * loop with its sums in registers. */
static void rows_times_batch_f32(const float *w, int in_dim, const float *x, float *out, int n_tokens,
                                 long out_stride, int nr)
{
    for (int t0 = 0; t0 < n_tokens; t0 += TOKEN_TILE_F32) {
        int nt = n_tokens - t0 < TOKEN_TILE_F32 ? n_tokens - t0 : TOKEN_TILE_F32;
        const float *xt = x + (long)t0 * in_dim;
        float *ot = out + (long)t0 * out_stride;
        /* The first tile of tokens asks for the next tile of rows while
         * it reads this one from memory: a row tile is ROW_TILE short
         * streams, too short for the hardware prefetcher to get going
         * (the matmuls of one stories110M-shaped step, timed alone in CPU
         * time on a loaded machine: about 15% faster for one token, 7%
         * for sixteen). The other tiles find the rows in cache. */
        int prefetch = t0 == 0;
        switch (nr * 8 + nt) {
        case ROW_TILE * 8 + 3: rows_times_tokens_f32(w, in_dim, xt, ot, out_stride, ROW_TILE, 3, prefetch); break;
        case ROW_TILE * 8 + 2: rows_times_tokens_f32(w, in_dim, xt, ot, out_stride, ROW_TILE, 2, prefetch); break;
        case ROW_TILE * 8 + 1: rows_times_tokens_f32(w, in_dim, xt, ot, out_stride, ROW_TILE, 1, prefetch); break;
        case 8 + 3: rows_times_tokens_f32(w, in_dim, xt, ot, out_stride, 1, 3, prefetch); break;
        case 8 + 2: rows_times_tokens_f32(w, in_dim, xt, ot, out_stride, 1, 2, prefetch); break;
        default: rows_times_tokens_f32(w, in_dim, xt, ot, out_stride, 1, 1, prefetch); break;
        }
    }
}

void matmul(float *out, const float *x, const float *w, int n_tokens, int in_dim, int out_dim)
{
    long macs = (long)n_tokens * in_dim * out_dim;
    int full_tiles = out_dim / ROW_TILE, n_tiles = full_tiles + out_dim % ROW_TILE;
    (void)macs;
#pragma omp parallel for schedule(static) if (macs >= PARALLEL_MIN_MACS)
    for (int b = 0; b < n_tiles; b++) {
        /* Tiles of ROW_TILE rows, then the last out_dim % ROW_TILE rows one by one. */
        int r0 = b < full_tiles ? ROW_TILE * b : ROW_TILE * full_tiles + (b - full_tiles);
        int nr = b < full_tiles ? ROW_TILE : 1;
        rows_times_batch_f32(w + (long)r0 * in_dim, in_dim, x, out + r0, n_tokens, out_dim, nr);
    }
}

/* ------------------------------------------------------------ stored weights
 *
 * matmul_weights() for every type but f32. A row is a sequence of blocks of
 * 32 weights; each block is turned into f32 in registers (two vectors of
 * 16: weights 0-15 and 16-31) and multiplied with the same 32 elements of
 * up to TOKEN_TILE tokens, each with its own 32 running sums. Partial k of
 * a token only ever sees weight k of each block, so the order is fixed by
 * the row alone (ops.h states it). */

#define BLOCK QUANT_BLOCK
#define TOKEN_TILE 8 /* 16 vector sums + 2 of weights: within 32 registers (AVX-512) */
#define PREFETCH_AHEAD 4096

/* Half to float for the per-block scales: the F16C instruction where the
 * build has it, else the exact bit-level conversion (the same value). */
#if defined(__F16C__)
static inline float half_to_float(const unsigned char *p)
{
    return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8));
}
#else
static inline float half_to_float(const unsigned char *p)
{
    return dtype_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}
#endif

/* The 32 f32 weights of block b of a row, as weight_dequantize_row() gives
 * them, in two halves of 16. Scalar code for the 16-bit float types: they
 * are not what quantized files hold, and the loop stays obvious. */
static inline void block_to_f32_scalar(WeightType type, const unsigned char *row, int b, float w[BLOCK])
{
    const unsigned char *p = row + (size_t)b * BLOCK * 2;
    for (int j = 0; j < BLOCK; j++) {
        uint16_t h = (uint16_t)(p[2 * j] | p[2 * j + 1] << 8);
        w[j] = type == WEIGHT_F16 ? dtype_f16_to_f32(h) : dtype_bf16_to_f32(h);
    }
}

#if defined(__GNUC__)
/* 16 bytes to 16 int32 lanes, zero- or sign-extended. GCC 12 turns
 * __builtin_convertvector() of a byte vector into one scalar move per
 * element, so the x86 builds say which instruction they mean (vpmovzxbd,
 * vpmovsxbd); the other builds widen element by element. */
static inline void widen_bytes(const unsigned char *p, int is_signed, Int16 *out)
{
#if defined(__AVX512F__)
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)p);
    *out = (Int16)(is_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b));
#elif defined(__AVX2__)
    __m128i b0 = _mm_loadl_epi64((const __m128i *)(const void *)p);
    __m128i b1 = _mm_loadl_epi64((const __m128i *)(const void *)(p + 8));
    __m256i halves[2] = {is_signed ? _mm256_cvtepi8_epi32(b0) : _mm256_cvtepu8_epi32(b0),
                         is_signed ? _mm256_cvtepi8_epi32(b1) : _mm256_cvtepu8_epi32(b1)};
    memcpy(out, halves, sizeof *out);
#else
    for (int i = 0; i < 16; i++)
        (*out)[i] = is_signed ? (int8_t)p[i] : p[i];
#endif
}

/* One block in registers: lo holds weights 0-15, hi weights 16-31. Each
 * weight is (float)q * d (+ m), one rounding per operation, exactly the
 * scalar formula (-ffp-contract=off keeps the multiply and add apart). */
static inline __attribute__((always_inline)) void block_to_f32(WeightType type, const unsigned char *row, int b,
                                                               Block16 *lo, Block16 *hi)
{
    if (type == WEIGHT_Q4_1 || type == WEIGHT_Q4_0) {
        int has_min = type == WEIGHT_Q4_1;
        const unsigned char *blk = row + (size_t)b * (has_min ? 20 : 18);
        float d = half_to_float(blk), m = has_min ? half_to_float(blk + 2) : 0.0f;
        Int16 q;
        widen_bytes(blk + (has_min ? 4 : 2), 0, &q);
#if defined(__AVX512F__)
        /* A 4-bit weight takes one of 16 values: compute them once per
         * block, by the same formula, and look each weight up (vpermps
         * reads only the low 4 bits of each index). */
        const Block16 iota = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
        Block16 table = has_min ? iota * d + m : (iota - 8.0f) * d;
        *lo = (Block16)_mm512_permutexvar_ps((__m512i)q, (__m512)table);
        *hi = (Block16)_mm512_permutexvar_ps((__m512i)(q >> 4), (__m512)table);
#else
        Block16 wl = __builtin_convertvector(has_min ? q & 15 : (q & 15) - 8, Block16) * d;
        Block16 wh = __builtin_convertvector(has_min ? q >> 4 : (q >> 4) - 8, Block16) * d;
        *lo = has_min ? wl + m : wl;
        *hi = has_min ? wh + m : wh;
#endif
    } else if (type == WEIGHT_Q8_0) {
        const unsigned char *blk = row + (size_t)b * 34;
        float d = half_to_float(blk);
        Int16 q0, q1;
        widen_bytes(blk + 2, 1, &q0);
        widen_bytes(blk + 18, 1, &q1);
        *lo = __builtin_convertvector(q0, Block16) * d;
        *hi = __builtin_convertvector(q1, Block16) * d;
    } else {
        float w[BLOCK];
        block_to_f32_scalar(type, row, b, w);
        memcpy(lo, w, sizeof *lo);
        memcpy(hi, w + 16, sizeof *hi);
    }
}

/* One row against nt (a constant after inlining) tokens. */
static inline __attribute__((always_inline)) void row_times_tokens(WeightType type, const unsigned char *row,
                                                                   int cols, const float *x, float *out,
                                                                   long out_stride, const int nt)
{
    Block16 acc[TOKEN_TILE][2];
    for (int t = 0; t < nt; t++)
        acc[t][0] = acc[t][1] = (Block16){0};
    int n_blocks = cols / BLOCK;
    const size_t block_bytes = weight_type_block_bytes(type) * (type >= WEIGHT_Q8_0 ? 1 : BLOCK);
    for (int b = 0; b < n_blocks; b++) {
        Block16 lo, hi, xv;
        /* A row is a few hundred bytes, so the hardware prefetcher has
         * little to go on inside one; asking for the bytes 4 KiB ahead
         * (about a dozen rows of Q4_1) keeps the stream from memory flowing
         * and made single-thread decode of SmolLM2 about 20% faster.
         * Prefetching past the end of the matrix is harmless. */
        __builtin_prefetch(row + (size_t)b * block_bytes + PREFETCH_AHEAD, 0, 0);
        block_to_f32(type, row, b, &lo, &hi);
        for (int t = 0; t < nt; t++) {
            const float *xt = x + (long)t * cols + b * BLOCK;
            memcpy(&xv, xt, sizeof xv);
            acc[t][0] += lo * xv;
            memcpy(&xv, xt + 16, sizeof xv);
            acc[t][1] += hi * xv;
        }
    }
    for (int t = 0; t < nt; t++)
        out[t * out_stride] = combine_block_partials(&acc[t][0], &acc[t][1]);
}
#else
/* Without vector extensions: the same order, written out. */
static void row_times_tokens(WeightType type, const unsigned char *row, int cols, const float *x, float *out,
                             long out_stride, const int nt)
{
    float acc[TOKEN_TILE][BLOCK] = {{0}};
    float w[BLOCK];
    for (int b = 0; b < cols / BLOCK; b++) {
        if (type == WEIGHT_F16 || type == WEIGHT_BF16)
            block_to_f32_scalar(type, row, b, w);
        else {
            WeightMatrix blk = weight_matrix(row + (size_t)b * weight_type_block_bytes(type), type, 1, BLOCK);
            weight_dequantize_row(&blk, 0, w);
        }
        for (int t = 0; t < nt; t++)
            for (int k = 0; k < BLOCK; k++)
                acc[t][k] += w[k] * x[(long)t * cols + b * BLOCK + k];
    }
    for (int t = 0; t < nt; t++) {
        float q[LANES];
        for (int k = 0; k < LANES; k++)
            q[k] = (acc[t][k] + acc[t][k + 16]) + (acc[t][k + 8] + acc[t][k + 24]);
        out[t * out_stride] = combine_lanes(q);
    }
}
#endif

/* f16/bf16 rows may end with a partial block: those weights come last, in
 * order. */
static void add_row_tail(const WeightMatrix *w, const unsigned char *row, const float *x, int nt, float *out,
                         long out_stride)
{
    int start = w->cols / BLOCK * BLOCK;
    for (int t = 0; t < nt; t++) {
        float s = out[t * out_stride];
        for (int j = start; j < w->cols; j++) {
            uint16_t h = (uint16_t)(row[2 * j] | row[2 * j + 1] << 8);
            float wj = w->type == WEIGHT_F16 ? dtype_f16_to_f32(h) : dtype_bf16_to_f32(h);
            s += wj * x[(long)t * w->cols + j];
        }
        out[t * out_stride] = s;
    }
}

/* All tokens against one row, TOKEN_TILE at a time. The switch hands
 * row_times_tokens() a constant count, so each case compiles to a loop
 * with its sums in registers. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline void row_times_batch(const WeightMatrix *w, WeightType type, int r, const float *x, float *out,
                                   int n_tokens)
{
    const unsigned char *row = (const unsigned char *)w->data + (size_t)r * w->row_bytes;
    long stride = w->rows;
    for (int t0 = 0; t0 < n_tokens; t0 += TOKEN_TILE) {
        const float *xt = x + (long)t0 * w->cols;
        float *ot = out + (long)t0 * stride + r;
        int nt = n_tokens - t0 < TOKEN_TILE ? n_tokens - t0 : TOKEN_TILE;
        switch (nt) {
        case 8: row_times_tokens(type, row, w->cols, xt, ot, stride, 8); break;
        case 7: row_times_tokens(type, row, w->cols, xt, ot, stride, 7); break;
        case 6: row_times_tokens(type, row, w->cols, xt, ot, stride, 6); break;
        case 5: row_times_tokens(type, row, w->cols, xt, ot, stride, 5); break;
        case 4: row_times_tokens(type, row, w->cols, xt, ot, stride, 4); break;
        case 3: row_times_tokens(type, row, w->cols, xt, ot, stride, 3); break;
        case 2: row_times_tokens(type, row, w->cols, xt, ot, stride, 2); break;
        default: row_times_tokens(type, row, w->cols, xt, ot, stride, 1); break;
        }
        if (w->cols % BLOCK != 0)
            add_row_tail(w, row, xt, nt, ot, stride);
    }
}

/* One function per block type, with the type written as a constant inside
 * the loop (a variable would reach the outlined OpenMP body through
 * memory), so that the compiler drops the other branches of block_to_f32()
 * from the hot loop. Each shares its rows out among the threads of the
 * enclosing parallel region (an orphaned `omp for`) and does not wait for
 * the others at the end: the caller's region does. */
#define ROWS_OF_TYPE(name, type_const)                                                  \
    static void name(const WeightMatrix *w, const float *x, float *out, int n_tokens)  \
    {                                                                                   \
        _Pragma("omp for schedule(static) nowait")                                      \
        for (int r = 0; r < w->rows; r++)                                               \
            row_times_batch(w, type_const, r, x, out, n_tokens);                        \
    }
ROWS_OF_TYPE(rows_q4_1, WEIGHT_Q4_1)
ROWS_OF_TYPE(rows_q4_0, WEIGHT_Q4_0)
ROWS_OF_TYPE(rows_q8_0, WEIGHT_Q8_0)
ROWS_OF_TYPE(rows_f16, WEIGHT_F16)
ROWS_OF_TYPE(rows_bf16, WEIGHT_BF16)

static void rows_of(const WeightMatrix *w, const float *x, float *out, int n_tokens)
{
    switch (w->type) {
    case WEIGHT_Q4_1: rows_q4_1(w, x, out, n_tokens); return;
    case WEIGHT_Q4_0: rows_q4_0(w, x, out, n_tokens); return;
    case WEIGHT_Q8_0: rows_q8_0(w, x, out, n_tokens); return;
    case WEIGHT_F16: rows_f16(w, x, out, n_tokens); return;
    case WEIGHT_BF16: rows_bf16(w, x, out, n_tokens); return;
    default: return;
    }
}

void matmul_weights(float *out, const float *x, const WeightMatrix *w, int n_tokens)
{
    matmul_weights_group(&out, x, &w, 1, n_tokens);
}

void matmul_weights_group(float *const *outs, const float *x, const WeightMatrix *const *w, int n_mats,
                          int n_tokens)
{
    long macs = 0;
    int any_f32 = 0;
    for (int i = 0; i < n_mats; i++) {
        macs += (long)n_tokens * w[i]->cols * w[i]->rows;
        any_f32 |= w[i]->type == WEIGHT_F32;
    }
    if (any_f32) {
        /* llama2.c's f32 path, exactly as before: matmul() per matrix. */
        for (int i = 0; i < n_mats; i++) {
            if (w[i]->type == WEIGHT_F32)
                matmul(outs[i], x, (const float *)w[i]->data, n_tokens, w[i]->cols, w[i]->rows);
            else
                matmul_weights_group(&outs[i], x, &w[i], 1, n_tokens);
        }
        return;
    }
    (void)macs;
    /* One fork and one join for all the matrices: the threads go on to the
     * next matrix without waiting (nowait above). */
#pragma omp parallel if (macs >= PARALLEL_MIN_MACS)
    for (int i = 0; i < n_mats; i++)
        rows_of(w[i], x, outs[i], n_tokens);
}

void rmsnorm_eps(float *out, const float *x, const float *weight, int n, float eps)
{
    float ss = 0.0f;
    for (int j = 0; j < n; j++)
        ss += x[j] * x[j];
    ss /= (float)n;
    ss += eps;
    ss = 1.0f / sqrtf(ss);
    for (int j = 0; j < n; j++)
        out[j] = weight[j] * (ss * x[j]);
}

void rmsnorm(float *out, const float *x, const float *weight, int n)
{
    rmsnorm_eps(out, x, weight, n, 1e-5f);
}

void softmax(float *x, int n)
{
    float max = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > max)
            max = x[i];
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    for (int i = 0; i < n; i++)
        x[i] /= sum;
}

void rope_tables(float *cos_out, float *sin_out, int seq_len, int head_dim)
{
    rope_tables_theta(cos_out, sin_out, seq_len, head_dim, 10000.0f);
}

void rope_tables_theta(float *cos_out, float *sin_out, int seq_len, int head_dim, float theta)
{
    int half = head_dim / 2;
    for (int pos = 0; pos < seq_len; pos++)
        for (int i = 0; i < half; i++) {
            float freq = 1.0f / powf(theta, (float)(2 * i) / (float)head_dim);
            float angle = (float)pos * freq;
            cos_out[(long)pos * half + i] = cosf(angle);
            sin_out[(long)pos * half + i] = sinf(angle);
        }
}

void rope_rotate(float *vec, int width, int head_dim, const float *cos_row, const float *sin_row)
{
    for (int i = 0; i < width; i += 2) {
        int pair = (i % head_dim) / 2;
        float c = cos_row[pair], s = sin_row[pair];
        float v0 = vec[i], v1 = vec[i + 1];
        vec[i] = v0 * c - v1 * s;
        vec[i + 1] = v0 * s + v1 * c;
    }
}

void swiglu(float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        g = g * (1.0f / (1.0f + expf(-g)));
        gate[i] = g * up[i];
    }
}

void add_inplace(float *out, const float *other, int n)
{
    for (int i = 0; i < n; i++)
        out[i] += other[i];
}

/* out[i] = sum over t, in order, of a[t] * v[t][i]: the same sums as
 * attention_accumulate() called for t = 0, 1, ... on a zeroed out, but each
 * running sum stays in a register across all positions instead of going
 * through memory once per position. */
static void attention_weighted_sum(float *out, const float *a, const float *values, int n_pos, int stride,
                                   int head_dim)
{
    int i = 0;
#if defined(__GNUC__)
    for (; i + LANES <= head_dim; i += LANES) {
        Lanes acc = {0}, v;
        for (int t = 0; t < n_pos; t++) {
            LANES_LOAD(v, values + (long)t * stride + i);
            acc += a[t] * v;
        }
        LANES_STORE(out + i, acc);
    }
#endif
    for (; i < head_dim; i++) {
        float acc = 0.0f;
        for (int t = 0; t < n_pos; t++)
            acc += a[t] * values[(long)t * stride + i];
        out[i] = acc;
    }
}

void attention_reference(float *out, const float *q, const float *keys, const float *values, int n_pos, int stride,
                         int head_dim, float *scores)
{
    for (int t = 0; t < n_pos; t++)
        scores[t] = attention_score(q, keys + (long)t * stride, head_dim);
    softmax(scores, n_pos);
    attention_weighted_sum(out, scores, values, n_pos, stride, head_dim);
}

void ops_set_threads(int n)
{
#ifdef _OPENMP
    if (n > 0)
        omp_set_num_threads(n);
#else
    (void)n;
#endif
}

int ops_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}
