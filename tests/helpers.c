#include "helpers.h"

#include <check.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "assets.h"
#include "forward.h"
#include "generate.h"
#include "mem.h"
#include "ops.h"
#include "sampler.h"
#include "synth.h"

const char *test_shared_file(const char *name)
{
    /* A few rotating buffers, so that a test can hold several paths. */
    static char paths[4][PATH_MAX];
    static int next;
    char *path = paths[next++ % 4];
    /* As the programs look (assets.h): models/ first, which a clone has
     * (stories260K, tok512 and the golden text are committed there), then
     * ../shared/models (and the same beside the project root), where the
     * larger files are. On a machine without ../shared (the GPU machine),
     * KVLAB_SHARED_MODELS names a copy of it made by scripts/gpu-prepare.sh. */
    const char *copy = getenv("KVLAB_SHARED_MODELS");
    const char *dirs[] = {"models", "../shared/models", "../../shared/models", copy && *copy ? copy : NULL};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0] && dirs[i]; i++) {
        snprintf(path, PATH_MAX, "%s/%s", dirs[i], name);
        if (access(path, R_OK) == 0)
            return path;
    }
    return NULL;
}

void test_skip(const char *test, const char *why)
{
    fprintf(stderr, "SKIP: %s: %s\n", test, why);
}

static char *read_all(int fd, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 1 >= cap)
            buf = realloc(buf, cap *= 2);
        ssize_t got = read(fd, buf + n, cap - n - 1);
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

int test_run_program(const char *const *argv, ProgramResult *r)
{
    memset(r, 0, sizeof *r);
    const char *build = getenv("KVLAB_BUILD");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", build ? build : "build", argv[0]);
    char out_path[] = "/tmp/kvlab-out-XXXXXX", err_path[] = "/tmp/kvlab-err-XXXXXX";
    int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
    if (out_fd < 0 || err_fd < 0)
        return -1;
    unlink(out_path);
    unlink(err_path);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(out_fd, 1);
        dup2(err_fd, 2);
        int devnull = open("/dev/null", O_RDONLY);
        dup2(devnull, 0);
        execv(path, (char *const *)argv);
        fprintf(stderr, "cannot run %s\n", path);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    lseek(out_fd, 0, SEEK_SET);
    lseek(err_fd, 0, SEEK_SET);
    r->out = read_all(out_fd, &r->out_len);
    r->err = read_all(err_fd, NULL);
    close(out_fd);
    close(err_fd);
    return 0;
}

void test_result_free(ProgramResult *r)
{
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof *r);
}

int test_count_lines(const char *s)
{
    int n = 0;
    for (const char *p = s; *p; p++)
        if (*p == '\n')
            n++;
    size_t len = strlen(s);
    if (len > 0 && s[len - 1] != '\n')
        n++;
    return n;
}

void test_write_temp(const void *data, size_t n, char *out)
{
    snprintf(out, PATH_MAX, "/tmp/kvlab-test-XXXXXX");
    int fd = mkstemp(out);
    ck_assert_msg(fd >= 0, "cannot create a temporary file");
    ck_assert_msg(write(fd, data, n) == (ssize_t)n, "cannot write a temporary file");
    close(fd);
}

void test_write_synthetic(const ModelConfig *cfg, unsigned long long seed, int ak42, int shared, char *model_out,
                          char *tok_out)
{
    SynthSpec spec = {.cfg = *cfg, .shared_classifier = shared, .ak42 = ak42, .seed = seed};
    void *image;
    size_t bytes;
    Err err = {{0}};
    ck_assert_msg(synth_model_image(&spec, &image, &bytes, &err) == 0, "synth_model_image: %s", err.msg);
    test_write_temp(image, bytes, model_out);
    mem_free(image);
    ck_assert_msg(synth_tokenizer_image(cfg->vocab_size, &image, &bytes, &err) == 0, "synth_tokenizer_image: %s",
                  err.msg);
    test_write_temp(image, bytes, tok_out);
    mem_free(image);
}

/* ------------------------------------------------ references for the GPU tests */

/* A K/V seam over one sequence that keeps one layer (the forward pass
 * stores every K/V of a layer before any token of it attends) and rounds
 * K/V to a storage type: the CPU sees exactly what the device, or a CPU
 * cache of that type, keeps. */
typedef struct {
    ModelConfig cfg;
    KvRowFormat row;      /* the storage type's rows */
    float *keys, *values; /* [seq_len][kv_dim] */
    double jitter;        /* relative noise before rounding (0: none) */
    unsigned long long rng;
    unsigned char *stored; /* [kv_row_bytes(row)] one row as stored, for the rounding */
} RoundingKv;

/* The row as a cache of the type holds it. */
static void round_row(RoundingKv *kv, float *row)
{
    kv_row_store(kv->stored, row, &kv->row);
    kv_row_load(row, kv->stored, &kv->row);
}

static void jitter_row(RoundingKv *kv, float *row, int n)
{
    for (int i = 0; i < n; i++)
        row[i] *= (float)(1.0 + kv->jitter * (2.0 * (double)sampler_random_f32(&kv->rng) - 1.0));
}

static void rounding_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v)
{
    RoundingKv *kv = ctx;
    (void)layer;
    int kv_dim = model_kv_dim(&kv->cfg);
    float *kr = kv->keys + (size_t)e->pos * kv_dim, *vr = kv->values + (size_t)e->pos * kv_dim;
    memcpy(kr, k, (size_t)kv_dim * sizeof(float));
    memcpy(vr, v, (size_t)kv_dim * sizeof(float));
    if (kv->jitter > 0.0) {
        jitter_row(kv, kr, kv_dim);
        jitter_row(kv, vr, kv_dim);
    }
    round_row(kv, kr);
    round_row(kv, vr);
}

static void rounding_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out,
                            float *scores)
{
    RoundingKv *kv = ctx;
    (void)layer;
    int hd = model_head_dim(&kv->cfg), kv_dim = model_kv_dim(&kv->cfg), col = (head / model_kv_mul(&kv->cfg)) * hd;
    attention_reference(out, q, kv->keys + col, kv->values + col, e->pos + 1, kv_dim, hd, scores);
}

static float *rounded_logits(const Model *m, const int *tokens, int n, KvDtype kv_type, double jitter,
                             unsigned long long seed);

float *test_cpu_logits(const Model *m, const int *tokens, int n, Dtype kv_type)
{
    return test_cpu_logits_jittered(m, tokens, n, kv_type, 0.0, 0);
}

float *test_cpu_logits_kv(const Model *m, const int *tokens, int n, KvDtype kv_type)
{
    return rounded_logits(m, tokens, n, kv_type, 0.0, 0);
}

float *test_cpu_logits_jittered(const Model *m, const int *tokens, int n, Dtype kv_type, double jitter,
                                unsigned long long seed)
{
    return rounded_logits(m, tokens, n, kv_dtype_from_device(kv_type), jitter, seed);
}

static float *rounded_logits(const Model *m, const int *tokens, int n, KvDtype kv_type, double jitter,
                             unsigned long long seed)
{
    const ModelConfig *c = &m->cfg;
    size_t floats = (size_t)c->seq_len * (size_t)model_kv_dim(c);
    RoundingKv kv = {*c, {0}, calloc(floats, sizeof(float)), calloc(floats, sizeof(float)), jitter, seed, NULL};
    Err err = {{0}};
    ck_assert_msg(kv_row_format_init(&kv.row, kv_type, c->n_kv_heads, model_head_dim(c), &err) == 0, "%s", err.msg);
    kv.stored = malloc(kv_row_bytes(&kv.row));
    KvSeam seam = {&kv, rounding_store, rounding_attend};
    ForwardState fs;
    ck_assert_msg(n >= 1 && n <= c->seq_len, "test_cpu_logits: %d positions", n);
    ck_assert_msg(forward_state_init(&fs, c, n, n, &err) == 0, "%s", err.msg);
    BatchEntry *e = calloc((size_t)n, sizeof *e);
    for (int i = 0; i < n; i++)
        e[i] = (BatchEntry){.seq = 0, .pos = i, .token = tokens[i], .logits_row = i};
    forward(m, &fs, &seam, e, n);
    float *logits = malloc((size_t)n * c->vocab_size * sizeof(float));
    memcpy(logits, fs.logits, (size_t)n * c->vocab_size * sizeof(float));
    forward_state_free(&fs);
    free(e);
    free(kv.keys);
    free(kv.values);
    free(kv.stored);
    return logits;
}

float test_top_gap(const float *row, int vocab)
{
    int best = sampler_argmax(row, vocab);
    float second = -INFINITY;
    for (int j = 0; j < vocab; j++)
        if (j != best && row[j] > second)
            second = row[j];
    return row[best] - second;
}

char *test_slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = calloc((size_t)n + 1, 1);
    ck_assert_int_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return buf;
}

int test_json_ints(const char *text, const char *key, int *out, int max)
{
    char quoted[128];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    const char *p = strstr(text, quoted);
    ck_assert_msg(p != NULL, "no \"%s\" in %.200s", key, text);
    p += strlen(quoted);
    while (*p == ' ' || *p == ':')
        p++;
    ck_assert_msg(*p == '[', "\"%s\" is not followed by an array", key);
    int n = 0;
    for (p++; *p && *p != ']';) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) {
            p++;
            continue;
        }
        ck_assert_msg(n < max, "\"%s\" has more than %d numbers", key, max);
        out[n++] = (int)v;
        p = end;
    }
    return n;
}

/* A contiguous cache written here, independent of every chapter's (and so of
 * any lab exercise): the reference the serving chapters are compared with. */
typedef struct {
    ModelConfig cfg;
    float *keys, *values; /* [layers][seq_len][kv_dim] */
    int stored;           /* leading positions with K/V */
} ContigKv;

static float *contig_row(float *base, const ModelConfig *c, int layer, int pos)
{
    return base + ((size_t)layer * c->seq_len + (size_t)pos) * (size_t)model_kv_dim(c);
}

static int contig_prepare(void *ctx, int n_tokens, int *cached, Err *err)
{
    (void)n_tokens;
    (void)err;
    *cached = ((ContigKv *)ctx)->stored;
    return 0;
}

static void contig_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v)
{
    ContigKv *kv = ctx;
    size_t n = (size_t)model_kv_dim(&kv->cfg) * sizeof(float);
    memcpy(contig_row(kv->keys, &kv->cfg, layer, e->pos), k, n);
    memcpy(contig_row(kv->values, &kv->cfg, layer, e->pos), v, n);
    if (e->pos + 1 > kv->stored)
        kv->stored = e->pos + 1;
}

static void contig_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out,
                          float *scores)
{
    ContigKv *kv = ctx;
    const ModelConfig *c = &kv->cfg;
    int off = (head / model_kv_mul(c)) * model_head_dim(c);
    attention_reference(out, q, contig_row(kv->keys, c, layer, 0) + off, contig_row(kv->values, c, layer, 0) + off,
                        e->pos + 1, model_kv_dim(c), model_head_dim(c), scores);
}

int test_solo_tokens_sampled(const Model *m, const Tokenizer *t, const char *prompt, int steps, float temperature,
                             unsigned long long seed, int *out)
{
    SamplingParams p = sampling_params_default();
    p.temperature = temperature;
    p.top_p = 0.9f;
    return test_solo_tokens_params(m, t, prompt, steps, &p, seed, out);
}

int test_solo_tokens_params(const Model *m, const Tokenizer *t, const char *prompt, int steps, const SamplingParams *p,
                            unsigned long long seed, int *out)
{
    const ModelConfig *c = &m->cfg;
    Generation g;
    Err err = {{0}};
    ck_assert_msg(generation_init(&g, m, t, prompt, &err) == 0, "%s", err.msg);
    size_t floats = (size_t)c->n_layers * c->seq_len * model_kv_dim(c);
    ContigKv kv = {*c, calloc(floats, sizeof(float)), calloc(floats, sizeof(float)), 0};
    SingleStreamKv strat = {.seam = {.ctx = &kv, .store = contig_store, .attend = contig_attend},
                            .prepare = contig_prepare};
    ForwardState fs;
    ck_assert(forward_state_init(&fs, c, c->seq_len, 1, &err) == 0);
    Sampler s;
    ck_assert_msg(sampler_init_params(&s, c->vocab_size, p, seed, &err) == 0, "%s", err.msg);
    ck_assert_msg(generate(&g, m, t, &s, &fs, &strat, steps, NULL, &err) == 0, "%s", err.msg);
    int n = g.n_tokens - g.n_prompt;
    memcpy(out, g.tokens + g.n_prompt, (size_t)n * sizeof(int));
    sampler_free(&s);
    forward_state_free(&fs);
    free(kv.keys);
    free(kv.values);
    generation_free(&g);
    return n;
}

void test_solo_open(TestSolo *s, const Model *m, const Tokenizer *t, const ServingRun *run)
{
    s->count = run->n_reqs;
    s->stride = m->cfg.seq_len + 1;
    s->n = calloc((size_t)s->count, sizeof(int));
    s->tokens = calloc((size_t)s->count * (size_t)s->stride, sizeof(int));
    ck_assert(s->n && s->tokens);
    for (int i = 0; i < s->count; i++) {
        const RequestSpec *spec = run->reqs[i].spec;
        s->n[i] = test_solo_tokens_sampled(m, t, spec->prompt, spec->max_new_tokens, run->opts->temperature,
                                           run->opts->seed + (unsigned long long)i, s->tokens + (size_t)i * s->stride);
    }
}

void test_solo_of_requests(TestSolo *s, const Model *m, const Tokenizer *t, const char *requests, const CliOptions *o)
{
    RequestFile rf;
    ServingRun run;
    CliOptions opts = *o;
    Err err = {{0}};
    ck_assert_msg(request_file_parse(&rf, requests, strlen(requests), "t", &err) == 0, "%s", err.msg);
    ck_assert_msg(serving_run_init(&run, m, t, &opts, &rf, &err) == 0, "%s", err.msg);
    test_solo_open(s, m, t, &run);
    serving_run_free(&run);
    request_file_free(&rf);
}

void test_solo_close(TestSolo *s)
{
    free(s->n);
    free(s->tokens);
}

void test_expect_solo(const TestSolo *s, const ServingRun *run, int allow_rejected, const char *what)
{
    ck_assert_int_eq(run->n_reqs, s->count);
    for (int i = 0; i < run->n_reqs; i++) {
        const Request *r = &run->reqs[i];
        if (allow_rejected && r->finish == REQ_FINISH_REJECTED)
            continue;
        ck_assert_msg(r->finish == REQ_FINISH_LENGTH || r->finish == REQ_FINISH_STOP,
                      "%s: request %d did not finish (%d)", what, i, (int)r->finish);
        int n = r->n_tokens - r->n_prompt;
        ck_assert_msg(n == s->n[i] &&
                          memcmp(r->tokens + r->n_prompt, s->tokens + (size_t)i * s->stride, (size_t)n * sizeof(int)) == 0,
                      "%s: request %d (sample %d, %d preemptions) differs from its solo run", what, r->spec->id,
                      r->sample, r->preemptions);
    }
}

int test_solo_tokens(const Model *m, const Tokenizer *t, const char *prompt, int steps, int *out)
{
    return test_solo_tokens_sampled(m, t, prompt, steps, 0.0f, 1, out);
}

/* ------------------------------------------------------------ test models */

const ModelConfig TEST_SYNTH_GQA = {48, 96, 3, 6, 2, 400, 64};

void test_model_synthetic(TestModel *f, ModelConfig cfg, unsigned long long seed)
{
    memset(f, 0, sizeof *f);
    SynthSpec spec = {.cfg = cfg, .shared_classifier = 0, .seed = seed};
    size_t bytes, tok_bytes;
    Err err = {{0}};
    ck_assert(synth_model_image(&spec, &f->image, &bytes, &err) == 0);
    ck_assert(synth_tokenizer_image(cfg.vocab_size, &f->tok_image, &tok_bytes, &err) == 0);
    ck_assert_msg(model_open_image(&f->m, f->image, bytes, &err) == 0, "%s", err.msg);
    ck_assert_msg(tokenizer_open_image(&f->t, f->tok_image, tok_bytes, cfg.vocab_size, &err) == 0, "%s", err.msg);
    ops_set_threads(forward_default_threads(&cfg)); /* as the programs do: one thread for a model this narrow */
}

int test_model_stories(TestModel *f, const char *test)
{
    const char *mp = test_shared_file("stories260K.bin"), *tp = test_shared_file("tok512.bin");
    if (!mp || !tp) {
        test_skip(test, "stories260K.bin or tok512.bin is in neither models/ nor ../shared/models/");
        return 0;
    }
    memset(f, 0, sizeof *f);
    Err err = {{0}};
    ck_assert_msg(model_load(&f->m, mp, &err) == 0, "%s", err.msg);
    ck_assert_msg(tokenizer_load(&f->t, tp, 512, &err) == 0, "%s", err.msg);
    ops_set_threads(forward_default_threads(&f->m.cfg));
    return 1;
}

int test_model_smollm2(TestModel *f, const char *test)
{
    const char *mp = test_shared_file("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!mp) {
        test_skip(test, "SmolLM2-135M-Instruct.Q4_1.gguf is in neither models/ nor ../shared/models/ (make models "
                        "fetches it)");
        return 0;
    }
    memset(f, 0, sizeof *f);
    Err err = {{0}};
    ck_assert_msg(model_load(&f->m, mp, &err) == 0, "%s", err.msg);
    ck_assert_msg(tokenizer_open_gguf(&f->t, &f->m.gguf, &err) == 0, "%s", err.msg);
    ops_set_threads(forward_default_threads(&f->m.cfg));
    return 1;
}

void test_model_free(TestModel *f)
{
    tokenizer_free(&f->t);
    model_free(&f->m);
    mem_free(f->tok_image);
    mem_free(f->image);
}
