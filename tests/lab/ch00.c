/* Lab 0, the sampler: the three penalties and the three filters that
 * decide which tokens can be drawn (exercises/ch00/, regions
 * ch00.repetition, ch00.counts, ch00.min_p, ch00.top_k,
 * ch00.top_p; `make lab CH=sampling`), each as vLLM and the OpenAI API
 * define it (book/sampling.md), first on logit vectors you can check by
 * hand, then through the whole sampler: sampler_sample_seq() calls your five
 * functions in vLLM's order, and its draws must follow the distribution
 * they leave.
 *
 * Every expected value is computed here, independently of your code, and
 * every small case is exact in binary floating point. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/grading.h"
#include "sampler.h"

/* Prints a vector of logits into @p buf, for the messages. */
static const char *show(char *buf, size_t size, const float *x, int n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && at + 16 < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%g", i ? " " : "", (double)x[i]);
    return buf;
}

/* Whether two logit vectors are equal, element for element (-inf included). */
static int same(const float *a, const float *b, int n)
{
    for (int i = 0; i < n; i++)
        if (!(a[i] == b[i]))
            return 0;
    return 1;
}

#define EXPECT_LOGITS(got, want, n, what, hint)                                                                      \
    do {                                                                                                             \
        char g_[256], w_[256];                                                                                       \
        ck_assert_msg(same(got, want, n), "expected %s to leave logits %s, got %s; hint: %s", what,                  \
                      show(w_, sizeof w_, want, n), show(g_, sizeof g_, got, n), hint);                              \
    } while (0)

/* ------------------------------------------------------------ penalties */

/* Logits 2, -1, 0.5, 0, 3, -2, 4: token 0 and 5 are in the prompt, token 1
 * was generated 3 times, token 4 twice, token 5 once; tokens 2, 3 and 6
 * were never seen. */
enum { PV = 7 };
static const float P_LOGITS[PV] = {2.0f, -1.0f, 0.5f, 0.0f, 3.0f, -2.0f, 4.0f};
static const unsigned char P_PROMPT[PV] = {1, 0, 0, 0, 0, 1, 0};
static const int P_COUNTS[PV] = {0, 3, 0, 0, 2, 1, 0};

START_TEST(repetition_divides_positive_and_multiplies_negative)
{
    float x[PV];
    memcpy(x, P_LOGITS, sizeof x);
    sampler_penalize_repetition(x, PV, P_PROMPT, P_COUNTS, 2.0f);
    EXPECT_LOGITS(x, ((const float[PV]){1.0f, -2.0f, 0.5f, 0.0f, 1.5f, -4.0f, 4.0f}), PV, "repetition penalty 2",
                  "sampler_penalize_repetition() divides a positive logit by the penalty and multiplies any other by "
                  "it, for every token in the prompt (in_prompt) or the output (output_counts > 0), and leaves the "
                  "tokens seen in neither alone");
    /* A penalty below 1 rewards repeats, the same way round. */
    memcpy(x, P_LOGITS, sizeof x);
    sampler_penalize_repetition(x, PV, P_PROMPT, P_COUNTS, 0.5f);
    EXPECT_LOGITS(x, ((const float[PV]){4.0f, -0.5f, 0.5f, 0.0f, 6.0f, -1.0f, 4.0f}), PV, "repetition penalty 0.5",
                  "sampler_penalize_repetition(): logit > 0 ? logit / penalty : logit x penalty");
}
END_TEST

START_TEST(repetition_counts_the_prompt_and_the_output)
{
    /* Only the prompt, then only the output: each alone is enough. */
    const unsigned char prompt_only[PV] = {0, 0, 1, 0, 0, 0, 1};
    const int none[PV] = {0};
    float x[PV];
    memcpy(x, P_LOGITS, sizeof x);
    sampler_penalize_repetition(x, PV, prompt_only, none, 4.0f);
    EXPECT_LOGITS(x, ((const float[PV]){2.0f, -1.0f, 0.125f, 0.0f, 3.0f, -2.0f, 1.0f}), PV,
                  "repetition penalty 4 with tokens 2 and 6 in the prompt and no output",
                  "sampler_penalize_repetition() penalises the prompt's tokens too (vLLM's repetition penalty, "
                  "unlike the frequency and presence penalties, counts the prompt)");
    const unsigned char no_prompt[PV] = {0};
    const int once[PV] = {0, 0, 0, 0, 0, 0, 1};
    memcpy(x, P_LOGITS, sizeof x);
    sampler_penalize_repetition(x, PV, no_prompt, once, 4.0f);
    EXPECT_LOGITS(x, ((const float[PV]){2.0f, -1.0f, 0.5f, 0.0f, 3.0f, -2.0f, 1.0f}), PV,
                  "repetition penalty 4 with token 6 generated once and no prompt",
                  "sampler_penalize_repetition() penalises a generated token once, however often it came");
}
END_TEST

START_TEST(frequency_subtracts_once_per_occurrence)
{
    float x[PV];
    memcpy(x, P_LOGITS, sizeof x);
    sampler_penalize_counts(x, PV, P_COUNTS, 0.5f, 0.0f);
    EXPECT_LOGITS(x, ((const float[PV]){2.0f, -2.5f, 0.5f, 0.0f, 2.0f, -2.5f, 4.0f}), PV,
                  "frequency penalty 0.5 (presence 0)",
                  "sampler_penalize_counts() subtracts frequency x output_counts[v] from each logit; the prompt "
                  "(token 0) does not count");
    memcpy(x, P_LOGITS, sizeof x);
    sampler_penalize_counts(x, PV, P_COUNTS, -1.0f, 0.0f);
    EXPECT_LOGITS(x, ((const float[PV]){2.0f, 2.0f, 0.5f, 0.0f, 5.0f, -1.0f, 4.0f}), PV,
                  "frequency penalty -1 (presence 0)",
                  "sampler_penalize_counts(): a negative frequency penalty rewards repeats, by the same formula");
}
END_TEST

START_TEST(presence_subtracts_once_per_token)
{
    float x[PV];
    memcpy(x, P_LOGITS, sizeof x);
    sampler_penalize_counts(x, PV, P_COUNTS, 0.0f, 0.25f);
    EXPECT_LOGITS(x, ((const float[PV]){2.0f, -1.25f, 0.5f, 0.0f, 2.75f, -2.25f, 4.0f}), PV,
                  "presence penalty 0.25 (frequency 0)",
                  "sampler_penalize_counts() subtracts the presence penalty once from every token generated at least "
                  "once, however often; the prompt (token 0) does not count");
    /* Both: token 1 -1 - 3 x 0.5 + 0.5 = -2, token 4 3 - 2 x 0.5 + 0.5 = 2.5, token 5 -2 - 0.5 + 0.5 = -2. */
    memcpy(x, P_LOGITS, sizeof x);
    sampler_penalize_counts(x, PV, P_COUNTS, 0.5f, -0.5f);
    EXPECT_LOGITS(x, ((const float[PV]){2.0f, -2.0f, 0.5f, 0.0f, 2.5f, -2.0f, 4.0f}), PV,
                  "frequency penalty 0.5 and presence penalty -0.5",
                  "sampler_penalize_counts(): logit -= count x frequency, then -= presence, for each generated token; "
                  "a negative presence penalty rewards the tokens already generated");
}
END_TEST

/* ------------------------------------------------------------ min-p */

START_TEST(min_p_drops_below_a_fraction_of_the_top)
{
    enum { V = 6 };
    /* p(v) / p(max) = exp(logit - 2): e^-1 = 0.37, 1, e^-2 = 0.14, e^-3 = 0.05, 1, e^-5 = 0.007 */
    const float logits[V] = {1.0f, 2.0f, 0.0f, -1.0f, 2.0f, -3.0f};
    static const struct {
        float min_p;
        unsigned char keep[V];
    } cases[] = {
        {0.001f, {1, 1, 1, 1, 1, 1}},
        {0.01f, {1, 1, 1, 1, 1, 0}},
        {0.1f, {1, 1, 1, 0, 1, 0}},
        {0.3f, {1, 1, 0, 0, 1, 0}},
        {0.5f, {0, 1, 0, 0, 1, 0}},
        {1.0f, {0, 1, 0, 0, 1, 0}}, /* both tied tokens are the most likely */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float x[V], want[V];
        memcpy(x, logits, sizeof x);
        for (int i = 0; i < V; i++)
            want[i] = cases[c].keep[i] ? logits[i] : -INFINITY;
        sampler_filter_min_p(x, V, cases[c].min_p);
        char what[64];
        snprintf(what, sizeof what, "min-p %g over 1 2 0 -1 2 -3", (double)cases[c].min_p);
        EXPECT_LOGITS(x, want, V, what,
                      "sampler_filter_min_p() masks (-INFINITY) every token whose probability is below min_p x the "
                      "top probability, i.e. exp(logit - max logit) < min_p; the kept logits are left as they were");
    }
}
END_TEST

START_TEST(min_p_finds_the_top_anywhere)
{
    enum { V = 5 };
    /* The most likely token is last, every logit negative, one already masked. */
    const float logits[V] = {-4.0f, -INFINITY, -3.0f, -6.0f, -2.0f};
    float x[V];
    memcpy(x, logits, sizeof x);
    sampler_filter_min_p(x, V, 0.2f); /* keeps exp(-1) = 0.37, drops exp(-2) = 0.14 and less */
    EXPECT_LOGITS(x, ((const float[V]){-INFINITY, -INFINITY, -3.0f, -INFINITY, -2.0f}), V,
                  "min-p 0.2 over -4 -inf -3 -6 -2",
                  "sampler_filter_min_p() compares with the largest logit wherever it is (sampler_argmax()), and "
                  "works on probabilities, not logits: the ratio is exp(logit - max), not logit / max");
}
END_TEST

/* ------------------------------------------------------------ top-k */

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
        {7, {1, 1, 1, 1, 1, 1, 1}},
    };
    ProbIndex top[V];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float x[V], want[V];
        memcpy(x, logits, sizeof x);
        for (int i = 0; i < V; i++)
            want[i] = cases[c].keep[i] ? logits[i] : -INFINITY;
        sampler_filter_top_k(x, V, cases[c].k, top);
        char what[64];
        snprintf(what, sizeof what, "top-k %d over 1 3 2 2 -inf 2 0.5", cases[c].k);
        EXPECT_LOGITS(x, want, V, what,
                      "sampler_filter_top_k() keeps exactly k tokens, the largest logits, ties to the lower id (so "
                      "that top-k 1 keeps sampler_argmax()'s token), and sets every other logit to -INFINITY");
    }
    /* Ties met before a better token: the better one must push out the
     * higher id of the tie, never the lower. */
    float y[4] = {2.0f, 2.0f, 3.0f, 2.0f};
    sampler_filter_top_k(y, 4, 2, top);
    EXPECT_LOGITS(y, ((const float[4]){2.0f, -INFINITY, 3.0f, -INFINITY}), 4, "top-k 2 over 2 2 3 2",
                  "sampler_filter_top_k(): when a better token comes, the kept token that ranks last leaves (of a "
                  "tie, the higher id)");
}
END_TEST

/* The k kept by a plain sort (logit descending, then id ascending). */
static int rank_desc(const void *a, const void *b)
{
    const ProbIndex *x = a, *y = b;
    if (x->prob != y->prob)
        return (x->prob < y->prob) - (x->prob > y->prob);
    return (x->index > y->index) - (x->index < y->index);
}

START_TEST(top_k_matches_a_sort_on_a_large_vocabulary)
{
    enum { V = 2000 };
    static const int ks[] = {1, 2, 7, 50, 333, 1999};
    float *logits = malloc(V * sizeof *logits), *x = malloc(V * sizeof *x), *want = malloc(V * sizeof *want);
    ProbIndex *top = malloc(V * sizeof *top), *sorted = malloc(V * sizeof *sorted);
    ck_assert(logits && x && want && top && sorted);
    unsigned long long rng = 12345;
    for (int round = 0; round < 3; round++) {
        /* round 0: random; 1: rising (every token beats the last); 2: few distinct values (many ties) */
        for (int v = 0; v < V; v++)
            logits[v] = round == 0 ? 8.0f * sampler_random_f32(&rng) - 4.0f
                      : round == 1 ? (float)v / 64.0f
                                   : (float)(int)(4.0f * sampler_random_f32(&rng));
        for (size_t c = 0; c < sizeof ks / sizeof ks[0]; c++) {
            int k = ks[c];
            for (int v = 0; v < V; v++)
                sorted[v] = (ProbIndex){logits[v], v};
            qsort(sorted, V, sizeof *sorted, rank_desc);
            for (int v = 0; v < V; v++)
                want[v] = -INFINITY;
            for (int i = 0; i < k; i++)
                want[sorted[i].index] = logits[sorted[i].index];
            memcpy(x, logits, V * sizeof *x);
            sampler_filter_top_k(x, V, k, top);
            int wrong = -1, kept = 0;
            for (int v = 0; v < V; v++) {
                kept += x[v] != -INFINITY;
                if (wrong < 0 && !(x[v] == want[v]))
                    wrong = v;
            }
            ck_assert_msg(wrong < 0, "expected top-k %d of %d %s logits to keep %d tokens, token %d at %g, got %d "
                          "kept, token %d at %g; hint: sampler_filter_top_k() keeps the k largest logits (ties to "
                          "the lower id) wherever they are, and must use only top[0..k-1] as scratch",
                          k, V, round == 0 ? "random" : round == 1 ? "rising" : "tied", k, wrong,
                          (double)want[wrong < 0 ? 0 : wrong], kept, wrong, (double)x[wrong < 0 ? 0 : wrong]);
        }
    }
    free(logits), free(x), free(want), free(top), free(sorted);
}
END_TEST

/* ------------------------------------------------------------ top-p */

START_TEST(top_p_keeps_the_token_that_crosses_the_threshold)
{
    /* Sorted probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625 (exact in binary). */
    const ProbIndex sorted[5] = {{0.5f, 9}, {0.25f, 4}, {0.125f, 0}, {0.0625f, 2}, {0.0625f, 7}};
    static const struct {
        float top_p;
        int kept;
        const char *why;
    } cases[] = {
        {1e-9f, 1, "the first token alone already crosses 1e-9, and the nucleus is never empty"},
        {0.3f, 1, "the first token (0.5) crosses 0.3 and stays"},
        {0.5f, 1, "the tokens before the second hold exactly 0.5, which is not less than 0.5"},
        {0.6f, 2, "0.5 < 0.6 before the second: it crosses 0.6 and stays"},
        {0.75f, 2, "0.75 before the third"},
        {0.8f, 3, "the third crosses 0.8 and stays"},
        {0.95f, 5, "0.9375 before the fifth, less than 0.95"},
        {0.999f, 5, "never more than n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int kept = sampler_filter_top_p(sorted, 5, cases[i].top_p);
        ck_assert_msg(kept == cases[i].kept,
                      "expected top-p %g over 0.5 0.25 0.125 0.0625 0.0625 to keep %d, got %d; hint: "
                      "sampler_filter_top_p() keeps a candidate while those before it hold less than top_p (%s)",
                      (double)cases[i].top_p, cases[i].kept, kept, cases[i].why);
    }
    ProbIndex one = {1.0f, 3};
    int kept = sampler_filter_top_p(&one, 1, 0.5f);
    ck_assert_msg(kept == 1, "expected top-p 0.5 over one candidate to keep 1, got %d; hint: sampler_filter_top_p() "
                  "returns 1..n", kept);
}
END_TEST

/* ------------------------------------------------------------ the whole sampler */

/* Counts the draws of @p n tokens by sampler_sample_seq() from the same
 * logits and sequence, and checks them against @p want (probabilities):
 * every token the filters drop is never drawn, every other within 5
 * standard deviations; fails on the first token off. */
static void expect_draws(const char *what, const SamplingParams *p, const float *logits, int vocab,
                         const int *tokens, int n_prompt, int n_tokens, const double *want, const char *hint)
{
    enum { N = 40000, VMAX = 16 };
    Sampler s;
    Err err = {{0}};
    ck_assert(vocab <= VMAX);
    ck_assert_msg(sampler_init_params(&s, vocab, p, 2024, &err) == 0, "%s", err.msg);
    int counts[VMAX] = {0};
    for (int n = 0; n < N; n++) {
        float x[VMAX];
        memcpy(x, logits, (size_t)vocab * sizeof *x);
        int t = sampler_sample_seq(&s, x, tokens, n_prompt, n_tokens);
        ck_assert_msg(t >= 0 && t < vocab, "expected a token id in 0..%d, got %d; hint: %s", vocab - 1, t, hint);
        counts[t]++;
    }
    sampler_free(&s);
    for (int v = 0; v < vocab; v++) {
        double share = (double)counts[v] / N, sd = sqrt(want[v] * (1.0 - want[v]) / N);
        int ok = want[v] == 0.0 ? counts[v] == 0 : fabs(share - want[v]) <= 5.0 * sd + 1e-9;
        ck_assert_msg(ok, "expected %s to draw token %d with probability %.4f, got %.4f (%d of %d draws); hint: %s",
                      what, v, want[v], share, counts[v], N, hint);
    }
}

/* softmax of @p logits / t over the tokens @p keep marks, in double. */
static void reference(const double *logits, const unsigned char *keep, int n, double t, double *out)
{
    double max = -INFINITY, sum = 0.0;
    for (int i = 0; i < n; i++)
        if (keep[i] && logits[i] / t > max)
            max = logits[i] / t;
    for (int i = 0; i < n; i++)
        sum += out[i] = keep[i] ? exp(logits[i] / t - max) : 0.0;
    for (int i = 0; i < n; i++)
        out[i] /= sum;
}

START_TEST(sampler_follows_the_filtered_distribution)
{
    enum { V = 8 };
    const float logits[V] = {1.0f, 2.5f, 0.5f, 2.0f, -1.0f, 1.5f, 0.0f, 3.0f};
    /* Prompt: token 7; output: token 3 twice, token 5 once. */
    const int tokens[4] = {7, 3, 5, 3};
    SamplingParams p = sampling_params_default();
    p.temperature = 0.5f;
    p.repetition_penalty = 1.5f;
    p.frequency_penalty = 0.25f;
    p.presence_penalty = 0.5f;
    /* After the penalties: 7: 3 / 1.5 = 2; 3: 2 / 1.5 - 0.5 - 0.5 = 0.3333; 5: 1.5 / 1.5 - 0.25 - 0.5 = 0.25. */
    const double penalized[V] = {1.0, 2.5, 0.5, 2.0 / 1.5 - 1.0, -1.0, 0.25, 0.0, 2.0};
    double want[V];
    const char *hint = "sampler_sample_seq() calls your sampler_penalize_repetition(), sampler_penalize_counts(), "
                       "sampler_filter_min_p(), sampler_filter_top_k() and "
                       "sampler_filter_top_p(), in that order; the small cases above say which is wrong";
    /* Penalties only. */
    reference(penalized, (const unsigned char[V]){1, 1, 1, 1, 1, 1, 1, 1}, V, 0.5, want);
    expect_draws("the penalties at T=0.5", &p, logits, V, tokens, 1, 4, want, hint);
    /* + top-k 3: tokens 1 (2.5), 7 (2.0) and 0 (1.0). */
    p.top_k = 3;
    reference(penalized, (const unsigned char[V]){1, 1, 0, 0, 0, 0, 0, 1}, V, 0.5, want);
    expect_draws("the penalties and top-k 3 at T=0.5", &p, logits, V, tokens, 1, 4, want, hint);
    /* + top-p 0.8 over those three: p = 0.7054, 0.2595, 0.0351: the second crosses 0.8. */
    p.top_p = 0.8f;
    reference(penalized, (const unsigned char[V]){0, 1, 0, 0, 0, 0, 0, 1}, V, 0.5, want);
    expect_draws("the penalties, top-k 3 and top-p 0.8 at T=0.5", &p, logits, V, tokens, 1, 4, want, hint);
    /* min-p 0.1 instead of top-p: exp(2 (l - 2.5)) >= 0.1 keeps l >= 1.349, the same two. */
    p.top_p = 0.0f;
    p.min_p = 0.1f;
    expect_draws("the penalties, min-p 0.1 and top-k 3 at T=0.5", &p, logits, V, tokens, 1, 4, want, hint);
}
END_TEST

Suite *lab_suite(void)
{
    Suite *s = suite_create("lab0");
    lab_add_test(s, repetition_divides_positive_and_multiplies_negative, LAB_UNIT_S, 1,
                 "sampler_penalize_repetition()");
    lab_add_test(s, repetition_counts_the_prompt_and_the_output, LAB_UNIT_S, 1, "sampler_penalize_repetition()");
    lab_add_test(s, frequency_subtracts_once_per_occurrence, LAB_UNIT_S, 1, "sampler_penalize_counts()");
    lab_add_test(s, presence_subtracts_once_per_token, LAB_UNIT_S, 1, "sampler_penalize_counts()");
    lab_add_test(s, min_p_drops_below_a_fraction_of_the_top, LAB_UNIT_S, 1, "sampler_filter_min_p()");
    lab_add_test(s, min_p_finds_the_top_anywhere, LAB_UNIT_S, 1, "sampler_filter_min_p()");
    lab_add_test(s, top_k_keeps_exactly_k_with_ties_to_the_lower_id, LAB_UNIT_S, 1, "sampler_filter_top_k()");
    lab_add_test(s, top_k_matches_a_sort_on_a_large_vocabulary, LAB_UNIT_S, 1, "sampler_filter_top_k()");
    lab_add_test(s, top_p_keeps_the_token_that_crosses_the_threshold, LAB_UNIT_S, 1, "sampler_filter_top_p()");
    lab_add_test(s, sampler_follows_the_filtered_distribution, LAB_RUN_S, 2,
                 "the five functions, through sampler_sample_seq()");
    return s;
}
