/* The CPU references of the K/V kernels (kernels/check/kv_ref.h): what the CUDA
 * kernels are validated against must itself be right. */
#include <check.h>
#include <string.h>

#include "dtype.h"
#include "kv_ref.h"
#include "ops.h"
#include "sampler.h"
#include "suites.h"

static void fill(float *x, int n, unsigned long long *rng)
{
    for (int i = 0; i < n; i++)
        x[i] = 2.0f * sampler_random_f32(rng) - 1.0f;
}

START_TEST(kv_write_stores_rows_at_their_slots)
{
    enum { ROWS = 8, DIM = 4, N = 3 };
    float k[N * DIM], v[N * DIM];
    unsigned long long rng = 1;
    fill(k, N * DIM, &rng);
    fill(v, N * DIM, &rng);
    uint16_t kc[ROWS * DIM], vc[ROWS * DIM];
    memset(kc, 0x55, sizeof kc);
    memset(vc, 0x55, sizeof vc);
    long long slots[N] = {6, -1, 2};
    kv_write_reference(kc, vc, DTYPE_F16, k, v, slots, N, DIM);
    for (int r = 0; r < ROWS; r++)
        for (int j = 0; j < DIM; j++) {
            int token = r == 6 ? 0 : r == 2 ? 2 : -1;
            uint16_t want_k = token < 0 ? 0x5555 : dtype_f32_to_f16(k[token * DIM + j]);
            uint16_t want_v = token < 0 ? 0x5555 : dtype_f32_to_f16(v[token * DIM + j]);
            ck_assert_msg(kc[r * DIM + j] == want_k && vc[r * DIM + j] == want_v, "row %d element %d", r, j);
        }
}
END_TEST

START_TEST(paged_row_at_block_boundaries)
{
    int table[] = {7, 2, 9};
    int bs = 4;
    ck_assert_int_eq(paged_row(table, bs, 0), 28);
    ck_assert_int_eq(paged_row(table, bs, 3), 31);
    ck_assert_int_eq(paged_row(table, bs, 4), 8);
    ck_assert_int_eq(paged_row(table, bs, 7), 11);
    ck_assert_int_eq(paged_row(table, bs, 8), 36);
    int one[] = {5, 0, 3};
    ck_assert_int_eq(paged_row(one, 1, 2), 3);
}
END_TEST

/* Attention through a block table over shuffled blocks gives the very same
 * bits as attention over the contiguous rows: same values, same order. */
START_TEST(paged_attention_equals_contiguous)
{
    enum { HD = 8, KV_DIM = 16, T = 23, BS = 4, BLOCKS = 8 };
    float keys[T * KV_DIM], values[T * KV_DIM], q[HD];
    float pool_k[BLOCKS * BS * KV_DIM], pool_v[BLOCKS * BS * KV_DIM];
    unsigned long long rng = 2;
    fill(keys, T * KV_DIM, &rng);
    fill(values, T * KV_DIM, &rng);
    fill(q, HD, &rng);
    memset(pool_k, 0, sizeof pool_k);
    memset(pool_v, 0, sizeof pool_v);
    int table[] = {5, 0, 7, 2, 3, 6}; /* 6 blocks hold 23 positions */
    for (int t = 0; t < T; t++) {
        memcpy(pool_k + paged_row(table, BS, t) * KV_DIM, keys + t * KV_DIM, sizeof(float) * KV_DIM);
        memcpy(pool_v + paged_row(table, BS, t) * KV_DIM, values + t * KV_DIM, sizeof(float) * KV_DIM);
    }
    for (int head = 0; head < KV_DIM / HD; head++)
        for (int n_pos = 1; n_pos <= T; n_pos += 5) {
            float want[HD], got[HD], scores[T];
            attention_reference(want, q, keys + head * HD, values + head * HD, n_pos, KV_DIM, HD, scores);
            paged_attention_reference(got, q, pool_k + head * HD, pool_v + head * HD, table, BS, n_pos, KV_DIM, HD,
                                      scores);
            ck_assert_mem_eq(got, want, sizeof want);
        }
}
END_TEST

START_TEST(block_copy_copies_whole_blocks_in_every_layer)
{
    enum { LAYERS = 3, BLOCKS = 5, BS = 2, ROW = 6 };
    unsigned char k[LAYERS * BLOCKS * BS * ROW], v[sizeof k], k0[sizeof k], v0[sizeof k];
    for (size_t i = 0; i < sizeof k; i++) {
        k0[i] = (unsigned char)i;
        v0[i] = (unsigned char)(255 - i);
    }
    memcpy(k, k0, sizeof k);
    memcpy(v, v0, sizeof v);
    int pairs[] = {1, 4, 0, 2};
    kv_block_copy_reference(k, v, pairs, 2, LAYERS, BLOCKS * BS, BS, ROW);
    size_t run = BS * ROW, layer = BLOCKS * run;
    for (int l = 0; l < LAYERS; l++)
        for (int b = 0; b < BLOCKS; b++) {
            int src = b == 4 ? 1 : b == 2 ? 0 : b;
            ck_assert_mem_eq(k + l * layer + b * run, k0 + l * layer + src * run, run);
            ck_assert_mem_eq(v + l * layer + b * run, v0 + l * layer + src * run, run);
        }
}
END_TEST

Suite *suite_kv_ref(void)
{
    Suite *s = suite_create("kv_ref");
    TCase *tc = tcase_create("references");
    tcase_add_test(tc, kv_write_stores_rows_at_their_slots);
    tcase_add_test(tc, paged_row_at_block_boundaries);
    tcase_add_test(tc, paged_attention_equals_contiguous);
    tcase_add_test(tc, block_copy_copies_whole_blocks_in_every_layer);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(kv_ref)
