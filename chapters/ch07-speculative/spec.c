/* Chapter 7's step: chapter 4's schedule, then proposals, one verifying
 * forward pass, acceptance and rollback, then chapter 4's accounting. */
#include <string.h>

#include "mem.h"
#include "sampler.h"
#include "scheduler.h"
#include "spec.h"

/* ------------------------------------------------------------ open, close */

int spec_open(SpecDecoder *d, const SpecOptions *o, const ServingRun *run, Err *err)
{
    memset(d, 0, sizeof *d);
    d->opt = *o;
    d->n_seqs = run->n_reqs;
    d->vocab = run->model->cfg.vocab_size;
    d->sampled = run->opts->temperature > 0.0f;
    if (!o->method)
        return 0;
    size_t n = (size_t)d->n_seqs, k = (size_t)o->k, vocab = (size_t)d->vocab;
    d->budget = mem_alloc_array(MEM_ACTIVATIONS, n, sizeof(int));
    d->n_proposed = mem_alloc_array(MEM_ACTIVATIONS, n, sizeof(int));
    d->proposals = mem_alloc_array(MEM_ACTIVATIONS, n * k, sizeof(int));
    d->rows = mem_alloc_array(MEM_ACTIVATIONS, n * (k + 1), sizeof(int));
    d->targets = mem_alloc_array(MEM_ACTIVATIONS, k + 1, sizeof(int));
    d->scratch = mem_alloc_array(MEM_ACTIVATIONS, vocab, sizeof(float));
    if (!d->budget || !d->n_proposed || !d->proposals || !d->rows || !d->targets || !d->scratch)
        return err_set(err, "out of memory for the proposals of %d requests", d->n_seqs);
    memset(d->budget, 0, n * sizeof(int));
    memset(d->n_proposed, 0, n * sizeof(int));
    if (d->sampled) {
        d->p = mem_alloc_array(MEM_ACTIVATIONS, (k + 1) * vocab, sizeof(float));
        if (o->method != SPEC_NGRAM)
            d->q = mem_alloc_array(MEM_ACTIVATIONS, n * k * vocab, sizeof(float));
        if (!d->p || (o->method != SPEC_NGRAM && !d->q))
            return err_set(err, "out of memory for the distributions of %d requests", d->n_seqs);
    }
    if (o->method == SPEC_SELF || o->method == SPEC_DRAFT) {
        d->has_draft = 1;
        return spec_draft_open(&d->draft, o, run, err);
    }
    return 0;
}

int spec_attach(SpecDecoder *d, PagedServer *server, ServingRun *run, Err *err)
{
    d->server = server;
    if (!d->opt.method)
        return 0;
    d->holders = mem_alloc_array(MEM_ACTIVATIONS, (size_t)server->kv.pool.n_blocks, sizeof(int));
    if (!d->holders)
        return err_set(err, "out of memory");
    /* Every request may feed k proposals more than chapter 4 plans, each with a logits row. */
    long tokens = (long)run->max_step_tokens + (long)run->n_reqs * d->opt.k;
    long rows = (long)run->n_reqs * (d->opt.k + 1);
    if (tokens > 100000000L || rows > 100000000L)
        return err_set(err, "--spec-k %d with %d requests makes a step too large", d->opt.k, run->n_reqs);
    return serving_widen_steps(run, (int)tokens, (int)rows, err);
}

void spec_close(SpecDecoder *d)
{
    if (d->has_draft)
        spec_draft_close(&d->draft);
    mem_free(d->budget);
    mem_free(d->n_proposed);
    mem_free(d->proposals);
    mem_free(d->rows);
    mem_free(d->targets);
    mem_free(d->scratch);
    mem_free(d->p);
    mem_free(d->q);
    mem_free(d->holders);
    memset(d, 0, sizeof *d);
}

/* ------------------------------------------------------------ proposing */

/* Proposals request @p r may make this step: k, fewer near its last token
 * (every emitted token must fit max_tokens, so position T + n - 1 stays in
 * the context), and fewer when the pool's free blocks (@p free, updated)
 * cannot hold them: speculation never preempts. */
static int proposal_budget(const SpecDecoder *d, const Request *r, int *free)
{
    const PagedServer *s = d->server;
    const int bs = s->kv.pool.shape.block_size, T = r->n_tokens;
    int n = d->opt.k;
    if (n > r->max_tokens - T - 1)
        n = r->max_tokens - T - 1;
    const BlockTable *t = &s->kv.tables.tables[r->index];
    int room = (t->n_blocks + *free) * bs - T; /* positions T.. the held and free blocks can take */
    if (n > room)
        n = room;
    if (n <= 0)
        return 0;
    *free -= block_count_for_tokens(T + n, bs) - t->n_blocks;
    return n;
}

/* A request speculates when it feeds only its newest token this step (a
 * decode, not a prompt or a recomputation) and has generated before. */
static int decodes_only(const Request *r)
{
    return r->phase == REQ_RUNNING && r->n_tokens > r->n_prompt && r->n_cached == r->n_tokens - 1;
}

/* Every taker that decodes gets a budget; the proposers fill proposals. */
static void propose(SpecDecoder *d, ServingRun *run)
{
    int free = d->server->kv.pool.n_free;
    for (int i = 0; i < run->n_takers; i++) {
        Request *r = &run->reqs[run->taker_req[i]];
        if (decodes_only(r))
            d->budget[r->index] = proposal_budget(d, r, &free);
    }
    if (d->opt.method == SPEC_NGRAM) {
        for (int seq = 0; seq < d->n_seqs; seq++)
            if (d->budget[seq] > 0)
                d->n_proposed[seq] =
                    spec_propose_ngram(run->reqs[seq].tokens, run->reqs[seq].n_tokens, d->opt.ngram_min,
                                       d->opt.ngram_max, d->budget[seq], d->proposals + (size_t)seq * d->opt.k);
        return;
    }
    spec_draft_propose(d, run);
}

/* The proposals of @p r into its table and the batch: room for positions
 * T..T+n-1 (fresh blocks: the block of T - 1 is private already), the
 * tokens written after its newest (scratch until accepted), one entry
 * each with its own logits row. */
static void feed_proposals(SpecDecoder *d, ServingRun *run, Request *r, int first_row)
{
    PagedServer *s = d->server;
    BlockTable *t = &s->kv.tables.tables[r->index];
    const int n = d->n_proposed[r->index], T = r->n_tokens, k = d->opt.k;
    const int *proposals = d->proposals + (size_t)r->index * k; /* [n] */
    int *rows = d->rows + (size_t)r->index * (k + 1);           /* [n + 1] */
    block_table_grow(&s->kv.pool, t, T + n); /* proposal_budget() counted the free blocks */
    paged_track_table(s, t);
    rows[0] = first_row;
    for (int i = 0; i < n; i++) {
        r->tokens[T + i] = proposals[i];
        rows[i + 1] = run->n_logits++;
        run->entries[run->n_entries++] =
            (BatchEntry){.seq = r->index, .pos = T + i, .token = proposals[i], .logits_row = rows[i + 1]};
    }
}

/* The requests with proposals leave chapter 4's list of takers (they take
 * their tokens in verify()), and feed their proposals. */
static void feed_all(SpecDecoder *d, ServingRun *run)
{
    int kept = 0, blocks_before = block_pool_used(&d->server->kv.pool);
    for (int i = 0; i < run->n_takers; i++) {
        Request *r = &run->reqs[run->taker_req[i]];
        if (d->n_proposed[r->index] > 0) {
            feed_proposals(d, run, r, run->taker_row[i]);
            continue;
        }
        d->budget[r->index] = 0;
        run->taker_req[kept] = run->taker_req[i];
        run->taker_row[kept++] = run->taker_row[i];
    }
    run->n_takers = kept;
    int blocks = block_pool_used(&d->server->kv.pool) - blocks_before;
    if (blocks > d->proposal_blocks_peak)
        d->proposal_blocks_peak = blocks;
}

/* ------------------------------------------------------------ verifying */

/* Greedy: the verifier's choice at every row, as chapter 4's sampler makes
 * it (penalties included), over the tokens up to that row. */
static int accept_greedy(SpecDecoder *d, ServingRun *run, Request *r, int n, int *next)
{
    const int T = r->n_tokens, *rows = d->rows + (size_t)r->index * (d->opt.k + 1);
    size_t vocab = (size_t)d->vocab;
    for (int i = 0; i <= n; i++) {
        memcpy(d->scratch, run->logits + (size_t)rows[i] * vocab, vocab * sizeof(float));
        d->targets[i] = sampler_sample_seq(&r->sampler, d->scratch, r->tokens, r->n_prompt, T + i);
    }
    int accepted = spec_accept_greedy(d->targets, d->proposals + (size_t)r->index * d->opt.k, n);
    *next = d->targets[accepted];
    return accepted;
}

/* Sampling: the verifier's distributions, then rejection sampling. */
static int accept_sampled(SpecDecoder *d, ServingRun *run, Request *r, int n, int *next)
{
    const int *rows = d->rows + (size_t)r->index * (d->opt.k + 1);
    size_t vocab = (size_t)d->vocab;
    for (int i = 0; i <= n; i++) {
        memcpy(d->scratch, run->logits + (size_t)rows[i] * vocab, vocab * sizeof(float));
        spec_distribution(&r->sampler, d->scratch, r->tokens, r->n_prompt, r->n_tokens + i, d->p + (size_t)i * vocab);
    }
    const float *q = d->q ? d->q + (size_t)r->index * d->opt.k * vocab : NULL;
    return spec_accept_sampled(d->p, q, d->proposals + (size_t)r->index * d->opt.k, n, d->vocab,
                               &r->sampler.rng_state, d->scratch, next);
}

/* One request's verification: its accepted proposals and the verifier's
 * token are taken (a stop or the length may end it early), then the
 * positions past what was accepted are rolled back. */
static void verify(SpecDecoder *d, ServingRun *run, Request *r)
{
    const int n = d->n_proposed[r->index], T = r->n_tokens;
    int next, accepted = d->sampled ? accept_sampled(d, run, r, n, &next) : accept_greedy(d, run, r, n, &next);
    const int *proposals = d->proposals + (size_t)r->index * d->opt.k;
    int finished = 0, emitted = 0;
    for (int i = 0; i < accepted && !finished; i++, emitted++)
        finished = serving_take_token(run, r, proposals[i]);
    if (!finished) {
        serving_take_token(run, r, next);
        emitted++;
    }
    /* Positions T-1..T-1+accepted hold accepted tokens' K/V; a request that
     * stopped early holds no more than its tokens. */
    int keep = T + accepted < r->n_tokens ? T + accepted : r->n_tokens;
    d->rejected_positions += (T + n) - keep;
    d->blocks_rolled_back += spec_rollback(d->server, run, r, keep);
    if (d->has_draft)
        spec_draft_keep(&d->draft, r->index, keep);
    d->proposed += n;
    d->accepted += accepted;
    d->spec_steps++;
    d->spec_emitted += emitted;
    d->n_proposed[r->index] = d->budget[r->index] = 0;
}

/* ------------------------------------------------------------ one step */

int spec_step(SpecDecoder *d, ServingRun *run, Err *err)
{
    PagedServer *s = d->server;
    if (!d->opt.method)
        return paged_step(s, run, err); /* no --spec: chapter 4 exactly */
    if (!serving_step_begin(run))
        return 0;
    if (paged_plan(s, run, err)) /* chapter 4: room for every next token, admissions, preemptions */
        return -1;
    propose(d, run);  /* k guesses per decoding request, within the free blocks */
    feed_all(d, run); /* each: last token + proposals, one chunk, a logits row per position */
    KvSeam seam = paged_seam(&s->kv);
    if (serving_step_forward(run, &seam, err))
        return -1;
    d->forward_steps++;
    serving_step_sample(run); /* the requests without proposals: chapter 4's sampling */
    for (int seq = 0; seq < d->n_seqs; seq++)
        if (d->n_proposed[seq] > 0)
            verify(d, run, &run->reqs[seq]); /* accept, take the tokens, roll back */
    paged_account(s, run);                   /* sees accepted tokens only */
    int n_finished = serving_step_finished(run);
    for (int i = 0; i < n_finished; i++)
        paged_finished(s, run, &run->reqs[run->finished_now[i]]);
    if (d->opt.check && spec_check_invariants(s, run, d->holders, err))
        return -1;
    d->invariant_checks += d->opt.check;
    serving_step_end(run);
    return 0;
}
