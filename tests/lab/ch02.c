/* Chapter 2 lab tests: the contiguous KV cache (kv_cache_prepare(),
 * kv_cache_store(), kv_cache_attend(), kv_cache_grow(): your
 * exercises/ch02/ under `make lab CH=2`).
 *
 * Small cases you can check by hand first (prepare, store, attend, grow),
 * then whole generations that must give exactly the logits of a reference
 * and the golden text. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "assets.h"
#include "generate.h"
#include "kvcache.h"
#include "lab/grading.h"
#include "mem.h"
#include "ops.h"
#include "sampler.h"
#include "synth.h"
#include "tokenizer.h"

/* 2 layers, 4 query heads sharing 2 KV heads (kv_mul 2), head_dim 2:
 * kv_dim 4, so a row is 4 floats and everything fits on paper. */
static const ModelConfig SMALL = {8, 16, 2, 4, 2, 400, 40};

static size_t row_index(const KvCache *kv, int layer, int pos)
{
    return ((size_t)layer * (size_t)kv->capacity + (size_t)pos) * (size_t)kv->kv_dim;
}

static void open_cache(KvCache *kv, KvAllocPolicy policy, int n_prompt)
{
    mem_reset();
    Err err = {{0}};
    ck_assert_msg(kv_cache_init(kv, &SMALL, policy, n_prompt, &err) == 0, "kv_cache_init failed: %s", err.msg);
}

/* ------------------------------------------------------------ ch02.prepare */

START_TEST(prepare_reports_what_is_already_cached)
{
    KvCache kv;
    open_cache(&kv, KV_ALLOC_MAX, 5);
    Err err = {{0}};
    int want[][2] = {{5, 0}, {6, 5}, {7, 6}, {8, 7}}; /* {n_tokens, cached} */
    for (int i = 0; i < 4; i++) {
        int cached = -1;
        ck_assert_msg(kv_cache_prepare(&kv, want[i][0], &cached, &err) == 0, "kv_cache_prepare(%d) failed: %s",
                      want[i][0], err.msg);
        ck_assert_msg(cached == want[i][1],
                      "step with %d tokens: expected %d cached positions, got %d; hint: kv_cache_prepare(): the first "
                      "step runs the whole prompt (nothing cached yet), every later step only the newest token",
                      want[i][0], want[i][1], cached);
    }
    ck_assert_msg(kv.length == 8, "expected kv->length 8 after a step with 8 tokens, got %d; hint: kv_cache_prepare() "
                  "records how many positions hold K/V once this step has stored its tokens", kv.length);
    kv_cache_free(&kv);
}
END_TEST

/* ------------------------------------------------------------ ch02.store */

/* Under both policies: with --kv-alloc grow the capacity (16 here) is not
 * seq_len (40), so a layer stride of seq_len writes rows that do not exist. */
static const KvAllocPolicy POLICIES[] = {KV_ALLOC_MAX, KV_ALLOC_GROW};

START_TEST(store_writes_row_layer_pos)
{
    for (int p = 0; p < 2; p++) {
        KvCache kv;
        open_cache(&kv, POLICIES[p], 1);
        const char *policy = kv_alloc_policy_name(POLICIES[p]);
        float k[4] = {1, 2, 3, 4}, v[4] = {-1, -2, -3, -4};
        BatchEntry e = {.seq = 0, .pos = 3, .token = 7, .logits_row = -1};
        kv_cache_store(&kv, 1, &e, k, v);
        size_t row = row_index(&kv, 1, 3); /* (1 x capacity + 3) x 4 */
        for (int i = 0; i < 4; i++) {
            ck_assert_msg(kv.keys[row + i] == k[i],
                          "--kv-alloc %s (capacity %d): expected keys[(1 x capacity + 3) x kv_dim + %d] = %g, got %g; "
                          "hint: in kv_cache_store(), row (layer, pos) starts at (layer x capacity + pos) x kv_dim",
                          policy, kv.capacity, i, (double)k[i], (double)kv.keys[row + i]);
            ck_assert_msg(kv.values[row + i] == v[i],
                          "--kv-alloc %s: expected values[%zu] = %g, got %g; hint: kv_cache_store() puts V in "
                          "kv->values, at the same row as K",
                          policy, row + i, (double)v[i], (double)kv.values[row + i]);
        }
        /* Nothing else was touched. */
        size_t total = (size_t)SMALL.n_layers * (size_t)kv.capacity * 4;
        for (size_t i = 0; i < total; i++)
            if (i < row || i >= row + 4)
                ck_assert_msg(kv.keys[i] == 0.0f && kv.values[i] == 0.0f,
                              "--kv-alloc %s: expected only row (layer 1, pos 3) to be written, but float %zu is %g / "
                              "%g; hint: check the layer stride in kv_cache_store() (capacity x kv_dim, and the "
                              "capacity is not seq_len once the cache can grow)",
                              policy, i, (double)kv.keys[i], (double)kv.values[i]);
        kv_cache_free(&kv);
    }
}
END_TEST

/* ------------------------------------------------------------ ch02.attend */

static void put_row(float *base, const KvCache *kv, int layer, int pos, int kv_head, float a, float b)
{
    float *row = base + row_index(kv, layer, pos) + kv_head * 2;
    row[0] = a;
    row[1] = b;
}

/* Equal keys give equal weights, so the output is the mean of the values
 * the query may see. */
START_TEST(attend_averages_values_under_equal_scores)
{
    for (int p = 0; p < 2; p++) {
        KvCache kv;
        open_cache(&kv, POLICIES[p], 1);
        const char *policy = kv_alloc_policy_name(POLICIES[p]);
        /* Layer 1, KV head 0: values (3,0), (0,3), (3,3); position 3 must stay unseen. */
        put_row(kv.values, &kv, 1, 0, 0, 3, 0);
        put_row(kv.values, &kv, 1, 1, 0, 0, 3);
        put_row(kv.values, &kv, 1, 2, 0, 3, 3);
        put_row(kv.values, &kv, 1, 3, 0, 1000, 1000);
        /* Layer 0 and KV head 1 hold something else, to catch wrong offsets. */
        for (int pos = 0; pos < 4; pos++) {
            put_row(kv.values, &kv, 0, pos, 0, -50, -50);
            put_row(kv.values, &kv, 1, pos, 1, 77, 77);
        }
        float q[2] = {1, 0}, out[2] = {9, 9}, scores[40];
        BatchEntry e = {.seq = 0, .pos = 2, .token = 0, .logits_row = -1};
        kv_cache_attend(&kv, 1, &e, 1, q, out, scores); /* query head 1 reads KV head 1 / 2 = 0 */
        ck_assert_msg(fabsf(out[0] - 2.0f) < 1e-5f && fabsf(out[1] - 2.0f) < 1e-5f,
                      "--kv-alloc %s (capacity %d): expected (2, 2), the mean of the values at positions 0..2, got "
                      "(%g, %g); hint: in kv_cache_attend(), query head h reads KV head h / kv_mul, in layer `layer` "
                      "(layer x capacity rows in), positions 0..e->pos and no further",
                      policy, kv.capacity, (double)out[0], (double)out[1]);
        e.pos = 1;
        kv_cache_attend(&kv, 1, &e, 0, q, out, scores);
        ck_assert_msg(fabsf(out[0] - 1.5f) < 1e-5f && fabsf(out[1] - 1.5f) < 1e-5f,
                      "--kv-alloc %s: expected (1.5, 1.5) for a query at position 1, got (%g, %g); hint: "
                      "kv_cache_attend() is causal: positions 0..e->pos, the token included",
                      policy, (double)out[0], (double)out[1]);
        kv_cache_free(&kv);
    }
}
END_TEST

/* A key that matches the query gets the larger weight: score ln 3 against
 * 0 gives softmax weights 1/4 and 3/4. */
START_TEST(attend_weights_by_the_scores)
{
    KvCache kv;
    open_cache(&kv, KV_ALLOC_MAX, 1);
    float ln3 = logf(3.0f) * sqrtf(2.0f); /* scores are divided by sqrt(head_dim) */
    put_row(kv.keys, &kv, 0, 0, 1, 0, 0);
    put_row(kv.keys, &kv, 0, 1, 1, ln3, 0);
    put_row(kv.values, &kv, 0, 0, 1, 4, 0);
    put_row(kv.values, &kv, 0, 1, 1, 0, 8);
    float q[2] = {1, 0}, out[2], scores[40];
    BatchEntry e = {.seq = 0, .pos = 1, .token = 0, .logits_row = -1};
    kv_cache_attend(&kv, 0, &e, 3, q, out, scores); /* head 3 -> KV head 1 */
    ck_assert_msg(fabsf(out[0] - 1.0f) < 1e-5f && fabsf(out[1] - 6.0f) < 1e-5f,
                  "expected (1, 6) = 1/4 x (4, 0) + 3/4 x (0, 8), got (%g, %g); hint: kv_cache_attend(): score = "
                  "q . k / sqrt(head_dim) over this KV head's slice (head / kv_mul), softmax over the scores, then "
                  "the weighted sum of values",
                  (double)out[0], (double)out[1]);
    kv_cache_free(&kv);
}
END_TEST

/* ------------------------------------------------------------ ch02.grow */

static void fill_cache_rows(KvCache *kv, int n_pos)
{
    for (int l = 0; l < SMALL.n_layers; l++)
        for (int pos = 0; pos < n_pos; pos++)
            for (int i = 0; i < 4; i++) {
                kv->keys[row_index(kv, l, pos) + i] = (float)(1000 * l + 10 * pos + i);
                kv->values[row_index(kv, l, pos) + i] = -(float)(1000 * l + 10 * pos + i);
            }
}

START_TEST(grow_moves_rows_and_counts_the_move)
{
    KvCache kv;
    open_cache(&kv, KV_ALLOC_GROW, 3);
    ck_assert_int_eq(kv.capacity, 16);
    Err err = {{0}};
    kv.length = 16; /* as after a step with 16 tokens; this test does not depend on your prepare */
    fill_cache_rows(&kv, 16);
    size_t per_token = model_kv_bytes_per_token(&SMALL, sizeof(float)); /* 2 x 2 x 2 x 2 x 4 = 64 B */
    ck_assert_msg(kv_cache_grow(&kv, 32, &err) == 0, "kv_cache_grow(32) failed: %s", err.msg);
    ck_assert_msg(kv.capacity == 32, "expected capacity 32 after growing, got %d; hint: kv_cache_grow() attaches the new "
                  "buffer (kv_cache_attach())",
                  kv.capacity);
    for (int l = 0; l < SMALL.n_layers; l++)
        for (int pos = 0; pos < 16; pos++)
            for (int i = 0; i < 4; i++) {
                float want = (float)(1000 * l + 10 * pos + i);
                float got_k = kv.keys[row_index(&kv, l, pos) + i], got_v = kv.values[row_index(&kv, l, pos) + i];
                ck_assert_msg(got_k == want && got_v == -want,
                              "after growing, expected row (layer %d, pos %d) float %d = %g / %g, got %g / %g; hint: "
                              "kv_cache_grow() copies old -> new, each layer's rows separately, since the layer "
                              "stride is capacity x kv_dim",
                              l, pos, i, (double)want, (double)-want, (double)got_k, (double)got_v);
            }
    ck_assert_msg(kv.reallocations == 1, "expected 1 reallocation, got %d; hint: kv_cache_grow() counts each move",
                  kv.reallocations);
    ck_assert_msg(kv.bytes_copied == 16 * per_token,
                  "expected %zu bytes copied (16 positions x %zu B), got %zu; hint: kv_cache_grow() counts the "
                  "keys and the values of every layer",
                  16 * per_token, per_token, kv.bytes_copied);
    ck_assert_msg(kv.peak_held_bytes == 48 * per_token,
                  "expected a peak of %zu bytes (old 16 + new 32 positions), got %zu; hint: in kv_cache_grow(), "
                  "both buffers exist until the old one is freed",
                  48 * per_token, kv.peak_held_bytes);
    ck_assert_msg(mem_current(MEM_KV, MEM_HOST) == 32 * per_token,
                  "expected the ledger to hold %zu KV bytes (the new buffer only), got %zu; hint: kv_cache_grow() "
                  "frees the old buffer with mem_free and allocates with mem_alloc(MEM_KV, ...)",
                  32 * per_token, mem_current(MEM_KV, MEM_HOST));
    ck_assert_msg(mem_peak(MEM_KV, MEM_HOST) == 48 * per_token,
                  "expected the ledger's KV peak %zu, got %zu; hint: kv_cache_grow() allocates the new buffer once, "
                  "before it frees the old one", 48 * per_token, mem_peak(MEM_KV, MEM_HOST));
    kv_cache_free(&kv);
}
END_TEST

/* Two moves: 16 -> 32 -> 40 positions. The peak is the largest moment,
 * old + new of the second move (32 + 40), not a sum over the moves. */
START_TEST(grow_twice_keeps_the_largest_peak)
{
    KvCache kv;
    open_cache(&kv, KV_ALLOC_GROW, 3);
    Err err = {{0}};
    size_t per_token = model_kv_bytes_per_token(&SMALL, sizeof(float));
    kv.length = 16; /* as after a step with 16 tokens */
    fill_cache_rows(&kv, 16);
    ck_assert_msg(kv_cache_grow(&kv, 32, &err) == 0, "kv_cache_grow(32) failed: %s", err.msg);
    kv.length = 32;
    fill_cache_rows(&kv, 32);
    ck_assert_msg(kv_cache_grow(&kv, 40, &err) == 0, "kv_cache_grow(40) failed: %s", err.msg);
    ck_assert_msg(kv.peak_held_bytes == 72 * per_token,
                  "after growing 16 -> 32 -> 40 positions, expected a peak of %zu bytes (old 32 + new 40 during the "
                  "second move), got %zu; hint: kv_cache_grow() keeps the LARGEST old + new seen "
                  "(peak_held_bytes is a maximum, not a sum)",
                  72 * per_token, kv.peak_held_bytes);
    ck_assert_msg(kv.bytes_copied == 48 * per_token && kv.reallocations == 2,
                  "expected 2 moves copying 16 + 32 positions (%zu B), got %d moves and %zu B; hint: "
                  "kv_cache_grow() adds each move's bytes to bytes_copied",
                  48 * per_token, kv.reallocations, kv.bytes_copied);
    ck_assert_msg(mem_current(MEM_KV, MEM_HOST) == 40 * per_token && mem_peak(MEM_KV, MEM_HOST) == 72 * per_token,
                  "expected the ledger to hold %zu KV bytes at the end and %zu at its peak, got %zu and %zu; hint: "
                  "kv_cache_grow() frees each old buffer", 40 * per_token, 72 * per_token,
                  mem_current(MEM_KV, MEM_HOST), mem_peak(MEM_KV, MEM_HOST));
    kv_cache_free(&kv);
}
END_TEST

/* Steps that overflow the cache make prepare() grow it, doubling. */
START_TEST(prepare_grows_by_doubling)
{
    KvCache kv;
    open_cache(&kv, KV_ALLOC_GROW, 5);
    Err err = {{0}};
    int cached;
    int capacities[41] = {0};
    for (int n = 5; n <= 40; n++) {
        ck_assert_msg(kv_cache_prepare(&kv, n, &cached, &err) == 0, "kv_cache_prepare(%d) failed: %s", n, err.msg);
        capacities[n] = kv.capacity;
    }
    ck_assert_msg(capacities[16] == 16 && capacities[17] == 32 && capacities[32] == 32 && capacities[33] == 40,
                  "expected capacities 16, 32, 32, 40 at 16, 17, 32, 33 tokens, got %d, %d, %d, %d; hint: "
                  "kv_cache_grow() must leave the cache at the capacity it is asked for (kv_cache_prepare() asks "
                  "through kv_cache_make_room(), which doubles, never beyond seq_len 40)",
                  capacities[16], capacities[17], capacities[32], capacities[33]);
    ck_assert_msg(kv.reallocations == 2, "expected 2 reallocations (16 -> 32 -> 40), got %d; hint: "
                  "kv_cache_grow() counts one per call (kv_cache_make_room() calls it once per doubling)",
                  kv.reallocations);
    kv_cache_free(&kv);
}
END_TEST

/* ------------------------------------------------------------ whole generations */

/* A reference store with another layout, each position's K and V of a
 * layer side by side ([pos][layer][2][kv_dim]), copied element by element
 * and read with the shared attention reference: the tokens any correct
 * cache must give. */
typedef struct {
    ModelConfig cfg;
    int length;
    float *records; /* [seq_len][n_layers][2][kv_dim] */
} RefKv;

static float *ref_record(const RefKv *r, int pos, int layer)
{
    return r->records + ((size_t)pos * (size_t)r->cfg.n_layers + (size_t)layer) * 2u * (size_t)model_kv_dim(&r->cfg);
}

static void ref_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v)
{
    RefKv *r = ctx;
    int kv_dim = model_kv_dim(&r->cfg);
    float *record = ref_record(r, e->pos, layer); /* K, then V */
    for (int i = 0; i < kv_dim; i++) {
        record[i] = k[i];
        record[kv_dim + i] = v[i];
    }
}

static void ref_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out, float *scores)
{
    RefKv *r = ctx;
    int hd = model_head_dim(&r->cfg), kv_dim = model_kv_dim(&r->cfg), stride = r->cfg.n_layers * 2 * kv_dim;
    const float *keys = ref_record(r, 0, layer) + (size_t)(head / model_kv_mul(&r->cfg)) * (size_t)hd;
    attention_reference(out, q, keys, keys + kv_dim, e->pos + 1, stride, hd, scores);
}

static int ref_prepare(void *ctx, int n_tokens, int *cached, Err *err)
{
    (void)err;
    RefKv *r = ctx;
    *cached = r->length;
    r->length = n_tokens;
    return 0;
}

/* The logits of every step are recorded as the next step is prepared (the
 * forward state still holds them then), because on a random-weight model a
 * wrong attention can leave the greedy tokens unchanged but never the
 * logits. prepare() only gets the seam's context, so the recorder is global. */
typedef struct {
    int (*inner_prepare)(void *ctx, int n_tokens, int *cached, Err *err);
    const ForwardState *fs;
    int vocab, steps, cap, prepared;
    float *log; /* [cap][vocab] */
} Recorder;

static Recorder *recording;

static void record_logits(Recorder *r)
{
    if (r->steps < r->cap)
        memcpy(r->log + (size_t)r->steps * (size_t)r->vocab, r->fs->logits, sizeof(float) * (size_t)r->vocab);
    r->steps++;
}

static int recording_prepare(void *ctx, int n_tokens, int *cached, Err *err)
{
    if (recording->prepared++ > 0)
        record_logits(recording);
    return recording->inner_prepare(ctx, n_tokens, cached, err);
}

/* Generates with a strategy; returns every step's logits ([steps][vocab],
 * malloc'd) and their number. */
static float *generate_with(const Model *m, const Tokenizer *t, int steps, const SingleStreamKv *kv, Generation *g,
                            FILE *out, Err *err, int *rc, int *n_steps)
{
    Sampler s;
    ForwardState fs;
    ck_assert_int_eq(sampler_init(&s, m->cfg.vocab_size, 0.0f, 0.9f, 42, err), 0);
    ck_assert_int_eq(forward_state_init(&fs, &m->cfg, g->n_prompt, 1, err), 0);
    Recorder r = {.inner_prepare = kv->prepare, .fs = &fs, .vocab = m->cfg.vocab_size, .cap = m->cfg.seq_len + 1};
    r.log = calloc((size_t)r.cap * (size_t)r.vocab, sizeof(float));
    SingleStreamKv recorded = *kv;
    recorded.prepare = recording_prepare;
    recording = &r;
    *rc = generate(g, m, t, &s, &fs, &recorded, steps, out, err);
    if (*rc == 0)
        record_logits(&r);
    recording = NULL;
    *n_steps = r.steps < r.cap ? r.steps : r.cap;
    forward_state_free(&fs);
    sampler_free(&s);
    return r.log;
}

static void expect_reference_logits(const Model *m, const Tokenizer *t, const char *prompt, int steps,
                                    KvAllocPolicy policy)
{
    Err err = {{0}};
    int rc, n_want, n_got;
    /* The reference. */
    Generation g;
    ck_assert_int_eq(generation_init(&g, m, t, prompt, &err), 0);
    RefKv ref = {.cfg = m->cfg};
    size_t floats = (size_t)m->cfg.seq_len * (size_t)m->cfg.n_layers * 2u * (size_t)model_kv_dim(&m->cfg);
    ref.records = calloc(floats, sizeof(float));
    SingleStreamKv ref_kv = {.seam = {.ctx = &ref, .store = ref_store, .attend = ref_attend}, .prepare = ref_prepare};
    float *want = generate_with(m, t, steps, &ref_kv, &g, NULL, &err, &rc, &n_want);
    ck_assert_msg(rc == 0, "the reference failed: %s", err.msg);
    generation_free(&g);
    free(ref.records);

    /* Yours. */
    ck_assert_int_eq(generation_init(&g, m, t, prompt, &err), 0);
    KvCache cache;
    ck_assert_msg(kv_cache_init(&cache, &m->cfg, policy, g.n_prompt, &err) == 0, "kv_cache_init: %s", err.msg);
    SingleStreamKv kv = kv_cache_strategy(&cache);
    float *got = generate_with(m, t, steps, &kv, &g, NULL, &err, &rc, &n_got);
    ck_assert_msg(rc == 0, "--kv-alloc %s: generation failed: %s; hint: a step must feed only the positions that "
                  "are not cached yet", kv_alloc_policy_name(policy), err.msg);
    size_t row = (size_t)m->cfg.vocab_size;
    int first_diff = -1;
    for (int step = 0; step < n_want && step < n_got && first_diff < 0; step++)
        if (memcmp(got + (size_t)step * row, want + (size_t)step * row, row * sizeof(float)) != 0)
            first_diff = step;
    ck_assert_msg(first_diff < 0 && n_got == n_want,
                  "--kv-alloc %s, prompt '%s': expected %d steps with the reference's logits bit for bit, got %d "
                  "steps, first difference at step %d; hint: test store and attend first (the logits of step 0, the "
                  "prompt, already need both)",
                  kv_alloc_policy_name(policy), prompt, n_want, n_got, first_diff);
    kv_cache_free(&cache);
    generation_free(&g);
    free(want);
    free(got);
}

START_TEST(logits_equal_the_reference_on_a_synthetic_gqa_model)
{
    ModelConfig cfg = {32, 64, 2, 4, 2, 400, 64};
    SynthSpec spec = {.cfg = cfg, .shared_classifier = 1, .ak42 = 0, .seed = 1};
    void *model_image, *tok_image;
    size_t model_bytes, tok_bytes;
    Err err = {{0}};
    ck_assert_int_eq(synth_model_image(&spec, &model_image, &model_bytes, &err), 0);
    ck_assert_int_eq(synth_tokenizer_image(cfg.vocab_size, &tok_image, &tok_bytes, &err), 0);
    Model m;
    Tokenizer t;
    ck_assert_msg(model_open_image(&m, model_image, model_bytes, &err) == 0, "%s", err.msg);
    ck_assert_msg(tokenizer_open_image(&t, tok_image, tok_bytes, cfg.vocab_size, &err) == 0, "%s", err.msg);
    expect_reference_logits(&m, &t, "hello world", 100, KV_ALLOC_MAX);
    expect_reference_logits(&m, &t, "hello world", 100, KV_ALLOC_GROW);
    tokenizer_free(&t);
    model_free(&m);
    mem_free(model_image);
    mem_free(tok_image);
}
END_TEST

/* The golden output (models/LICENSE-tinyllamas.md): chapter 2 prints exactly it. */
START_TEST(golden_output_on_stories260k)
{
    char model_path[PATH_MAX], tok_path[PATH_MAX], golden_path[PATH_MAX];
    if (assets_find("stories260K.bin", model_path, sizeof model_path) ||
        assets_find("tok512.bin", tok_path, sizeof tok_path) ||
        assets_find("golden-once-upon-a-time-150.txt", golden_path, sizeof golden_path)) {
        fprintf(stderr, "SKIP: golden_output_on_stories260k: stories260K.bin, tok512.bin or "
                        "golden-once-upon-a-time-150.txt is in neither models/ nor ../shared/models/\n");
        return;
    }
    Err err = {{0}};
    Model m;
    Tokenizer t;
    ck_assert_msg(model_load(&m, model_path, &err) == 0, "%s", err.msg);
    ck_assert_msg(tokenizer_load(&t, tok_path, m.cfg.vocab_size, &err) == 0, "%s", err.msg);
    FILE *gf = fopen(golden_path, "rb");
    char golden[4096];
    size_t golden_len = fread(golden, 1, sizeof golden, gf);
    fclose(gf);
    const KvAllocPolicy policies[] = {KV_ALLOC_MAX, KV_ALLOC_GROW};
    for (int p = 0; p < 2; p++) {
        char *text = NULL;
        size_t text_len = 0;
        FILE *out = open_memstream(&text, &text_len);
        Generation g;
        ck_assert_int_eq(generation_init(&g, &m, &t, "Once upon a time", &err), 0);
        KvCache cache;
        ck_assert_int_eq(kv_cache_init(&cache, &m.cfg, policies[p], g.n_prompt, &err), 0);
        SingleStreamKv kv = kv_cache_strategy(&cache);
        int rc, n_steps;
        free(generate_with(&m, &t, 150, &kv, &g, out, &err, &rc, &n_steps));
        fclose(out);
        ck_assert_msg(rc == 0, "--kv-alloc %s: generation failed: %s", kv_alloc_policy_name(policies[p]), err.msg);
        ck_assert_msg(text_len == golden_len && memcmp(text, golden, golden_len) == 0,
                      "--kv-alloc %s: expected the golden text\n%.*s\ngot\n%s\nhint: the unit tests above say which "
                      "piece is wrong",
                      kv_alloc_policy_name(policies[p]), (int)golden_len, golden, text);
        free(text);
        kv_cache_free(&cache);
        generation_free(&g);
    }
    tokenizer_free(&t);
    model_free(&m);
}
END_TEST

Suite *lab_suite(void)
{
    Suite *s = suite_create("lab-ch02");
    lab_add_test(s, prepare_reports_what_is_already_cached, LAB_UNIT_S, 1, "kv_cache_prepare()");
    lab_add_test(s, store_writes_row_layer_pos, LAB_UNIT_S, 1, "kv_cache_store()");
    lab_add_test(s, attend_averages_values_under_equal_scores, LAB_UNIT_S, 1, "kv_cache_attend()");
    lab_add_test(s, attend_weights_by_the_scores, LAB_UNIT_S, 1, "kv_cache_attend()");
    lab_add_test(s, grow_moves_rows_and_counts_the_move, LAB_UNIT_S, 1, "kv_cache_grow()");
    lab_add_test(s, grow_twice_keeps_the_largest_peak, LAB_UNIT_S, 1, "kv_cache_grow()");
    lab_add_test(s, prepare_grows_by_doubling, LAB_UNIT_S, 1, "kv_cache_grow(), as kv_cache_prepare() calls it");
    lab_add_test(s, logits_equal_the_reference_on_a_synthetic_gqa_model, LAB_RUN_S, 2,
                 "chapter 2's generation loop with your kv_cache_prepare(), kv_cache_store(), kv_cache_attend() "
                 "and kv_cache_grow()");
    lab_add_test(s, golden_output_on_stories260k, LAB_RUN_S, 2,
                 "chapter 2's generation loop with your kv_cache_prepare(), kv_cache_store(), kv_cache_attend() "
                 "and kv_cache_grow()");
    return s;
}
