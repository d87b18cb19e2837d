/* Chapter 4 lab: the block allocator, the slot mapping, copy-on-write,
 * PagedAttention and the admission rule (exercises/ch04/, regions
 * ch04.alloc, ch04.release, ch04.slot, ch04.cow, ch04.attend, ch04.admit),
 * first on small cases you can check by hand, then end to end: a server
 * that preempts and forks must give every request the tokens it gets alone. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ext/paged_dtype.h"
#include "generate.h"
#include "helpers.h"
#include "lab/grading.h"
#include "mem.h"
#include "ops.h"
#include "paged.h"
#include "serving.h"
#include "synth.h"

static BlockShape shape_of(int block_size)
{
    return (BlockShape){.block_size = block_size, .n_layers = 2, .kv_dim = 4, .elem_bytes = sizeof(float)};
}

/* ------------------------------------------------------------ allocator */

START_TEST(alloc_hands_out_each_block_once)
{
    BlockPool p;
    Err err = {{0}};
    BlockShape s = shape_of(4);
    ck_assert(block_pool_init(&p, &s, 4, 1, &err) == 0);
    int seen[4] = {0};
    for (int i = 0; i < 4; i++) {
        int b = block_pool_alloc(&p);
        ck_assert_msg(b >= 0 && b < 4, "expected a block id in 0..3 from a pool with %d free, got %d; hint: "
                                       "block_pool_alloc() pops free_stack[n_free - 1] and decrements n_free",
                      4 - i, b);
        ck_assert_msg(!seen[b], "expected distinct blocks, got block %d twice; hint: does block_pool_alloc() pop the "
                                "top of the stack (and decrement n_free)?", b);
        seen[b] = 1;
        ck_assert_msg(p.ref_count[b] == 1, "expected reference count 1 for a new block, got %d; hint: "
                                           "block_pool_alloc() gives it one holder, the caller",
                      p.ref_count[b]);
        ck_assert_msg(p.n_free == 3 - i, "expected %d free blocks, got %d; hint: block_pool_alloc() takes one off "
                                         "n_free", 3 - i, p.n_free);
    }
    int b = block_pool_alloc(&p);
    ck_assert_msg(b == -1, "expected -1 from an empty pool, got %d; hint: block_pool_alloc() checks n_free "
                          "before popping", b);
    block_pool_free(&p);
}
END_TEST

START_TEST(release_frees_at_zero_and_refuses_double_free)
{
    BlockPool p;
    Err err = {{0}};
    BlockShape s = shape_of(4);
    ck_assert(block_pool_init(&p, &s, 3, 1, &err) == 0);
    int a = block_pool_alloc(&p), b = block_pool_alloc(&p);
    ck_assert_msg(a >= 0 && b >= 0, "expected two blocks, got %d and %d; hint: finish block_pool_alloc() (ch04.alloc) "
                  "first", a, b);
    int left = block_pool_release(&p, a);
    ck_assert_msg(left == 0 && p.n_free == 2, "expected 0 holders left and 2 free blocks, got %d and %d; hint: "
                                              "block_pool_release() pushes the block back on free_stack when its "
                                              "count reaches 0",
                  left, p.n_free);
    ck_assert_msg(p.free_stack[p.n_free - 1] == a, "expected block %d on top of the free stack, got %d; hint: "
                  "block_pool_release() pushes it at free_stack[n_free++]", a, p.free_stack[p.n_free - 1]);
    left = block_pool_release(&p, a);
    ck_assert_msg(p.ref_count[a] == 0,
                  "expected a double free to leave block %d's reference count at 0, got %d; hint: "
                  "block_pool_release() must refuse (return -1 and change nothing) before it decrements: a count "
                  "below 0 means the block is neither held nor free", a, p.ref_count[a]);
    ck_assert_msg(left == -1 && p.n_free == 2, "expected a double free to return -1 and change nothing, got %d with "
                                               "%d free; hint: in block_pool_release(), a block whose count is "
                                               "already 0 has no holder to drop",
                  left, p.n_free);
    block_pool_retain(&p, b); /* two holders now */
    left = block_pool_release(&p, b);
    ck_assert_msg(left == 1 && p.n_free == 2, "expected a shared block to stay held (1 holder left, 2 free), got "
                                              "%d holders and %d free; hint: block_pool_release() returns the holders "
                                              "left; only the last holder frees the block",
                  left, p.n_free);
    left = block_pool_release(&p, b);
    ck_assert_msg(left == 0 && p.n_free == 3, "expected the last release to free it (3 free), got %d holders, %d free; hint: "
                                              "block_pool_release() frees at 0 holders",
                  left, p.n_free);
    block_pool_free(&p);
}
END_TEST

/* ------------------------------------------------------------ slot mapping */

START_TEST(slot_lookup_at_block_boundaries)
{
    int ids[3] = {7, 2, 5};
    BlockTable t = {.blocks = ids, .n_blocks = 3, .capacity = 3};
    int sizes[] = {1, 4, 16};
    for (int k = 0; k < 3; k++) {
        int bs = sizes[k];
        int pos[] = {0, bs - 1, bs, 2 * bs - 1, 2 * bs, 3 * bs - 1};
        int want_block[] = {7, 7, 2, 2, 5, 5}, want_offset[] = {0, bs - 1, 0, bs - 1, 0, bs - 1};
        for (int i = 0; i < 6; i++) {
            int offset = -1, block = block_table_slot(&t, pos[i], bs, &offset);
            ck_assert_msg(block == want_block[i] && offset == want_offset[i],
                          "expected position %d (block size %d) in block %d at offset %d, got block %d offset %d; "
                          "hint: block_table_slot(): logical block pos / block_size, row pos %% block_size",
                          pos[i], bs, want_block[i], want_offset[i], block, offset);
        }
    }
}
END_TEST

/* ------------------------------------------------------------ copy-on-write */

START_TEST(cow_copies_only_a_shared_block)
{
    BlockPool p;
    BlockTables bt;
    Err err = {{0}};
    BlockShape s = shape_of(4);
    ck_assert(block_pool_init(&p, &s, 6, 1, &err) == 0);
    ck_assert(block_tables_init(&bt, 2, 3, &err) == 0);
    BlockTable *parent = &bt.tables[0], *child = &bt.tables[1];
    /* Free blocks hold garbage, as reused memory does: a copy that goes
     * the wrong way, or reads the wrong block, cannot pass for a zero. */
    for (size_t i = 0; i < (size_t)p.n_blocks * p.floats_per_block; i++)
        p.storage[i] = NAN;
    ck_assert_msg(block_table_grow(&p, parent, 6) == 0,
                  "expected room for 6 tokens; hint: finish block_pool_alloc() (ch04.alloc) first");
    for (int blk = 0; blk < 2; blk++)
        for (size_t i = 0; i < p.floats_per_block; i++)
            p.storage[(size_t)parent->blocks[blk] * p.floats_per_block + i] = (float)(1000 * blk + (int)i);
    block_table_fork(&p, parent, child);
    int shared = child->blocks[1], copied = -1;
    float *before = malloc(p.floats_per_block * sizeof(float)); /* the shared block's K/V */
    memcpy(before, p.storage + (size_t)shared * p.floats_per_block, p.floats_per_block * sizeof(float));
    int rc = block_table_make_writable(&p, child, 5, &copied); /* position 5: logical block 1 */
    ck_assert_msg(rc == 0 && copied == 1, "expected a copy of the shared block holding position 5, got rc %d, "
                                          "copied %d; hint: block_table_make_writable() copies a block with "
                                          "ref_count > 1 before it is written",
                  rc, copied);
    ck_assert_msg(child->blocks[1] != shared && parent->blocks[1] == shared,
                  "expected the child to point at a new block and the parent to keep %d, got child %d parent %d; "
                  "hint: block_table_make_writable() points the writer's table at the copy",
                  shared, child->blocks[1], parent->blocks[1]);
    ck_assert_msg(child->blocks[0] == parent->blocks[0], "expected block 0 still shared, got %d and %d; hint: "
                                                         "block_table_make_writable() copies only the block being "
                                                         "written",
                  child->blocks[0], parent->blocks[0]);
    ck_assert_msg(p.ref_count[shared] == 1 && p.ref_count[child->blocks[1]] == 1,
                  "expected one holder each for the original and the copy, got %d and %d; hint: "
                  "block_table_make_writable() releases the shared block once the copy is made",
                  p.ref_count[shared], p.ref_count[child->blocks[1]]);
    ck_assert_msg(memcmp(p.storage + (size_t)child->blocks[1] * p.floats_per_block, before,
                         p.floats_per_block * sizeof(float)) == 0,
                  "expected the copy to hold the shared block's K and V; hint: block_table_make_writable() copies "
                  "the shared block INTO the fresh one: block_pool_copy(pool, dst = fresh, src = shared)");
    ck_assert_msg(memcmp(p.storage + (size_t)shared * p.floats_per_block, before, p.floats_per_block * sizeof(float)) ==
                      0,
                  "expected the shared block to keep its K and V (the parent still reads it), got them overwritten; "
                  "hint: block_table_make_writable() copies from the shared block, never into it");
    free(before);
    rc = block_table_make_writable(&p, parent, 5, &copied);
    ck_assert_msg(rc == 0 && copied == 0, "expected no copy of a block only this table holds, got copied %d; hint: "
                  "block_table_make_writable() writes in place when ref_count is 1",
                  copied);
    block_table_release(&p, parent, NULL, NULL);
    block_table_release(&p, child, NULL, NULL);
    ck_assert_msg(p.n_free == 6, "expected every block free at the end, got %d of 6; hint: "
                  "block_table_make_writable() must leave one holder per block", p.n_free);
    block_tables_free(&bt);
    block_pool_free(&p);
}
END_TEST

/* ------------------------------------------------------------ PagedAttention */

START_TEST(attend_through_scattered_blocks)
{
    const int head_dim = 2, kv_dim = 4, n_pos = 10, bs = 4;
    BlockPool p;
    Err err = {{0}};
    BlockShape s = shape_of(bs);
    ck_assert(block_pool_init(&p, &s, 5, 1, &err) == 0);
    int ids[3] = {4, 0, 2}; /* positions 0-3 in block 4, 4-7 in block 0, 8-9 in block 2 */
    BlockTable t = {.blocks = ids, .n_blocks = 3, .capacity = 3};
    /* Every row that holds no position of the sequence is garbage (NaN),
     * as in a pool whose blocks were used before: rows 10 and 11 of the
     * last block, the blocks the table does not name, the other layer. */
    for (size_t i = 0; i < (size_t)p.n_blocks * p.floats_per_block; i++)
        p.storage[i] = NAN;
    float keys[10 * 4], values[10 * 4]; /* [n_pos][kv_dim], the contiguous view */
    unsigned long long rng = 99;
    for (int i = 0; i < n_pos * kv_dim; i++) {
        keys[i] = sampler_random_f32(&rng) - 0.5f;
        values[i] = sampler_random_f32(&rng) * 4.0f;
    }
    for (int pos = 0; pos < n_pos; pos++) {
        int block = ids[pos / bs], row = pos % bs;
        memcpy(block_pool_keys(&p, block, 1) + row * kv_dim, keys + pos * kv_dim, sizeof(float) * kv_dim);
        memcpy(block_pool_values(&p, block, 1) + row * kv_dim, values + pos * kv_dim, sizeof(float) * kv_dim);
    }
    float q[2] = {0.7f, -1.3f}, want[2], got[2] = {0, 0}, scores[10], scores2[10 + 4];
    for (int kv_head = 0; kv_head < 2; kv_head++)
        for (int n = 1; n <= n_pos; n++) {
            attention_reference(want, q, keys + kv_head * head_dim, values + kv_head * head_dim, n, kv_dim,
                                head_dim, scores);
            for (int i = 0; i < 10 + 4; i++) /* scratch is garbage too; past n it must stay untouched */
                scores2[i] = NAN;
            paged_attention(&p, &t, 1, kv_head, head_dim, q, n, got, scores2);
            for (int i = n; i < 10 + 4; i++)
                ck_assert_msg(isnan(scores2[i]),
                              "expected paged_attention() over %d positions to write scores[0..%d] only, got "
                              "scores[%d] written; hint: the last block holds n_pos - i x block_size rows, not "
                              "block_size: score only the positions that exist",
                              n, n - 1, i);
            ck_assert_msg(memcmp(want, got, sizeof want) == 0,
                          "expected (%.7g, %.7g) for KV head %d over %d positions, got (%.7g, %.7g); hint: same "
                          "order as attention_reference: paged_attention() scores 0..n-1, softmax, then the values, "
                          "reading logical block i from physical block t->blocks[i], layer 1, the head's slice, "
                          "only the filled rows of the last block",
                          (double)want[0], (double)want[1], kv_head, n, (double)got[0], (double)got[1]);
        }
    block_pool_free(&p);
}
END_TEST

/* ------------------------------------------------------------ admission */

START_TEST(admit_keeps_the_watermark)
{
    struct {
        int free, needed, watermark, want;
    } cases[] = {{10, 7, 3, 1}, {10, 8, 3, 0}, {7, 7, 0, 1}, {6, 7, 0, 0}, {20, 1, 19, 1}, {20, 2, 19, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = paged_can_admit(cases[i].free, cases[i].needed, cases[i].watermark);
        ck_assert_msg(got == cases[i].want, "expected %d for %d free, %d needed, watermark %d, got %d; hint: "
                                            "paged_can_admit() admits when free - needed >= watermark",
                      cases[i].want, cases[i].free, cases[i].needed, cases[i].watermark, got);
    }
}
END_TEST

/* ------------------------------------------------------------ end to end */

/* A small synthetic model (GQA: 6 query heads on 2 KV heads, seq_len 64)
 * and its tokenizer, from memory images freed by close_synthetic(). */
typedef struct {
    void *image, *tok_image;
    Model m;
    Tokenizer t;
} Synthetic;

static void open_synthetic(Synthetic *s, unsigned long long seed)
{
    SynthSpec spec = {.cfg = {48, 96, 3, 6, 2, 400, 64}, .seed = seed};
    size_t bytes, tok_bytes;
    Err err = {{0}};
    ck_assert(synth_model_image(&spec, &s->image, &bytes, &err) == 0);
    ck_assert(synth_tokenizer_image(spec.cfg.vocab_size, &s->tok_image, &tok_bytes, &err) == 0);
    ck_assert(model_open_image(&s->m, s->image, bytes, &err) == 0);
    ck_assert(tokenizer_open_image(&s->t, s->tok_image, tok_bytes, spec.cfg.vocab_size, &err) == 0);
}

static void close_synthetic(Synthetic *s)
{
    tokenizer_free(&s->t);
    mem_free(s->tok_image);
    mem_free(s->image);
}

/* The tokens a request gets alone, with a contiguous cache. */
static int solo(const Model *m, const Tokenizer *t, const char *prompt, int steps, float temperature,
                unsigned long long seed, int *out)
{
    return test_solo_tokens_sampled(m, t, prompt, steps, temperature, seed, out);
}

/* Serves @p requests on a small synthetic model (GQA) in a pool of
 * @p blocks blocks of 4 tokens and compares every request with its solo run. */
static void serve_and_compare(const char *requests, int blocks, int n_samples, float temperature, int want_preempt)
{
    Synthetic syn;
    open_synthetic(&syn, 11);
    const Model *m = &syn.m;
    const Tokenizer *t = &syn.t;
    const ModelConfig cfg = m->cfg;
    Err err = {{0}};
    RequestFile rf;
    ck_assert(request_file_parse(&rf, requests, strlen(requests), "lab", &err) == 0);
    CliOptions o;
    cli_defaults(&o);
    o.block_size = 4;
    o.watermark = 0;
    o.kv_budget = (size_t)blocks * 4 * model_kv_bytes_per_token(&cfg, sizeof(float));
    o.n_samples = n_samples;
    o.temperature = temperature;
    ServingRun run;
    ck_assert(serving_run_init(&run, m, t, &o, &rf, &err) == 0);
    PagedServer *s = NULL;
    int rc = paged_open(&run, &s, NULL, &err);
    /* Step by step, the pool's books checked after every step: a broken
     * invariant is printed (paged_check_invariants()) under the test. */
    while (rc == 0 && serving_unfinished(&run)) {
        rc = paged_step(s, &run, &err);
        ck_assert_msg(rc != 0 || paged_check_invariants(&s->kv.pool, &s->kv.tables, 0, stdout) == 0,
                      "expected the pool's books to hold after step %ld, got the broken invariant printed above; "
                      "hint: block_pool_alloc() gives a block one holder, block_pool_release() frees it at 0, "
                      "block_table_make_writable() moves one holder from the shared block to the copy", run.step);
    }
    ck_assert_msg(rc == 0, "expected the server to finish every request, got: %s; hint: this test runs the whole "
                           "chapter (block_pool_alloc(), block_pool_release(), paged_can_admit() and "
                           "block_table_make_writable() all take part): the unit tests above name the one at fault",
                  err.msg);
    ck_assert_msg(paged_check_invariants(&s->kv.pool, &s->kv.tables, 1, stdout) == 0,
                  "expected nothing held once every request is done, got the broken invariant printed above; "
                  "hint: block_pool_release() returns a block to the free stack when its last holder lets go");
    if (want_preempt)
        ck_assert_msg(s->preemptions > 0, "expected preemptions in a pool of %d blocks, got none", blocks);
    for (int i = 0; i < run.n_reqs; i++) {
        const Request *r = &run.reqs[i];
        int want[64];
        int n = solo(m, t, r->spec->prompt, r->spec->max_new_tokens, temperature, o.seed + (unsigned long long)i,
                     want);
        int same = n == r->n_tokens - r->n_prompt && memcmp(want, r->tokens + r->n_prompt, n * sizeof(int)) == 0;
        ck_assert_msg(same, "expected request %d (sample %d, %d preemptions) to give its solo tokens, got "
                            "different ones; hint: this test runs the whole chapter: the unit tests above name the "
                            "function at fault (block_table_slot() places a token, paged_attention() reads the "
                            "blocks in table order%s)",
                      r->spec->id, r->sample, r->preemptions, n_samples > 1 ? ", block_table_make_writable() copies shared blocks" : "");
    }
    ck_assert_msg(s->kv.pool.n_free == s->kv.pool.n_blocks, "expected every block free at the end, got %d of %d; "
                                                            "hint: block_pool_release() returns a block to the free stack when its last holder lets go",
                  s->kv.pool.n_free, s->kv.pool.n_blocks);
    paged_close(s);
    serving_run_free(&run);
    request_file_free(&rf);
    close_synthetic(&syn);
}

START_TEST(server_gives_solo_tokens_under_preemption)
{
    serve_and_compare("5\tab\n30\tthe end of it\n12\tx\n70\tlong enough to reach seq len\n40\tmore words here\n", 18, 1,
                      0.0f, 1);
}
END_TEST

START_TEST(forked_samples_give_their_solo_tokens)
{
    serve_and_compare("20\tthe end of it\n15\tab\n", 64, 3, 0.9f, 0);
}
END_TEST

/* ------------------------------------------------------------ int8 slots */

/* Head @p head's scale as the slot stores it, after every code. */
static float scale_at(const unsigned char *slot, int n_heads, int head_dim, int head)
{
    float scale;
    memcpy(&scale, slot + (size_t)n_heads * (size_t)head_dim + (size_t)head * sizeof scale, sizeof scale);
    return scale;
}

START_TEST(int8_slot_counts_its_scales)
{
    const int cases[][3] = {{4, 8, 48}, {1, 64, 68}, {3, 10, 42}, {40, 128, 5280}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t got = paged_int8_row_bytes(cases[i][0], cases[i][1]);
        ck_assert_msg(got == (size_t)cases[i][2], "expected %d bytes for an int8 slot of %d heads of %d, got %zu; "
                      "hint: paged_int8_row_bytes() counts one byte per code and the 4-byte f32 scale of each head",
                      cases[i][2], cases[i][0], cases[i][1], got);
    }
}
END_TEST

/* Three heads of 8: one whose scale is exactly 1 (its largest value is
 * 127), with ties and values that truncation would round the wrong way;
 * one of zeros (scale 0: every code 0, no NaN); one of subnormal values
 * whose scale rounds so far down that x / scale passes 127 (saturation). */
START_TEST(int8_store_rounds_and_saturates_per_head)
{
    enum { HEADS = 3, DIM = 8 };
    const float tiny = 0x1p-149f; /* the smallest subnormal */
    float x[HEADS * DIM] = {127.0f, 2.5f, 3.5f, -2.5f, -2.7f, 126.6f, 0.4f, -126.5f, /* scale 1 */
                            0, 0, 0, 0, 0, 0, 0, 0,                                 /* scale 0 */
                            190 * tiny, 95 * tiny, -190 * tiny, 0, tiny, 0, 0, 0};  /* scale 1 x tiny */
    const int8_t want[HEADS * DIM] = {127, 2, 4, -2, -3, 127, 0, -126, 0, 0, 0, 0, 0, 0, 0, 0,
                                      127, 95, -127, 0, 1, 0, 0, 0};
    const float want_scale[HEADS] = {1.0f, 0.0f, tiny};
    unsigned char slot[HEADS * DIM + HEADS * 4 + 1];
    memset(slot, 0xAB, sizeof slot);
    paged_int8_store_row(slot, x, HEADS, DIM);
    for (int h = 0; h < HEADS; h++) {
        float got = scale_at(slot, HEADS, DIM, h);
        ck_assert_msg(memcmp(&got, &want_scale[h], sizeof got) == 0,
                      "expected head %d's scale %a after the codes, got %a; hint: paged_int8_store_row() computes "
                      "each head's scale from that head's own values (largest |x| / 127) and copies it to "
                      "scales + head x 4", h, (double)want_scale[h], (double)got);
    }
    for (int i = 0; i < HEADS * DIM; i++) {
        int got = ((const int8_t *)slot)[i];
        ck_assert_msg(got == want[i], "expected code %d for %g (head %d), got %d; hint: paged_int8_store_row() "
                      "rounds x / scale to nearest with ties to even (nearbyintf, not a cast, which truncates) and "
                      "keeps codes within -127..127 (a rounded scale can push x / scale past 127)",
                      want[i], (double)x[i], i / DIM, got);
    }
    ck_assert_msg(slot[HEADS * DIM + HEADS * 4] == 0xAB, "expected nothing written past the slot's %d bytes; hint: "
                  "paged_int8_store_row() writes head_dim codes and one scale per head", HEADS * DIM + HEADS * 4);
}
END_TEST

START_TEST(int8_load_reads_each_head_with_its_scale)
{
    enum { HEADS = 3, DIM = 4 };
    unsigned char slot[HEADS * DIM + HEADS * 4];
    const int8_t codes[HEADS * DIM] = {1, -2, 127, -127, 5, 0, -5, 64, 3, 3, -3, 100};
    const float scales[HEADS] = {0.5f, 0.25f, 3.0f};
    memcpy(slot, codes, sizeof codes);
    memcpy(slot + sizeof codes, scales, sizeof scales);
    for (int h = 0; h < HEADS; h++) {
        float got[DIM + 1];
        got[DIM] = 42.0f;
        paged_int8_load_head(got, slot, h, HEADS, DIM);
        for (int i = 0; i < DIM; i++)
            ck_assert_msg(got[i] == (float)codes[h * DIM + i] * scales[h],
                          "expected head %d value %d to be %g (code %d x scale %g), got %g; hint: "
                          "paged_int8_load_head() reads the head's codes at head x head_dim and the head's own "
                          "scale at scales + head x 4", h, i, (double)((float)codes[h * DIM + i] * scales[h]),
                          codes[h * DIM + i], (double)scales[h], (double)got[i]);
        ck_assert_msg(got[DIM] == 42.0f, "expected head_dim values written, no more; hint: paged_int8_load_head()");
    }
}
END_TEST

/* The whole chapter with int8 blocks: every generated token is the argmax
 * of the logits a contiguous cache of the same int8 rows gives
 * (common/cpu/kv_dtype.c's rows; tests/helpers.c), under preemption. */
START_TEST(server_with_int8_blocks_follows_the_int8_reference)
{
    Synthetic syn;
    open_synthetic(&syn, 17);
    const Model *m = &syn.m;
    const ModelConfig cfg = m->cfg;
    Err err = {{0}};
    const char *requests = "30\tthe end of it\n40\tmore words here\n25\tab\n";
    RequestFile rf;
    ck_assert(request_file_parse(&rf, requests, strlen(requests), "lab", &err) == 0);
    CliOptions o;
    cli_defaults(&o);
    o.block_size = 4;
    o.watermark = 0;
    o.kv_dtype = "int8";
    o.kv_budget = (size_t)14 * 4 * kv_dtype_bytes_per_token(&cfg, KV_DTYPE_INT8);
    ServingRun run;
    ck_assert(serving_run_init(&run, m, &syn.t, &o, &rf, &err) == 0);
    PagedServer *s = NULL;
    int rc = paged_serve(&run, &s, NULL, &err);
    ck_assert_msg(rc == 0, "expected the int8 server to finish every request, got: %s; hint: paged_int8_row_bytes() "
                  "must count the codes and the scales (the pool's rows are that long)", err.msg);
    for (int i = 0; i < run.n_reqs; i++) {
        const Request *r = &run.reqs[i];
        float *logits = test_cpu_logits_kv(m, r->tokens, r->n_tokens - 1, KV_DTYPE_INT8); /* [n][vocab] */
        for (int j = r->n_prompt; j < r->n_tokens; j++) {
            const float *row = logits + (size_t)(j - 1) * (size_t)cfg.vocab_size;
            int best = 0;
            for (int v = 1; v < cfg.vocab_size; v++)
                best = row[v] > row[best] ? v : best;
            ck_assert_msg(best == r->tokens[j], "expected request %d's token %d to be %d (the int8 reference), got "
                          "%d; hint: the unit tests above name the function at fault: paged_int8_store_row() writes "
                          "the slot, paged_int8_load_head() reads it back", i, j - r->n_prompt, best, r->tokens[j]);
        }
        free(logits);
    }
    paged_close(s);
    serving_run_free(&run);
    request_file_free(&rf);
    close_synthetic(&syn);
}
END_TEST

/* What the end-to-end tests exercise. */
#define WHOLE_CHAPTER "chapter 4's server with every function of the lab"

Suite *lab_suite(void)
{
    Suite *s = suite_create("ch04");
    lab_add_test(s, alloc_hands_out_each_block_once, LAB_UNIT_S, 1, "block_pool_alloc()");
    lab_add_test(s, release_frees_at_zero_and_refuses_double_free, LAB_UNIT_S, 1, "block_pool_release()");
    lab_add_test(s, slot_lookup_at_block_boundaries, LAB_UNIT_S, 1, "block_table_slot()");
    lab_add_test(s, cow_copies_only_a_shared_block, LAB_UNIT_S, 1, "block_table_make_writable()");
    lab_add_test(s, attend_through_scattered_blocks, LAB_UNIT_S, 1, "paged_attention()");
    lab_add_test(s, admit_keeps_the_watermark, LAB_UNIT_S, 1, "paged_can_admit()");
    lab_add_test(s, server_gives_solo_tokens_under_preemption, LAB_RUN_S, 2, WHOLE_CHAPTER);
    lab_add_test(s, forked_samples_give_their_solo_tokens, LAB_RUN_S, 2, WHOLE_CHAPTER);
    lab_add_test(s, int8_slot_counts_its_scales, LAB_UNIT_S, 1, "paged_int8_row_bytes()");
    lab_add_test(s, int8_store_rounds_and_saturates_per_head, LAB_UNIT_S, 1, "paged_int8_store_row()");
    lab_add_test(s, int8_load_reads_each_head_with_its_scale, LAB_UNIT_S, 1, "paged_int8_load_head()");
    lab_add_test(s, server_with_int8_blocks_follows_the_int8_reference, LAB_RUN_S, 2,
                 "chapter 4's server with int8 blocks (paged_int8_store_row(), paged_int8_load_head(), "
                 "paged_int8_row_bytes())");
    return s;
}
