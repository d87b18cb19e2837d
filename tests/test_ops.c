/* The CPU ops of common/cpu/ops.c against plain double-precision references
 * written here, and the bitwise properties the chapters rely on: a matmul
 * row does not depend on how many tokens share the call, nor on the number
 * of threads.
 *
 * Tolerances: every op here sums at most a few hundred float products, so
 * its error against the double reference is a few units in the last place
 * of the largest partial sum (float epsilon is 1.2e-7). The bounds below
 * (1e-5 relative to the size of the terms) are about 100x that, and a wrong
 * implementation (a missing term, a wrong index, a missing scale) is off by
 * far more. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "ops.h"
#include "suites.h"

/* A fixed pseudo-random stream in [-1, 1), independent of the library. */
static float rnd(unsigned *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static float *random_floats(int n, unsigned seed)
{
    float *x = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++)
        x[i] = rnd(&seed);
    return x;
}

/* |got - want| <= tol * scale, with scale the sum of magnitudes of the
 * terms that made want (so cancellation does not make the bound unfair). */
static void assert_close(double got, double want, double scale, double tol, const char *what, int i)
{
    ck_assert_msg(fabs(got - want) <= tol * (scale > 1e-30 ? scale : 1.0),
                  "%s[%d]: got %.9g, want %.9g (diff %.3g, allowed %.3g)", what, i, got, want, fabs(got - want),
                  tol * scale);
}

START_TEST(dot_matches_double)
{
    static const int sizes[] = {1, 3, 7, 8, 9, 16, 37, 64, 173};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int n = sizes[s];
        float *a = random_floats(n, 11u + (unsigned)n), *b = random_floats(n, 97u + (unsigned)n);
        double want = 0, scale = 0;
        for (int i = 0; i < n; i++) {
            want += (double)a[i] * b[i];
            scale += fabs((double)a[i] * b[i]);
        }
        assert_close(dot(a, b, n), want, scale, 1e-5, "dot", n);
        free(a);
        free(b);
    }
}
END_TEST

START_TEST(matmul_matches_double)
{
    const int n_tokens = 5, in_dim = 37, out_dim = 11; /* in_dim % 8 != 0, out_dim % 4 != 0 */
    float *x = random_floats(n_tokens * in_dim, 1), *w = random_floats(out_dim * in_dim, 2);
    float *out = malloc(sizeof(float) * n_tokens * out_dim);
    matmul(out, x, w, n_tokens, in_dim, out_dim);
    for (int t = 0; t < n_tokens; t++)
        for (int o = 0; o < out_dim; o++) {
            double want = 0, scale = 0;
            for (int i = 0; i < in_dim; i++) {
                double p = (double)w[o * in_dim + i] * x[t * in_dim + i];
                want += p;
                scale += fabs(p);
            }
            assert_close(out[t * out_dim + o], want, scale, 1e-5, "matmul", t * out_dim + o);
        }
    free(x);
    free(w);
    free(out);
}
END_TEST

/* The property chapter 1 vs chapter 2 rests on: a token's row is the same
 * bits whether it is computed alone, in a batch, or by dot(). */
START_TEST(matmul_rows_are_batch_independent)
{
    static const int shapes[][3] = {
        /* n_tokens, in_dim, out_dim */
        {7, 37, 11}, {3, 5, 3}, {9, 64, 13}, {4, 172, 66}, {1, 9, 1}, {6, 8, 4},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int n = shapes[s][0], in = shapes[s][1], out_dim = shapes[s][2];
        float *x = random_floats(n * in, 10u + (unsigned)s), *w = random_floats(out_dim * in, 20u + (unsigned)s);
        float *batched = malloc(sizeof(float) * n * out_dim), *single = malloc(sizeof(float) * out_dim);
        matmul(batched, x, w, n, in, out_dim);
        for (int t = 0; t < n; t++) {
            matmul(single, x + t * in, w, 1, in, out_dim);
            ck_assert_msg(memcmp(single, batched + t * out_dim, sizeof(float) * out_dim) == 0,
                          "shape %zu: token %d alone differs from token %d in a batch of %d", s, t, t, n);
            for (int o = 0; o < out_dim; o++) {
                float d = dot(w + o * in, x + t * in, in);
                ck_assert_msg(memcmp(&d, &batched[t * out_dim + o], sizeof d) == 0,
                              "shape %zu: row %d token %d: matmul %.9g != dot %.9g", s, o, t,
                              (double)batched[t * out_dim + o], (double)d);
            }
        }
        free(x);
        free(w);
        free(batched);
        free(single);
    }
}
END_TEST

/* Large enough to take the parallel path (see PARALLEL_MIN_MACS in ops.c:
 * 2^17 multiply-adds); Check forks per test, so setting threads is local. */
START_TEST(matmul_is_thread_count_independent)
{
    const int n = 7, in = 203, out_dim = 131; /* 186,011 multiply-adds */
    float *x = random_floats(n * in, 5), *w = random_floats(out_dim * in, 6);
    float *one = malloc(sizeof(float) * n * out_dim), *two = malloc(sizeof(float) * n * out_dim);
    ops_set_threads(1);
    ck_assert_int_eq(ops_threads(), 1);
    matmul(one, x, w, n, in, out_dim);
    ops_set_threads(2);
    ck_assert_int_eq(ops_threads(), 2);
    matmul(two, x, w, n, in, out_dim);
    ck_assert_msg(memcmp(one, two, sizeof(float) * n * out_dim) == 0, "1 and 2 threads give different bits");
    free(x);
    free(w);
    free(one);
    free(two);
}
END_TEST

START_TEST(rmsnorm_matches_double)
{
    const int n = 45;
    float *x = random_floats(n, 3), *w = random_floats(n, 4), *out = malloc(sizeof(float) * n);
    for (int i = 0; i < n; i++)
        x[i] *= 3.0f; /* not already normalised */
    rmsnorm(out, x, w, n);
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    double inv = 1.0 / sqrt(ss / n + 1e-5);
    for (int i = 0; i < n; i++)
        assert_close(out[i], w[i] * inv * x[i], fabs(w[i] * inv * x[i]), 1e-5, "rmsnorm", i);
    /* In place gives the same bits. */
    float *copy = malloc(sizeof(float) * n);
    memcpy(copy, x, sizeof(float) * n);
    rmsnorm(copy, copy, w, n);
    ck_assert_mem_eq(copy, out, sizeof(float) * n);
    free(x);
    free(w);
    free(out);
    free(copy);
}
END_TEST

START_TEST(softmax_matches_double_and_is_stable)
{
    float x[6] = {1.0f, 2.0f, -3.0f, 0.5f, 2.0f, 0.0f};
    double want[6], sum = 0;
    for (int i = 0; i < 6; i++)
        sum += want[i] = exp(x[i]);
    softmax(x, 6);
    double total = 0;
    for (int i = 0; i < 6; i++) {
        assert_close(x[i], want[i] / sum, 1.0, 1e-6, "softmax", i);
        total += x[i];
    }
    ck_assert_msg(fabs(total - 1.0) < 1e-6, "probabilities sum to %.9g", total);
    ck_assert_msg(x[1] == x[4], "equal logits must give equal probabilities");

    /* exp(1000) overflows a float; subtracting the max keeps it finite. */
    float big[3] = {1000.0f, 1001.0f, 999.0f};
    softmax(big, 3);
    double e0 = exp(-1.0), e2 = exp(-2.0), z = e0 + 1.0 + e2;
    assert_close(big[0], e0 / z, 1.0, 1e-6, "softmax(big)", 0);
    assert_close(big[1], 1.0 / z, 1.0, 1e-6, "softmax(big)", 1);
    assert_close(big[2], e2 / z, 1.0, 1e-6, "softmax(big)", 2);

    float one[1] = {-42.0f};
    softmax(one, 1);
    ck_assert(one[0] == 1.0f);
}
END_TEST

START_TEST(rope_tables_match_double)
{
    const int seq_len = 40, head_dim = 12, half = head_dim / 2;
    float *c = malloc(sizeof(float) * seq_len * half), *s = malloc(sizeof(float) * seq_len * half);
    rope_tables(c, s, seq_len, head_dim);
    for (int p = 0; p < seq_len; p++)
        for (int i = 0; i < half; i++) {
            double angle = p * pow(10000.0, -2.0 * i / head_dim);
            /* float angles carry a relative error of ~1e-7, so the absolute
             * error of cos/sin grows with the angle (at most 40 rad here). */
            assert_close(c[p * half + i], cos(angle), 1.0, 1e-5, "cos", p * half + i);
            assert_close(s[p * half + i], sin(angle), 1.0, 1e-5, "sin", p * half + i);
        }
    free(c);
    free(s);
}
END_TEST

START_TEST(rope_rotate_matches_double_and_keeps_norms)
{
    const int seq_len = 32, head_dim = 10, heads = 3, width = heads * head_dim, half = head_dim / 2;
    float *c = malloc(sizeof(float) * seq_len * half), *s = malloc(sizeof(float) * seq_len * half);
    rope_tables(c, s, seq_len, head_dim);
    float *v = random_floats(width, 8), *rot = malloc(sizeof(float) * width);

    /* Position 0 rotates by 0: the identity, bit for bit. */
    memcpy(rot, v, sizeof(float) * width);
    rope_rotate(rot, width, head_dim, c, s);
    ck_assert_mem_eq(rot, v, sizeof(float) * width);

    for (int pos = 1; pos < seq_len; pos += 7) {
        memcpy(rot, v, sizeof(float) * width);
        rope_rotate(rot, width, head_dim, c + pos * half, s + pos * half);
        for (int i = 0; i < width; i += 2) {
            int pair = (i % head_dim) / 2;
            double angle = pos * pow(10000.0, -2.0 * pair / head_dim);
            double w0 = v[i] * cos(angle) - v[i + 1] * sin(angle);
            double w1 = v[i] * sin(angle) + v[i + 1] * cos(angle);
            assert_close(rot[i], w0, 1.0, 1e-5, "rope", i);
            assert_close(rot[i + 1], w1, 1.0, 1e-5, "rope", i + 1);
            /* A rotation keeps the length of every pair. */
            double before = (double)v[i] * v[i] + (double)v[i + 1] * v[i + 1];
            double after = (double)rot[i] * rot[i] + (double)rot[i + 1] * rot[i + 1];
            assert_close(after, before, before, 1e-5, "pair norm", i);
        }
    }
    free(c);
    free(s);
    free(v);
    free(rot);
}
END_TEST

START_TEST(swiglu_matches_double)
{
    const int n = 29;
    float *g = random_floats(n, 12), *u = random_floats(n, 13), *orig = malloc(sizeof(float) * n);
    for (int i = 0; i < n; i++)
        g[i] *= 6.0f; /* cover the flat and the steep parts of silu */
    memcpy(orig, g, sizeof(float) * n);
    swiglu(g, u, n);
    for (int i = 0; i < n; i++) {
        double x = orig[i], want = x / (1.0 + exp(-x)) * u[i];
        assert_close(g[i], want, fabs(want), 1e-5, "swiglu", i);
    }
    free(g);
    free(u);
    free(orig);
}
END_TEST

START_TEST(add_and_score_match_double)
{
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {0.5f, -2, 0, 1e-3f, -5};
    add_inplace(a, b, 5);
    const float want[5] = {1.5f, 0, 3, 4.001f, 0};
    for (int i = 0; i < 5; i++)
        assert_close(a[i], want[i], 1.0, 1e-6, "add_inplace", i);
    const int hd = 9;
    float *q = random_floats(hd, 30), *k = random_floats(hd, 31);
    double dotq = 0, scale = 0;
    for (int i = 0; i < hd; i++) {
        dotq += (double)q[i] * k[i];
        scale += fabs((double)q[i] * k[i]);
    }
    assert_close(attention_score(q, k, hd), dotq / 3.0, scale / 3.0, 1e-5, "attention_score", 0);
    free(q);
    free(k);
}
END_TEST

/* Causal attention of one head over rows of a strided K/V layout, as a
 * cache with several heads per row stores it. */
START_TEST(attention_reference_matches_double)
{
    const int n_pos = 13, head_dim = 6, stride = 4 * head_dim;
    float *q = random_floats(head_dim, 40);
    float *keys = random_floats(n_pos * stride, 41), *values = random_floats(n_pos * stride, 42);
    for (int i = 0; i < head_dim; i++)
        q[i] *= 4.0f; /* a peaked distribution, not a near-uniform one */
    float out[6], scores[13];
    attention_reference(out, q, keys, values, n_pos, stride, head_dim, scores);
    double s[13], max = -1e300, z = 0;
    for (int t = 0; t < n_pos; t++) {
        s[t] = 0;
        for (int i = 0; i < head_dim; i++)
            s[t] += (double)q[i] * keys[t * stride + i];
        s[t] /= sqrt((double)head_dim);
        max = s[t] > max ? s[t] : max;
    }
    for (int t = 0; t < n_pos; t++)
        z += s[t] = exp(s[t] - max);
    for (int i = 0; i < head_dim; i++) {
        double want = 0;
        for (int t = 0; t < n_pos; t++)
            want += s[t] / z * values[t * stride + i];
        assert_close(out[i], want, 1.0, 1e-5, "attention", i);
    }
    /* One position: the output is that position's value, whatever q. */
    attention_reference(out, q, keys, values, 1, stride, head_dim, scores);
    for (int i = 0; i < head_dim; i++)
        ck_assert(out[i] == values[i]);
    free(q);
    free(keys);
    free(values);
}
END_TEST

Suite *suite_ops(void)
{
    Suite *s = suite_create("ops");
    TCase *ref = tcase_create("reference");
    tcase_add_test(ref, dot_matches_double);
    tcase_add_test(ref, matmul_matches_double);
    tcase_add_test(ref, rmsnorm_matches_double);
    tcase_add_test(ref, softmax_matches_double_and_is_stable);
    tcase_add_test(ref, rope_tables_match_double);
    tcase_add_test(ref, rope_rotate_matches_double_and_keeps_norms);
    tcase_add_test(ref, swiglu_matches_double);
    tcase_add_test(ref, add_and_score_match_double);
    tcase_add_test(ref, attention_reference_matches_double);
    suite_add_tcase(s, ref);
    TCase *bits = tcase_create("bitwise");
    tcase_add_test(bits, matmul_rows_are_batch_independent);
    tcase_add_test(bits, matmul_is_thread_count_independent);
    suite_add_tcase(s, bits);
    return s;
}

REGISTER_SUITE(ops)
