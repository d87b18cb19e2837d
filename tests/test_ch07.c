/* Chapter 7: speculative decoding gives chapter 4's greedy tokens byte for
 * byte under every proposer, every k from 1 to 8, block sizes 1, 16 and 64
 * and a budget that preempts; the block tables and reference counts hold
 * their invariants after every step and every block comes back; rejection
 * sampling keeps the verifier's distribution (a chi-square test that a
 * wrong rule fails); bad options are refused in one line. */
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "mem.h"
#include "paged.h"
#include "sampler.h"
#include "scheduler.h"
#include "serving.h"
#include "spec.h"
#include "suites.h"
#include "synth.h"

/* ------------------------------------------------------------ fixtures */

/* Requests whose text repeats itself (prompt lookup finds something) and
 * one that does not. */
static const char *REQUESTS = "60\tOnce upon a time, there was a little girl. Once upon a time\n"
                              "48\tLily and Ben. Lily and Ben went to the park. Lily and\n"
                              "40\tThe cat sat on the mat\n"
                              "52\tOne day\n";

/* A run stepped here: chapter 7's (spec set) or chapter 4's. */
typedef struct {
    RequestFile rf;
    CliOptions o;
    ServingRun run;
    PagedServer *server;
    SpecDecoder d;
    int steps;
} SpecRun;

static void run_open(SpecRun *sr, const Model *m, const Tokenizer *t, CliOptions o, const SpecOptions *so,
                     const char *requests)
{
    Err err = {{0}};
    memset(sr, 0, sizeof *sr);
    ck_assert_msg(request_file_parse(&sr->rf, requests, strlen(requests), "t", &err) == 0, "%s", err.msg);
    sr->o = o;
    ck_assert_msg(serving_run_init(&sr->run, m, t, &sr->o, &sr->rf, &err) == 0, "%s", err.msg);
    ck_assert_msg(spec_check(so, &sr->run, &err) == 0, "%s", err.msg);
    ck_assert_msg(paged_check(&sr->run, &err) == 0, "%s", err.msg);
    ck_assert_msg(spec_open(&sr->d, so, &sr->run, &err) == 0, "%s", err.msg);
    ck_assert_msg(paged_open(&sr->run, &sr->server, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(spec_attach(&sr->d, sr->server, &sr->run, &err) == 0, "%s", err.msg);
}

/* Steps to the end; spec_step() checks the invariants after every step
 * when so->check is set (it fails the step otherwise). */
static void run_serve(SpecRun *sr, const char *what)
{
    Err err = {{0}};
    while (serving_unfinished(&sr->run)) {
        ck_assert_msg(spec_step(&sr->d, &sr->run, &err) == 0, "%s: %s", what, err.msg);
        sr->steps++;
    }
}

/* Every block back in the pool: the free count of a fresh pool. */
static void run_close(SpecRun *sr)
{
    const BlockPool *p = &sr->server->kv.pool;
    ck_assert_msg(p->n_free == p->n_blocks, "%d of %d blocks free after the run", p->n_free, p->n_blocks);
    for (int b = 0; b < p->n_blocks; b++)
        ck_assert_int_eq(p->ref_count[b], 0);
    spec_close(&sr->d);
    paged_close(sr->server);
    serving_run_free(&sr->run);
    request_file_free(&sr->rf);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
}

static CliOptions options(int block_size, size_t budget)
{
    CliOptions o;
    cli_defaults(&o);
    o.block_size = block_size;
    o.kv_budget = budget;
    return o;
}

/* The tokens chapter 4 gives each request (and how it finished), and
 * whether it had to preempt. */
typedef struct {
    int n;
    int *n_tokens;
    int *tokens; /* [n][stride] */
    int stride;
    RequestFinish *finish;
    long preemptions;
} Reference;

static void reference_of(Reference *ref, const Model *m, const Tokenizer *t, CliOptions o, const char *requests)
{
    SpecRun sr;
    SpecOptions none = {0};
    run_open(&sr, m, t, o, &none, requests);
    run_serve(&sr, "chapter 4");
    ref->n = sr.run.n_reqs;
    ref->stride = m->cfg.seq_len + 1;
    ref->n_tokens = calloc((size_t)ref->n, sizeof(int));
    ref->tokens = calloc((size_t)ref->n * (size_t)ref->stride, sizeof(int));
    ref->finish = calloc((size_t)ref->n, sizeof(RequestFinish));
    ck_assert(ref->n_tokens && ref->tokens && ref->finish);
    for (int i = 0; i < ref->n; i++) {
        const Request *r = &sr.run.reqs[i];
        ref->n_tokens[i] = r->n_tokens;
        ref->finish[i] = r->finish;
        memcpy(ref->tokens + (size_t)i * ref->stride, r->tokens, (size_t)r->n_tokens * sizeof(int));
    }
    ref->preemptions = sr.server->preemptions;
    run_close(&sr);
}

static void reference_free(Reference *ref)
{
    free(ref->n_tokens);
    free(ref->tokens);
    free(ref->finish);
}

/* Chapter 7's run with @p so gives every request chapter 4's tokens. */
static void expect_same_tokens(const Reference *ref, const Model *m, const Tokenizer *t, CliOptions o,
                               SpecOptions so, const char *requests, const char *what, SpecRun *keep)
{
    SpecRun sr;
    so.check = 1; /* the invariants after every step */
    run_open(&sr, m, t, o, &so, requests);
    run_serve(&sr, what);
    for (int i = 0; i < ref->n; i++) {
        const Request *r = &sr.run.reqs[i];
        ck_assert_msg(r->finish == ref->finish[i], "%s: request %d finished %d, chapter 4 %d", what, i, r->finish,
                      ref->finish[i]);
        ck_assert_msg(r->n_tokens == ref->n_tokens[i], "%s: request %d has %d tokens, chapter 4 %d", what, i,
                      r->n_tokens, ref->n_tokens[i]);
        for (int p = 0; p < r->n_tokens; p++)
            ck_assert_msg(r->tokens[p] == ref->tokens[(size_t)i * ref->stride + p],
                          "%s: request %d, position %d: token %d, chapter 4 %d", what, i, p, r->tokens[p],
                          ref->tokens[(size_t)i * ref->stride + p]);
    }
    ck_assert_msg(sr.d.accepted <= sr.d.proposed, "%s", what);
    ck_assert_msg(sr.d.invariant_checks == sr.steps, "%s: %ld checks in %d steps", what, sr.d.invariant_checks,
                  sr.steps);
    if (keep) {
        keep->d.proposed = sr.d.proposed;
        keep->d.accepted = sr.d.accepted;
        keep->d.rejected_positions = sr.d.rejected_positions;
    }
    run_close(&sr);
}

static SpecOptions spec_of(SpecMethod method, int k)
{
    SpecOptions so = {.method = method, .k = k, .ngram_min = 1, .ngram_max = 3, .self_layers = 2};
    return so;
}

/* Every proposer (the draft at @p draft_path), every k in 1..8, block
 * sizes 1, 16 and 64, each under a budget of @p budget_tokens[i] tokens
 * that makes chapter 4 preempt. */
static void identity_matrix(const Model *m, const Tokenizer *t, const char *draft_path, const int budget_tokens[3],
                            const char *requests, const char *model_name)
{
    const int sizes[3] = {1, 16, 64};
    const SpecMethod methods[3] = {SPEC_NGRAM, SPEC_SELF, SPEC_DRAFT};
    const char *names[3] = {"ngram", "self:2", "draft"};
    for (int s = 0; s < 3; s++) {
        size_t budget = (size_t)budget_tokens[s] * model_kv_bytes_per_token(&m->cfg, sizeof(float));
        CliOptions o = options(sizes[s], budget);
        Reference ref;
        reference_of(&ref, m, t, o, requests);
        if (sizes[s] < m->cfg.seq_len) /* a one-block request never grows: nothing to preempt */
            ck_assert_msg(ref.preemptions > 0, "%s, block size %d: the budget of %d tokens is not tight enough to preempt",
                      model_name, sizes[s], budget_tokens[s]);
        for (int mi = 0; mi < 3; mi++)
            for (int k = 1; k <= 8; k++) {
                SpecOptions so = spec_of(methods[mi], k);
                so.draft_path = draft_path;
                char what[160];
                snprintf(what, sizeof what, "%s, --spec %s, k %d, block size %d", model_name, names[mi], k, sizes[s]);
                expect_same_tokens(&ref, m, t, o, so, requests, what, NULL);
            }
        reference_free(&ref);
    }
}

/* ------------------------------------------------------------ greedy identity */

START_TEST(greedy_identity_stories260k)
{
    TestModel f;
    if (!test_model_stories(&f, "greedy_identity_stories260k"))
        return;
    char draft[PATH_MAX], tok[PATH_MAX];
    const ModelConfig small = {32, 64, 2, 4, 2, 512, 512}; /* stories260K's vocabulary and context */
    test_write_synthetic(&small, 3, 0, 0, draft, tok);
    const int budgets[3] = {150, 160, 192};
    identity_matrix(&f.m, &f.t, draft, budgets, REQUESTS, "stories260K");
    unlink(draft);
    unlink(tok);
    test_model_free(&f);
}
END_TEST

START_TEST(greedy_identity_synthetic_gqa)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 5);
    ModelConfig draft_cfg = TEST_SYNTH_GQA;
    draft_cfg.n_layers = 2;
    char draft[PATH_MAX], tok[PATH_MAX];
    test_write_synthetic(&draft_cfg, 9, 0, 0, draft, tok);
    /* Short requests: the model's context is 64. */
    const char *requests = "30\tab ab ab\n24\tx y x y x\n20\tq\n";
    const int budgets[3] = {70, 80, 128};
    identity_matrix(&f.m, &f.t, draft, budgets, requests, "synthetic GQA");
    unlink(draft);
    unlink(tok);
    test_model_free(&f);
}
END_TEST

/* SmolLM2 (when present): each proposer once, k = 4, block size 16 (a
 * forward pass of a 135M model is slow on a shared machine). */
START_TEST(greedy_identity_smollm2)
{
    TestModel f;
    if (!test_model_smollm2(&f, "greedy_identity_smollm2"))
        return;
    const char *requests = "12\tRepeat this sentence: the quick brown fox jumps over the lazy dog.\n8\tHello\n";
    CliOptions o = options(16, 64u << 20);
    Reference ref;
    reference_of(&ref, &f.m, &f.t, o, requests);
    const char *path = test_shared_file("SmolLM2-135M-Instruct.Q4_1.gguf");
    for (int mi = 0; mi < 3; mi++) {
        SpecOptions so = spec_of(mi == 0 ? SPEC_NGRAM : mi == 1 ? SPEC_SELF : SPEC_DRAFT, 4);
        so.self_layers = 8;
        so.draft_path = path; /* the model as its own draft: every proposal is accepted */
        char what[80];
        snprintf(what, sizeof what, "SmolLM2, --spec %s, k 4", mi == 0 ? "ngram" : mi == 1 ? "self:8" : "draft");
        SpecRun keep;
        expect_same_tokens(&ref, &f.m, &f.t, o, so, requests, what, &keep);
        if (so.method == SPEC_DRAFT)
            ck_assert_msg(keep.d.accepted == keep.d.proposed, "%s: %ld of %ld accepted", what, keep.d.accepted,
                          keep.d.proposed);
    }
    reference_free(&ref);
    test_model_free(&f);
}
END_TEST

/* The model as its own draft proposes exactly what it verifies: every
 * proposal is accepted, and each speculating step emits k + 1 tokens but
 * near the end. A draft of another model's weights is accepted less. */
START_TEST(self_draft_accepts_everything)
{
    TestModel f;
    if (!test_model_stories(&f, "self_draft_accepts_everything"))
        return;
    CliOptions o = options(16, 0);
    Reference ref;
    reference_of(&ref, &f.m, &f.t, o, REQUESTS);
    SpecOptions so = spec_of(SPEC_DRAFT, 4);
    so.draft_path = test_shared_file("stories260K.bin");
    SpecRun keep;
    expect_same_tokens(&ref, &f.m, &f.t, o, so, REQUESTS, "stories260K drafting for itself", &keep);
    ck_assert_int_gt(keep.d.proposed, 0);
    ck_assert_msg(keep.d.accepted == keep.d.proposed, "%ld of %ld accepted", keep.d.accepted, keep.d.proposed);
    so = spec_of(SPEC_SELF, 4);
    expect_same_tokens(&ref, &f.m, &f.t, o, so, REQUESTS, "stories260K, self:2", &keep);
    ck_assert_msg(keep.d.accepted < keep.d.proposed, "self:2 accepted all %ld proposals", keep.d.proposed);
    ck_assert_int_gt(keep.d.rejected_positions, 0);
    reference_free(&ref);
    test_model_free(&f);
}
END_TEST

/* ------------------------------------------------------------ the pieces */

START_TEST(ngram_lookup)
{
    int out[8];
    const int seq[] = {1, 5, 6, 7, 8, 5, 6};
    /* "5 6" occurred at 1: what followed was 7 8 5 6 (capped by k). */
    ck_assert_int_eq(spec_propose_ngram(seq, 7, 1, 3, 3, out), 3);
    ck_assert_int_eq(out[0], 7);
    ck_assert_int_eq(out[1], 8);
    ck_assert_int_eq(out[2], 5);
    /* Proposals never run past the sequence's end. */
    ck_assert_int_eq(spec_propose_ngram(seq, 7, 1, 3, 8, out), 4);
    ck_assert_int_eq(out[3], 6);
    /* The latest earlier occurrence wins: "9" at 3 (then 4), not at 1 (then 2). */
    const int again[] = {0, 9, 2, 9, 4, 9};
    ck_assert_int_eq(spec_propose_ngram(again, 6, 1, 1, 1, out), 1);
    ck_assert_int_eq(out[0], 4);
    /* A longer n is tried first: "2 3" matches at 1 (then 4), "3" alone later (then 7). */
    const int longer[] = {1, 2, 3, 4, 3, 7, 2, 3};
    ck_assert_int_eq(spec_propose_ngram(longer, 8, 1, 2, 1, out), 1);
    ck_assert_int_eq(out[0], 4);
    ck_assert_int_eq(spec_propose_ngram(longer, 8, 1, 1, 1, out), 1);
    ck_assert_int_eq(out[0], 7);
    /* No earlier occurrence, or n_min above what can match: nothing. */
    const int fresh[] = {1, 2, 3, 4};
    ck_assert_int_eq(spec_propose_ngram(fresh, 4, 1, 3, 4, out), 0);
    ck_assert_int_eq(spec_propose_ngram(seq, 7, 3, 3, 4, out), 0);
}
END_TEST

START_TEST(greedy_rule)
{
    const int targets[] = {4, 5, 6, 7};
    const int all[] = {4, 5, 6}, first_wrong[] = {9, 5, 6}, last_wrong[] = {4, 5, 9};
    ck_assert_int_eq(spec_accept_greedy(targets, all, 3), 3);
    ck_assert_int_eq(spec_accept_greedy(targets, first_wrong, 3), 0);
    ck_assert_int_eq(spec_accept_greedy(targets, last_wrong, 3), 2);
    ck_assert_int_eq(spec_accept_greedy(targets, all, 0), 0);
}
END_TEST

/* A rollback drops this table's hold on each block past the kept
 * positions: a block another table shares stays held, a private one goes
 * back to the pool; the kept blocks stay. */
START_TEST(rollback_shared_and_private_blocks)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 5);
    SpecRun sr;
    SpecOptions none = {0};
    run_open(&sr, &f.m, &f.t, options(4, 0), &none, "10\tab\n10\tab\n");
    PagedServer *s = sr.server;
    BlockPool *p = &s->kv.pool;
    BlockTable *a = &s->kv.tables.tables[0], *b = &s->kv.tables.tables[1];
    int free0 = p->n_free;
    ck_assert_int_eq(block_table_grow(p, a, 10), 0); /* 3 blocks */
    paged_track_table(s, a);
    block_table_fork(p, a, b); /* b shares all three */
    ck_assert_int_eq(block_table_grow(p, b, 14), 0); /* and one of its own */
    paged_track_table(s, b);
    sr.run.reqs[0].n_cached = 10;
    sr.run.reqs[1].n_cached = 14;
    int shared_last = a->blocks[2];
    ck_assert_int_eq(spec_rollback(s, &sr.run, &sr.run.reqs[1], 5), 1); /* its own block freed; 2 shared dropped */
    ck_assert_int_eq(b->n_blocks, 2);
    ck_assert_int_eq(sr.run.reqs[1].n_cached, 5);
    ck_assert_int_eq(p->ref_count[shared_last], 1); /* still a's */
    ck_assert_int_eq(p->ref_count[a->blocks[0]], 2);
    ck_assert_int_eq(p->n_free, free0 - 3);
    ck_assert_int_eq(spec_rollback(s, &sr.run, &sr.run.reqs[0], 8), 1); /* keeps ceil(8/4) = 2 */
    ck_assert_int_eq(p->ref_count[shared_last], 0);
    ck_assert_int_eq(a->n_blocks, 2);
    ck_assert_int_eq(spec_rollback(s, &sr.run, &sr.run.reqs[0], 0), 0); /* b still holds both */
    ck_assert_int_eq(spec_rollback(s, &sr.run, &sr.run.reqs[1], 0), 2);
    ck_assert_int_eq(p->n_free, free0);
    serving_preempt(&sr.run, &sr.run.reqs[0]); /* nothing ran: close as after a run */
    run_close(&sr);
    test_model_free(&f);
}
END_TEST

/* The invariant check finds a table that holds a block too many, and a
 * reference count that does not match its holders. */
START_TEST(invariants_catch_a_leak)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 5);
    SpecRun sr;
    SpecOptions so = spec_of(SPEC_NGRAM, 4);
    run_open(&sr, &f.m, &f.t, options(4, 0), &so, "10\tab\n");
    Err err = {{0}};
    ck_assert_int_eq(spec_check_invariants(sr.server, &sr.run, sr.d.holders, &err), 0);
    BlockPool *p = &sr.server->kv.pool;
    BlockTable *t = &sr.server->kv.tables.tables[0];
    ck_assert_int_eq(block_table_grow(p, t, 4), 0); /* a block for a request that holds no positions */
    ck_assert_int_eq(spec_check_invariants(sr.server, &sr.run, sr.d.holders, &err), -1);
    ck_assert_msg(strstr(err.msg, "holds 1 blocks"), "%s", err.msg);
    sr.run.reqs[0].phase = REQ_RUNNING;
    sr.run.reqs[0].n_cached = 4;
    ck_assert_int_eq(spec_check_invariants(sr.server, &sr.run, sr.d.holders, &err), 0);
    block_pool_retain(p, t->blocks[0]); /* a hold nobody has */
    ck_assert_int_eq(spec_check_invariants(sr.server, &sr.run, sr.d.holders, &err), -1);
    ck_assert_msg(strstr(err.msg, "reference count 2 but 1 tables"), "%s", err.msg);
    block_pool_release(p, t->blocks[0]);
    block_table_release(p, t, NULL, NULL);
    sr.run.reqs[0].phase = REQ_WAITING;
    spec_close(&sr.d);
    paged_close(sr.server);
    serving_run_free(&sr.run);
    request_file_free(&sr.rf);
    test_model_free(&f);
}
END_TEST

/* ------------------------------------------------------------ sampling */

/* Draws from @p w (summing to 1) with the generator. */
static int draw_from(const float *w, int n, unsigned long long *rng)
{
    double u = (double)sampler_random_f32(rng), cdf = 0.0;
    for (int i = 0; i < n; i++) {
        cdf += w[i];
        if (u < cdf)
            return i;
    }
    return n - 1;
}

/* A wrong rule: on a rejection it draws from p again instead of from
 * max(0, p - q), which counts the proposal's share twice. */
static int wrong_accept(const float *p, const float *q, const int *proposals, int n, int vocab,
                        unsigned long long *rng, float *scratch, int *next)
{
    (void)scratch;
    for (int i = 0; i < n; i++) {
        int d = proposals[i];
        if ((double)sampler_random_f32(rng) < (double)p[(size_t)i * vocab + d] / (double)q[(size_t)i * vocab + d])
            continue;
        *next = draw_from(p + (size_t)i * vocab, vocab, rng);
        return i;
    }
    *next = draw_from(p + (size_t)n * vocab, vocab, rng);
    return n;
}

typedef int (*AcceptRule)(const float *, const float *, const int *, int, int, unsigned long long *, float *, int *);

/* Pearson's chi-square of the first emitted token over @p draws draws
 * against p's first row; the counts go into @p msg. */
static double first_token_chi2(AcceptRule rule, const float *p, const float *q, int n, int vocab, int draws,
                               char *msg, size_t msg_size)
{
    unsigned long long rng = 20231;
    long counts[64] = {0};
    int proposals[8];
    float scratch[64];
    for (int d = 0; d < draws; d++) {
        for (int i = 0; i < n; i++)
            proposals[i] = draw_from(q + (size_t)i * vocab, vocab, &rng); /* the draft samples from q */
        int next, accepted = rule(p, q, proposals, n, vocab, &rng, scratch, &next);
        counts[accepted > 0 ? proposals[0] : next]++;
    }
    double chi2 = 0.0;
    size_t used = (size_t)snprintf(msg, msg_size, "observed/expected:");
    for (int t = 0; t < vocab; t++) {
        double expected = (double)draws * p[t];
        chi2 += ((double)counts[t] - expected) * ((double)counts[t] - expected) / expected;
        if (used < msg_size)
            used += (size_t)snprintf(msg + used, msg_size - used, " %ld/%.0f", counts[t], expected);
    }
    return chi2;
}

/* softmax(row[0..n-1] / temperature): a distribution over the first n
 * tokens of a model's logits row. */
static void first_tokens_softmax(const float *row, int n, float temperature, float *out)
{
    double max = row[0], sum = 0.0;
    for (int i = 1; i < n; i++)
        if (row[i] > max)
            max = row[i];
    for (int i = 0; i < n; i++)
        sum += exp(((double)row[i] - max) / temperature);
    for (int i = 0; i < n; i++)
        out[i] = (float)(exp(((double)row[i] - max) / temperature) / sum);
}

/* Over many draws at a fixed context of a small synthetic model (its
 * logits over its first 8 tokens, at temperature 0.25, are p; a second
 * model's are the draft's q), the first token emitted under speculation
 * has the model's own distribution: Pearson's chi-square below 24.32, the
 * 0.1% critical value for 7 degrees of freedom. The wrong rule above is
 * caught by the same test. */
START_TEST(rejection_sampling_keeps_the_distribution)
{
    TestModel target, drafter;
    test_model_synthetic(&target, TEST_SYNTH_GQA, 21);
    test_model_synthetic(&drafter, TEST_SYNTH_GQA, 22);
    const int context[] = {1, 3, 5, 2, 7, 4}, n = 3, vocab = 8, draws = 200000, full = TEST_SYNTH_GQA.vocab_size;
    float *pl = test_cpu_logits(&target.m, context, 6, DTYPE_F32), *ql = test_cpu_logits(&drafter.m, context, 6, DTYPE_F32);
    float p[4 * 8], q[3 * 8];
    for (int i = 0; i <= n; i++) /* rows 2..5 of the context: n + 1 positions */
        first_tokens_softmax(pl + (size_t)(2 + i) * full, vocab, 0.25f, p + (size_t)i * vocab);
    for (int i = 0; i < n; i++)
        first_tokens_softmax(ql + (size_t)(2 + i) * full, vocab, 0.25f, q + (size_t)i * vocab);
    char msg[512];
    double good = first_token_chi2(spec_accept_sampled, p, q, n, vocab, draws, msg, sizeof msg);
    ck_assert_msg(good < 24.32, "rejection sampling: chi-square %.2f >= 24.32 (7 df, 0.1%%); %s", good, msg);
    double wrong = first_token_chi2(wrong_accept, p, q, n, vocab, draws, msg, sizeof msg);
    ck_assert_msg(wrong >= 24.32, "the wrong rule passed: chi-square %.2f; %s", wrong, msg);
    /* Prompt lookup's proposals are certain (q == NULL): the same holds. */
    unsigned long long rng = 7;
    long counts[8] = {0};
    float scratch[8];
    for (int d = 0; d < draws; d++) {
        int proposals[1] = {3}, next;
        int accepted = spec_accept_sampled(p, NULL, proposals, 1, vocab, &rng, scratch, &next);
        counts[accepted ? 3 : next]++;
    }
    double chi2 = 0.0;
    for (int t = 0; t < vocab; t++)
        chi2 += ((double)counts[t] - draws * p[t]) * ((double)counts[t] - draws * p[t]) / (draws * p[t]);
    ck_assert_msg(chi2 < 24.32, "certain proposals: chi-square %.2f", chi2);
    free(pl);
    free(ql);
    test_model_free(&target);
    test_model_free(&drafter);
}
END_TEST

/* Sampled runs (--temperature 0.8) under every proposer, and --n 2 forks
 * whose prompt blocks are shared: the invariants hold after every step and
 * every block comes back. */
START_TEST(sampled_runs_and_forks_keep_the_books)
{
    TestModel f;
    if (!test_model_stories(&f, "sampled_runs_and_forks_keep_the_books"))
        return;
    char draft[PATH_MAX], tok[PATH_MAX];
    const ModelConfig small = {32, 64, 2, 4, 2, 512, 512};
    test_write_synthetic(&small, 3, 0, 0, draft, tok);
    for (int mi = 0; mi < 3; mi++)
        for (int n = 1; n <= 2; n++) {
            CliOptions o = options(4, 200u * 1280u);
            o.temperature = 0.8f;
            o.n_samples = n;
            SpecOptions so = spec_of(mi == 0 ? SPEC_NGRAM : mi == 1 ? SPEC_SELF : SPEC_DRAFT, 5);
            so.draft_path = draft;
            so.check = 1;
            SpecRun sr;
            run_open(&sr, &f.m, &f.t, o, &so, REQUESTS);
            run_serve(&sr, "sampled");
            ck_assert_int_gt(sr.d.proposed, 0);
            for (int i = 0; i < sr.run.n_reqs; i++)
                ck_assert_int_ne(sr.run.reqs[i].finish, REQ_FINISH_NONE);
            run_close(&sr);
        }
    unlink(draft);
    unlink(tok);
    test_model_free(&f);
}
END_TEST

/* ------------------------------------------------------------ the program */

static void expect_refused(const char *const *argv, const char *word)
{
    ProgramResult r;
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_msg(r.status == 1, "exit %d for %s: %s", r.status, word, r.err);
    ck_assert_uint_eq(r.out_len, 0);
    ck_assert_msg(strncmp(r.err, "ch07-speculative: error: ", 25) == 0 && strstr(r.err, word) &&
                      test_count_lines(r.err) == 1,
                  "expected one error line naming '%s': %s", word, r.err);
    test_result_free(&r);
}

START_TEST(program_refuses_bad_options)
{
    char model[PATH_MAX], tok[PATH_MAX], other[PATH_MAX], other_tok[PATH_MAX], reqs[PATH_MAX];
    test_write_synthetic(&TEST_SYNTH_GQA, 11, 0, 0, model, tok);
    ModelConfig wide = TEST_SYNTH_GQA;
    wide.vocab_size = 500;
    test_write_synthetic(&wide, 12, 0, 0, other, other_tok);
    test_write_temp(REQUESTS, strlen(REQUESTS), reqs);
#define RUN(...) ((const char *const[]){"ch07-speculative", "--model", model, "--tokenizer", tok, "--requests", reqs, \
                                        __VA_ARGS__, NULL})
    expect_refused(RUN("--spec", "bigram"), "bigram");
    expect_refused(RUN("--spec", "ngram", "--spec-k", "0"), "spec-k");
    expect_refused(RUN("--spec", "ngram", "--spec-k", "17"), "spec-k");
    expect_refused(RUN("--spec-k", "4"), "need --spec");
    expect_refused(RUN("--spec", "ngram", "--spec-ngram-min", "4", "--spec-ngram-max", "2"), "spec-ngram-min 4");
    expect_refused(RUN("--spec", "self:2", "--spec-ngram-max", "2"), "need --spec ngram");
    expect_refused(RUN("--spec", "draft"), "--draft-model FILE");
    expect_refused(RUN("--spec", "self:3"), "3 layers");
    expect_refused(RUN("--spec", "self:x"), "self:L");
    expect_refused(RUN("--spec", "draft", "--draft-model", other), "vocabulary of 500 tokens, the model 400");
    expect_refused(RUN("--spec", "ngram", "--beam", "2"), "--beam");
    expect_refused(RUN("--spec", "ngram", "--max-num-batched-tokens", "64"), "token budget");
    expect_refused(RUN("--spec", "ngram", "--spec-k"), "needs a value");
#undef RUN
    const char *help[] = {"ch07-speculative", "--help", NULL};
    ProgramResult r;
    ck_assert_int_eq(test_run_program(help, &r), 0);
    ck_assert_int_eq(r.status, 0);
    ck_assert_msg(strstr(r.out, "--spec ngram") && strstr(r.out, "--draft-model"), "%s", r.out);
    test_result_free(&r);
    unlink(model);
    unlink(tok);
    unlink(other);
    unlink(other_tok);
    unlink(reqs);
}
END_TEST

/* The program: chapter 4's tokens in --out, the acceptance in the report. */
START_TEST(program_reports_acceptance)
{
    char model[PATH_MAX], tok[PATH_MAX], reqs[PATH_MAX], out4[PATH_MAX], out7[PATH_MAX], json[PATH_MAX];
    test_write_synthetic(&TEST_SYNTH_GQA, 11, 0, 0, model, tok);
    const char *requests = "30\tab ab ab\n24\tx y x y x\n";
    test_write_temp(requests, strlen(requests), reqs);
    test_write_temp("", 0, out4);
    test_write_temp("", 0, out7);
    test_write_temp("", 0, json);
    const char *ch4[] = {"ch04-paged", "--model", model, "--tokenizer", tok, "--requests", reqs, "--out", out4,
                         "--quiet", NULL};
    const char *ch7[] = {"ch07-speculative", "--model", model, "--tokenizer", tok, "--requests", reqs, "--out", out7,
                         "--spec", "self:2", "--spec-k", "3", "--spec-check", "--json", json, NULL};
    ProgramResult r;
    ck_assert_int_eq(test_run_program(ch4, &r), 0);
    ck_assert_msg(r.status == 0, "%s", r.err);
    test_result_free(&r);
    ck_assert_int_eq(test_run_program(ch7, &r), 0);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_msg(strstr(r.err, "speculation    self:2, k = 3, greedy") && strstr(r.err, "proposals accepted"), "%s",
                  r.err);
    test_result_free(&r);
    char *a = test_slurp(out4), *b = test_slurp(out7), *j = test_slurp(json);
    /* The lines differ only in their step numbers: compare the tokens. */
    const char *pa = a, *pb = b;
    while ((pa = strstr(pa, "\"tokens\":")) && (pb = strstr(pb, "\"tokens\":"))) {
        size_t la = strcspn(pa, "]"), lb = strcspn(pb, "]");
        ck_assert_msg(la == lb && memcmp(pa, pb, la) == 0, "chapter 4 %.*s, chapter 7 %.*s", (int)la, pa, (int)lb, pb);
        pa += la;
        pb += lb;
    }
    int proposed = -1, accepted = -1;
    const char *jp = strstr(j, "\"spec_proposed\":"), *ja = strstr(j, "\"spec_accepted\":");
    ck_assert_msg(jp && ja && sscanf(jp + 16, "%d", &proposed) == 1 && sscanf(ja + 16, "%d", &accepted) == 1, "%s", j);
    ck_assert_int_gt(proposed, 0);
    ck_assert_int_le(accepted, proposed);
    free(a);
    free(b);
    free(j);
    unlink(model);
    unlink(tok);
    unlink(reqs);
    unlink(out4);
    unlink(out7);
    unlink(json);
}
END_TEST

Suite *suite_ch07(void)
{
    Suite *s = suite_create("ch07");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, ngram_lookup);
    tcase_add_test(tc, greedy_rule);
    tcase_add_test(tc, rollback_shared_and_private_blocks);
    tcase_add_test(tc, invariants_catch_a_leak);
    tcase_add_test(tc, rejection_sampling_keeps_the_distribution);
    tcase_add_test(tc, greedy_identity_synthetic_gqa);
    tcase_add_test(tc, greedy_identity_stories260k);
    tcase_add_test(tc, self_draft_accepts_everything);
    tcase_add_test(tc, sampled_runs_and_forks_keep_the_books);
    tcase_add_test(tc, greedy_identity_smollm2);
    tcase_add_test(tc, program_refuses_bad_options);
    tcase_add_test(tc, program_reports_acceptance);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_LAB_SUITE(ch07)
