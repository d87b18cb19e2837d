/* The sampler: greedy is argmax, a seed fixes the sequence, temperature
 * sampling follows the softmax, top-p never leaves the nucleus, and bad
 * settings are refused; then the filters and penalties added after it
 * (min-p, top-k, top-p's crossing token, repetition, frequency and
 * presence penalties): the edge cases that make them greedy, hand-worked
 * penalties, and a seeded distribution test per filter against an
 * independent reference of the filtered, renormalised distribution. */
#include <check.h>
#include <math.h>
#include <stdio.h>
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

/* ------------------------------------------------------------ filters and penalties */

static void init_params_ok(Sampler *s, int vocab, const SamplingParams *p, unsigned long long seed)
{
    Err err = {{0}};
    ck_assert_msg(sampler_init_params(s, vocab, p, seed, &err) == 0, "sampler_init_params: %s", err.msg);
}

static SamplingParams params(float temperature, int top_k, float top_p, float min_p)
{
    SamplingParams p = sampling_params_default();
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    return p;
}

/* Random logits in [-5, 5), and two of them tied for the top at ids 3 and
 * 7 every fourth vector (greedy picks 3, the lower id). */
static void random_logits(float *x, int n, unsigned long long *rng, int tie)
{
    for (int i = 0; i < n; i++)
        x[i] = 10.0f * sampler_random_f32(rng) - 5.0f;
    if (tie)
        x[3] = x[7] = 6.0f;
}

/* Whatever the temperature and the other filters, a filter that leaves
 * one token leaves the greedy one: top-k 1, and top-p 1e-9 (the first
 * token already holds more than 1e-9). */
static void expect_greedy_with(const char *what, SamplingParams p)
{
    enum { V = 512, VECTORS = 100 };
    static const float temperatures[] = {0.01f, 0.1f, 0.7f, 1.0f, 1.5f, 10.0f, 100.0f};
    float logits[V], scratch[V];
    unsigned long long rng = 77;
    for (size_t t = 0; t < sizeof temperatures / sizeof temperatures[0]; t++) {
        p.temperature = temperatures[t];
        Sampler s;
        init_params_ok(&s, V, &p, 5 + t);
        for (int k = 0; k < VECTORS; k++) {
            random_logits(logits, V, &rng, k % 4 == 0);
            int want = sampler_argmax(logits, V), got = draw(&s, logits, scratch);
            ck_assert_msg(got == want, "%s at T=%g, vector %d: drew token %d, greedy is %d", what,
                          (double)p.temperature, k, got, want);
        }
        sampler_free(&s);
    }
}

START_TEST(top_k_1_is_greedy_at_any_temperature)
{
    expect_greedy_with("top-k 1", params(1.0f, 1, 0.0f, 0.0f));
    expect_greedy_with("top-k 1 with top-p 0.9", params(1.0f, 1, 0.9f, 0.0f));
    expect_greedy_with("top-k 1 with min-p 0.05", params(1.0f, 1, 0.0f, 0.05f));
}
END_TEST

START_TEST(top_p_1e_9_is_greedy_at_any_temperature)
{
    expect_greedy_with("top-p 1e-9", params(1.0f, 0, 1e-9f, 0.0f));
    expect_greedy_with("top-p 1e-9 with top-k 50", params(1.0f, 50, 1e-9f, 0.0f));
}
END_TEST

/* Temperature 0 is greedy whatever the filters say: it takes the first
 * of the two largest logits, leaves the logits alone and draws nothing. */
START_TEST(temperature_0_ignores_the_filters)
{
    static const SamplingParams filtered[] = {
        {.top_k = 3, .top_p = 0.1f, .min_p = 0.9f, .repetition_penalty = 1.0f},
        {.top_k = 5, .top_p = 1e-9f, .repetition_penalty = 1.0f},
        {.min_p = 1.0f, .repetition_penalty = 1.0f},
    };
    const float logits[6] = {0.5f, -2.0f, 1.0f, 4.25f, 4.25f, 0.0f};
    for (size_t k = 0; k < sizeof filtered / sizeof filtered[0]; k++) {
        Sampler s;
        init_params_ok(&s, 6, &filtered[k], 9);
        float x[6];
        memcpy(x, logits, sizeof x);
        unsigned long long before = s.rng_state;
        int token = sampler_sample(&s, x);
        ck_assert_msg(token == 3 && memcmp(x, logits, sizeof x) == 0 && s.rng_state == before,
                      "settings %zu at T=0: token %d (greedy: 3), logits %s, random numbers %s", k, token,
                      memcmp(x, logits, sizeof x) ? "changed" : "kept", s.rng_state == before ? "untouched" : "drawn");
        sampler_free(&s);
    }
}
END_TEST

/* Neutral settings change nothing: top-k of the whole vocabulary, or
 * larger, draws exactly what no top-k draws, draw for draw. */
START_TEST(neutral_filters_draw_the_same_tokens)
{
    enum { V = 50, N = 300 };
    float logits[V], scratch[V];
    unsigned long long rng = 3;
    random_logits(logits, V, &rng, 0);
    int base[N], other[N];
    static const int ks[] = {V, V + 1, 1 << 30};
    for (int top_p = 0; top_p < 2; top_p++) {
        Sampler s;
        SamplingParams p = params(0.8f, 0, top_p ? 0.9f : 0.0f, 0.0f);
        init_params_ok(&s, V, &p, 11);
        for (int i = 0; i < N; i++)
            base[i] = draw(&s, logits, scratch);
        sampler_free(&s);
        for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++) {
            p.top_k = ks[k];
            init_params_ok(&s, V, &p, 11);
            for (int i = 0; i < N; i++)
                other[i] = draw(&s, logits, scratch);
            sampler_free(&s);
            ck_assert_msg(memcmp(base, other, sizeof base) == 0, "top-k %d (top-p %s) changed the draws", ks[k],
                          top_p ? "0.9" : "off");
        }
    }
}
END_TEST

/* Sorted probabilities 0.5, 0.25, 0.125, 0.125 (exact in binary): a token
 * stays while those before it hold less than top_p. */
START_TEST(top_p_keeps_the_token_that_crosses_the_threshold)
{
    const ProbIndex sorted[4] = {{0.5f, 9}, {0.25f, 4}, {0.125f, 0}, {0.125f, 2}};
    static const struct {
        float top_p;
        int kept;
    } cases[] = {
        {1e-9f, 1},  /* the first token alone already crosses */
        {0.5f, 1},   /* the first holds exactly 0.5: the second has 0.5 before it, not less */
        {0.6f, 2},   /* 0.5 < 0.6: the second token crosses 0.6 and stays */
        {0.75f, 2},  /* 0.75 before the third */
        {0.8f, 3},   /* the third crosses 0.8 */
        {0.99f, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int kept = sampler_filter_top_p(sorted, 4, cases[i].top_p);
        ck_assert_msg(kept == cases[i].kept, "top-p %g over 0.5, 0.25, 0.125, 0.125 kept %d tokens, expected %d",
                      (double)cases[i].top_p, kept, cases[i].kept);
    }
    /* Through the sampler: with top-p 0.6 the crossing token (0.25) is
     * drawn a third of the time; dropping it would leave token 1 alone. */
    enum { V = 4, N = 30000 };
    const double probs[V] = {0.125, 0.5, 0.125, 0.25};
    float logits[V], scratch[V];
    for (int i = 0; i < V; i++)
        logits[i] = (float)log(probs[i]);
    Sampler s;
    init_ok(&s, V, 1.0f, 0.6f, 21);
    int counts[V] = {0};
    for (int n = 0; n < N; n++)
        counts[draw(&s, logits, scratch)]++;
    ck_assert_msg(counts[0] == 0 && counts[2] == 0, "outside the nucleus: %d, %d", counts[0], counts[2]);
    double share = (double)counts[3] / N; /* 0.25 / 0.75, sd 0.0027 */
    ck_assert_msg(fabs(share - 1.0 / 3.0) < 0.02, "the crossing token has %.3f of the draws, expected 0.333", share);
    sampler_free(&s);
}
END_TEST

START_TEST(top_k_keeps_exactly_k_with_ties_to_the_lower_id)
{
    enum { V = 7 };
    const float logits[V] = {1.0f, 3.0f, 2.0f, 2.0f, -INFINITY, 2.0f, 0.5f};
    static const struct {
        int k;
        unsigned char keep[V];
    } cases[] = {
        {1, {0, 1, 0, 0, 0, 0, 0}},
        {2, {0, 1, 1, 0, 0, 0, 0}}, /* ids 2, 3 and 5 tie at 2.0: the lowest stays */
        {3, {0, 1, 1, 1, 0, 0, 0}},
        {5, {1, 1, 1, 1, 0, 1, 0}},
        {6, {1, 1, 1, 1, 0, 1, 1}}, /* -inf ranks last */
    };
    ProbIndex top[V];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float x[V];
        memcpy(x, logits, sizeof x);
        sampler_filter_top_k(x, V, cases[c].k, top);
        for (int i = 0; i < V; i++) {
            float want = cases[c].keep[i] ? logits[i] : -INFINITY;
            ck_assert_msg(x[i] == want, "top-k %d: token %d has logit %g, expected %g", cases[c].k, i, (double)x[i],
                          (double)want);
        }
    }
    /* Ties met before a better token: the better one must push out the
     * higher id of the tie, never the lower. */
    float y[4] = {2.0f, 2.0f, 3.0f, 2.0f};
    sampler_filter_top_k(y, 4, 2, top);
    ck_assert_msg(y[0] == 2.0f && y[1] == -INFINITY && y[2] == 3.0f && y[3] == -INFINITY,
                  "top-k 2 of 2, 2, 3, 2 left %g %g %g %g, expected 2 -inf 3 -inf", (double)y[0], (double)y[1],
                  (double)y[2], (double)y[3]);
}
END_TEST

START_TEST(min_p_drops_below_a_fraction_of_the_top)
{
    enum { V = 5 };
    /* p(v) / p(max) = exp(logit - 2): 1, e^-1 = 0.37, e^-2 = 0.14, e^-3 = 0.05, 1 */
    const float logits[V] = {1.0f, 2.0f, 0.0f, -1.0f, 2.0f};
    static const struct {
        float min_p;
        unsigned char keep[V];
    } cases[] = {
        {0.01f, {1, 1, 1, 1, 1}},
        {0.1f, {1, 1, 1, 0, 1}},
        {0.3f, {1, 1, 0, 0, 1}},
        {0.5f, {0, 1, 0, 0, 1}},
        {1.0f, {0, 1, 0, 0, 1}}, /* both tied tokens are the most likely */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float x[V];
        memcpy(x, logits, sizeof x);
        sampler_filter_min_p(x, V, cases[c].min_p);
        for (int i = 0; i < V; i++) {
            float want = cases[c].keep[i] ? logits[i] : -INFINITY;
            ck_assert_msg(x[i] == want, "min-p %g: token %d has logit %g, expected %g", (double)cases[c].min_p, i,
                          (double)x[i], (double)want);
        }
    }
}
END_TEST

/* Logits 2, -1, 0.5, 0, 3, -2; prompt: token 0 (and 5, twice); output:
 * 1, 4, 4, 1, 1. Every value below is exact in binary. */
enum { PEN_V = 6, PEN_N = 8, PEN_PROMPT = 3 };
static const float PEN_LOGITS[PEN_V] = {2.0f, -1.0f, 0.5f, 0.0f, 3.0f, -2.0f};
static const int PEN_TOKENS[PEN_N] = {0, 5, 5, 1, 4, 4, 1, 1};

static void expect_logits(const char *what, const float *got, const float *want, int n)
{
    for (int i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i], "%s: token %d has logit %g, expected %g", what, i, (double)got[i],
                      (double)want[i]);
}

START_TEST(penalties_by_hand)
{
    const unsigned char in_prompt[PEN_V] = {1, 0, 0, 0, 0, 1};
    const int counts[PEN_V] = {0, 3, 0, 0, 2, 0};
    float x[PEN_V];
    /* Repetition 2: prompt and output tokens, positive divided, negative multiplied. */
    memcpy(x, PEN_LOGITS, sizeof x);
    sampler_penalize_repetition(x, PEN_V, in_prompt, counts, 2.0f);
    expect_logits("repetition 2", x, (const float[PEN_V]){1.0f, -2.0f, 0.5f, 0.0f, 1.5f, -4.0f}, PEN_V);
    /* Frequency 0.5: 0.5 per generated occurrence; the prompt's tokens untouched. */
    memcpy(x, PEN_LOGITS, sizeof x);
    sampler_penalize_counts(x, PEN_V, counts, 0.5f, 0.0f);
    expect_logits("frequency 0.5", x, (const float[PEN_V]){2.0f, -2.5f, 0.5f, 0.0f, 2.0f, -2.0f}, PEN_V);
    /* Presence 0.25: once per generated token, however often. */
    memcpy(x, PEN_LOGITS, sizeof x);
    sampler_penalize_counts(x, PEN_V, counts, 0.0f, 0.25f);
    expect_logits("presence 0.25", x, (const float[PEN_V]){2.0f, -1.25f, 0.5f, 0.0f, 2.75f, -2.0f}, PEN_V);
    /* Negative frequency and presence reward repeats. */
    memcpy(x, PEN_LOGITS, sizeof x);
    sampler_penalize_counts(x, PEN_V, counts, -1.0f, -0.5f);
    expect_logits("frequency -1, presence -0.5", x, (const float[PEN_V]){2.0f, 2.5f, 0.5f, 0.0f, 5.5f, -2.0f}, PEN_V);
}
END_TEST

/* All three through the sampler, in vLLM's order (repetition, then
 * frequency, then presence), counted from the sequence's tokens. */
START_TEST(penalties_count_the_sequence)
{
    SamplingParams p = sampling_params_default();
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    Sampler s;
    init_params_ok(&s, PEN_V, &p, 1);
    /* token 1: -1 x 2 - 0.5 x 3 - 0.25 = -3.75; token 4: 3 / 2 - 0.5 x 2 - 0.25 = 0.25 */
    const float want[PEN_V] = {1.0f, -3.75f, 0.5f, 0.0f, 0.25f, -4.0f};
    for (int round = 0; round < 2; round++) { /* the scratch is left clean: twice the same */
        float x[PEN_V];
        memcpy(x, PEN_LOGITS, sizeof x);
        sampler_penalize(&s, x, PEN_TOKENS, PEN_PROMPT, PEN_N);
        expect_logits("the three penalties", x, want, PEN_V);
    }
    /* Greedy after the penalties (as vLLM): token 4 (logit 3) without
     * them, token 0 (1.0) with them. */
    float x[PEN_V];
    memcpy(x, PEN_LOGITS, sizeof x);
    ck_assert_int_eq(sampler_sample_seq(&s, x, PEN_TOKENS, PEN_PROMPT, PEN_N), 0);
    memcpy(x, PEN_LOGITS, sizeof x);
    ck_assert_int_eq(sampler_sample(&s, x), 4); /* no tokens: nothing to penalise */
    /* A sequence that is all prompt: only the repetition penalty acts. */
    memcpy(x, PEN_LOGITS, sizeof x);
    sampler_penalize(&s, x, PEN_TOKENS, PEN_N, PEN_N);
    expect_logits("all prompt", x, (const float[PEN_V]){1.0f, -2.0f, 0.5f, 0.0f, 1.5f, -4.0f}, PEN_V);
    sampler_free(&s);
    /* Neutral penalties with tokens change nothing and allocate nothing. */
    mem_reset();
    init_params_ok(&s, PEN_V, &(SamplingParams){.temperature = 0.0f, .repetition_penalty = 1.0f}, 1);
    ck_assert_ptr_null(s.output_counts);
    memcpy(x, PEN_LOGITS, sizeof x);
    ck_assert_int_eq(sampler_sample_seq(&s, x, PEN_TOKENS, PEN_PROMPT, PEN_N), 4);
    expect_logits("neutral penalties", x, PEN_LOGITS, PEN_V);
    sampler_free(&s);
}
END_TEST

/* The penalties' scratch is sized at set-up, counted as activations, and
 * only when a penalty is on. */
START_TEST(penalty_scratch_is_counted_up_front)
{
    enum { V = 1000 };
    SamplingParams off = params(1.0f, 0, 0.9f, 0.0f), on = off;
    on.frequency_penalty = 0.1f;
    ck_assert_uint_eq(sampler_scratch_bytes(V, &off), V * sizeof(ProbIndex));
    ck_assert_uint_eq(sampler_scratch_bytes(V, &on), V * (sizeof(ProbIndex) + sizeof(int) + 1));
    for (int k = 0; k < 2; k++) {
        mem_reset();
        Sampler s;
        init_params_ok(&s, V, k ? &on : &off, 1);
        ck_assert_uint_eq(mem_current(MEM_ACTIVATIONS, MEM_HOST), sampler_scratch_bytes(V, k ? &on : &off));
        ck_assert_int_eq(mem_live_buffers(), k ? 3 : 1);
        /* Sampling allocates nothing. */
        float logits[V], scratch[V];
        unsigned long long rng = 5;
        random_logits(logits, V, &rng, 0);
        int tokens[40];
        for (int i = 0; i < 40; i++)
            tokens[i] = (i * 37) % V;
        for (int i = 0; i < 20; i++) {
            memcpy(scratch, logits, sizeof logits);
            sampler_sample_seq(&s, scratch, tokens, 10, 10 + i);
        }
        ck_assert_int_eq(mem_live_buffers(), k ? 3 : 1);
        sampler_free(&s);
        ck_assert_int_eq(mem_live_buffers(), 0);
    }
}
END_TEST

/* ------------------------------------------------ distributions (chi-square) */

/* The reference: the filtered, renormalised distribution computed in
 * double, step by step as sampler.h says (independent of sampler.c). */
static void reference_probs(const float *logits, int n, const SamplingParams *p, double *out)
{
    double max = -INFINITY, sum = 0.0, pmax = 0.0;
    for (int i = 0; i < n; i++)
        if ((double)logits[i] / p->temperature > max)
            max = (double)logits[i] / p->temperature;
    for (int i = 0; i < n; i++)
        pmax = fmax(pmax, out[i] = exp((double)logits[i] / p->temperature - max));
    for (int i = 0; i < n; i++) /* min-p */
        if (p->min_p > 0.0f && out[i] < p->min_p * pmax)
            out[i] = 0.0;
    if (p->top_k > 0) /* top-k: rank by probability, ties to the lower id */
        for (int i = 0; i < n; i++) {
            int rank = 0;
            for (int j = 0; j < n; j++)
                rank += out[j] > out[i] || (out[j] == out[i] && j < i);
            if (rank >= p->top_k)
                out[i] = 0.0;
        }
    for (int i = 0; i < n; i++)
        sum += out[i];
    for (int i = 0; i < n; i++)
        out[i] /= sum;
    if (p->top_p > 0.0f && p->top_p < 1.0f) { /* top-p: keep while those ranked before hold < top_p */
        double keep[64];
        for (int i = 0; i < n; i++) {
            double before = 0.0;
            for (int j = 0; j < n; j++)
                if (out[j] > out[i] || (out[j] == out[i] && j < i))
                    before += out[j];
            keep[i] = out[i] > 0.0 && before < p->top_p ? out[i] : 0.0;
        }
        sum = 0.0;
        for (int i = 0; i < n; i++)
            sum += keep[i];
        for (int i = 0; i < n; i++)
            out[i] = keep[i] / sum;
    }
}

/* Upper 1e-4 quantiles of the chi-square distribution, by degrees of
 * freedom 1..11 (a correct sampler fails a test with probability 1e-4
 * for a random seed; the seeds here are fixed, so the outcome is too). */
static const double CHI2_CRITICAL_1E4[12] = {0, 15.14, 18.42, 21.11, 23.51, 25.74, 27.86, 29.88, 31.83, 33.72, 35.56,
                                            37.37};

/* Draws N tokens and checks them against the reference: tokens the
 * filters drop are never drawn, and the counts of the others fit the
 * reference at significance 1e-4 (chi-square, one degree of freedom
 * less than the tokens kept). */
static void expect_distribution(const char *what, const float *logits, int n, const SamplingParams *p,
                                const int *tokens, int n_prompt, int n_tokens)
{
    enum { N = 200000, MAXV = 11 };
    ck_assert_int_le(n, MAXV);
    double want[MAXV], penalized[MAXV];
    float x[MAXV];
    memcpy(x, logits, (size_t)n * sizeof(float));
    Sampler s;
    init_params_ok(&s, n, p, 4242);
    sampler_penalize(&s, x, tokens, n_prompt, n_tokens); /* checked by hand in penalties_count_the_sequence */
    for (int i = 0; i < n; i++)
        penalized[i] = x[i];
    reference_probs(x, n, p, want);
    int counts[MAXV] = {0};
    for (int k = 0; k < N; k++) {
        memcpy(x, logits, (size_t)n * sizeof(float));
        counts[sampler_sample_seq(&s, x, tokens, n_prompt, n_tokens)]++;
    }
    sampler_free(&s);
    char table[512] = "";
    double chi2 = 0.0;
    int kept = 0;
    for (int i = 0; i < n; i++) {
        double e = N * want[i];
        snprintf(table + strlen(table), sizeof table - strlen(table), " %d:%d/%.0f", i, counts[i], e);
        if (want[i] == 0.0)
            continue;
        kept++;
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    for (int i = 0; i < n; i++)
        ck_assert_msg(want[i] > 0.0 || counts[i] == 0, "%s: token %d (logit %g) is filtered out but was drawn; "
                      "drawn/expected:%s", what, i, penalized[i], table);
    ck_assert_msg(kept == 1 || chi2 < CHI2_CRITICAL_1E4[kept - 1],
                  "%s: chi-square %.1f over %d tokens exceeds %.2f (significance 1e-4); drawn/expected of %d:%s", what,
                  chi2, kept, CHI2_CRITICAL_1E4[kept - 1], N, table);
}

/* Eight tokens, the ids out of order of their logits. */
static const float DIST[8] = {1.0f, 2.5f, 0.2f, 2.0f, -0.5f, 1.6f, 0.9f, -1.2f};
static const int DIST_TOKENS[6] = {1, 2, 3, 1, 1, 5}; /* prompt: 1, 2; output: 3, 1, 1, 5 */

/* One seeded distribution test per filter, per pair of steps whose order
 * matters, and for the penalties (each case runs as its own test). */
static const struct {
    const char *name;
    SamplingParams p;
    int n_prompt, n_tokens; /* of DIST_TOKENS: 0, 0 = no sequence */
} DIST_CASES[] = {
    /* min-p keeps logits >= 2.5 + T ln 0.2: five tokens at T=1, seven at
     * T=2 (min-p after the temperature) */
    {"min-p 0.2 at T=1", {.temperature = 1.0f, .min_p = 0.2f, .repetition_penalty = 1.0f}, 0, 0},
    {"min-p 0.2 at T=2", {.temperature = 2.0f, .min_p = 0.2f, .repetition_penalty = 1.0f}, 0, 0},
    {"top-k 3 at T=1", {.temperature = 1.0f, .top_k = 3, .repetition_penalty = 1.0f}, 0, 0},
    {"top-k 6 at T=0.5", {.temperature = 0.5f, .top_k = 6, .repetition_penalty = 1.0f}, 0, 0},
    {"top-p 0.6 at T=1", {.temperature = 1.0f, .top_p = 0.6f, .repetition_penalty = 1.0f}, 0, 0},
    {"top-p 0.95 at T=1.5", {.temperature = 1.5f, .top_p = 0.95f, .repetition_penalty = 1.0f}, 0, 0},
    /* top-p over what top-k left, renormalised: the four kept tokens have
     * 0.38, 0.23, 0.16, 0.09 of the whole distribution and 0.45, 0.27,
     * 0.18, 0.10 renormalised, so top-p 0.65 keeps two of them; over the
     * whole distribution it would keep three (0.38 + 0.23 < 0.65) */
    {"top-k 4, top-p 0.65", {.temperature = 1.0f, .top_k = 4, .top_p = 0.65f, .repetition_penalty = 1.0f}, 0, 0},
    {"min-p 0.1, top-k 5, top-p 0.9 at T=0.8",
     {.temperature = 0.8f, .top_k = 5, .top_p = 0.9f, .min_p = 0.1f, .repetition_penalty = 1.0f}, 0, 0},
    {"the three penalties at T=1",
     {.temperature = 1.0f, .repetition_penalty = 1.5f, .frequency_penalty = 0.4f, .presence_penalty = 0.3f}, 2, 6},
    /* penalties before the temperature: the subtractions are scaled by 1/T too */
    {"the three penalties at T=0.5",
     {.temperature = 0.5f, .repetition_penalty = 1.5f, .frequency_penalty = 0.4f, .presence_penalty = 0.3f}, 2, 6},
    {"the penalties, top-k 4, top-p 0.8",
     {.temperature = 1.0f, .top_k = 4, .top_p = 0.8f, .repetition_penalty = 1.5f, .frequency_penalty = 0.4f,
      .presence_penalty = 0.3f},
     2, 6},
};

START_TEST(distribution_fits_the_reference)
{
    const int i = _i;
    expect_distribution(DIST_CASES[i].name, DIST, 8, &DIST_CASES[i].p, DIST_CASES[i].n_tokens ? DIST_TOKENS : NULL,
                        DIST_CASES[i].n_prompt, DIST_CASES[i].n_tokens);
}
END_TEST

START_TEST(bad_new_settings_are_refused)
{
    static const struct {
        SamplingParams p;
        const char *word;
    } cases[] = {
        {{.top_k = -1, .repetition_penalty = 1.0f}, "top-k"},
        {{.min_p = -0.1f, .repetition_penalty = 1.0f}, "min-p"},
        {{.min_p = 1.5f, .repetition_penalty = 1.0f}, "min-p"},
        {{.min_p = NAN, .repetition_penalty = 1.0f}, "min-p"},
        {{.repetition_penalty = 0.0f}, "repetition-penalty"},
        {{.repetition_penalty = -1.0f}, "repetition-penalty"},
        {{.repetition_penalty = 0.001f}, "repetition-penalty"},
        {{.repetition_penalty = 101.0f}, "repetition-penalty"},
        {{.repetition_penalty = NAN}, "repetition-penalty"},
        {{.repetition_penalty = 1.0f, .frequency_penalty = 2.5f}, "frequency-penalty"},
        {{.repetition_penalty = 1.0f, .frequency_penalty = NAN}, "frequency-penalty"},
        {{.repetition_penalty = 1.0f, .presence_penalty = -3.0f}, "presence-penalty"},
        {{.repetition_penalty = 1.0f, .presence_penalty = INFINITY}, "presence-penalty"},
    };
    mem_reset();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Sampler s;
        Err err = {{0}};
        ck_assert_msg(sampler_init_params(&s, 10, &cases[i].p, 1, &err) == -1, "case %zu was accepted", i);
        ck_assert_msg(strstr(err.msg, cases[i].word) != NULL, "case %zu: message '%s' does not mention %s", i,
                      err.msg, cases[i].word);
    }
    ck_assert_int_eq(mem_live_buffers(), 0);
    /* The edges are accepted. */
    static const SamplingParams edges[] = {
        {.top_k = 0, .min_p = 1.0f, .repetition_penalty = 0.01f, .frequency_penalty = -2.0f, .presence_penalty = 2.0f},
        {.top_k = 1 << 30, .min_p = 0.0f, .repetition_penalty = 100.0f, .frequency_penalty = 2.0f,
         .presence_penalty = -2.0f},
    };
    for (size_t i = 0; i < 2; i++) {
        Sampler s;
        init_params_ok(&s, 10, &edges[i], 1);
        sampler_free(&s);
    }
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

Suite *suite_sampler(void)
{
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("sampling");
    tcase_set_timeout(tc, 60); /* 600,000 seeded draws: over the default 4 s under ASan on a loaded machine */
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
    TCase *filters = tcase_create("filters and penalties");
    tcase_set_timeout(filters, 60);
    tcase_add_test(filters, top_k_1_is_greedy_at_any_temperature);
    tcase_add_test(filters, top_p_1e_9_is_greedy_at_any_temperature);
    tcase_add_test(filters, temperature_0_ignores_the_filters);
    tcase_add_test(filters, neutral_filters_draw_the_same_tokens);
    tcase_add_test(filters, top_p_keeps_the_token_that_crosses_the_threshold);
    tcase_add_test(filters, top_k_keeps_exactly_k_with_ties_to_the_lower_id);
    tcase_add_test(filters, min_p_drops_below_a_fraction_of_the_top);
    tcase_add_test(filters, penalties_by_hand);
    tcase_add_test(filters, penalties_count_the_sequence);
    tcase_add_test(filters, penalty_scratch_is_counted_up_front);
    tcase_add_loop_test(filters, distribution_fits_the_reference, 0, (int)(sizeof DIST_CASES / sizeof DIST_CASES[0]));
    tcase_add_test(filters, bad_new_settings_are_refused);
    suite_add_tcase(s, filters);
    return s;
}

/* The filters and penalties are lab 0's functions: in the handout they are
 * the untouched exercises. */
REGISTER_LAB_SUITE(sampler)
