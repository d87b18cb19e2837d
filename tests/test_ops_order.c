/* The summation order of the CPU ops, pinned bit for bit. dot(), matmul()
 * and attention_reference() are written for speed (vector lanes, running
 * sums in registers); these tests hold them to the plain scalar loops that
 * define their order, so that a faster version can never change a bit. */
#include <check.h>
#include <math.h>
#include <string.h>

#include "ops.h"
#include "sampler.h"
#include "suites.h"

static void random_fill(float *x, int n, unsigned long long *rng)
{
    for (int i = 0; i < n; i++)
        x[i] = 2.0f * sampler_random_f32(rng) - 1.0f;
}

/* dot()'s documented order: 32 partial sums, partial k collecting the
 * products of elements k, k + 32, k + 64, ... in turn over the first
 * n - n % 32 elements; partial k + 16 added to partial k, then k + 8 to k;
 * the eight combined pairwise; then the tail in order. */
static float dot_by_definition(const float *a, const float *b, int n)
{
    float p[32] = {0};
    int j = 0;
    for (; j + 32 <= n; j += 32)
        for (int k = 0; k < 32; k++)
            p[k] += a[j + k] * b[j + k];
    float q[16], r[8];
    for (int k = 0; k < 16; k++)
        q[k] = p[k] + p[k + 16];
    for (int k = 0; k < 8; k++)
        r[k] = q[k] + q[k + 8];
    float sum = ((r[0] + r[4]) + (r[1] + r[5])) + ((r[2] + r[6]) + (r[3] + r[7]));
    for (; j < n; j++)
        sum += a[j] * b[j];
    return sum;
}

static int same_bits(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

START_TEST(dot_follows_its_definition)
{
    unsigned long long rng = 1;
    float a[300] = {0}, b[300] = {0};
    for (int n = 0; n <= 300; n += (n < 100 ? 1 : 37)) {
        random_fill(a, n, &rng);
        random_fill(b, n, &rng);
        ck_assert_msg(same_bits(dot(a, b, n), dot_by_definition(a, b, n)), "dot of length %d differs", n);
    }
}
END_TEST

/* Shapes around the kernel's tiles (4 rows, 3 tokens, 32 columns) and
 * batches of 1 to 8 tokens: every output must be the definition's bits. */
START_TEST(matmul_rows_equal_dot_for_any_batch)
{
    unsigned long long rng = 2;
    static float w[96 * 67], x[8 * 96], out[8 * 67]; /* room for the largest shape below */
    int shapes[][2] = {{45, 37}, {8, 4}, {16, 5}, {7, 3}, {64, 36}, {1, 1}, {96, 67}, {32, 9}, {63, 6}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int in = shapes[s][0], od = shapes[s][1];
        random_fill(w, in * od, &rng);
        random_fill(x, 8 * in, &rng);
        for (int n_tokens = 1; n_tokens <= 8; n_tokens++) {
            matmul(out, x, w, n_tokens, in, od);
            for (int t = 0; t < n_tokens; t++)
                for (int o = 0; o < od; o++)
                    ck_assert_msg(same_bits(out[t * od + o], dot_by_definition(w + o * in, x + t * in, in)),
                                  "matmul %dx%d, %d tokens: row %d of token %d differs from dot()", in, od, n_tokens,
                                  o, t);
        }
    }
}
END_TEST

/* attention_score() is dot() over the head, then the division. */
START_TEST(attention_score_follows_its_definition)
{
    unsigned long long rng = 4;
    float q[130], k[130];
    for (int hd = 1; hd <= 130; hd += (hd < 70 ? 1 : 13)) {
        random_fill(q, hd, &rng);
        random_fill(k, hd, &rng);
        float want = dot_by_definition(q, k, hd) / sqrtf((float)hd);
        ck_assert_msg(same_bits(attention_score(q, k, hd), want), "attention_score of head_dim %d differs", hd);
    }
}
END_TEST

/* The attention reference against the per-position loop every chapter's
 * attend would write: scores, softmax, weighted sum from a zeroed output. */
START_TEST(attention_reference_equals_the_plain_loop)
{
    unsigned long long rng = 3;
    static float keys[70 * 96], values[70 * 96], q[48], scores[70], want[48], got[48];
    int head_dims[] = {1, 2, 7, 8, 10, 16, 24, 33, 48};
    for (size_t h = 0; h < sizeof head_dims / sizeof head_dims[0]; h++) {
        int hd = head_dims[h], stride = 2 * hd;
        for (int n_pos = 1; n_pos <= 70; n_pos += 23) {
            random_fill(keys, n_pos * stride, &rng);
            random_fill(values, n_pos * stride, &rng);
            random_fill(q, hd, &rng);
            for (int t = 0; t < n_pos; t++)
                scores[t] = attention_score(q, keys + t * stride, hd);
            softmax(scores, n_pos);
            memset(want, 0, sizeof want);
            for (int t = 0; t < n_pos; t++)
                attention_accumulate(want, scores[t], values + t * stride, hd);
            attention_reference(got, q, keys, values, n_pos, stride, hd, scores);
            ck_assert_msg(memcmp(got, want, (size_t)hd * sizeof(float)) == 0,
                          "attention_reference (head_dim %d, %d positions) differs from the plain loop", hd, n_pos);
        }
    }
}
END_TEST

Suite *suite_ops_order(void)
{
    Suite *s = suite_create("ops_order");
    TCase *tc = tcase_create("bits");
    tcase_add_test(tc, dot_follows_its_definition);
    tcase_add_test(tc, matmul_rows_equal_dot_for_any_batch);
    tcase_add_test(tc, attention_score_follows_its_definition);
    tcase_add_test(tc, attention_reference_equals_the_plain_loop);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(ops_order)
