/* Chapter 1 lab: the tests `make lab CH=1` grades.
 *
 * The student writes three functions, one file each in exercises/ch01/
 * (exercises/ch01/, one file each): naive_prepare (how many positions are cached:
 * none), naive_store (put a token's K and V in row e->pos) and naive_attend
 * (causal attention of one head over positions 0..e->pos, with grouped-query
 * heads). Each piece is tested alone on small cases whose answer can be
 * worked out by hand or by attention_reference(), then all together: the
 * chapter's generation loop must produce the same tokens as an independent
 * KV-cache reference on a synthetic model, and the golden text on the real
 * stories260K model. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate.h"
#include "helpers.h"
#include "lab/grading.h"
#include "mem.h"
#include "naive.h"
#include "ops.h"
#include "synth.h"

/* ------------------------------------------------------------ helpers */

/* A model shape for the unit tests; only the attention sizes matter. */
static ModelConfig attention_cfg(int n_heads, int n_kv_heads, int head_dim, int seq_len)
{
    return (ModelConfig){.dim = n_heads * head_dim, .hidden_dim = 4 * n_heads * head_dim, .n_layers = 2,
                         .n_heads = n_heads, .n_kv_heads = n_kv_heads, .vocab_size = 512, .seq_len = seq_len};
}

static void open_store(NaiveKv *kv, const ModelConfig *c)
{
    Err err = {{0}};
    ck_assert_msg(naive_kv_init(kv, c, &err) == 0, "naive_kv_init failed: %s", err.msg);
}

/* Deterministic numbers in [-1, 1). */
static float next_random(unsigned *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / (float)(1u << 23) - 1.0f;
}

static void fill_random(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        x[i] = next_random(&seed);
}

static void fill(float *x, size_t n, float value)
{
    for (size_t i = 0; i < n; i++)
        x[i] = value;
}

/* What naive_attend must return: attention_reference() over the KV head
 * that query head @p head reads, positions 0..n_pos-1. */
static void reference_attend(const NaiveKv *kv, int head, int n_pos, const float *q, float *out)
{
    const ModelConfig *c = &kv->cfg;
    int head_dim = model_head_dim(c), kv_dim = model_kv_dim(c);
    size_t offset = (size_t)(head / model_kv_mul(c)) * (size_t)head_dim;
    float scores[512];
    attention_reference(out, q, kv->keys + offset, kv->values + offset, n_pos, kv_dim, head_dim, scores);
}

/* ------------------------------------------------------- naive_prepare */

START_TEST(prepare_caches_nothing)
{
    ModelConfig c = attention_cfg(2, 1, 4, 16);
    NaiveKv kv;
    open_store(&kv, &c);
    int lengths[] = {1, 5, 16};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        int cached = -7;
        Err err = {{0}};
        int rc = naive_prepare(&kv, lengths[i], &cached, &err);
        ck_assert_msg(rc == 0, "expected naive_prepare to return 0, got %d; hint: naive_prepare() has nothing to "
                               "prepare in chapter 1, so it cannot fail", rc);
        ck_assert_msg(cached == 0,
                      "expected 0 cached positions for a %d-token sequence, got %d; hint: naive_prepare(): chapter 1 keeps "
                      "no K/V between steps, so every step must run all positions again (*cached = 0)",
                      lengths[i], cached);
    }
    naive_kv_free(&kv);
}
END_TEST

/* --------------------------------------------------------- naive_store */

/* Checks that row @p pos of @p buf holds @p want and every other row still
 * holds @p untouched. */
static void check_rows(const float *buf, const char *name, int capacity, int kv_dim, int pos, const float *want,
                       float untouched)
{
    for (int i = 0; i < kv_dim; i++)
        ck_assert_msg(buf[(size_t)pos * kv_dim + i] == want[i],
                      "expected row %d of kv->%s (the token's row, e->pos) to hold the stored vector, but element %d "
                      "is %g instead of %g; hint: naive_store() copies all kv_dim floats to kv->%s + e->pos * kv_dim",
                      pos, name, i, buf[(size_t)pos * kv_dim + i], want[i], name);
    for (int row = 0; row < capacity; row++)
        for (int i = 0; i < kv_dim && row != pos; i++)
            ck_assert_msg(buf[(size_t)row * kv_dim + i] == untouched,
                          "expected row %d of kv->%s to stay untouched (only row %d was stored), but element %d is "
                          "%g; hint: in naive_store(), a token's row starts at e->pos * kv_dim and is kv_dim floats long",
                          row, name, pos, i, buf[(size_t)row * kv_dim + i]);
}

START_TEST(store_writes_row_at_pos)
{
    ModelConfig c = attention_cfg(4, 2, 4, 8);
    int kv_dim = model_kv_dim(&c);
    NaiveKv kv;
    open_store(&kv, &c);
    float k[8], v[8];
    for (int i = 0; i < kv_dim; i++) {
        k[i] = 1.0f + (float)i;
        v[i] = -1.0f - (float)i;
    }
    int positions[] = {3, 0, 7}; /* the middle and both ends of the buffer */
    for (size_t p = 0; p < sizeof positions / sizeof positions[0]; p++) {
        fill(kv.keys, (size_t)kv.capacity * kv_dim, -100.0f);
        fill(kv.values, (size_t)kv.capacity * kv_dim, -100.0f);
        BatchEntry e = {.seq = 0, .pos = positions[p], .token = 5, .logits_row = -1};
        naive_store(&kv, 0, &e, k, v);
        ck_assert_msg(!(kv.keys[(size_t)e.pos * kv_dim] == v[0] && kv.values[(size_t)e.pos * kv_dim] == k[0]),
                      "expected the key in kv->keys and the value in kv->values, got them the other way round; "
                      "hint: swap the two copies in naive_store()");
        check_rows(kv.keys, "keys", kv.capacity, kv_dim, e.pos, k, -100.0f);
        check_rows(kv.values, "values", kv.capacity, kv_dim, e.pos, v, -100.0f);
    }
    naive_kv_free(&kv);
}
END_TEST

START_TEST(store_reuses_rows_across_layers)
{
    ModelConfig c = attention_cfg(4, 2, 4, 8);
    int kv_dim = model_kv_dim(&c);
    NaiveKv kv;
    open_store(&kv, &c);
    fill(kv.keys, (size_t)kv.capacity * kv_dim, -100.0f);
    fill(kv.values, (size_t)kv.capacity * kv_dim, -100.0f);
    float k0[8], v0[8], k1[8], v1[8];
    fill_random(k0, 8, 1);
    fill_random(v0, 8, 2);
    fill_random(k1, 8, 3);
    fill_random(v1, 8, 4);
    BatchEntry e = {.seq = 0, .pos = 2, .token = 5, .logits_row = -1};
    naive_store(&kv, 0, &e, k0, v0);
    naive_store(&kv, 1, &e, k1, v1);
    ck_assert_msg(kv.keys[2 * kv_dim] != k0[0] || kv.keys[2 * kv_dim + 1] != k0[1],
                  "expected row 2 to hold layer 1's key after storing layer 0 and then layer 1 at position 2, but it "
                  "still holds layer 0's; hint: naive_store(): the buffers hold one layer at a time ([capacity][kv_dim], no layer "
                  "index): every layer writes the same row e->pos");
    check_rows(kv.keys, "keys", kv.capacity, kv_dim, 2, k1, -100.0f);
    check_rows(kv.values, "values", kv.capacity, kv_dim, 2, v1, -100.0f);
    naive_kv_free(&kv);
}
END_TEST

/* -------------------------------------------------------- naive_attend */

/* One head of width 2. The query at position 1 scores ln 3 against key 1
 * and 0 against key 0 (after dividing by sqrt(2)), so softmax gives the
 * weights 1/4 and 3/4, and the output is 1/4 (4, 0) + 3/4 (0, 8) = (1, 6). */
START_TEST(attend_hand_checked)
{
    ModelConfig c = attention_cfg(1, 1, 2, 4);
    NaiveKv kv;
    open_store(&kv, &c);
    const float keys[4][2] = {{0, 0}, {logf(3.0f), 0}, {0, 0}, {0, 0}};
    const float values[4][2] = {{4, 0}, {0, 8}, {0, 0}, {0, 0}};
    memcpy(kv.keys, keys, sizeof keys);
    memcpy(kv.values, values, sizeof values);
    const float q[2] = {sqrtf(2.0f), 0};
    float out[2], scores[4];

    BatchEntry first = {.seq = 0, .pos = 0, .token = 5, .logits_row = -1};
    naive_attend(&kv, 0, &first, 0, q, out, scores);
    ck_assert_msg(fabsf(out[0] - 4) < 1e-5f && fabsf(out[1] - 0) < 1e-5f,
                  "expected out = (4, 0) for the query at position 0, got (%g, %g); hint: in naive_attend(), the first "
                  "token sees only itself, so its softmax weight is 1 and the output is its own value row",
                  out[0], out[1]);

    BatchEntry second = {.seq = 0, .pos = 1, .token = 5, .logits_row = -1};
    naive_attend(&kv, 0, &second, 0, q, out, scores);
    /* The same numbers without the 1/sqrt(head_dim) scale: a common slip. */
    float w1 = 1.0f / (1.0f + expf(-logf(3.0f) * sqrtf(2.0f)));
    int forgot_scale = fabsf(out[0] - 4 * (1 - w1)) < 1e-3f && fabsf(out[1] - 8 * w1) < 1e-3f;
    ck_assert_msg(!forgot_scale,
                  "expected out = (1, 6) for the query at position 1, got (%g, %g); hint: that is what naive_attend() "
                  "gives without dividing the scores by sqrt(head_dim)",
                  out[0], out[1]);
    ck_assert_msg(fabsf(out[0] - 1) < 1e-5f && fabsf(out[1] - 6) < 1e-5f,
                  "expected out = (1, 6) for the query at position 1 (softmax weights 1/4 and 3/4 on the values "
                  "(4, 0) and (0, 8)), got (%g, %g); hint: in naive_attend(), score_t = q . k_t / sqrt(head_dim) for t = 0..e->pos, "
                  "softmax over those scores, then out = sum of weight_t * v_t",
                  out[0], out[1]);
    naive_kv_free(&kv);
}
END_TEST

/* Compares naive_attend with the reference for every head at @p pos.
 * Rows after pos may hold anything (the causal test puts NaN there). */
static void check_heads_at(NaiveKv *kv, int pos, unsigned seed)
{
    const ModelConfig *c = &kv->cfg;
    int head_dim = model_head_dim(c);
    float q[64], out[64], want[64], scores[512];
    for (int head = 0; head < c->n_heads; head++) {
        fill_random(q, (size_t)head_dim, seed + 17u * (unsigned)head);
        fill(scores, (size_t)c->seq_len, NAN); /* scratch starts as garbage */
        BatchEntry e = {.seq = 0, .pos = pos, .token = 5, .logits_row = -1};
        naive_attend(kv, 0, &e, head, q, out, scores);
        for (int i = 0; i < head_dim; i++)
            ck_assert_msg(isfinite(out[i]),
                          "expected a finite output for head %d at position %d, got out[%d] = %g; hint: naive_attend(): in this test "
                          "the rows after e->pos (and the scores scratch) hold NaN, so your code read positions the "
                          "token must not see, or a score it never wrote: attend to positions 0..e->pos only",
                          head, pos, i, out[i]);
        reference_attend(kv, head, pos + 1, q, want);
        int at;
        float diff = lab_max_abs_diff(out, want, head_dim, &at);
        if (diff <= 1e-5f)
            continue;
        float without_self[64];
        if (pos > 0)
            reference_attend(kv, head, pos, q, without_self);
        int left_out_self = pos > 0 && lab_max_abs_diff(out, without_self, head_dim, NULL) <= 1e-5f;
        ck_assert_msg(!left_out_self,
                      "expected head %d at position %d to attend to positions 0..%d, got the result for 0..%d; hint: "
                      "in naive_attend(), a token attends to itself too (t <= e->pos)",
                      head, pos, pos, pos - 1);
        ck_assert_msg(0, "expected out[%d] = %g for head %d at position %d (attention_reference), got %g; hint: "
                         "naive_attend(): score_t = q . k_t / sqrt(head_dim) over the key rows t = 0..e->pos of this head's KV head "
                         "(row stride kv_dim), softmax, then the same weights on the value rows",
                      at, want[at], head, pos, out[at]);
    }
}

START_TEST(attend_matches_reference)
{
    ModelConfig c = attention_cfg(4, 4, 8, 16);
    NaiveKv kv;
    open_store(&kv, &c);
    size_t n = (size_t)kv.capacity * model_kv_dim(&c);
    fill_random(kv.keys, n, 11);
    fill_random(kv.values, n, 12);
    int positions[] = {0, 1, 7, 15};
    for (size_t p = 0; p < sizeof positions / sizeof positions[0]; p++)
        check_heads_at(&kv, positions[p], 100u + (unsigned)p);
    naive_kv_free(&kv);
}
END_TEST

START_TEST(attend_is_causal)
{
    ModelConfig c = attention_cfg(4, 2, 8, 16);
    NaiveKv kv;
    open_store(&kv, &c);
    int kv_dim = model_kv_dim(&c);
    int positions[] = {0, 3, 14};
    for (size_t p = 0; p < sizeof positions / sizeof positions[0]; p++) {
        int pos = positions[p];
        size_t seen = (size_t)(pos + 1) * kv_dim, unseen = (size_t)(kv.capacity - pos - 1) * kv_dim;
        fill_random(kv.keys, seen, 21u + (unsigned)p);
        fill_random(kv.values, seen, 31u + (unsigned)p);
        fill(kv.keys + seen, unseen, NAN); /* the future: never to be read */
        fill(kv.values + seen, unseen, NAN);
        check_heads_at(&kv, pos, 200u + (unsigned)p);
    }
    naive_kv_free(&kv);
}
END_TEST

START_TEST(attend_gqa_head_mapping)
{
    ModelConfig c = attention_cfg(4, 2, 4, 8); /* kv_mul = 2: heads 0,1 read KV head 0; heads 2,3 KV head 1 */
    int head_dim = model_head_dim(&c), kv_dim = model_kv_dim(&c), kv_mul = model_kv_mul(&c);
    NaiveKv kv;
    open_store(&kv, &c);
    /* Every value row of KV head j is the constant 10 (j + 1): whatever the
     * weights, the output names the KV head that was read. */
    fill_random(kv.keys, (size_t)kv.capacity * kv_dim, 41);
    for (int t = 0; t < kv.capacity; t++)
        for (int i = 0; i < kv_dim; i++)
            kv.values[(size_t)t * kv_dim + i] = 10.0f * (float)(i / head_dim + 1);
    float q[4], out[4], scores[8];
    for (int head = 0; head < c.n_heads; head++) {
        fill_random(q, 4, 50u + (unsigned)head);
        BatchEntry e = {.seq = 0, .pos = 5, .token = 5, .logits_row = -1};
        naive_attend(&kv, 0, &e, head, q, out, scores);
        int want_kv = head / kv_mul;
        float want = 10.0f * (float)(want_kv + 1);
        ck_assert_msg(fabsf(out[0] - want) < 1e-4f,
                      "expected query head %d to read KV head %d (whose values are all %g), got out[0] = %g; hint: "
                      "naive_attend(): %d query heads share each KV head, so query head h reads KV head h / kv_mul (not h, not "
                      "h %% n_kv_heads), whose slice of a row starts at (h / kv_mul) * head_dim",
                      head, want_kv, want, out[0], kv_mul);
    }
    /* The keys must come from the same KV head as the values. */
    fill_random(kv.values, (size_t)kv.capacity * kv_dim, 42);
    check_heads_at(&kv, 5, 300);
    naive_kv_free(&kv);
}
END_TEST

/* ------------------------------------------------------- end to end */

/* The reference: a plain contiguous KV cache, [n_layers][seq_len][kv_dim],
 * with attention_reference() reading it. Written independently of the lab
 * code so that the two can only agree if the lab code is right. */
typedef struct {
    ModelConfig cfg;
    int n_cached;  /* positions whose K/V are stored */
    float *keys;   /* [n_layers][seq_len][kv_dim] */
    float *values; /* [n_layers][seq_len][kv_dim] */
} ReferenceCache;

static float *reference_row(const ReferenceCache *rc, float *base, int layer, int pos)
{
    int kv_dim = model_kv_dim(&rc->cfg);
    return base + ((size_t)layer * rc->cfg.seq_len + (size_t)pos) * kv_dim;
}

static int reference_prepare(void *ctx, int n_tokens, int *cached, Err *err)
{
    (void)err;
    ReferenceCache *rc = ctx;
    *cached = rc->n_cached; /* everything the earlier steps stored */
    rc->n_cached = n_tokens;
    return 0;
}

static void reference_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v)
{
    ReferenceCache *rc = ctx;
    size_t bytes = (size_t)model_kv_dim(&rc->cfg) * sizeof(float);
    memcpy(reference_row(rc, rc->keys, layer, e->pos), k, bytes);
    memcpy(reference_row(rc, rc->values, layer, e->pos), v, bytes);
}

static void reference_attend_seam(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out,
                                  float *scores)
{
    ReferenceCache *rc = ctx;
    const ModelConfig *c = &rc->cfg;
    size_t offset = (size_t)(head / model_kv_mul(c)) * (size_t)model_head_dim(c);
    attention_reference(out, q, reference_row(rc, rc->keys, layer, 0) + offset,
                        reference_row(rc, rc->values, layer, 0) + offset, e->pos + 1, model_kv_dim(c),
                        model_head_dim(c), scores);
}

/* A model and tokenizer, synthetic or loaded, and a run on them. */
typedef struct {
    Model model;
    Tokenizer tokenizer;
    void *image;
} Bench;

static void bench_open_synthetic(Bench *b)
{
    memset(b, 0, sizeof *b);
    /* An unshared classifier: with a shared one, a synthetic model mostly
     * repeats its last token whatever attention says, and a test that
     * ignores attention would pass a stub. */
    SynthSpec spec = {.shared_classifier = 0, .ak42 = 0, .seed = 7};
    ck_assert(synth_preset("tiny", &spec.cfg) == 0);
    size_t bytes, tok_bytes;
    void *tok_image;
    Err err = {{0}};
    ck_assert_msg(synth_model_image(&spec, &b->image, &bytes, &err) == 0, "synth_model_image: %s", err.msg);
    ck_assert_msg(model_open_image(&b->model, b->image, bytes, &err) == 0, "model_open_image: %s", err.msg);
    ck_assert_msg(synth_tokenizer_image(spec.cfg.vocab_size, &tok_image, &tok_bytes, &err) == 0,
                  "synth_tokenizer_image: %s", err.msg);
    ck_assert_msg(tokenizer_open_image(&b->tokenizer, tok_image, tok_bytes, spec.cfg.vocab_size, &err) == 0,
                  "tokenizer_open_image: %s", err.msg);
    mem_free(tok_image);
}

static void bench_close(Bench *b)
{
    tokenizer_free(&b->tokenizer);
    model_free(&b->model);
    mem_free(b->image);
}

/* Greedy generation of @p steps tokens after @p prompt with a strategy, as
 * chapter 1's program does it (activations sized for a whole sequence).
 * Returns generate()'s status; the error is in @p err. */
static int run_generation(const Bench *b, const SingleStreamKv *kv, const char *prompt, int steps, FILE *out,
                          Generation *g, Err *err)
{
    /* One thread: results never depend on it, and on a busy machine OpenMP
     * threads that wait for each other can take a test past its time limit. */
    ops_set_threads(1);
    Sampler sampler;
    ForwardState fs;
    memset(&fs, 0, sizeof fs);
    ck_assert_msg(sampler_init(&sampler, b->model.cfg.vocab_size, 0.0f, 0.0f, 1, err) == 0, "%s", err->msg);
    ck_assert_msg(generation_init(g, &b->model, &b->tokenizer, prompt, err) == 0, "%s", err->msg);
    ck_assert_msg(forward_state_init(&fs, &b->model.cfg, b->model.cfg.seq_len, 1, err) == 0, "%s", err->msg);
    int rc = generate(g, &b->model, &b->tokenizer, &sampler, &fs, kv, steps, out, err);
    forward_state_free(&fs);
    sampler_free(&sampler);
    return rc;
}

static void run_chapter1(const Bench *b, const char *prompt, int steps, FILE *out, Generation *g)
{
    NaiveKv kv;
    open_store(&kv, &b->model.cfg);
    SingleStreamKv strategy = naive_strategy(&kv);
    Err err = {{0}};
    int rc = run_generation(b, &strategy, prompt, steps, out, g, &err);
    ck_assert_msg(rc == 0,
                  "expected chapter 1's generation loop to run, got the error \"%s\"; hint: naive_prepare must report "
                  "0 cached positions, so that every step feeds the whole sequence",
                  err.msg);
    naive_kv_free(&kv);
}

static void run_reference(const Bench *b, const char *prompt, int steps, Generation *g)
{
    const ModelConfig *c = &b->model.cfg;
    size_t floats = (size_t)c->n_layers * c->seq_len * model_kv_dim(c);
    ReferenceCache rc = {.cfg = *c, .n_cached = 0, .keys = mem_alloc_array(MEM_KV, floats, sizeof(float)),
                         .values = mem_alloc_array(MEM_KV, floats, sizeof(float))};
    ck_assert(rc.keys && rc.values);
    SingleStreamKv strategy = {
        .seam = {.ctx = &rc, .store = reference_store, .attend = reference_attend_seam},
        .prepare = reference_prepare,
        .usage = NULL,
    };
    Err err = {{0}};
    ck_assert_msg(run_generation(b, &strategy, prompt, steps, NULL, g, &err) == 0, "reference: %s", err.msg);
    mem_free(rc.keys);
    mem_free(rc.values);
}

/* Different tokens among the generated ones (the reference must not just
 * repeat itself, or it would not tell attention from no attention). */
static int distinct_tokens(const Generation *g)
{
    int n = 0;
    for (int i = g->n_prompt; i < g->n_tokens; i++) {
        int seen = 0;
        for (int j = g->n_prompt; j < i && !seen; j++)
            seen = g->tokens[j] == g->tokens[i];
        n += !seen;
    }
    return n;
}

#define E2E_PROMPT "Once upon a time"
#define E2E_STEPS 40

START_TEST(generation_matches_reference)
{
    Bench b;
    bench_open_synthetic(&b);
    Generation want, got;
    run_reference(&b, E2E_PROMPT, E2E_STEPS, &want);
    ck_assert_msg(want.n_tokens - want.n_prompt >= 20 && distinct_tokens(&want) >= 10,
                  "test setup: the reference made only %d tokens, %d distinct", want.n_tokens - want.n_prompt,
                  distinct_tokens(&want));
    run_chapter1(&b, E2E_PROMPT, E2E_STEPS, NULL, &got);
    for (int i = want.n_prompt; i < want.n_tokens && i < got.n_tokens; i++)
        ck_assert_msg(got.tokens[i] == want.tokens[i],
                      "expected the tokens of a plain KV-cache reference; generated token %d is %d, expected %d "
                      "(the first %d agree); hint: pass the attend tests first; if they pass, check that store "
                      "writes both K and V for every position of every layer",
                      i - want.n_prompt + 1, got.tokens[i], want.tokens[i], i - want.n_prompt);
    ck_assert_msg(got.n_tokens == want.n_tokens, "expected %d generated tokens, got %d; hint: the same model and "
                  "prompt must stop at the same point", want.n_tokens - want.n_prompt, got.n_tokens - got.n_prompt);
    generation_free(&want);
    generation_free(&got);
    bench_close(&b);
}
END_TEST

START_TEST(generation_recomputes_everything)
{
    Bench b;
    bench_open_synthetic(&b);
    Generation g;
    run_chapter1(&b, E2E_PROMPT, E2E_STEPS, NULL, &g);
    /* A step with t tokens in context runs all t positions. */
    int steps_run = g.n_tokens - g.n_prompt + (g.finish == FINISH_STOP);
    long want = 0;
    for (int t = g.n_prompt; t < g.n_prompt + steps_run; t++)
        want += t;
    ck_assert_msg(g.positions_run == want,
                  "expected %ld token positions run through the model over %d steps (%d + %d + ... + %d: every step "
                  "recomputes the whole sequence), got %ld; hint: naive_prepare must say 0 positions are cached",
                  want, steps_run, g.n_prompt, g.n_prompt + 1, g.n_prompt + steps_run - 1, g.positions_run);
    generation_free(&g);
    bench_close(&b);
}
END_TEST

static char *read_whole_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    ck_assert(buf && fread(buf, 1, (size_t)n, f) == (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* Up to 60 bytes of text from a little before byte at, newlines shown as a backslash and n. */
static const char *excerpt(const char *text, size_t len, size_t at, char out[200])
{
    size_t from = at > 20 ? at - 20 : 0, n = 0;
    for (size_t i = from; i < len && i < from + 60; i++) {
        if (text[i] == '\n') {
            out[n++] = '\\';
            out[n++] = 'n';
        } else {
            out[n++] = text[i];
        }
    }
    out[n] = '\0';
    return out;
}

/* The public golden test (models/LICENSE-tinyllamas.md) with the lab code. */
START_TEST(golden_stories260K)
{
    const char *model_path = test_shared_file("stories260K.bin");
    const char *tok_path = test_shared_file("tok512.bin");
    const char *golden_path = test_shared_file("golden-once-upon-a-time-150.txt");
    if (!model_path || !tok_path || !golden_path) {
        test_skip("golden_stories260K", "stories260K.bin, tok512.bin or golden-once-upon-a-time-150.txt is in "
                                        "neither models/ nor ../shared/models/");
        return;
    }
    size_t golden_len;
    char *golden = read_whole_file(golden_path, &golden_len);
    Bench b;
    memset(&b, 0, sizeof b);
    Err err = {{0}};
    ck_assert_msg(model_load(&b.model, model_path, &err) == 0, "%s", err.msg);
    ck_assert_msg(tokenizer_load(&b.tokenizer, tok_path, b.model.cfg.vocab_size, &err) == 0, "%s", err.msg);
    char *text = NULL;
    size_t text_len = 0;
    FILE *out = open_memstream(&text, &text_len);
    ck_assert(out != NULL);
    Generation g;
    run_chapter1(&b, "Once upon a time", 150, out, &g);
    fclose(out);
    size_t same = 0;
    while (same < text_len && same < golden_len && text[same] == golden[same])
        same++;
    char got_excerpt[200], want_excerpt[200];
    ck_assert_msg(text_len == golden_len && same == golden_len,
                  "expected the %zu bytes of %s, got %zu bytes that agree up to byte %zu: expected \"%s\", got \"%s\"; "
                  "hint: pass the other tests first; this one runs the whole chapter on the real stories260K model",
                  golden_len, golden_path, text_len, same, excerpt(golden, golden_len, same, want_excerpt),
                  excerpt(text, text_len, same, got_excerpt));
    free(text);
    free(golden);
    generation_free(&g);
    tokenizer_free(&b.tokenizer);
    model_free(&b.model);
}
END_TEST

Suite *lab_suite(void)
{
    Suite *s = suite_create("lab-ch01");
    lab_add_test(s, prepare_caches_nothing, LAB_UNIT_S, 1, "naive_prepare()");
    lab_add_test(s, store_writes_row_at_pos, LAB_UNIT_S, 1, "naive_store()");
    lab_add_test(s, store_reuses_rows_across_layers, LAB_UNIT_S, 1, "naive_store()");
    lab_add_test(s, attend_hand_checked, LAB_UNIT_S, 1, "naive_attend()");
    lab_add_test(s, attend_matches_reference, LAB_UNIT_S, 1, "naive_attend()");
    lab_add_test(s, attend_is_causal, LAB_UNIT_S, 1, "naive_attend()");
    lab_add_test(s, attend_gqa_head_mapping, LAB_UNIT_S, 1, "naive_attend()");
    lab_add_test(s, generation_matches_reference, LAB_RUN_S, 2,
                 "chapter 1's generation loop with your naive_prepare(), naive_store() and naive_attend()");
    lab_add_test(s, generation_recomputes_everything, LAB_RUN_S, 1, "naive_prepare(), in chapter 1's generation loop");
    lab_add_test(s, golden_stories260K, LAB_RUN_S, 2,
                 "chapter 1's generation loop with your naive_prepare(), naive_store() and naive_attend()");
    return s;
}
