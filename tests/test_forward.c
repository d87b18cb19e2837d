/* The forward pass (common/cpu/forward.c) on synthetic models of several shapes:
 *
 *  (a) a whole sequence in one call gives the same logits, bit for bit, as
 *      feeding it one token at a time (what lets chapter 1 and chapter 2
 *      agree), and two sequences in one batch give what each gives alone;
 *  (b) the logits agree with a deliberately simple reference forward pass
 *      written here in double precision, llama2.c style, one token at a time;
 *  (c) forward_state_bytes() is exactly what forward_state_init() charges.
 *
 * The K/V seam used here is the simplest one possible: one contiguous cache
 * [seq][layer][pos][kv_dim], with attention done by attention_reference(). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "mem.h"
#include "model.h"
#include "ops.h"
#include "suites.h"
#include "synth.h"

/* ------------------------------------------------------------ shapes */

typedef struct {
    const char *name;
    ModelConfig cfg;
    int ak42;
    int shared;
    int gguf;              /* 1: a GGUF file with the types below */
    WeightType matrices;   /* GGUF: the projections */
    WeightType embedding;  /* GGUF: token_embd (and output) */
    float rope_theta;      /* GGUF: llama.rope.freq_base */
} Shape;

/* dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len */
static const Shape SHAPES[] = {
    {"GQA x3, legacy, shared", {48, 96, 2, 6, 2, 97, 24}, 0, 1, 0, WEIGHT_F32, WEIGHT_F32, 0},
    {"MQA, head_dim 12, dim 36, ak42, unshared", {36, 70, 3, 3, 1, 101, 20}, 1, 0, 0, WEIGHT_F32, WEIGHT_F32, 0},
    {"GQA x2, head_dim 6, legacy, unshared", {36, 64, 2, 6, 3, 64, 16}, 0, 0, 0, WEIGHT_F32, WEIGHT_F32, 0},
    {"MHA, head_dim 10, ak42, shared", {40, 72, 2, 4, 4, 80, 18}, 1, 1, 0, WEIGHT_F32, WEIGHT_F32, 0},
    /* GGUF, the SmolLM2 mix (Q4_1 matrices, Q8_0 embedding, base 1e5) and the other stored types */
    {"GGUF Q4_1 + Q8_0, GQA x3, tied, base 1e5", {96, 160, 2, 6, 2, 90, 22}, 0, 1, 1, WEIGHT_Q4_1, WEIGHT_Q8_0,
     100000.0f},
    {"GGUF Q4_0 + f16, MQA, unshared", {64, 128, 2, 4, 1, 70, 17}, 0, 0, 1, WEIGHT_Q4_0, WEIGHT_F16, 0},
    {"GGUF bf16 + Q4_1, MHA, unshared, base 5e5", {64, 96, 2, 2, 2, 75, 19}, 0, 0, 1, WEIGHT_BF16, WEIGHT_Q4_1,
     500000.0f},
    {"GGUF f32 + bf16, GQA x2, tied", {40, 72, 2, 4, 2, 80, 18}, 0, 1, 1, WEIGHT_F32, WEIGHT_BF16, 0},
};
#define N_SHAPES (sizeof SHAPES / sizeof SHAPES[0])

/* A synthetic model held in memory. */
typedef struct {
    void *image;
    Model model;
} TestModel;

static void open_model(TestModel *t, const ModelConfig *cfg, int ak42, int shared, unsigned long long seed)
{
    SynthSpec spec = {.cfg = *cfg, .shared_classifier = shared, .ak42 = ak42, .seed = seed};
    size_t bytes;
    Err err = {{0}};
    ck_assert_msg(synth_model_image(&spec, &t->image, &bytes, &err) == 0, "synth: %s", err.msg);
    ck_assert_msg(model_open_image(&t->model, t->image, bytes, &err) == 0, "open: %s", err.msg);
    ck_assert_int_eq(t->model.format, ak42 ? MODEL_FORMAT_AK42_V1 : MODEL_FORMAT_LEGACY);
    ck_assert_int_eq(t->model.shared_classifier, shared);
}

static void open_shape(TestModel *t, const Shape *s, unsigned long long seed)
{
    if (!s->gguf) {
        open_model(t, &s->cfg, s->ak42, s->shared, seed);
        return;
    }
    SynthGgufSpec spec = {.cfg = s->cfg, .shared_classifier = s->shared, .seed = seed, .matrix_type = s->matrices,
                          .embedding_type = s->embedding, .rope_theta = s->rope_theta};
    size_t bytes;
    Err err = {{0}};
    ck_assert_msg(synth_gguf_image(&spec, &t->image, &bytes, &err) == 0, "synth: %s", err.msg);
    ck_assert_msg(model_open_image(&t->model, t->image, bytes, &err) == 0, "open: %s", err.msg);
    ck_assert_int_eq(t->model.format, MODEL_FORMAT_GGUF);
    ck_assert_int_eq(t->model.shared_classifier, s->shared);
    ck_assert_int_eq(t->model.w.layers[0].wq.type, s->matrices);
    ck_assert_int_eq(t->model.w.token_embedding.type, s->embedding);
    ck_assert(t->model.rope_theta == (s->rope_theta > 0 ? s->rope_theta : 10000.0f));
}

static void close_model(TestModel *t)
{
    model_free(&t->model);
    mem_free(t->image);
}

static void random_tokens(int *tokens, int n, int vocab, unsigned seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        tokens[i] = (int)((seed >> 8) % (unsigned)vocab);
    }
}

/* ------------------------------------------------- a contiguous K/V seam */

typedef struct {
    ModelConfig cfg;
    int n_seqs;
    float *keys;   /* [n_seqs][n_layers][seq_len][kv_dim] */
    float *values; /* same layout */
} ContiguousKv;

static size_t cache_offset(const ContiguousKv *c, int seq, int layer, int pos)
{
    size_t kv_dim = (size_t)model_kv_dim(&c->cfg);
    return (((size_t)seq * c->cfg.n_layers + layer) * c->cfg.seq_len + pos) * kv_dim;
}

static void contiguous_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v)
{
    ContiguousKv *c = ctx;
    size_t at = cache_offset(c, e->seq, layer, e->pos), row = (size_t)model_kv_dim(&c->cfg) * sizeof(float);
    memcpy(c->keys + at, k, row);
    memcpy(c->values + at, v, row);
}

static void contiguous_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out,
                              float *scores)
{
    ContiguousKv *c = ctx;
    int hd = model_head_dim(&c->cfg), kv_head = head / model_kv_mul(&c->cfg);
    size_t at = cache_offset(c, e->seq, layer, 0) + (size_t)kv_head * hd;
    attention_reference(out, q, c->keys + at, c->values + at, e->pos + 1, model_kv_dim(&c->cfg), hd, scores);
}

static KvSeam contiguous_open(ContiguousKv *c, const ModelConfig *cfg, int n_seqs)
{
    c->cfg = *cfg;
    c->n_seqs = n_seqs;
    size_t n = (size_t)n_seqs * cfg->n_layers * cfg->seq_len * model_kv_dim(cfg);
    c->keys = mem_alloc_array(MEM_KV, n, sizeof(float));
    c->values = mem_alloc_array(MEM_KV, n, sizeof(float));
    ck_assert(c->keys && c->values);
    return (KvSeam){.ctx = c, .store = contiguous_store, .attend = contiguous_attend};
}

static void contiguous_close(ContiguousKv *c)
{
    mem_free(c->keys);
    mem_free(c->values);
}

/* ------------------------------------------------ running the model */

/* Logits of every position of a sequence, fed in one forward call; rows are
 * assigned in reverse order to check that logits_row is honoured. */
static float *logits_one_call(const Model *m, const int *tokens, int n)
{
    const ModelConfig *c = &m->cfg;
    ForwardState fs;
    Err err = {{0}};
    ck_assert_msg(forward_state_init(&fs, c, n, n, &err) == 0, "%s", err.msg);
    ContiguousKv kv;
    KvSeam seam = contiguous_open(&kv, c, 1);
    BatchEntry *e = malloc(sizeof(BatchEntry) * (size_t)n);
    for (int i = 0; i < n; i++)
        e[i] = (BatchEntry){.seq = 0, .pos = i, .token = tokens[i], .logits_row = n - 1 - i};
    forward(m, &fs, &seam, e, n);
    float *out = malloc(sizeof(float) * (size_t)n * c->vocab_size);
    for (int i = 0; i < n; i++)
        memcpy(out + (size_t)i * c->vocab_size, fs.logits + (size_t)(n - 1 - i) * c->vocab_size,
               sizeof(float) * c->vocab_size);
    free(e);
    contiguous_close(&kv);
    forward_state_free(&fs);
    return out;
}

/* Logits of every position, one forward call per token (a KV cache). */
static float *logits_token_by_token(const Model *m, const int *tokens, int n)
{
    const ModelConfig *c = &m->cfg;
    ForwardState fs;
    Err err = {{0}};
    ck_assert_msg(forward_state_init(&fs, c, 1, 1, &err) == 0, "%s", err.msg);
    ContiguousKv kv;
    KvSeam seam = contiguous_open(&kv, c, 1);
    float *out = malloc(sizeof(float) * (size_t)n * c->vocab_size);
    for (int i = 0; i < n; i++) {
        BatchEntry e = {.seq = 0, .pos = i, .token = tokens[i], .logits_row = 0};
        forward(m, &fs, &seam, &e, 1);
        memcpy(out + (size_t)i * c->vocab_size, fs.logits, sizeof(float) * c->vocab_size);
    }
    contiguous_close(&kv);
    forward_state_free(&fs);
    return out;
}

/* ------------------------------------------- the reference forward pass */

/* llama2.c's transformer, written plainly in double precision: one token at
 * a time, its own K/V cache, nothing shared with common/ but the weights. */
typedef struct {
    const Model *m;
    double *key_cache;   /* [n_layers][seq_len][kv_dim] */
    double *value_cache; /* [n_layers][seq_len][kv_dim] */
} Reference;

static void ref_rmsnorm(double *out, const double *x, const float *w, int n, double eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double scale = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        out[i] = w[i] * (x[i] * scale);
}

/* out[r] = sum_c w[r][c] x[c], each row dequantized exactly (quant.c) */
static void ref_matvec(double *out, const WeightMatrix *w, const double *x)
{
    float *row = malloc(sizeof(float) * (size_t)w->cols);
    for (int r = 0; r < w->rows; r++) {
        weight_dequantize_row(w, r, row);
        double s = 0;
        for (int c = 0; c < w->cols; c++)
            s += (double)row[c] * x[c];
        out[r] = s;
    }
    free(row);
}

static void ref_rope(double *v, int width, int head_dim, int pos, double theta)
{
    for (int i = 0; i < width; i += 2) {
        int j = i % head_dim; /* llama2.c: head_dim index of the pair's first element */
        double angle = pos / pow(theta, (double)j / head_dim);
        double c = cos(angle), s = sin(angle), v0 = v[i], v1 = v[i + 1];
        v[i] = v0 * c - v1 * s;
        v[i + 1] = v0 * s + v1 * c;
    }
}

/* Runs one token at position pos and writes its logits. */
static void ref_forward(Reference *r, int token, int pos, double *logits)
{
    const ModelConfig *c = &r->m->cfg;
    const ModelWeights *w = &r->m->w;
    int dim = c->dim, hd = model_head_dim(c), kv_dim = model_kv_dim(c), hid = c->hidden_dim;
    int kv_mul = c->n_heads / c->n_kv_heads;
    double *x = calloc((size_t)dim, sizeof(double)), *xb = calloc((size_t)dim, sizeof(double));
    double *q = calloc((size_t)dim, sizeof(double)), *att_out = calloc((size_t)dim, sizeof(double));
    double *tmp = calloc((size_t)dim, sizeof(double)), *att = calloc((size_t)pos + 1, sizeof(double));
    double *h1 = calloc((size_t)hid, sizeof(double)), *h3 = calloc((size_t)hid, sizeof(double));
    double eps = r->m->rms_eps, theta = r->m->rope_theta;
    float *emb = malloc(sizeof(float) * (size_t)dim);
    weight_dequantize_row(&w->token_embedding, token, emb);
    for (int i = 0; i < dim; i++)
        x[i] = emb[i];
    free(emb);
    for (int l = 0; l < c->n_layers; l++) {
        const LayerWeights *lw = &w->layers[l];
        ref_rmsnorm(xb, x, lw->rms_att, dim, eps);
        double *k = r->key_cache + ((size_t)l * c->seq_len + pos) * kv_dim;
        double *v = r->value_cache + ((size_t)l * c->seq_len + pos) * kv_dim;
        ref_matvec(q, &lw->wq, xb);
        ref_matvec(k, &lw->wk, xb);
        ref_matvec(v, &lw->wv, xb);
        ref_rope(q, dim, hd, pos, theta);
        ref_rope(k, kv_dim, hd, pos, theta);
        for (int h = 0; h < c->n_heads; h++) {
            const double *qh = q + h * hd;
            int kvh = h / kv_mul;
            double max = -INFINITY, z = 0;
            for (int t = 0; t <= pos; t++) {
                const double *kt = r->key_cache + ((size_t)l * c->seq_len + t) * kv_dim + kvh * hd;
                double s = 0;
                for (int i = 0; i < hd; i++)
                    s += qh[i] * kt[i];
                att[t] = s / sqrt((double)hd);
                max = att[t] > max ? att[t] : max;
            }
            for (int t = 0; t <= pos; t++)
                z += att[t] = exp(att[t] - max);
            for (int i = 0; i < hd; i++) {
                double o = 0;
                for (int t = 0; t <= pos; t++)
                    o += att[t] / z * r->value_cache[((size_t)l * c->seq_len + t) * kv_dim + kvh * hd + i];
                att_out[h * hd + i] = o;
            }
        }
        ref_matvec(tmp, &lw->wo, att_out);
        for (int i = 0; i < dim; i++)
            x[i] += tmp[i];
        ref_rmsnorm(xb, x, lw->rms_ffn, dim, eps);
        ref_matvec(h1, &lw->w1, xb);
        ref_matvec(h3, &lw->w3, xb);
        for (int i = 0; i < hid; i++)
            h1[i] = h1[i] / (1.0 + exp(-h1[i])) * h3[i];
        ref_matvec(tmp, &lw->w2, h1);
        for (int i = 0; i < dim; i++)
            x[i] += tmp[i];
    }
    ref_rmsnorm(xb, x, w->rms_final, dim, eps);
    ref_matvec(logits, &w->wcls, xb);
    free(x), free(xb), free(q), free(att_out), free(tmp), free(att), free(h1), free(h3);
}

/* ---------------------------------------------------------------- tests */

START_TEST(whole_sequence_equals_token_by_token)
{
    for (size_t s = 0; s < N_SHAPES; s++) {
        TestModel t;
        open_shape(&t, &SHAPES[s], 100 + s);
        const ModelConfig *c = &t.model.cfg;
        int n = c->seq_len; /* up to the last position the model allows */
        int *tokens = malloc(sizeof(int) * (size_t)n);
        random_tokens(tokens, n, c->vocab_size, 7u + (unsigned)s);
        float *batch = logits_one_call(&t.model, tokens, n);
        float *single = logits_token_by_token(&t.model, tokens, n);
        for (int i = 0; i < n; i++)
            ck_assert_msg(memcmp(batch + (size_t)i * c->vocab_size, single + (size_t)i * c->vocab_size,
                                 sizeof(float) * c->vocab_size) == 0,
                          "%s: position %d: one call and token-by-token give different logits", SHAPES[s].name, i);
        free(batch);
        free(single);
        free(tokens);
        close_model(&t);
    }
}
END_TEST

/* Two sequences interleaved in one batch (as chapters 3 and 4 feed them)
 * give what each gives alone: the seam keeps them apart by e->seq. */
START_TEST(two_sequences_in_one_batch)
{
    TestModel t;
    open_model(&t, &SHAPES[0].cfg, 0, 1, 5);
    const ModelConfig *c = &t.model.cfg;
    int na = 9, nb = 14, n = na + nb;
    int ta[9], tb[14];
    random_tokens(ta, na, c->vocab_size, 1);
    random_tokens(tb, nb, c->vocab_size, 2);
    float *alone_a = logits_one_call(&t.model, ta, na), *alone_b = logits_one_call(&t.model, tb, nb);

    ForwardState fs;
    Err err = {{0}};
    ck_assert(forward_state_init(&fs, c, n, n, &err) == 0);
    ContiguousKv kv;
    KvSeam seam = contiguous_open(&kv, c, 2);
    BatchEntry e[23];
    int ia = 0, ib = 0;
    for (int i = 0; i < n; i++) { /* a, b, b, a, b, b, ...: positions in order within each sequence */
        if ((i % 3 == 0 && ia < na) || ib == nb) {
            e[i] = (BatchEntry){.seq = 0, .pos = ia, .token = ta[ia], .logits_row = i};
            ia++;
        } else {
            e[i] = (BatchEntry){.seq = 1, .pos = ib, .token = tb[ib], .logits_row = i};
            ib++;
        }
    }
    forward(&t.model, &fs, &seam, e, n);
    for (int i = 0; i < n; i++) {
        const float *want = (e[i].seq == 0 ? alone_a : alone_b) + (size_t)e[i].pos * c->vocab_size;
        ck_assert_msg(memcmp(fs.logits + (size_t)i * c->vocab_size, want, sizeof(float) * c->vocab_size) == 0,
                      "entry %d (seq %d pos %d) differs from the sequence run alone", i, e[i].seq, e[i].pos);
    }
    contiguous_close(&kv);
    forward_state_free(&fs);
    free(alone_a);
    free(alone_b);
    close_model(&t);
}
END_TEST

/* The float forward pass against the double reference. The float path
 * rounds every product and partial sum to 24 bits (relative error 6e-8 per
 * operation); over sums of at most a few hundred terms and a handful of
 * layers the observed error on these models is at most 3e-7 of the largest
 * logit. A bound of 1e-4 times the largest logit leaves a 300x margin, while
 * any real mistake (RoPE on the wrong pairs, a wrong KV head for a query
 * head, an off-by-one in the causal mask, a missing residual) moves logits
 * by 1e-2 or more. */
START_TEST(matches_double_reference)
{
    for (size_t s = 0; s < N_SHAPES; s++) {
        TestModel t;
        open_shape(&t, &SHAPES[s], 200 + s);
        const ModelConfig *c = &t.model.cfg;
        int n = c->seq_len, V = c->vocab_size, kv_dim = model_kv_dim(c);
        int *tokens = malloc(sizeof(int) * (size_t)n);
        random_tokens(tokens, n, V, 11u + (unsigned)s);
        float *got = logits_one_call(&t.model, tokens, n);
        Reference r = {.m = &t.model};
        r.key_cache = calloc((size_t)c->n_layers * c->seq_len * kv_dim, sizeof(double));
        r.value_cache = calloc((size_t)c->n_layers * c->seq_len * kv_dim, sizeof(double));
        double *want = malloc(sizeof(double) * (size_t)V);
        double worst = 0;
        for (int pos = 0; pos < n; pos++) {
            ref_forward(&r, tokens[pos], pos, want);
            double scale = 0;
            for (int i = 0; i < V; i++)
                scale = fabs(want[i]) > scale ? fabs(want[i]) : scale;
            ck_assert_msg(scale > 0.1, "%s: logits are all near zero (%g): a useless test model", SHAPES[s].name,
                          scale);
            for (int i = 0; i < V; i++) {
                double diff = fabs(got[(size_t)pos * V + i] - want[i]);
                worst = diff / scale > worst ? diff / scale : worst;
                ck_assert_msg(diff <= 1e-4 * scale, "%s: pos %d logit %d: got %.7g, reference %.7g (scale %.3g)",
                              SHAPES[s].name, pos, i, (double)got[(size_t)pos * V + i], want[i], scale);
            }
        }
        ck_assert_msg(worst < 1e-4, "%s: worst relative error %.3g", SHAPES[s].name, worst);
        free(r.key_cache);
        free(r.value_cache);
        free(want);
        free(got);
        free(tokens);
        close_model(&t);
    }
}
END_TEST

/* Big enough for both the matmuls and the attention loop to go parallel;
 * Check forks per test, so changing the thread count stays in this test. */
START_TEST(thread_count_does_not_change_logits)
{
    ModelConfig cfg;
    ck_assert_int_eq(synth_preset("stories260K", &cfg), 0);
    cfg.seq_len = 64;
    TestModel t;
    open_model(&t, &cfg, 0, 1, 9);
    int n = 60, tokens[60];
    random_tokens(tokens, n, cfg.vocab_size, 3);
    ops_set_threads(1);
    float *one = logits_one_call(&t.model, tokens, n);
    ops_set_threads(2);
    float *two = logits_one_call(&t.model, tokens, n);
    ck_assert_msg(memcmp(one, two, sizeof(float) * (size_t)n * cfg.vocab_size) == 0,
                  "logits with 1 and 2 threads differ");
    free(one);
    free(two);
    close_model(&t);
}
END_TEST

START_TEST(state_bytes_match_the_ledger)
{
    static const int caps[][3] = {{1, 1, 1}, {17, 1, 2}, {24, 24, 1}, {5, 3, 2}};
    for (size_t s = 0; s < N_SHAPES; s++)
        for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++) {
            const ModelConfig *c = &SHAPES[s].cfg;
            ops_set_threads(caps[k][2]);
            size_t before = mem_current(MEM_ACTIVATIONS, MEM_HOST);
            long buffers = mem_live_buffers();
            ForwardState fs;
            Err err = {{0}};
            ck_assert_msg(forward_state_init(&fs, c, caps[k][0], caps[k][1], &err) == 0, "%s", err.msg);
            ck_assert_int_eq(fs.score_rows, caps[k][2]);
            size_t charged = mem_current(MEM_ACTIVATIONS, MEM_HOST) - before;
            size_t planned = forward_state_bytes(c, caps[k][0], caps[k][1], caps[k][2]);
            ck_assert_msg(charged == planned, "%s, tokens %d logits %d threads %d: charged %zu, planned %zu",
                          SHAPES[s].name, caps[k][0], caps[k][1], caps[k][2], charged, planned);
            /* And the plan is what the buffers' shape comments say. */
            size_t T = (size_t)caps[k][0], L = (size_t)caps[k][1], dim = (size_t)c->dim;
            size_t kv = (size_t)model_kv_dim(c), hid = (size_t)c->hidden_dim, half = (size_t)model_head_dim(c) / 2;
            size_t floats = 4 * T * dim + 2 * T * kv + 2 * T * hid + (size_t)caps[k][2] * c->seq_len + L * dim +
                            L * (size_t)c->vocab_size + 2 * (size_t)c->seq_len * half;
            ck_assert_uint_eq(planned, floats * sizeof(float));
            forward_state_free(&fs);
            ck_assert_uint_eq(mem_current(MEM_ACTIVATIONS, MEM_HOST), before);
            ck_assert_int_eq(mem_live_buffers(), buffers);
        }
}
END_TEST

START_TEST(state_refuses_zero_capacity)
{
    ForwardState fs;
    Err err = {{0}};
    ck_assert_int_eq(forward_state_init(&fs, &SHAPES[0].cfg, 0, 1, &err), -1);
    ck_assert_msg(strstr(err.msg, "positive"), "%s", err.msg);
    ck_assert_int_eq(forward_state_init(&fs, &SHAPES[0].cfg, 4, 0, &err), -1);
}
END_TEST

/* Small models run on one thread unless asked; wide ones use every core. */
START_TEST(default_threads_by_width)
{
    ModelConfig c;
    ck_assert_int_eq(synth_preset("stories260K", &c), 0);
    ck_assert_int_eq(forward_default_threads(&c), 1);
    ck_assert_int_eq(synth_preset("stories15M", &c), 0);
    ck_assert_int_eq(forward_default_threads(&c), 0);
    ck_assert_int_eq(synth_preset("stories110M", &c), 0);
    ck_assert_int_eq(forward_default_threads(&c), 0);
}
END_TEST

Suite *suite_forward(void)
{
    Suite *s = suite_create("forward");
    TCase *tc = tcase_create("forward");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, whole_sequence_equals_token_by_token);
    tcase_add_test(tc, two_sequences_in_one_batch);
    tcase_add_test(tc, matches_double_reference);
    tcase_add_test(tc, thread_count_does_not_change_logits);
    tcase_add_test(tc, state_bytes_match_the_ledger);
    tcase_add_test(tc, state_refuses_zero_capacity);
    tcase_add_test(tc, default_threads_by_width);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(forward)
