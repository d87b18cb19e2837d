/* kvsim's prefix-caching scenarios: the multi-turn trace is what it says
 * (each turn repeats its conversation, answers included), chapter 5's
 * caches find exactly the blocks an uncontended trace allows (the shared
 * system prompt, and every earlier turn with its generated answer), and
 * the program prints its rows and refuses bad options in one line. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvsim_prefix.h"
#include "mem.h"
#include "suites.h"

/* A small trace at 7B scale: few conversations, far apart, so that each
 * turn arrives after the one before has finished and nothing is evicted. */
static KvsimPrefixTrace small_trace(void)
{
    return (KvsimPrefixTrace){.conversations = 6, .turns = 4, .system_tokens = 100,
                              .user = {KVSIM_LOGNORMAL, 30, 0.5}, .answer = {KVSIM_LOGNORMAL, 40, 0.5},
                              .max_turn_tokens = 200, .think_steps = 5, .rate = 0.002, .seed = 3};
}

static Model llama7b_shape(void)
{
    Model m;
    memset(&m, 0, sizeof m);
    m.cfg = (ModelConfig){4096, 11008, 32, 32, 32, 32000, 2048};
    return m;
}

START_TEST(trace_turns_repeat_their_conversation)
{
    KvsimPrefixTrace t = small_trace();
    KvsimPrefixRequest reqs[24];
    int n = kvsim_prefix_make_trace(&t, 2048, reqs);
    ck_assert_int_eq(n, 24);
    for (int i = 1; i < n; i++)
        ck_assert_int_le(reqs[i - 1].spec.arrival_step, reqs[i].spec.arrival_step);
    Model m = llama7b_shape();
    CliOptions o;
    cli_defaults(&o);
    o.kv_budget = (size_t)1 << 34;
    SimRequestSpec specs[24];
    for (int i = 0; i < n; i++)
        specs[i] = reqs[i].spec;
    ServingRun run;
    Err err = {{0}};
    ck_assert_msg(serving_sim_init(&run, &m, &o, model_kv_bytes_per_token(&m.cfg, 2), specs, n, &err) == 0, "%s",
                  err.msg);
    kvsim_prefix_write_tokens(&t, reqs, &run);
    for (int i = 0; i < n; i++) {
        const Request *r = &run.reqs[i];
        ck_assert_int_eq(r->tokens[0], TOKEN_BOS);
        /* Every request starts with the same system prompt. */
        ck_assert(memcmp(r->tokens, run.reqs[0].tokens, (size_t)t.system_tokens * sizeof(int)) == 0);
        if (reqs[i].turn == 0)
            continue;
        /* Turn k's prompt is turn k - 1's prompt, its answer (what a
         * simulated request generates), then a new user turn. */
        for (int j = 0; j < n; j++)
            if (reqs[j].conversation == reqs[i].conversation && reqs[j].turn == reqs[i].turn - 1) {
                const Request *p = &run.reqs[j];
                ck_assert(memcmp(r->tokens, p->tokens, (size_t)p->n_prompt * sizeof(int)) == 0);
                for (int a = 0; a < reqs[j].spec.output_tokens; a++)
                    ck_assert_int_eq(r->tokens[p->n_prompt + a], SERVING_SIM_TOKEN);
                ck_assert_int_ne(r->tokens[p->n_prompt + reqs[j].spec.output_tokens], SERVING_SIM_TOKEN);
            }
    }
    serving_run_free(&run);
}
END_TEST

/* Uncontended, nothing evicted: conversation c's first turn finds the
 * system prompt's full blocks (c > 0); turn k finds turn k - 1's prompt and
 * answer, all but the last position it fed, in full blocks. */
START_TEST(uncontended_trace_hits_exactly_the_shared_blocks)
{
    KvsimPrefixTrace t = small_trace();
    KvsimPrefixRequest reqs[24];
    int n = kvsim_prefix_make_trace(&t, 2048, reqs);
    Model m = llama7b_shape();
    CliOptions o;
    cli_defaults(&o);
    o.block_size = 16;
    o.kv_budget = (size_t)2000 * 16 * model_kv_bytes_per_token(&m.cfg, 2);
    size_t per_token = model_kv_bytes_per_token(&m.cfg, 2);
    long want = 0;
    for (int i = 0; i < n; i++) {
        int limit = (reqs[i].spec.prompt_tokens - 1) / 16, found;
        if (reqs[i].turn == 0) {
            found = reqs[i].conversation > 0 ? t.system_tokens / 16 : 0;
        } else {
            found = 0;
            for (int j = 0; j < n; j++)
                if (reqs[j].conversation == reqs[i].conversation && reqs[j].turn == reqs[i].turn - 1)
                    found = (reqs[j].spec.prompt_tokens + reqs[j].spec.output_tokens - 1) / 16;
        }
        want += (long)(found < limit ? found : limit) * 16;
    }
    static const PrefixCacheMode modes[3] = {PREFIX_CACHE_OFF, PREFIX_CACHE_HASH, PREFIX_CACHE_RADIX};
    for (int k = 0; k < 3; k++) {
        KvsimPrefixResult r;
        Err err = {{0}};
        ck_assert_msg(kvsim_prefix_run(&m, &o, per_token, &t, reqs, n, modes[k], &r, &err) == 0, "%s", err.msg);
        long hits = r.query_tokens - r.prefill_computed;
        ck_assert_msg(hits == (k == 0 ? 0 : want), "--prefix-cache %s: %ld positions hit, want %ld",
                      prefix_cache_mode_name(modes[k]), hits, k == 0 ? 0 : want);
        ck_assert_int_eq(r.early_turns, 0);
        ck_assert_int_eq(r.evictions, 0);
        ck_assert_int_eq(r.preemptions, 0);
    }
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
    ck_assert_uint_eq(mem_current(MEM_KV_METADATA, MEM_HOST), 0);
}
END_TEST

START_TEST(program_prints_a_row_per_cache)
{
    const char *argv[] = {"kvsim", "--scenario", "prefix-multiturn-7b", "--conversations", "20", "--turns", "3",
                          NULL};
    ProgramResult r;
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_msg(strstr(r.out, "2384 blocks of 16 tokens") && strstr(r.out, "\noff ") && strstr(r.out, "\nhash ") &&
                      strstr(r.out, "\nradix "), "%s", r.out);
    test_result_free(&r);
    static const char *const bad[][4] = {{"--scenario", "prefix-nothing", NULL},
                                         {"--scenario", "prefix-multiturn-7b", "--block-size", "3"},
                                         {"--scenario", "prefix-multiturn-7b", "--rate", "0"},
                                         {"--scenario", "prefix-multiturn-7b", "--gpu", "a100-80gb"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *av[6] = {"kvsim", bad[i][0], bad[i][1], bad[i][2], bad[i][3], NULL};
        ck_assert_int_eq(test_run_program(av, &r), 0);
        ck_assert_msg(r.status == 1 && r.out_len == 0 && strstr(r.err, "kvsim: error: ") && test_count_lines(r.err) == 1,
                      "%s %s: exit %d, stderr: %s", bad[i][0], bad[i][1], r.status, r.err);
        test_result_free(&r);
    }
}
END_TEST

Suite *suite_kvsim_prefix(void)
{
    Suite *s = suite_create("kvsim_prefix");
    TCase *tc = tcase_create("kvsim_prefix");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, trace_turns_repeat_their_conversation);
    tcase_add_test(tc, uncontended_trace_hits_exactly_the_shared_blocks);
    tcase_add_test(tc, program_prints_a_row_per_cache);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_LAB_SUITE(kvsim_prefix)
