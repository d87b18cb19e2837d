/* The CPU reference of the K/V write kernel (kernels/check/kv_ref.h): what
 * the CUDA kernel is validated against must itself be right. (The paged
 * kernels' references are chapter 4's own paged_attention() and
 * block_pool_copy(), tested by the lab and test_block_pool.c.) */
#include <check.h>
#include <string.h>

#include "dtype.h"
#include "kv_ref.h"
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

Suite *suite_kv_ref(void)
{
    Suite *s = suite_create("kv_ref");
    TCase *tc = tcase_create("references");
    tcase_add_test(tc, kv_write_stores_rows_at_their_slots);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(kv_ref)
