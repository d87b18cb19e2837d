/* The sampler: greedy is argmax, a seed fixes the sequence, temperature
 * sampling follows the softmax, top-p never leaves the nucleus, and bad
 * settings are refused. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "sampler.h"
#include "suites.h"

/* Draws one token from a fresh copy of the logits (sampling scales and
 * normalises them in place). */
static int draw(Sampler *s, const float *logits, float *scratch)
{
    memcpy(scratch, logits, sizeof(float) * (size_t)s->vocab_size);
    return sampler_sample(s, scratch);
}

static void init_ok(Sampler *s, int vocab, float temperature, float top_p, unsigned long long seed)
{
    Err err = {{0}};
    ck_assert_msg(sampler_init(s, vocab, temperature, top_p, seed, &err) == 0, "sampler_init: %s", err.msg);
}

START_TEST(argmax_takes_the_first_of_ties)
{
    const float a[] = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f};
    ck_assert_int_eq(sampler_argmax(a, 5), 1);
    const float b[] = {-5.0f, -4.0f, -4.0f};
    ck_assert_int_eq(sampler_argmax(b, 3), 1);
    const float c[] = {7.0f};
    ck_assert_int_eq(sampler_argmax(c, 1), 0);
    const float d[] = {1.0f, 1.0f, 1.0f, 1.0f};
    ck_assert_int_eq(sampler_argmax(d, 4), 0);
    const float e[] = {-1e30f, -INFINITY, 1e-30f, 0.0f};
    ck_assert_int_eq(sampler_argmax(e, 4), 2);
}
END_TEST

START_TEST(greedy_is_argmax_and_leaves_logits_alone)
{
    Sampler s;
    init_ok(&s, 6, 0.0f, 0.9f, 123);
    float logits[6] = {0.5f, -2.0f, 4.25f, 4.25f, 1.0f, 0.0f};
    float copy[6];
    memcpy(copy, logits, sizeof logits);
    unsigned long long state = s.rng_state;
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(sampler_sample(&s, logits), 2);
    ck_assert_mem_eq(logits, copy, sizeof logits);
    ck_assert_msg(s.rng_state == state, "greedy sampling must not consume random numbers");
    sampler_free(&s);
}
END_TEST

static void sequence(unsigned long long seed, float top_p, int *out, int n)
{
    enum { V = 50 };
    float logits[V], scratch[V];
    for (int i = 0; i < V; i++)
        logits[i] = (float)((i * 37) % V) / 10.0f; /* a spread-out distribution */
    Sampler s;
    init_ok(&s, V, 1.0f, top_p, seed);
    for (int i = 0; i < n; i++)
        out[i] = draw(&s, logits, scratch);
    sampler_free(&s);
}

START_TEST(same_seed_same_sequence)
{
    enum { N = 200 };
    static const float top_ps[] = {0.0f, 0.9f};
    for (int k = 0; k < 2; k++) {
        int a[N], b[N], c[N];
        sequence(42, top_ps[k], a, N);
        sequence(42, top_ps[k], b, N);
        sequence(43, top_ps[k], c, N);
        ck_assert_msg(memcmp(a, b, sizeof a) == 0, "top_p %g: the same seed gave two different sequences",
                      (double)top_ps[k]);
        int differ = 0;
        for (int i = 0; i < N; i++)
            differ += a[i] != c[i];
        ck_assert_msg(differ > N / 4, "top_p %g: seeds 42 and 43 agree on %d of %d draws", (double)top_ps[k],
                      N - differ, N);
    }
    /* Seed 0 is allowed (mapped to a fixed nonzero state), and works. */
    int z1[N], z2[N];
    sequence(0, 0.0f, z1, N);
    sequence(0, 0.0f, z2, N);
    ck_assert_mem_eq(z1, z2, sizeof z1);
}
END_TEST

START_TEST(random_floats_are_uniform_in_unit_interval)
{
    unsigned long long state = 7;
    enum { N = 100000, BINS = 10 };
    int bins[BINS] = {0};
    for (int i = 0; i < N; i++) {
        float r = sampler_random_f32(&state);
        ck_assert_msg(r >= 0.0f && r < 1.0f, "random float %.9g outside [0, 1)", (double)r);
        bins[(int)(r * BINS)]++;
    }
    for (int b = 0; b < BINS; b++) /* expected 10,000 each; sd ~95 */
        ck_assert_msg(abs(bins[b] - N / BINS) < 600, "bin %d has %d of %d draws", b, bins[b], N);
}
END_TEST

/* Draws many tokens and compares frequencies with softmax(logits / T).
 * The bound is 5 standard deviations of a binomial count (plus a little),
 * so a correct sampler fails it with probability ~1e-6 per token, while a
 * sampler that ignores the temperature or skips the softmax is off by tens
 * of standard deviations. */
static void check_frequencies(float temperature)
{
    enum { V = 5, N = 200000 };
    const float logits[V] = {1.0f, 2.0f, 0.0f, -1.0f, 1.5f};
    double p[V], z = 0;
    for (int i = 0; i < V; i++)
        z += p[i] = exp(logits[i] / temperature);
    Sampler s;
    init_ok(&s, V, temperature, 0.0f, 2024);
    int counts[V] = {0};
    float scratch[V];
    for (int n = 0; n < N; n++) {
        int t = draw(&s, logits, scratch);
        ck_assert(t >= 0 && t < V);
        counts[t]++;
    }
    for (int i = 0; i < V; i++) {
        double want = N * p[i] / z, sd = sqrt(N * (p[i] / z) * (1 - p[i] / z));
        ck_assert_msg(fabs(counts[i] - want) <= 5 * sd + 2, "T=%g token %d: drawn %d times, softmax expects %.0f +- %.0f",
                      (double)temperature, i, counts[i], want, 5 * sd);
    }
    sampler_free(&s);
}

START_TEST(temperature_sampling_follows_softmax)
{
    check_frequencies(1.0f);
    check_frequencies(0.5f);
    check_frequencies(2.0f);
}
END_TEST

/* Probabilities 0.5, 0.3, 0.1, 0.06, 0.04: with top_p 0.7 the nucleus is
 * the two most likely tokens (0.5 <= 0.7 < 0.8), drawn in ratio 5:3. */
START_TEST(top_p_stays_in_the_nucleus)
{
    enum { V = 5, N = 50000 };
    const double probs[V] = {0.06, 0.3, 0.04, 0.5, 0.1}; /* shuffled: the sort must find them */
    float logits[V], scratch[V];
    for (int i = 0; i < V; i++)
        logits[i] = (float)log(probs[i]);
    Sampler s;
    init_ok(&s, V, 1.0f, 0.7f, 99);
    int counts[V] = {0};
    for (int n = 0; n < N; n++)
        counts[draw(&s, logits, scratch)]++;
    ck_assert_msg(counts[0] == 0 && counts[2] == 0 && counts[4] == 0,
                  "tokens outside the nucleus were drawn: %d, %d, %d times", counts[0], counts[2], counts[4]);
    double share = (double)counts[3] / N; /* 0.5 / 0.8 = 0.625, sd 0.0022 */
    ck_assert_msg(fabs(share - 0.625) < 0.015, "token 3 has %.3f of the nucleus draws, expected 0.625", share);
    sampler_free(&s);

    /* top_p 0.85: the nucleus grows to three tokens (0.8 <= 0.85 < 0.9). */
    init_ok(&s, V, 1.0f, 0.85f, 100);
    memset(counts, 0, sizeof counts);
    for (int n = 0; n < N; n++)
        counts[draw(&s, logits, scratch)]++;
    ck_assert_msg(counts[0] == 0 && counts[2] == 0, "outside the nucleus: %d, %d", counts[0], counts[2]);
    ck_assert_msg(counts[4] > 0, "the third token of the nucleus was never drawn");
    sampler_free(&s);
}
END_TEST

/* A large vocabulary where nearly all tokens fall under the cutoff that
 * top-p uses to skip sorting them: the three likely tokens share 0.95. */
START_TEST(top_p_large_vocabulary)
{
    enum { V = 1000, N = 20000 };
    float *logits = malloc(sizeof(float) * V), *scratch = malloc(sizeof(float) * V);
    /* p(tail token) = 0.05 / 997 each; p(500) = 0.5, p(17) = 0.3, p(901) = 0.15 */
    for (int i = 0; i < V; i++)
        logits[i] = (float)log(0.05 / 997);
    logits[500] = (float)log(0.5);
    logits[17] = (float)log(0.3);
    logits[901] = (float)log(0.15);
    Sampler s;
    init_ok(&s, V, 1.0f, 0.9f, 5);
    int seen[3] = {0};
    for (int n = 0; n < N; n++) {
        int t = draw(&s, logits, scratch);
        ck_assert_msg(t == 500 || t == 17 || t == 901, "draw %d gave token %d, outside the nucleus {500, 17, 901}",
                      n, t);
        seen[t == 500 ? 0 : t == 17 ? 1 : 2]++;
    }
    ck_assert_msg(seen[0] && seen[1] && seen[2], "every nucleus token must be drawn: %d %d %d", seen[0], seen[1],
                  seen[2]);
    sampler_free(&s);
    free(logits);
    free(scratch);
}
END_TEST

/* A nearly flat distribution over many tokens with a tiny top_p: every
 * probability is below the cutoff (1 - top_p) / (n - 1) that top-p uses to
 * skip the sort, yet the nucleus is not empty: it is the most likely token
 * alone (its probability, 5e-4, already exceeds top_p = 1e-5). */
START_TEST(top_p_below_one_over_vocab)
{
    enum { V = 2000 };
    float logits[V], scratch[V];
    for (int i = 0; i < V; i++)
        logits[i] = 0.0f;
    logits[5] = 0.0004f; /* p = 5.0018e-4, under the cutoff 5.0025e-4 */
    Sampler s;
    init_ok(&s, V, 1.0f, 1e-5f, 3);
    for (int n = 0; n < 100; n++) {
        int t = draw(&s, logits, scratch);
        ck_assert_msg(t == 5, "draw %d gave token %d; the nucleus is token 5 alone", n, t);
    }
    sampler_free(&s);
}
END_TEST

START_TEST(bad_settings_are_refused)
{
    static const struct {
        int vocab;
        float temperature, top_p;
        const char *word;
    } cases[] = {
        {0, 1.0f, 0.9f, "vocab_size"},
        {-3, 1.0f, 0.9f, "vocab_size"},
        {10, -1.0f, 0.9f, "temperature"},
        {10, NAN, 0.9f, "temperature"},
        {10, INFINITY, 0.9f, "temperature"},
        {10, 1.0f, -0.1f, "top-p"},
        {10, 1.0f, 1.5f, "top-p"},
        {10, 1.0f, NAN, "top-p"},
    };
    mem_reset();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Sampler s;
        Err err = {{0}};
        ck_assert_msg(sampler_init(&s, cases[i].vocab, cases[i].temperature, cases[i].top_p, 1, &err) == -1,
                      "case %zu was accepted", i);
        ck_assert_msg(strstr(err.msg, cases[i].word) != NULL, "case %zu: message '%s' does not mention %s", i,
                      err.msg, cases[i].word);
    }
    ck_assert_int_eq(mem_live_buffers(), 0); /* nothing leaked by the refusals */
    /* The edges of the valid ranges are accepted. */
    Sampler s;
    init_ok(&s, 1, 0.0f, 0.0f, 0);
    sampler_free(&s);
    init_ok(&s, 1, 100.0f, 1.0f, ~0ull);
    float one[1] = {3.0f};
    ck_assert_int_eq(sampler_sample(&s, one), 0);
    sampler_free(&s);
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

Suite *suite_sampler(void)
{
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("sampling");
    tcase_add_test(tc, argmax_takes_the_first_of_ties);
    tcase_add_test(tc, greedy_is_argmax_and_leaves_logits_alone);
    tcase_add_test(tc, same_seed_same_sequence);
    tcase_add_test(tc, random_floats_are_uniform_in_unit_interval);
    tcase_add_test(tc, temperature_sampling_follows_softmax);
    tcase_add_test(tc, top_p_stays_in_the_nucleus);
    tcase_add_test(tc, top_p_large_vocabulary);
    tcase_add_test(tc, top_p_below_one_over_vocab);
    tcase_add_test(tc, bad_settings_are_refused);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(sampler)
