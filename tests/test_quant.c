/* Weights in their stored types (common/model/quant.c) and the matmul on
 * them (matmul_weights() in common/cpu/ops.c):
 *
 *  (a) dequantization gives the values the block formats define, checked on
 *      hand-made blocks whose weights are known;
 *  (b) the fused matmul equals, bit for bit, the dot product in its
 *      documented order of the exactly dequantized rows, whatever the number
 *      of tokens, the tokens' place in the batch and the number of threads;
 *  (c) it agrees with a double-precision product of the dequantized weights
 *      (a wrong order of weights in a block would not);
 *  (d) quantizing a row and dequantizing it again loses no more than half a
 *      quantization step. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "ops.h"
#include "quant.h"
#include "sampler.h"
#include "suites.h"

static const WeightType ALL_TYPES[] = {WEIGHT_F32, WEIGHT_F16, WEIGHT_BF16, WEIGHT_Q8_0, WEIGHT_Q4_0, WEIGHT_Q4_1};
#define N_TYPES (sizeof ALL_TYPES / sizeof ALL_TYPES[0])

static void put_half(unsigned char *p, float v)
{
    uint16_t h = dtype_f32_to_f16(v);
    p[0] = (unsigned char)h;
    p[1] = (unsigned char)(h >> 8);
}

START_TEST(sizes_and_names)
{
    ck_assert_uint_eq(weight_row_bytes(WEIGHT_F32, 64), 256);
    ck_assert_uint_eq(weight_row_bytes(WEIGHT_F16, 64), 128);
    ck_assert_uint_eq(weight_row_bytes(WEIGHT_BF16, 10), 20);
    ck_assert_uint_eq(weight_row_bytes(WEIGHT_Q8_0, 576), 18 * 34);
    ck_assert_uint_eq(weight_row_bytes(WEIGHT_Q4_0, 64), 36);
    ck_assert_uint_eq(weight_row_bytes(WEIGHT_Q4_1, 576), 18 * 20);
    ck_assert_str_eq(weight_type_name(WEIGHT_Q4_1), "Q4_1");
    WeightType t;
    Err err = {{0}};
    ck_assert_int_eq(weight_type_parse("q8_0", &t, &err), 0);
    ck_assert_int_eq(t, WEIGHT_Q8_0);
    ck_assert_int_eq(weight_type_parse("q5_k", &t, &err), -1);
}
END_TEST

/* Blocks written byte by byte from the formats' definitions. */
START_TEST(dequantize_hand_made_blocks)
{
    float out[32];
    /* Q4_1: d = 0.5, m = -1; weight j has nibble j % 16 (low nibbles: 0..15
     * for weights 0..15; high nibbles: 15 - (j - 16) for weights 16..31). */
    unsigned char q41[20];
    put_half(q41, 0.5f);
    put_half(q41 + 2, -1.0f);
    for (int j = 0; j < 16; j++)
        q41[4 + j] = (unsigned char)(j | (15 - j) << 4);
    WeightMatrix w = weight_matrix(q41, WEIGHT_Q4_1, 1, 32);
    weight_dequantize_row(&w, 0, out);
    for (int j = 0; j < 16; j++) {
        ck_assert_msg(out[j] == 0.5f * (float)j - 1.0f, "Q4_1 weight %d: %g", j, (double)out[j]);
        ck_assert_msg(out[16 + j] == 0.5f * (float)(15 - j) - 1.0f, "Q4_1 weight %d: %g", 16 + j, (double)out[16 + j]);
    }
    /* Q4_0: d = 0.25, value (nibble - 8) * d. */
    unsigned char q40[18];
    put_half(q40, 0.25f);
    for (int j = 0; j < 16; j++)
        q40[2 + j] = (unsigned char)(j | (15 - j) << 4);
    w = weight_matrix(q40, WEIGHT_Q4_0, 1, 32);
    weight_dequantize_row(&w, 0, out);
    for (int j = 0; j < 16; j++) {
        ck_assert(out[j] == 0.25f * (float)(j - 8));
        ck_assert(out[16 + j] == 0.25f * (float)(7 - j));
    }
    /* Q8_0: d = 2^-7, int8 values -128..127 spread over the block. */
    unsigned char q80[34];
    put_half(q80, 1.0f / 128.0f);
    for (int j = 0; j < 32; j++)
        q80[2 + j] = (unsigned char)(int8_t)(j * 8 - 128);
    w = weight_matrix(q80, WEIGHT_Q8_0, 1, 32);
    weight_dequantize_row(&w, 0, out);
    for (int j = 0; j < 32; j++)
        ck_assert(out[j] == (float)(j * 8 - 128) / 128.0f);
}
END_TEST

static void random_fill(float *x, size_t n, unsigned long long *rng, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = scale * (2.0f * sampler_random_f32(rng) - 1.0f);
}

/* A random matrix stored as type t; returns the stored bytes (malloc'd). */
static void *random_matrix(WeightType t, int rows, int cols, unsigned long long seed, WeightMatrix *w)
{
    unsigned long long rng = seed;
    float *row = malloc(sizeof(float) * (size_t)cols);
    size_t rb = weight_row_bytes(t, cols);
    unsigned char *data = malloc(rb * (size_t)rows + 1);
    for (int r = 0; r < rows; r++) {
        random_fill(row, (size_t)cols, &rng, 1.0f);
        if (r % 7 == 3)
            row[r % cols] = 40.0f; /* an outlier: a block with a large scale */
        weight_quantize_row(t, row, cols, data + (size_t)r * rb);
    }
    free(row);
    *w = weight_matrix(data, t, rows, cols);
    return data;
}

/* The documented order, the same for every type (f32 through dot()): 32
 * partial sums by position in the block, folded k + 16 onto k, k + 8 onto
 * k, a pairwise tree over the eight, then the weights after the last whole
 * block in order. Written plainly here, from the exact dequantization of
 * quant.c. */
static float dot_blocked_by_definition(const float *w, const float *x, int n)
{
    float p[32] = {0};
    int blocks = n / 32;
    for (int b = 0; b < blocks; b++)
        for (int k = 0; k < 32; k++)
            p[k] += w[32 * b + k] * x[32 * b + k];
    float q[16], r[8];
    for (int k = 0; k < 16; k++)
        q[k] = p[k] + p[k + 16];
    for (int k = 0; k < 8; k++)
        r[k] = q[k] + q[k + 8];
    float s = ((r[0] + r[4]) + (r[1] + r[5])) + ((r[2] + r[6]) + (r[3] + r[7]));
    for (int j = 32 * blocks; j < n; j++)
        s += w[j] * x[j];
    return s;
}

static int same_bits(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

/* Every type, shapes with and without a partial last block (f16/bf16), 1
 * to 9 tokens (tiles of four, and the remainders), each token alone too. */
START_TEST(fused_matmul_equals_dequantize_then_dot)
{
    int shapes[][2] = {{64, 5}, {96, 9}, {576, 3}, {33, 4}, {70, 2}};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        WeightType t = ALL_TYPES[ti];
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int cols = shapes[s][0], rows = shapes[s][1];
            if (cols % weight_type_block_elems(t) != 0)
                continue;
            WeightMatrix w;
            void *data = random_matrix(t, rows, cols, 100 + s + 10 * ti, &w);
            float *deq = malloc(sizeof(float) * (size_t)rows * cols);
            for (int r = 0; r < rows; r++)
                weight_dequantize_row(&w, r, deq + (size_t)r * cols);
            const int n_tokens = 9;
            float *x = malloc(sizeof(float) * (size_t)n_tokens * cols);
            unsigned long long rng = 7 + s;
            random_fill(x, (size_t)n_tokens * cols, &rng, 2.0f);
            float *out = malloc(sizeof(float) * (size_t)n_tokens * rows), *alone = malloc(sizeof(float) * rows);
            for (int n = 1; n <= n_tokens; n++) {
                matmul_weights(out, x, &w, n);
                for (int tok = 0; tok < n; tok++)
                    for (int r = 0; r < rows; r++) {
                        const float *wr = deq + (size_t)r * cols, *xt = x + (size_t)tok * cols;
                        float want = dot_blocked_by_definition(wr, xt, cols);
                        ck_assert_msg(same_bits(out[(size_t)tok * rows + r], want),
                                      "%s %dx%d, %d tokens: token %d row %d is %.9g, the definition gives %.9g",
                                      weight_type_name(t), rows, cols, n, tok, r,
                                      (double)out[(size_t)tok * rows + r], (double)want);
                    }
            }
            for (int tok = 0; tok < n_tokens; tok++) {
                matmul_weights(alone, x + (size_t)tok * cols, &w, 1);
                ck_assert_msg(memcmp(alone, out + (size_t)tok * rows, sizeof(float) * rows) == 0,
                              "%s: token %d alone differs from the batch of %d", weight_type_name(t), tok, n_tokens);
            }
            free(out), free(alone), free(x), free(deq), free(data);
        }
    }
}
END_TEST

/* Against double precision on the dequantized weights: a permutation of
 * the weights inside a block (nibble order) would keep (b) consistent with
 * a wrong quant.c, but not this, since the test dequantizes through quant.c
 * and checks quant.c on hand-made blocks above. The f32 rounding error of a
 * 576-term sum is below 1e-5 of the sum of |terms|; any mistake is far
 * larger. */
START_TEST(fused_matmul_matches_double)
{
    const int rows = 17, cols = 576;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        WeightMatrix w;
        void *data = random_matrix(ALL_TYPES[ti], rows, cols, 55 + ti, &w);
        float x[576], out[17], row[576];
        unsigned long long rng = 3;
        random_fill(x, (size_t)cols, &rng, 1.0f);
        matmul_weights(out, x, &w, 1);
        for (int r = 0; r < rows; r++) {
            weight_dequantize_row(&w, r, row);
            double want = 0, mag = 0;
            for (int j = 0; j < cols; j++) {
                want += (double)row[j] * x[j];
                mag += fabs((double)row[j] * x[j]);
            }
            ck_assert_msg(fabs(out[r] - want) <= 1e-5 * mag, "%s row %d: %.9g vs %.9g", weight_type_name(ALL_TYPES[ti]),
                          r, (double)out[r], want);
        }
        free(data);
    }
}
END_TEST

/* Big enough for the parallel path (2^17 multiply-adds and more). */
START_TEST(fused_matmul_is_thread_count_independent)
{
    for (size_t ti = 1; ti < N_TYPES; ti++) {
        WeightMatrix w;
        void *data = random_matrix(ALL_TYPES[ti], 300, 256, 9 + ti, &w);
        float *x = malloc(sizeof(float) * 5 * 256), *one = malloc(sizeof(float) * 5 * 300),
              *two = malloc(sizeof(float) * 5 * 300);
        unsigned long long rng = 4;
        random_fill(x, 5 * 256, &rng, 1.0f);
        ops_set_threads(1);
        matmul_weights(one, x, &w, 5);
        ops_set_threads(2);
        matmul_weights(two, x, &w, 5);
        ck_assert_msg(memcmp(one, two, sizeof(float) * 5 * 300) == 0, "%s: 1 and 2 threads differ",
                      weight_type_name(ALL_TYPES[ti]));
        free(x), free(one), free(two), free(data);
    }
}
END_TEST

/* A group (Q, K, V on one input) gives each matrix's own bits, on 1 and 2
 * threads, also when one of them is f32 (llama2.c's path). */
START_TEST(group_equals_each_matrix_alone)
{
    const WeightType types[][3] = {{WEIGHT_Q4_1, WEIGHT_Q4_1, WEIGHT_Q4_1}, {WEIGHT_Q8_0, WEIGHT_Q4_0, WEIGHT_BF16},
                                   {WEIGHT_F32, WEIGHT_Q4_1, WEIGHT_F16}};
    const int rows[3] = {256, 96, 96}, cols = 192, n = 3;
    for (size_t c = 0; c < sizeof types / sizeof types[0]; c++) {
        WeightMatrix w[3];
        void *data[3];
        float *alone[3], *grouped[3];
        for (int i = 0; i < 3; i++) {
            data[i] = random_matrix(types[c][i], rows[i], cols, 70 + 3 * c + i, &w[i]);
            alone[i] = malloc(sizeof(float) * n * rows[i]);
            grouped[i] = malloc(sizeof(float) * n * rows[i]);
        }
        float x[3 * 192];
        unsigned long long rng = 8;
        random_fill(x, n * cols, &rng, 1.0f);
        const WeightMatrix *ws[3] = {&w[0], &w[1], &w[2]};
        for (int threads = 1; threads <= 2; threads++) {
            ops_set_threads(threads);
            for (int i = 0; i < 3; i++)
                matmul_weights(alone[i], x, &w[i], n);
            matmul_weights_group(grouped, x, ws, 3, n);
            for (int i = 0; i < 3; i++)
                ck_assert_msg(memcmp(alone[i], grouped[i], sizeof(float) * n * rows[i]) == 0,
                              "case %zu, %d threads: matrix %d (%s) differs in the group", c, threads, i,
                              weight_type_name(types[c][i]));
        }
        for (int i = 0; i < 3; i++)
            free(data[i]), free(alone[i]), free(grouped[i]);
    }
}
END_TEST

/* Round trip: each weight comes back within half a step of its block
 * (Q4_1: (max - min) / 15; Q8_0: max|x| / 127; Q4_0: a whole step of
 * |extreme| / 8, since the far end clamps at +7), f16 within its relative
 * precision, bf16 within 2^-8. */
START_TEST(quantize_round_trip)
{
    const int cols = 128;
    float x[128], back[128];
    unsigned long long rng = 21;
    random_fill(x, cols, &rng, 3.0f);
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        WeightType t = ALL_TYPES[ti];
        unsigned char buf[512];
        weight_quantize_row(t, x, cols, buf);
        WeightMatrix w = weight_matrix(buf, t, 1, cols);
        weight_dequantize_row(&w, 0, back);
        for (int b = 0; b < cols / 32; b++) {
            float lo = INFINITY, hi = -INFINITY, amax = 0;
            for (int j = 0; j < 32; j++) {
                lo = fminf(lo, x[32 * b + j]);
                hi = fmaxf(hi, x[32 * b + j]);
                amax = fmaxf(amax, fabsf(x[32 * b + j]));
            }
            for (int j = 0; j < 32; j++) {
                float v = x[32 * b + j], err = fabsf(back[32 * b + j] - v), bound;
                switch (t) {
                case WEIGHT_F32: bound = 0; break;
                case WEIGHT_F16: bound = fabsf(v) / 2048.0f + 1e-7f; break;
                case WEIGHT_BF16: bound = fabsf(v) / 256.0f; break;
                case WEIGHT_Q8_0: bound = 0.5f * amax / 127.0f * 1.01f + amax * 1e-3f; break;
                case WEIGHT_Q4_0: bound = amax / 8.0f * 1.01f + amax * 1e-3f; break; /* +8 steps clamp to +7 */
                default: bound = 0.5f * (hi - lo) / 15.0f * 1.01f + amax * 1e-3f; break;
                }
                ck_assert_msg(err <= bound, "%s weight %d: %g came back as %g", weight_type_name(t), 32 * b + j,
                              (double)v, (double)back[32 * b + j]);
            }
        }
    }
}
END_TEST

Suite *suite_quant(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("weights");
    tcase_add_test(tc, sizes_and_names);
    tcase_add_test(tc, dequantize_hand_made_blocks);
    tcase_add_test(tc, fused_matmul_equals_dequantize_then_dot);
    tcase_add_test(tc, fused_matmul_matches_double);
    tcase_add_test(tc, fused_matmul_is_thread_count_independent);
    tcase_add_test(tc, group_equals_each_matrix_alone);
    tcase_add_test(tc, quantize_round_trip);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(quant)
