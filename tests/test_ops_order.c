/* The summation order of the CPU ops, pinned bit for bit. dot(), matmul()
 * and attention_reference() are written for speed (vector lanes, running
 * sums in registers); these tests hold them to the plain scalar loops that
 * define their order, so that a faster version can never change a bit. */
#include <check.h>
#include <string.h>

#include "ops.h"
#include "sampler.h"
#include "suites.h"

static void random_fill(float *x, int n, unsigned long long *rng)
{
    for (int i = 0; i < n; i++)
        x[i] = 2.0f * sampler_random_f32(rng) - 1.0f;
}

/* dot()'s documented order: eight interleaved partial sums over the first
 * n - n % 8 elements, combined pairwise, then the tail in order. */
static float dot_by_definition(const float *a, const float *b, int n)
{
    float acc[8] = {0};
    int j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += a[j + l] * b[j + l];
    float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
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
    for (int n = 0; n <= 300; n += (n < 40 ? 1 : 37)) {
        random_fill(a, n, &rng);
        random_fill(b, n, &rng);
        ck_assert_msg(same_bits(dot(a, b, n), dot_by_definition(a, b, n)), "dot of length %d differs", n);
    }
}
END_TEST

START_TEST(matmul_rows_equal_dot_for_any_batch)
{
    unsigned long long rng = 2;
    static float w[64 * 64], x[3 * 64], out[3 * 64]; /* room for the largest shape below */
    int shapes[][2] = {{45, 37}, {8, 4}, {16, 5}, {7, 3}, {64, 36}, {1, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int in = shapes[s][0], od = shapes[s][1];
        random_fill(w, in * od, &rng);
        random_fill(x, 3 * in, &rng);
        for (int n_tokens = 1; n_tokens <= 3; n_tokens++) {
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

/* The attention reference against the per-position loop every chapter's
 * attend would write: scores, softmax, weighted sum from a zeroed output. */
START_TEST(attention_reference_equals_the_plain_loop)
{
    unsigned long long rng = 3;
    static float keys[70 * 48], values[70 * 48], q[24], scores[70], want[24], got[24];
    int head_dims[] = {1, 2, 7, 8, 10, 16, 24};
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
    tcase_add_test(tc, attention_reference_equals_the_plain_loop);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(ops_order)
