/* The host side of --device cuda for chapters 3 and 4, checked on any
 * machine. On the device a chapter keeps its books on the host, with no
 * K/V bytes there, and the device store holds each token's K/V in the
 * slot the books name: the region's first slot + position (chapter 3), or
 * table[pos / bs] x bs + pos % bs (chapter 4). It only works if the books
 * tell the store about every copy they decide (a region moved, a block
 * copied on write), in the order they decide them, and if the regions and
 * tables read after schedule() say where every fed token's K/V are.
 *
 * Here a shadow store stands in for the device: one label per slot, the
 * label of (request, position) being a hash of the request's tokens
 * 0..position, so that a slot holding another request's K/V, or a stale
 * one, never passes. Each step writes the labels of the fed tokens into
 * their slots (as the device's K/V write does), then checks, as attention
 * would read them, that every position of every fed token carries its own
 * label. The copies come only from the chapters' hooks (on_move, on_copy),
 * applied when the hooks fire. Tight budgets force moves, requeues,
 * preemptions and copy-on-write. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "batching.h"
#include "paged.h"
#include "scheduler.h"
#include "serving.h"
#include "serving_device.h"
#include "suites.h"

/* ------------------------------------------------------------ the shadow */

typedef struct {
    uint64_t *label;        /* [n_slots] prefix hash held by each slot; 0: nothing yet */
    long n_slots;
    size_t bytes_per_token; /* chapter 3: bytes of the books per slot */
    int block_size;         /* chapter 4 */
    long copies;            /* copies the hooks asked for */
} Shadow;

/* The label of position pos of a request: its tokens 0..pos, hashed. */
static uint64_t prefix_label(const Request *r, int pos)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (int p = 0; p <= pos; p++) {
        h ^= (uint64_t)(unsigned)r->tokens[p] + 1;
        h *= 1099511628211ull;
    }
    return h | 1; /* never 0 */
}

/* BatchingState.on_move: the device copies rows of every layer; the shadow
 * copies labels. */
static void shadow_move(void *ctx, const KvRegion *from, const KvRegion *to, int n_pos)
{
    Shadow *sh = ctx;
    ck_assert_msg(from->offset % sh->bytes_per_token == 0 && to->offset % sh->bytes_per_token == 0,
                  "regions at bytes %zu and %zu are not whole slots", from->offset, to->offset);
    long src = (long)(from->offset / sh->bytes_per_token), dst = (long)(to->offset / sh->bytes_per_token);
    ck_assert_msg(n_pos <= from->tokens && n_pos <= to->tokens, "moving %d positions between regions of %d and %d",
                  n_pos, from->tokens, to->tokens);
    ck_assert_msg(src + n_pos <= dst || dst + n_pos <= src, "a move overlaps itself");
    ck_assert(src + n_pos <= sh->n_slots && dst + n_pos <= sh->n_slots);
    memcpy(sh->label + dst, sh->label + src, (size_t)n_pos * sizeof(uint64_t));
    sh->copies++;
}

/* BlockPool.on_copy: a whole block, every row. */
static void shadow_copy(void *ctx, int dst, int src)
{
    Shadow *sh = ctx;
    ck_assert(dst != src);
    memcpy(sh->label + (long)dst * sh->block_size, sh->label + (long)src * sh->block_size,
           (size_t)sh->block_size * sizeof(uint64_t));
    sh->copies++;
}

struct Sim;

/* Where the books say position pos of request seq lives. */
typedef long (*SlotOf)(const struct Sim *sim, int seq, int pos);

static long arena_slot(const struct Sim *sim, int seq, int pos);
static long block_slot(const struct Sim *sim, int seq, int pos);

/* ------------------------------------------------------------ a run without a model */

enum { MAX_REQS = 16 };

typedef struct Sim {
    Model m; /* only cfg is filled in */
    CliOptions o;
    RequestSpec specs[MAX_REQS];
    ServingRun run;
    BatchingState *batching; /* chapter 3, or NULL */
    PagedServer *paged;      /* chapter 4, or NULL */
    Shadow sh;
} Sim;

static long arena_slot(const Sim *sim, int seq, int pos)
{
    const Shadow *sh = &sim->sh;
    const BatchingState *b = sim->batching;
    const KvRegion *reg = &b->regions[seq];
    ck_assert_msg(pos < reg->tokens, "request %d position %d is outside its region of %d", seq, pos, reg->tokens);
    ck_assert(reg->offset % sh->bytes_per_token == 0);
    return (long)(reg->offset / sh->bytes_per_token) + pos;
}

static long block_slot(const Sim *sim, int seq, int pos)
{
    const Shadow *sh = &sim->sh;
    const PagedServer *s = sim->paged;
    const BlockTable *t = &s->kv.tables.tables[seq];
    ck_assert_msg(pos / sh->block_size < t->n_blocks, "request %d position %d has no block", seq, pos);
    return (long)t->blocks[pos / sh->block_size] * sh->block_size + pos % sh->block_size;
}

/* GQA, seq_len 64: K/V of a token = 2 x 2 layers x 16 x 4 B = 256 B. */
static const ModelConfig CFG = {32, 64, 2, 4, 2, 97, 64};

/* Requests: prompt lengths and new tokens per line, each line --n samples
 * (same prompt, forked in chapter 4). */
static void sim_open(Sim *sim, int chapter, CliOptions o, int n_lines, const int *prompt_len, const int *new_tokens)
{
    memset(sim, 0, sizeof *sim);
    sim->m.cfg = CFG;
    sim->o = o;
    ServingRun *run = &sim->run;
    int samples = o.n_samples > 0 ? o.n_samples : 1;
    run->model = &sim->m;
    run->opts = &sim->o;
    run->kv_bytes_per_token = model_kv_bytes_per_token(&CFG, sizeof(float));
    run->no_kv_storage = 1;
    run->simulated = 1; /* this test plays the device and takes the tokens itself */
    run->n_reqs = n_lines * samples;
    ck_assert_int_le(run->n_reqs, MAX_REQS);
    run->reqs = calloc((size_t)run->n_reqs, sizeof(Request));
    for (int i = 0; i < run->n_reqs; i++) {
        int line = i / samples;
        sim->specs[line] = (RequestSpec){.id = line, .line = line + 1, .max_new_tokens = new_tokens[line], .prompt = "p"};
        Request *r = &run->reqs[i];
        *r = (Request){.spec = &sim->specs[line], .index = i, .sample = i % samples, .n_prompt = prompt_len[line],
                       .n_tokens = prompt_len[line], .admitted_step = -1, .finished_step = -1};
        r->max_tokens = prompt_len[line] + new_tokens[line] < CFG.seq_len ? prompt_len[line] + new_tokens[line]
                                                                          : CFG.seq_len;
        r->tokens = calloc((size_t)CFG.seq_len, sizeof(int));
        r->tokens[0] = TOKEN_BOS;
        for (int p = 1; p < r->n_prompt; p++) /* the samples of a line share its prompt */
            r->tokens[p] = 3 + (line * 31 + p * 7) % (CFG.vocab_size - 3);
    }
    Err err = {{0}};
    int rc = chapter == 3 ? batching_open(run, &sim->batching, NULL, &err) : paged_open(run, &sim->paged, NULL, &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
}

static void sim_close(Sim *sim)
{
    batching_close(sim->batching);
    paged_close(sim->paged);
    for (int i = 0; i < sim->run.n_reqs; i++)
        free(sim->run.reqs[i].tokens);
    free(sim->run.reqs);
    sim->run.reqs = NULL; /* the step buffers are the chapter's (serving_open_steps()): */
    serving_run_free(&sim->run);
    free(sim->sh.label);
}

/* One step as the chapters run it on the device, with the shadow as the
 * device: schedule (hooks fire), write the fed tokens' labels, read every
 * position of every fed token, take tokens, account, retire. */
static void sim_step(Sim *sim, SlotOf slot_of)
{
    ServingRun *run = &sim->run;
    Err err = {{0}};
    ck_assert(serving_step_begin(run));
    int rc = sim->batching ? batching_schedule(sim->batching, run, &err) : paged_schedule(sim->paged, run, &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    ck_assert_msg(run->n_entries > 0, "step %ld planned nothing", run->step);
    for (int i = 0; i < run->n_entries; i++) {
        const BatchEntry *e = &run->entries[i];
        long slot = slot_of(sim, e->seq, e->pos);
        ck_assert(slot >= 0 && slot < sim->sh.n_slots);
        sim->sh.label[slot] = prefix_label(&run->reqs[e->seq], e->pos);
    }
    for (int i = 0; i < run->n_entries; i++) {
        const BatchEntry *e = &run->entries[i];
        const Request *r = &run->reqs[e->seq];
        for (int p = 0; p <= e->pos; p++)
            ck_assert_msg(sim->sh.label[slot_of(sim, e->seq, p)] == prefix_label(r, p),
                          "step %ld: request %d reads position %d and finds another token's K/V", run->step,
                          e->seq, p);
    }
    for (int i = 0; i < run->n_entries; i++) {
        Request *r = &run->reqs[run->entries[i].seq];
        if (run->entries[i].pos + 1 > r->n_cached)
            r->n_cached = run->entries[i].pos + 1;
    }
    int n_done = 0;
    for (int i = 0; i < run->n_takers; i++) {
        Request *r = &run->reqs[run->taker_req[i]];
        /* Every request its own tokens, forked samples included. */
        r->tokens[r->n_tokens] = 3 + (r->index * 13 + r->n_tokens * 5) % (CFG.vocab_size - 3);
        r->n_tokens++;
        if (r->n_tokens >= r->max_tokens) {
            r->phase = REQ_DONE;
            r->finish = REQ_FINISH_LENGTH;
            r->finished_step = run->step;
            run->n_done++;
            run->finished_now[n_done++] = r->index;
        }
    }
    if (sim->batching)
        batching_account(sim->batching, run);
    else
        paged_account(sim->paged, run);
    for (int i = 0; i < n_done; i++) {
        Request *r = &run->reqs[run->finished_now[i]];
        if (sim->batching)
            batching_finished(sim->batching, run, r);
        else
            paged_finished(sim->paged, run, r);
    }
    serving_step_end(run);
}

static void sim_run_to_end(Sim *sim, SlotOf slot_of)
{
    while (sim->run.n_done < sim->run.n_reqs) {
        ck_assert_msg(sim->run.step < 5000, "no end after 5000 steps");
        sim_step(sim, slot_of);
    }
}

static CliOptions options(size_t budget)
{
    CliOptions o;
    cli_defaults(&o);
    o.kv_budget = budget;
    o.temperature = 0.0f;
    return o;
}

/* ------------------------------------------------------------ chapter 3 */

static const int LINES = 6;
static const int PROMPTS[] = {5, 12, 3, 9, 7, 20};
static const int NEW_TOKENS[] = {40, 20, 61, 30, 50, 10};

/* Chapter 3 under a budget of `slots` tokens: every policy places its
 * regions where the books say; `grow` also moves and requeues. */
static void arena_mirrors_books(const char *reserve, int slots, int max_batch, int expect_moves)
{
    Sim sim;
    CliOptions o = options((size_t)slots * model_kv_bytes_per_token(&CFG, sizeof(float)));
    o.reserve = reserve;
    o.max_batch = max_batch;
    sim_open(&sim, 3, o, LINES, PROMPTS, NEW_TOKENS);
    BatchingState *b = sim.batching;
    ck_assert_ptr_null(b->storage);
    sim.sh = (Shadow){.n_slots = slots, .bytes_per_token = b->bytes_per_token};
    sim.sh.label = calloc((size_t)slots, sizeof(uint64_t));
    b->on_move = shadow_move;
    b->on_move_ctx = &sim.sh;
    sim_run_to_end(&sim, arena_slot);
    if (expect_moves) {
        ck_assert_msg(b->stats.grow_moves > 0 && sim.sh.copies > 0, "--reserve %s: no move (%ld, %ld copies)",
                      reserve, b->stats.grow_moves, sim.sh.copies);
        ck_assert_msg(b->stats.requeues > 0, "--reserve %s: no requeue", reserve);
        ck_assert_int_le(sim.sh.copies, b->stats.grow_moves); /* moves of empty regions copy nothing */
    } else {
        ck_assert_int_eq(sim.sh.copies, 0);
    }
    sim_close(&sim);
}

START_TEST(arena_store_follows_regions_and_moves)
{
    arena_mirrors_books("grow", 100, 4, 1);
    arena_mirrors_books("grow", 130, 3, 1);
    arena_mirrors_books("max", 200, 4, 0);
    arena_mirrors_books("pow2", 150, 4, 0);
}
END_TEST

/* ------------------------------------------------------------ chapter 4 */

/* Chapter 4 with every line forked into `samples` (copy-on-write of the
 * shared last prompt block) under a pool of `blocks`: preemptions too. */
static void pool_mirrors_books(int block_size, int blocks, int samples)
{
    Sim sim;
    CliOptions o = options((size_t)blocks * block_size * model_kv_bytes_per_token(&CFG, sizeof(float)));
    o.block_size = block_size;
    o.n_samples = samples;
    o.temperature = 1.0f; /* --n needs it; the driver picks the tokens anyway */
    o.watermark = 0;
    sim_open(&sim, 4, o, 3, PROMPTS, NEW_TOKENS);
    PagedServer *s = sim.paged;
    ck_assert_int_eq(s->kv.pool.n_blocks, blocks);
    ck_assert_ptr_null(s->kv.pool.storage);
    sim.sh = (Shadow){.n_slots = (long)blocks * block_size, .block_size = block_size};
    sim.sh.label = calloc((size_t)sim.sh.n_slots, sizeof(uint64_t));
    s->kv.pool.on_copy = shadow_copy;
    s->kv.pool.on_copy_ctx = &sim.sh;
    sim_run_to_end(&sim, block_slot);
    ck_assert_msg(s->preemptions > 0, "block size %d, %d blocks: no preemption", block_size, blocks);
    if (samples > 1 && block_size > 1)
        ck_assert_msg(s->cow_copies > 0, "block size %d: no copy-on-write", block_size);
    ck_assert_int_eq(sim.sh.copies, s->cow_copies);
    sim_close(&sim);
}

START_TEST(block_store_follows_tables_and_copies)
{
    /* Lines of 5+40, 12+20 and 3+61 (capped at 64) tokens, three samples
     * each: far more than the pools hold at once. */
    pool_mirrors_books(1, 70, 3);
    pool_mirrors_books(4, 20, 3);
    pool_mirrors_books(4, 20, 1);
    pool_mirrors_books(16, 6, 3);
}
END_TEST

/* ------------------------------------------------------------ attaching */

START_TEST(attach_makes_the_books_count_device_bytes)
{
    ServingRun run;
    memset(&run, 0, sizeof run);
    Model m;
    memset(&m, 0, sizeof m);
    m.cfg = CFG;
    run.model = &m;
    run.kv_bytes_per_token = model_kv_bytes_per_token(&CFG, sizeof(float));
    ServingDevice d;
    memset(&d, 0, sizeof d);
    d.run.kv_type = DTYPE_F16;
    serving_device_attach(&d, &run);
    ck_assert_ptr_eq(run.device, &d);
    ck_assert_int_eq(run.no_kv_storage, 1);
    ck_assert_uint_eq(run.kv_bytes_per_token, 128); /* 2 x 2 layers x 16 x 2 B */
}
END_TEST

Suite *suite_serving_device(void)
{
    Suite *s = suite_create("serving_device");
    TCase *tc = tcase_create("mirror");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, arena_store_follows_regions_and_moves);
    tcase_add_test(tc, block_store_follows_tables_and_copies);
    tcase_add_test(tc, attach_makes_the_books_count_device_bytes);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_LAB_SUITE(serving_device)
