/* Chapter 5: prefix caching changes which positions are computed, never
 * the tokens. Every request gives its solo tokens with --prefix-cache off,
 * hash and radix, at every block size, under budgets that force eviction
 * and preemption, and with --n forks; the shared-prefix workload computes
 * at least 60% fewer prefill positions; a fully cached prompt recomputes
 * its last block; generated tokens are cached; a prefix shorter than a
 * block never hits; the radix tree splits, grows and evicts at its leaves;
 * off is chapter 4 byte for byte; the program refuses bad input in one
 * line. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "mem.h"
#include "ops.h"
#include "ext/budget.h"
#include "prefix.h"
#include "serving.h"
#include "suites.h"
#include "synth.h"

/* ------------------------------------------------------------ fixtures */

/* SmolLM2-135M-Instruct from its GGUF file, with the tokenizer the file
 * holds; SKIP when neither models/ nor ../shared/models has it. */
static CliOptions greedy(int block_size, size_t budget)
{
    CliOptions o;
    cli_defaults(&o);
    o.block_size = block_size;
    o.kv_budget = budget;
    return o;
}

static const PrefixCacheMode MODES[3] = {PREFIX_CACHE_OFF, PREFIX_CACHE_HASH, PREFIX_CACHE_RADIX};

/* A run of chapter 4's server with the cache above it, left open. */
typedef struct {
    RequestFile rf;
    CliOptions o;
    ServingRun run;
    PagedServer *server;
    PrefixCache *cache;
} PrefixRun;

static void prefix_run(PrefixRun *pr, const TestModel *f, const char *requests, CliOptions o, PrefixCacheMode mode)
{
    Err err = {{0}};
    ck_assert_msg(request_file_parse(&pr->rf, requests, strlen(requests), "t", &err) == 0, "%s", err.msg);
    pr->o = o;
    ck_assert_msg(serving_run_init(&pr->run, &f->m, &f->t, &pr->o, &pr->rf, &err) == 0, "%s", err.msg);
    ck_assert_msg(prefix_serve(&pr->run, mode, &pr->server, &pr->cache, &err) == 0, "%s, block size %d: %s",
                  prefix_cache_mode_name(mode), o.block_size, err.msg);
}

/* What every finished run must leave: each block free, on the stack or
 * parked with its K/V cached; the parked ones exactly the cache's free
 * ones; the breakdown whole; nothing leaked once closed. */
static void prefix_run_close(PrefixRun *pr)
{
    const PagedServer *s = pr->server;
    const BlockPool *p = &s->kv.pool;
    const PrefixCache *c = pr->cache;
    ck_assert_int_eq(s->n_running, 0);
    ck_assert_msg(p->n_free + p->n_parked == p->n_blocks, "%d free + %d parked of %d blocks at the end", p->n_free,
                  p->n_parked, p->n_blocks);
    for (int b = 0; b < p->n_blocks; b++)
        ck_assert_msg(p->ref_count[b] == 0, "block %d has refcount %d at the end", b, p->ref_count[b]);
    if (c->mode == PREFIX_CACHE_HASH) {
        ck_assert_int_eq(p->n_parked, c->hash.n_queued);
        ck_assert_int_eq(p->n_parked, c->hash.n_registered);
    } else if (c->mode == PREFIX_CACHE_RADIX) {
        ck_assert_int_eq(p->n_parked, c->radix.n_blocks_in_tree);
    } else {
        ck_assert_int_eq(p->n_parked, 0);
    }
    double fr[4];
    kv_breakdown_fractions(&pr->run.breakdown, fr);
    ck_assert_double_eq_tol(fr[0] + fr[1] + fr[2] + fr[3], 1.0, 1e-9);
    ck_assert_double_eq(fr[3], 0.0);
    prefix_cache_close(pr->cache);
    paged_close(pr->server);
    serving_run_free(&pr->run);
    request_file_free(&pr->rf);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
    ck_assert_uint_eq(mem_current(MEM_KV_METADATA, MEM_HOST), 0);
}

static long evictions_of(const PrefixCache *c)
{
    return c->mode == PREFIX_CACHE_HASH ? c->hash.evictions : c->mode == PREFIX_CACHE_RADIX ? c->radix.evictions : 0;
}

/* The tokens each request gets alone, with a contiguous cache written in
 * the test helpers (nothing of chapters 4 or 5): greedy, or sampled as
 * --n samples with @p temperature. */
static void solo_set(TestSolo *solo, const TestModel *f, const char *requests, int n_samples, float temperature)
{
    CliOptions o = greedy(16, 0);
    o.n_samples = n_samples;
    o.temperature = temperature;
    test_solo_of_requests(solo, &f->m, &f->t, requests, &o);
}

static void expect_solo_tokens(const PrefixRun *pr, const TestSolo *solo)
{
    char what[96];
    snprintf(what, sizeof what, "--prefix-cache %s, block size %d, budget %zu", prefix_cache_mode_name(pr->cache->mode),
             pr->o.block_size, pr->o.kv_budget);
    test_expect_solo(solo, &pr->run, 0, what);
}

/* ------------------------------------------------------------ same tokens */

/* Prompts that share openings of several lengths, and one that shares
 * nothing; a few reach seq_len (64). */
static const char *SYNTH_SHARED = "20\tthe quick brown fox jumps over the lazy dog and then\n"
                                  "12\tthe quick brown fox jumps over the lazy dog and now\n"
                                  "30\tthe quick brown fox jumps over the lazy cat\n"
                                  "9\tthe quick brown fox\n"
                                  "40\tsomething else entirely\n"
                                  "25\tthe quick brown fox jumps over the lazy dog and then\n"
                                  "16\tthe quick brown fox jumps\n";

/* Every block size from 1 to 256, three caches, a roomy budget and one
 * that forces preemption and eviction: every request its solo tokens. */
static void same_tokens_everywhere(const TestModel *f, const char *requests, int tight_tokens, int n_samples,
                                   float temperature)
{
    TestSolo solo, *ss = &solo;
    solo_set(ss, f, requests, n_samples, temperature);
    size_t per_token = model_kv_bytes_per_token(&f->m.cfg, sizeof(float));
    long hash_hits_small = 0, evictions_tight = 0, preemptions_tight = 0;
    for (int bs = 1; bs <= 256; bs *= 2) {
        size_t budgets[2] = {(size_t)64 * 512 * per_token,
                             (size_t)block_count_for_tokens(tight_tokens, bs) * (size_t)bs * per_token};
        for (int k = 0; k < 2; k++)
            for (int m = 0; m < 3; m++) {
                PrefixRun pr;
                CliOptions o = greedy(bs, budgets[k]);
                o.watermark = 0;
                o.n_samples = n_samples;
                o.temperature = temperature;
                prefix_run(&pr, f, requests, o, MODES[m]);
                expect_solo_tokens(&pr, ss);
                if (bs <= 4 && MODES[m] == PREFIX_CACHE_HASH)
                    hash_hits_small += pr.cache->hit_tokens;
                if (k == 1 && MODES[m] != PREFIX_CACHE_OFF) {
                    evictions_tight += evictions_of(pr.cache);
                    preemptions_tight += pr.server->preemptions;
                }
                if (MODES[m] == PREFIX_CACHE_OFF)
                    ck_assert_int_eq(pr.cache->hit_tokens, 0);
                prefix_run_close(&pr);
            }
    }
    ck_assert_msg(hash_hits_small > 0, "the shared openings never hit at block sizes 1 to 4");
    ck_assert_msg(evictions_tight > 0 && preemptions_tight > 0,
                  "the tight budgets forced %ld evictions and %ld preemptions; the test wants both", evictions_tight,
                  preemptions_tight);
    test_solo_close(ss);
}

START_TEST(same_tokens_off_hash_radix_synthetic)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    same_tokens_everywhere(&f, SYNTH_SHARED, 72, 1, 0.0f);
    test_model_free(&f);
}
END_TEST

START_TEST(same_tokens_with_forks)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    same_tokens_everywhere(&f, "20\tthe quick brown fox jumps over the lazy dog\n"
                               "15\tthe quick brown fox jumps over\n"
                               "18\tthe quick brown fox jumps over the lazy dog\n",
                           80, 3, 0.9f);
    test_model_free(&f);
}
END_TEST

/* --max-num-batched-tokens: a prompt's positions after its cached blocks
 * run in chunks; every budget, block size and cache gives the solo tokens,
 * no step runs more tokens than the budget, the caches still hit, and the
 * tight pools evict and preempt. */
START_TEST(chunked_prefill_same_tokens_within_the_budget)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    TestSolo solo, *ss = &solo;
    solo_set(ss, &f, SYNTH_SHARED, 1, 0.0f);
    size_t per_token = model_kv_bytes_per_token(&f.m.cfg, sizeof(float));
    long hits = 0, evictions = 0, preemptions = 0;
    const int budgets[] = {1, 5, 32};
    for (int bs = 1; bs <= 16; bs *= 4)
        for (int b = 0; b < 3; b++)
            for (int tight = 0; tight < 2; tight++)
                for (int m = 0; m < 3; m++) {
                    size_t pool = tight ? (size_t)block_count_for_tokens(72, bs) * (size_t)bs * per_token
                                        : (size_t)64 * 512 * per_token;
                    CliOptions o = greedy(bs, pool);
                    o.watermark = 0;
                    o.max_num_batched_tokens = budgets[b];
                    PrefixRun pr;
                    prefix_run(&pr, &f, SYNTH_SHARED, o, MODES[m]);
                    expect_solo_tokens(&pr, ss);
                    ck_assert_ptr_nonnull(pr.server->budget);
                    ck_assert_msg(pr.server->budget->max_step_tokens <= budgets[b],
                                  "a step ran %d tokens with --max-num-batched-tokens %d",
                                  pr.server->budget->max_step_tokens, budgets[b]);
                    if (MODES[m] != PREFIX_CACHE_OFF) {
                        hits += pr.cache->hit_tokens;
                        if (tight) {
                            evictions += evictions_of(pr.cache);
                            preemptions += pr.server->preemptions;
                        }
                    }
                    prefix_run_close(&pr);
                }
    ck_assert_msg(hits > 0, "no prefix hit with a token budget");
    ck_assert_msg(evictions > 0 && preemptions > 0, "the tight pools forced %ld evictions and %ld preemptions",
                  evictions, preemptions);
    test_solo_close(ss);
    test_model_free(&f);
}
END_TEST

/* SmolLM2-135M-Instruct, its chat turns sharing the default system message
 * (ChatML on one line: a request file has no newlines): off, hash and radix
 * give each request its solo tokens, at block size 16 with whole prompts
 * and with chunks of 24, and at block size 4, and the caches find the
 * system message. The sanitizer build (-O1, every access checked, some
 * twenty times slower) serves two requests, hash and radix, whole prompts
 * at block size 16. */
#if defined(__SANITIZE_ADDRESS__)
#define SMOLLM2_REQUESTS 2
#define SMOLLM2_SETUPS 1
#define SMOLLM2_FIRST_MODE 1
#else
#define SMOLLM2_REQUESTS 3
#define SMOLLM2_SETUPS 3
#define SMOLLM2_FIRST_MODE 0
#endif
START_TEST(smollm2_chat_same_tokens)
{
    TestModel f;
    if (!test_model_smollm2(&f, "smollm2_chat_same_tokens"))
        return;
#define SYS "<|im_start|>system You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|> "
    const char *lines[3] = {"6\t" SYS "<|im_start|>user What is the capital of France?<|im_end|> <|im_start|>assistant\n",
                            "6\t" SYS "<|im_start|>user Name three colours.<|im_end|> <|im_start|>assistant\n",
                            "6\t" SYS "<|im_start|>user What is the capital of France?<|im_end|> <|im_start|>assistant\n"};
#undef SYS
    char requests[1024] = "";
    for (int i = 0; i < SMOLLM2_REQUESTS; i++)
        strcat(requests, lines[i]);
    TestSolo solo, *ss = &solo;
    solo_set(ss, &f, requests, 1, 0.0f);
    const int block_sizes[3] = {16, 16, 4}, chunks[3] = {0, 24, 0};
    long hits[3] = {0, 0, 0};
    for (int k = 0; k < SMOLLM2_SETUPS; k++)
        for (int m = SMOLLM2_FIRST_MODE; m < 3; m++) {
            CliOptions o = greedy(block_sizes[k], (size_t)64 << 20);
            o.max_num_batched_tokens = chunks[k];
            PrefixRun pr;
            prefix_run(&pr, &f, requests, o, MODES[m]);
            expect_solo_tokens(&pr, ss);
            hits[m] += pr.cache->hit_tokens;
            prefix_run_close(&pr);
        }
    ck_assert_int_eq(hits[0], 0);
    ck_assert_msg(hits[1] > 0 && hits[1] == hits[2], "hash found %ld cached positions, radix %ld", hits[1], hits[2]);
    test_solo_close(ss);
    test_model_free(&f);
}
END_TEST

/* Serves @p requests on the real model with each cache at block size
 * @p bs (budget 0: the default), checks every request's tokens against
 * its solo run, and returns the prefill positions each cache computed and,
 * through @p evictions, how many blocks the caches evicted. */
static void serve_three_ways(const TestModel *f, const char *requests, const TestSolo *ss, int bs, size_t budget,
                             long computed[3], long *evictions)
{
    for (int m = 0; m < 3; m++) {
        PrefixRun pr;
        prefix_run(&pr, f, requests, greedy(bs, budget), MODES[m]);
        expect_solo_tokens(&pr, ss);
        computed[m] = pr.cache->query_tokens - pr.cache->hit_tokens;
        *evictions += evictions_of(pr.cache);
        prefix_run_close(&pr);
    }
}

/* data/requests-shared-prefix.tsv on the real model: the same tokens with
 * off, hash and radix at the default budget, where the caches compute at
 * least 60% fewer prefill positions than off, and in pools so tight that
 * they evict and preempt. */
START_TEST(shared_prefix_file_same_tokens_and_60_percent_saved)
{
    TestModel f;
    if (!test_model_stories(&f, "shared_prefix_file_same_tokens_and_60_percent_saved"))
        return;
    char *requests = test_slurp("data/requests-shared-prefix.tsv");
    TestSolo solo, *ss = &solo;
    solo_set(ss, &f, requests, 1, 0.0f);
    long computed[3], evictions = 0;
    serve_three_ways(&f, requests, ss, 16, 0, computed, &evictions);
    for (int m = 1; m < 3; m++)
        ck_assert_msg(computed[m] * 10 <= computed[0] * 4,
                      "--prefix-cache %s computed %ld prefill positions, off %ld: less than 60%% saved",
                      prefix_cache_mode_name(MODES[m]), computed[m], computed[0]);
    /* Tight: 32 blocks' worth of 16 tokens for requests of about 20 blocks. */
    size_t per_token = model_kv_bytes_per_token(&f.m.cfg, sizeof(float));
    for (int bs = 4; bs <= 16; bs *= 4)
        serve_three_ways(&f, requests, ss, bs, (size_t)32 * 16 * per_token, computed, &evictions);
    ck_assert_msg(evictions > 0, "no eviction in the tight pools");
    test_solo_close(ss);
    free(requests);
    test_model_free(&f);
}
END_TEST

/* data/requests-multi-turn.tsv on the real model, in a tight pool. */
START_TEST(multi_turn_file_same_tokens)
{
    TestModel f;
    if (!test_model_stories(&f, "multi_turn_file_same_tokens"))
        return;
    char *requests = test_slurp("data/requests-multi-turn.tsv");
    TestSolo solo, *ss = &solo;
    solo_set(ss, &f, requests, 1, 0.0f);
    long computed[3], evictions = 0;
    size_t per_token = model_kv_bytes_per_token(&f.m.cfg, sizeof(float));
    serve_three_ways(&f, requests, ss, 16, (size_t)20 * 16 * per_token, computed, &evictions);
    ck_assert_msg(computed[1] < computed[0] && computed[2] < computed[0] && evictions > 0,
                  "computed %ld (off), %ld (hash), %ld (radix) with %ld evictions", computed[0], computed[1],
                  computed[2], evictions);
    test_solo_close(ss);
    free(requests);
    test_model_free(&f);
}
END_TEST

/* A prompt of exactly k blocks, twice: the second finds all k cached, but
 * takes only k - 1 and computes the last block again, for its logits. */
START_TEST(fully_cached_prompt_recomputes_its_last_block)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    const char *requests = "6\tthe quick brown fox jumps over\n6\tthe quick brown fox jumps over\n";
    RequestFile rf;
    Err err = {{0}};
    ck_assert(request_file_parse(&rf, requests, strlen(requests), "t", &err) == 0);
    CliOptions o = greedy(1, 0);
    ServingRun run;
    ck_assert(serving_run_init(&run, &f.m, &f.t, &o, &rf, &err) == 0);
    int n_prompt = run.reqs[0].n_prompt, bs = 1;
    while (n_prompt % (2 * bs) == 0 && 2 * bs < n_prompt)
        bs *= 2; /* the largest power of two that divides the prompt, below it */
    serving_run_free(&run);
    request_file_free(&rf);
    ck_assert_int_gt(n_prompt / bs, 1);
    TestSolo solo, *ss = &solo;
    solo_set(ss, &f, requests, 1, 0.0f);
    for (int m = 1; m < 3; m++) {
        PrefixRun pr;
        prefix_run(&pr, &f, requests, greedy(bs, 0), MODES[m]);
        expect_solo_tokens(&pr, ss);
        const PrefixCache *c = pr.cache;
        ck_assert_msg(c->hit_tokens == n_prompt - bs && c->recomputed_tokens == bs,
                      "%s, prompt of %d tokens in blocks of %d: %ld hit, %ld recomputed; want %d and %d",
                      prefix_cache_mode_name(MODES[m]), n_prompt, bs, c->hit_tokens, c->recomputed_tokens,
                      n_prompt - bs, bs);
        ck_assert_int_eq(c->query_tokens - c->hit_tokens, n_prompt + bs);
        prefix_run_close(&pr);
    }
    test_solo_close(ss);
    test_model_free(&f);
}
END_TEST

/* Two prompts that share their first 4 tokens: nothing is shared in
 * blocks of more than 4 (only full blocks are cached), a block is in
 * blocks of 4. */
START_TEST(prefix_shorter_than_a_block_never_hits)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    const char *requests = "5\tthe quick\n5\tthe quack\n";
    RequestFile rf;
    Err err = {{0}};
    ck_assert(request_file_parse(&rf, requests, strlen(requests), "t", &err) == 0);
    CliOptions o = greedy(1, 0);
    ServingRun run;
    ck_assert(serving_run_init(&run, &f.m, &f.t, &o, &rf, &err) == 0);
    int common = 0;
    while (run.reqs[0].tokens[common] == run.reqs[1].tokens[common])
        common++;
    serving_run_free(&run);
    request_file_free(&rf);
    ck_assert_msg(common >= 2 && common < 8, "the prompts share %d tokens; the test wants 2 to 7", common);
    for (int bs = 1; bs <= 16; bs *= 2)
        for (int m = 1; m < 3; m++) {
            PrefixRun pr;
            prefix_run(&pr, &f, requests, greedy(bs, 0), MODES[m]);
            long want = (long)(common / bs) * bs;
            ck_assert_msg(pr.cache->hit_tokens == want, "%s, %d shared tokens, block size %d: %ld hit, want %ld",
                          prefix_cache_mode_name(MODES[m]), common, bs, pr.cache->hit_tokens, want);
            prefix_run_close(&pr);
        }
    test_model_free(&f);
}
END_TEST

/* ------------------------------------------------------ without a model */

/* Accounting only, at 7B scale (512 KiB per token in f16): the kvsim way. */
typedef struct {
    Model m;
    CliOptions o;
    ServingRun run;
    PagedServer *server;
    PrefixCache *cache;
} Sim;

/* Opens the run; @p write_prompts (may be NULL) gives the requests their
 * own token ids before the server sees them (a simulated request's are
 * all alike otherwise). */
static void sim_run(Sim *sim, const SimRequestSpec *specs, int n, int n_blocks, PrefixCacheMode mode,
                    void (*write_prompts)(ServingRun *run))
{
    memset(sim, 0, sizeof *sim);
    sim->m.cfg = (ModelConfig){4096, 11008, 32, 32, 32, 32000, 2048};
    sim->o = greedy(16, (size_t)n_blocks * (8u << 20));
    sim->o.watermark = 0;
    Err err = {{0}};
    ck_assert_msg(serving_sim_init(&sim->run, &sim->m, &sim->o, model_kv_bytes_per_token(&sim->m.cfg, 2), specs, n,
                                   &err) == 0, "%s", err.msg);
    if (write_prompts)
        write_prompts(&sim->run);
    ck_assert_msg(prefix_serve(&sim->run, mode, &sim->server, &sim->cache, &err) == 0, "%s", err.msg);
}

static void sim_close(Sim *sim)
{
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
    prefix_cache_close(sim->cache);
    paged_close(sim->server);
    serving_run_free(&sim->run);
}

/* A produces 40 tokens; B arrives after A is done, its prompt A's prompt
 * and A's generated tokens (a simulated request's tokens are all alike).
 * B finds the blocks A's decodes filled: generated tokens are cached. */
START_TEST(generated_tokens_are_cached)
{
    SimRequestSpec specs[2] = {{.prompt_tokens = 20, .max_new_tokens = 40},
                               {.prompt_tokens = 60, .max_new_tokens = 5, .arrival_step = 100}};
    for (int m = 0; m < 3; m++) {
        Sim sim;
        sim_run(&sim, specs, 2, 64, MODES[m], NULL);
        const PrefixCache *c = sim.cache;
        /* A's 59 cached positions fill 3 blocks of 16; B may take at most
         * (60 - 1) / 16 = 3: positions 0-47, 28 of them A's output. */
        long want = MODES[m] == PREFIX_CACHE_OFF ? 0 : 48;
        ck_assert_msg(c->hit_tokens == want, "%s: B hit %ld positions, want %ld", prefix_cache_mode_name(MODES[m]),
                      c->hit_tokens, want);
        ck_assert_int_eq(sim.run.reqs[1].admitted_step, 100);
        sim_close(&sim);
    }
}
END_TEST

/* Prompts of 100 tokens that share their first 64 (4 blocks of 16) and
 * differ after. */
static void shared_then_distinct(ServingRun *run)
{
    for (int i = 0; i < run->n_reqs; i++)
        for (int k = 1; k < run->reqs[i].n_prompt; k++)
            run->reqs[i].tokens[k] = k < 64 ? 10 + k : 1000 + 100 * i + k;
}

/* One request at a time in a pool of 12 blocks: each leaves its 7 full
 * blocks cached, so from the third on the pool must evict. Least recently
 * freed first, a request's tail before its head: the 4 shared blocks,
 * taken again by every request and freed last, are never evicted, and
 * every request after the first finds them. */
START_TEST(eviction_keeps_the_hot_prefix_without_a_model)
{
    SimRequestSpec specs[12];
    for (int i = 0; i < 12; i++)
        specs[i] = (SimRequestSpec){.prompt_tokens = 100, .max_new_tokens = 28, .arrival_step = 40 * i};
    for (int m = 1; m < 3; m++) {
        Sim sim;
        sim_run(&sim, specs, 12, 12, MODES[m], shared_then_distinct);
        const PrefixCache *c = sim.cache;
        ck_assert_msg(c->hit_tokens == 11 * 64, "%s: %ld positions hit, want 11 x 64",
                      prefix_cache_mode_name(MODES[m]), c->hit_tokens);
        ck_assert_int_gt(evictions_of(c), 0);
        ck_assert_int_eq(sim.run.n_done, 12);
        ck_assert_int_eq(sim.server->preemptions, 0);
        const BlockPool *p = &sim.server->kv.pool;
        ck_assert_int_eq(p->n_free + p->n_parked, p->n_blocks);
        sim_close(&sim);
    }
}
END_TEST

/* ------------------------------------------------------------ the radix tree */

typedef struct {
    BlockPool pool;
    BlockTables bt;
    RadixTree tree;
} TreeFixture;

static void tree_open(TreeFixture *tf, int n_blocks)
{
    Err err = {{0}};
    BlockShape shape = {.block_size = 2, .n_layers = 1, .kv_dim = 1, .elem_bytes = sizeof(float)};
    ck_assert(block_pool_init(&tf->pool, &shape, n_blocks, 0, &err) == 0);
    ck_assert(block_tables_init(&tf->bt, 4, 8, &err) == 0);
    ck_assert(radix_init(&tf->tree, &tf->pool, &err) == 0);
}

static void tree_close(TreeFixture *tf)
{
    radix_free(&tf->tree);
    block_tables_free(&tf->bt);
    block_pool_free(&tf->pool);
    ck_assert_uint_eq(mem_current(MEM_KV_METADATA, MEM_HOST), 0);
}

/* Table t gets fresh blocks for @p tokens (n_tokens, a multiple of 2) and
 * each block joins the tree after the one before. */
static void tree_insert_sequence(TreeFixture *tf, int t, const int *tokens, int n_tokens)
{
    BlockTable *tab = &tf->bt.tables[t];
    ck_assert(block_table_grow(&tf->pool, tab, n_tokens) == 0);
    int after = -1;
    for (int i = 0; i < n_tokens / 2; i++) {
        int b = tab->blocks[i];
        ck_assert_int_eq(radix_insert(&tf->tree, after, b, tokens + 2 * i), b);
        after = b;
    }
}

START_TEST(radix_tree_compresses_splits_and_matches)
{
    TreeFixture tf;
    tree_open(&tf, 16);
    int a[] = {1, 2, 3, 4, 5, 6, 7, 8}, b[] = {1, 2, 3, 4, 9, 9, 7, 8, 0};
    tree_insert_sequence(&tf, 0, a, 8);
    const int *ta = tf.bt.tables[0].blocks;
    ck_assert_msg(tf.tree.n_nodes == 2, "one sequence is one edge below the root: %d nodes", tf.tree.n_nodes);
    int found[8];
    ck_assert_int_eq(radix_match(&tf.tree, b, 9, found), 2); /* [1 2][3 4], then [9 9] leaves the edge */
    ck_assert(found[0] == ta[0] && found[1] == ta[1]);
    /* b takes them and goes on: [9 9] after [3 4] splits a's edge in two. */
    BlockTable *tb = &tf.bt.tables[1];
    radix_take(&tf.tree, tb, found, 2);
    ck_assert_int_eq(tf.pool.ref_count[ta[0]], 2);
    ck_assert(block_table_grow(&tf.pool, tb, 8) == 0);
    ck_assert_int_eq(radix_insert(&tf.tree, ta[1], tb->blocks[2], b + 4), tb->blocks[2]);
    ck_assert_int_eq(tf.tree.splits, 1);
    ck_assert_int_eq(tf.tree.n_nodes, 4); /* root, [1 2][3 4], [5 6][7 8], [9 9] */
    ck_assert_int_eq(radix_insert(&tf.tree, tb->blocks[2], tb->blocks[3], b + 6), tb->blocks[3]);
    ck_assert_int_eq(tf.tree.n_nodes, 4); /* a leaf grows: [9 9][7 8] */
    ck_assert_int_eq(radix_match(&tf.tree, a, 8, found), 3); /* not the block of the last position */
    ck_assert_int_eq(radix_match(&tf.tree, a, 9, found), 4);
    ck_assert_int_eq(found[3], ta[3]);
    ck_assert_int_eq(radix_match(&tf.tree, b, 9, found), 4);
    ck_assert_int_eq(found[3], tb->blocks[3]);
    /* An equal block in the same place is not added twice. */
    BlockTable *tc = &tf.bt.tables[2];
    ck_assert(block_table_grow(&tf.pool, tc, 2) == 0);
    ck_assert_int_eq(radix_insert(&tf.tree, -1, tc->blocks[0], a), ta[0]);
    ck_assert_int_eq(tf.tree.n_blocks_in_tree, 6);
    block_table_release(&tf.pool, tc, NULL, NULL);
    for (int t = 0; t < 2; t++)
        radix_release(&tf.tree, &tf.bt.tables[t], NULL, NULL);
    ck_assert_int_eq(tf.pool.n_parked, 6);
    ck_assert_int_eq(tf.pool.n_free, 10);
    tree_close(&tf);
}
END_TEST

START_TEST(radix_tree_evicts_least_recent_leaf_tails)
{
    TreeFixture tf;
    tree_open(&tf, 8);
    int a[] = {1, 2, 3, 4, 5, 6}, b[] = {1, 2, 7, 8};
    tree_insert_sequence(&tf, 0, a, 6);
    radix_release(&tf.tree, &tf.bt.tables[0], NULL, NULL); /* a is done: 3 blocks parked */
    int found[4];
    ck_assert_int_eq(radix_match(&tf.tree, b, 4, found), 1);
    BlockTable *tb = &tf.bt.tables[1];
    radix_take(&tf.tree, tb, found, 1); /* b holds [1 2] again */
    ck_assert(block_table_grow(&tf.pool, tb, 4) == 0);
    ck_assert_int_eq(radix_insert(&tf.tree, found[0], tb->blocks[1], b + 2), tb->blocks[1]);
    /* Parked: a's [3 4][5 6]. Held by b: [1 2], [7 8]. The leaf a's edge
     * was used longest ago: its tail goes first, then [3 4]. */
    int a_blocks[3];
    memcpy(a_blocks, tf.bt.ids, sizeof a_blocks); /* table 0's entries, still in its row */
    ck_assert_int_eq(radix_evict(&tf.tree), a_blocks[2]);
    ck_assert_int_eq(radix_evict(&tf.tree), a_blocks[1]);
    ck_assert_msg(radix_evict(&tf.tree) == -1, "evicted a block b still holds");
    ck_assert_int_eq(tf.tree.evictions, 2);
    radix_release(&tf.tree, tb, NULL, NULL);
    /* b's [7 8] is now the tail of the only leaf; then [1 2]. */
    ck_assert_int_eq(radix_evict(&tf.tree), tb->blocks[1]);
    ck_assert_int_eq(radix_evict(&tf.tree), found[0]);
    ck_assert_int_eq(tf.tree.n_nodes, 1);
    ck_assert_int_eq(tf.pool.n_free, 8);
    tree_close(&tf);
}
END_TEST

/* ------------------------------------------------------------ the hash */

/* 64-bit FNV-1a over bytes, written independently of hash_block_key(). */
static uint64_t fnv1a_reference(const unsigned char *bytes, size_t n)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ bytes[i]) * 1099511628211ull;
    return h;
}

START_TEST(block_key_is_fnv1a_of_parent_and_tokens)
{
    ck_assert(fnv1a_reference((const unsigned char *)"", 0) == 0xcbf29ce484222325ull); /* published vectors */
    ck_assert(fnv1a_reference((const unsigned char *)"a", 1) == 0xaf63dc4c8601ec8cull);
    unsigned char bytes[16] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* the parent, low byte first */
                               0x0d, 0x0c, 0x0b, 0x0a, 0xff, 0x01, 0x00, 0x00};
    int tokens[2] = {0x0a0b0c0d, 0x1ff};
    ck_assert(hash_block_key(0x0102030405060708ull, tokens, 2) == fnv1a_reference(bytes, 16));
}
END_TEST

/* ------------------------------------------------------------ program */

typedef struct {
    char model[PATH_MAX], tok[PATH_MAX], reqs[PATH_MAX];
} ProgramFiles;

static void program_files(ProgramFiles *pf)
{
    test_write_synthetic(&TEST_SYNTH_GQA, 11, 0, 0, pf->model, pf->tok);
    test_write_temp(SYNTH_SHARED, strlen(SYNTH_SHARED), pf->reqs);
}

static void program_files_remove(const ProgramFiles *pf)
{
    remove(pf->model);
    remove(pf->tok);
    remove(pf->reqs);
}

static void run_program(const char *name, const ProgramFiles *pf, const char *const *extra, ProgramResult *r)
{
    const char *argv[32] = {name, "--model", pf->model, "--tokenizer", pf->tok, "--requests", pf->reqs};
    int n = 7;
    for (int i = 0; extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    ck_assert_int_eq(test_run_program(argv, r), 0);
}

static void expect_refusal(const ProgramFiles *pf, const char *const *extra, const char *word)
{
    ProgramResult r;
    run_program("ch05-prefix", pf, extra, &r);
    ck_assert_msg(r.status == 1, "exit %d for %s: %s", r.status, word, r.err);
    ck_assert_uint_eq(r.out_len, 0);
    const char *e = strstr(r.err, "ch05-prefix: error: ");
    ck_assert_msg(e && strstr(e, word), "expected an error naming '%s': %s", word, r.err);
    ck_assert_msg(test_count_lines(r.err) == 1, "expected nothing on stderr but the error, got:\n%s", r.err);
    test_result_free(&r);
}

START_TEST(program_refuses_bad_input)
{
    ProgramFiles pf;
    program_files(&pf);
    expect_refusal(&pf, (const char *const[]){"--prefix-cache", "lru", NULL}, "not one of off, hash, radix");
    expect_refusal(&pf, (const char *const[]){"--prefix-cache", NULL}, "needs a value");
    expect_refusal(&pf, (const char *const[]){"--device", "cuda", NULL}, "unknown option '--device'");
    expect_refusal(&pf, (const char *const[]){"--block-size", "3", NULL}, "power of two");
    expect_refusal(&pf, (const char *const[]){"--kv-budget", "1000", NULL}, "holds no block");
    expect_refusal(&pf, (const char *const[]){"--n", "2", NULL}, "--temperature");
    expect_refusal(&pf, (const char *const[]){"--preempt", "swap", NULL}, "--preempt swap is chapter 4's only");
    expect_refusal(&pf, (const char *const[]){"--swap-space", "1MiB", NULL}, "--swap-space needs --preempt swap");
    expect_refusal(&pf, (const char *const[]){"--max-num-batched-tokens", "0", NULL}, "--max-num-batched-tokens");
    program_files_remove(&pf);
    const char *argv[] = {"ch05-prefix", "--help", NULL};
    ProgramResult r;
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_int_eq(r.status, 0);
    ck_assert_msg(strstr(r.out, "--prefix-cache off|hash|radix") && strstr(r.out, "CPU only"), "%s", r.out);
    ck_assert_msg(!strstr(r.out, "\n  --device"), "%s", r.out);
    test_result_free(&r);
}
END_TEST

/* The integer after "key": in a JSON report (the test fails without it). */
static long json_long(const char *json, const char *key)
{
    char pattern[96];
    snprintf(pattern, sizeof pattern, "\"%s\": ", key);
    const char *p = strstr(json, pattern);
    ck_assert_msg(p != NULL, "no %s in the JSON report", key);
    return strtol(p + strlen(pattern), NULL, 10);
}

static char *slurp_and_remove(const char *path)
{
    char *text = test_slurp(path);
    remove(path);
    return text;
}

/* --prefix-cache off is chapter 4: the same requests on the same steps, the
 * same blocks over time; hash and radix give the same tokens and report
 * what they saved. */
START_TEST(program_off_is_chapter_4_and_reports_the_cache)
{
    ProgramFiles pf;
    program_files(&pf);
    char out4[PATH_MAX + 8], out5[PATH_MAX + 8], json4[PATH_MAX + 8], json5[PATH_MAX + 8];
    snprintf(out4, sizeof out4, "%s.4.jsonl", pf.reqs);
    snprintf(out5, sizeof out5, "%s.5.jsonl", pf.reqs);
    snprintf(json4, sizeof json4, "%s.4.json", pf.reqs);
    snprintf(json5, sizeof json5, "%s.5.json", pf.reqs);
    const char *tight[] = {"--block-size", "4", "--kv-budget", "12KiB", NULL};
    ProgramResult r;
    run_program("ch04-paged", &pf, (const char *const[]){tight[0], tight[1], tight[2], tight[3], "--out", out4,
                                                        "--json", json4, NULL}, &r);
    ck_assert_msg(r.status == 0, "%s", r.err);
    test_result_free(&r);
    char *ch4 = slurp_and_remove(out4), *ch4_json = slurp_and_remove(json4);
    int t4[4096], t5[4096];
    int n4 = test_json_ints(ch4_json, "blocks_timeline", t4, 4096);
    const char *modes[] = {"off", "hash", "radix"};
    for (int m = 0; m < 3; m++) {
        run_program("ch05-prefix", &pf, (const char *const[]){tight[0], tight[1], tight[2], tight[3], "--out", out5,
                                                             "--json", json5, "--prefix-cache", modes[m], NULL}, &r);
        ck_assert_msg(r.status == 0, "%s", r.err);
        ck_assert_uint_eq(r.out_len, 0);
        ck_assert_msg(strstr(r.err, "ch05-prefix: KV budget 12.00 KiB: 8 blocks of 4 tokens"), "%s", r.err);
        ck_assert_msg(strstr(r.err, "prefix cache (") && strstr(r.err, "KV cache usage"), "%s", r.err);
        char *ch5 = slurp_and_remove(out5), *ch5_json = slurp_and_remove(json5);
        if (m == 0) {
            ck_assert_msg(strcmp(ch4, ch5) == 0, "--prefix-cache off: --out differs from chapter 4's:\n%s\n%s", ch4,
                          ch5);
            int n5 = test_json_ints(ch5_json, "blocks_timeline", t5, 4096);
            ck_assert_msg(n4 == n5 && memcmp(t4, t5, (size_t)n4 * sizeof(int)) == 0,
                          "--prefix-cache off: blocks over time differ from chapter 4's");
        } else {
            /* the same tokens: the lines agree up to "admitted_step" */
            for (const char *a = ch4, *b = ch5; *a; a = strchr(a, '\n') + 1, b = strchr(b, '\n') + 1) {
                size_t la = (size_t)(strstr(a, "\"admitted_step\"") - a), lb = (size_t)(strstr(b, "\"admitted_step\"") - b);
                ck_assert_msg(la == lb && memcmp(a, b, la) == 0, "--prefix-cache %s: a request's tokens differ",
                              modes[m]);
            }
        }
        const char *keys[] = {"\"prefix_cache\"", "\"prefix_cache_hit_tokens\"", "\"prefill_tokens_computed\"",
                              "\"prefix_cache_hit_rate\"", "\"prefix_cache_evictions\"", "\"cached_free_timeline\"",
                              "\"blocks_shared_at_peak\"", "\"kv_cache_usage_with_cached_peak\"",
                              "\"blocks_timeline\"", "\"preemptions\""};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            ck_assert_msg(strstr(ch5_json, keys[k]), "%s missing from the JSON report", keys[k]);
        /* The ledger's kv_metadata is chapter 4's (tables, free stack,
         * reference counts) and the cache's, nothing else. */
        long blocks = json_long(ch5_json, "blocks_total");
        ck_assert_int_eq(json_long(ch5_json, "kv_metadata_bytes"),
                         json_long(ch5_json, "block_table_bytes") + 2 * blocks * (long)sizeof(int) +
                             json_long(ch5_json, "prefix_cache_metadata_bytes"));
        free(ch5);
        free(ch5_json);
        test_result_free(&r);
    }
    free(ch4);
    free(ch4_json);
    program_files_remove(&pf);
}
END_TEST

/* Adds a test case of its own (CK_RUN_CASE=name runs one). */
static void add_case(Suite *s, const char *name, const TTest *const *tests, int n, double timeout_s)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, timeout_s);
    for (int i = 0; i < n; i++)
        tcase_add_test(tc, tests[i]);
    suite_add_tcase(s, tc);
}

Suite *suite_ch05(void)
{
    Suite *s = suite_create("ch05");
    const TTest *units[] = {block_key_is_fnv1a_of_parent_and_tokens, radix_tree_compresses_splits_and_matches,
                            radix_tree_evicts_least_recent_leaf_tails, fully_cached_prompt_recomputes_its_last_block,
                            prefix_shorter_than_a_block_never_hits, generated_tokens_are_cached,
                            eviction_keeps_the_hot_prefix_without_a_model};
    const TTest *identity[] = {same_tokens_off_hash_radix_synthetic, same_tokens_with_forks,
                               chunked_prefill_same_tokens_within_the_budget};
    const TTest *stories[] = {shared_prefix_file_same_tokens_and_60_percent_saved, multi_turn_file_same_tokens};
    const TTest *smollm2[] = {smollm2_chat_same_tokens};
    const TTest *program[] = {program_refuses_bad_input, program_off_is_chapter_4_and_reports_the_cache};
    add_case(s, "ch05_units", units, 7, 120);
    add_case(s, "ch05_identity", identity, 3, 600);
    add_case(s, "ch05_stories", stories, 2, 600);
    add_case(s, "ch05_smollm2", smollm2, 1, 600);
    add_case(s, "ch05_program", program, 2, 300);
    return s;
}

REGISTER_LAB_SUITE(ch05)
