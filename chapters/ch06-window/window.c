/* Chapter 6: the occupancy masks, attention over the rows held, eviction
 * after every step, teacher forcing, and the step itself (chapter 4's
 * scheduler with this chapter's seam). See window.h. */
#include <float.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "ext/paged_dtype.h"
#include "infile.h"
#include "mem.h"
#include "ops.h"
#include "scheduler.h" /* chapter 4's phases, which window_step() runs */
#include "tokenizer.h"
#include "window.h"

/* ------------------------------------------------------------ books */

/* Most bytes a --kv-force file may have: ids of every request at full length. */
#define WINDOW_FORCE_MAX_BYTES (64u << 20)

/* Reads "id id id\n" lines, one per request (fewer lines: the rest are not
 * forced). The file's text is parsed strictly: digits and blanks only. */
static int read_forced(WindowCache *w, const char *path, int vocab, Err *err)
{
    size_t size;
    int fd = infile_open(path, WINDOW_FORCE_MAX_BYTES, &size, err);
    if (fd < 0)
        return -1;
    char *text = mem_alloc(MEM_ACTIVATIONS, size + 1); /* the file's bytes, NUL-terminated */
    int status = text ? infile_read_exact(fd, text, size, path, err) : err_set(err, "out of memory for %s", path);
    close(fd);
    w->force_buf = status ? NULL : mem_alloc_array(MEM_ACTIVATIONS, size / 2 + 1, sizeof(int)); /* [ids] */
    if (!status && w->opt.argmax_path) /* [ids] the greedy choice beside each forced id */
        w->argmax_buf = mem_alloc_array(MEM_ACTIVATIONS, size / 2 + 1, sizeof(int));
    if (!status && (!w->force_buf || (w->opt.argmax_path && !w->argmax_buf)))
        status = err_set(err, "out of memory for %s", path);
    int n = 0, seq = 0;
    for (size_t i = 0; !status && i < size && seq < w->n_seqs;) {
        if (!w->forced[seq])
            w->forced[seq] = w->force_buf + n;
        if (text[i] == '\n') {
            seq++, i++;
        } else if (text[i] == ' ') {
            i++;
        } else if (text[i] >= '0' && text[i] <= '9') {
            long id = 0;
            while (i < size && text[i] >= '0' && text[i] <= '9' && id <= vocab)
                id = id * 10 + (text[i++] - '0');
            if (id >= vocab)
                status = err_set(err, "%s: line %d: token id %ld is not below the vocabulary (%d)", path, seq + 1,
                                 id, vocab);
            w->force_buf[n++] = (int)id;
            w->n_forced[seq]++;
        } else {
            status = err_set(err, "%s: line %d: only token ids and spaces may appear", path, seq + 1);
        }
    }
    mem_free(text);
    return status;
}

int window_open(WindowCache *w, const WindowOptions *o, const ServingRun *run, Err *err)
{
    memset(w, 0, sizeof *w);
    w->opt = *o;
    w->n_seqs = run->n_reqs;
    w->seq_len = run->model->cfg.seq_len;
    w->n_heads = run->model->cfg.n_heads;
    w->capacity = block_count_for_tokens(w->seq_len, run->opts->block_size); /* chapter 4's table capacity */
    size_t n = (size_t)w->n_seqs;
    w->held = mem_alloc_array(MEM_KV_METADATA, n * (size_t)w->seq_len, 1);
    w->rows_held = mem_alloc_array(MEM_KV_METADATA, n * (size_t)w->capacity, sizeof(int));
    w->n_held = mem_alloc_array(MEM_KV_METADATA, n, sizeof(int));
    w->forced = mem_alloc_array(MEM_ACTIVATIONS, n, sizeof(int *));
    w->n_forced = mem_alloc_array(MEM_ACTIVATIONS, n, sizeof(int));
    w->fed = mem_alloc_array(MEM_ACTIVATIONS, n, sizeof(int));
    /* One scratch pool per thread of the forward pass, each room for every
     * position of a sequence, one KV head wide, K and V. */
    w->n_gather = ops_threads();
    size_t gather_floats = (size_t)w->n_gather * (size_t)w->capacity * (size_t)run->opts->block_size * 2u *
                           (size_t)model_head_dim(&run->model->cfg);
    w->gather = mem_alloc_array(MEM_ACTIVATIONS, gather_floats, sizeof(float));
    w->identity = mem_alloc_array(MEM_ACTIVATIONS, (size_t)w->capacity, sizeof(int));
    if (o->evict == WINDOW_EVICT_H2O)
        w->attn = mem_alloc_array(MEM_KV_METADATA, n * (size_t)w->n_heads * (size_t)w->seq_len, sizeof(float));
    if (!w->held || !w->rows_held || !w->n_held || !w->forced || !w->n_forced || !w->fed || !w->gather ||
        !w->identity || (o->evict == WINDOW_EVICT_H2O && !w->attn))
        return err_set(err, "out of memory for the occupancy masks of %d sequences", w->n_seqs);
    for (int i = 0; i < w->capacity; i++)
        w->identity[i] = i;
    memset(w->held, 0, n * (size_t)w->seq_len);
    memset(w->rows_held, 0, n * (size_t)w->capacity * sizeof(int));
    memset(w->n_held, 0, n * sizeof(int));
    memset(w->forced, 0, n * sizeof(int *));
    memset(w->n_forced, 0, n * sizeof(int));
    if (w->attn)
        memset(w->attn, 0, n * (size_t)w->n_heads * (size_t)w->seq_len * sizeof(float));
    return o->force_path ? read_forced(w, o->force_path, run->model->cfg.vocab_size, err) : 0;
}

void window_close(WindowCache *w)
{
    mem_free(w->held);
    mem_free(w->rows_held);
    mem_free(w->n_held);
    mem_free(w->attn);
    mem_free(w->forced);
    mem_free(w->n_forced);
    mem_free(w->fed);
    mem_free(w->gather);
    mem_free(w->identity);
    mem_free(w->force_buf);
    mem_free(w->argmax_buf);
    memset(w, 0, sizeof *w);
}

/* ------------------------------------------------------------ the seam */

/* A sequence that starts again from position 0 (its first prompt, or a
 * recomputation after preemption: chapter 4 emptied its table) has no
 * history: its masks, counts and scores start afresh. */
static void forget_sequence(WindowCache *w, int seq)
{
    memset(w->held + (size_t)seq * w->seq_len, 0, (size_t)w->seq_len);
    memset(w->rows_held + (size_t)seq * w->capacity, 0, (size_t)w->capacity * sizeof(int));
    w->n_held[seq] = 0;
    if (w->attn)
        memset(w->attn + (size_t)seq * w->n_heads * w->seq_len, 0,
               (size_t)w->n_heads * (size_t)w->seq_len * sizeof(float));
}

static void window_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v)
{
    WindowCache *w = ctx;
    KvSeam kv = paged_server_seam(w->server); /* chapter 4's slot mapping: row pos % block_size (its type: --kv-dtype) */
    kv.store(kv.ctx, layer, e, k, v);
    if (layer != 0)
        return;
    if (e->pos == 0)
        forget_sequence(w, e->seq);
    unsigned char *held = w->held + (size_t)e->seq * w->seq_len;
    if (!held[e->pos]) {
        held[e->pos] = 1;
        w->rows_held[(size_t)e->seq * w->capacity + e->pos / w->server->kv.pool.shape.block_size]++;
        w->n_held[e->seq]++;
    }
}

/* Whether the query at @p qpos may see position @p pos: it is held, and it
 * is a sink or in the window (with h2o any held position: the heavy
 * hitters; in a long prompt's step that is every position of the prompt,
 * as H2O runs the prompt with the full cache and evicts afterwards). */
static int in_view(const WindowCache *w, int pos, int qpos)
{
    if (!w->opt.window || w->opt.evict == WINDOW_EVICT_H2O)
        return 1;
    return pos < w->opt.sinks || pos > qpos - w->opt.window;
}

static int visible(const WindowCache *w, const unsigned char *held, int pos, int qpos)
{
    return held[pos] && in_view(w, pos, qpos);
}

long window_attended(const WindowCache *w, const ServingRun *run)
{
    long attended = 0;
    for (int i = 0; i < run->n_entries; i++) {
        const BatchEntry *e = &run->entries[i];
        const unsigned char *held = w->held + (size_t)e->seq * w->seq_len; /* [seq_len] */
        int first_fed = run->reqs[e->seq].n_cached; /* the step writes from here on before any query reads */
        for (int pos = 0; pos <= e->pos; pos++)
            attended += (held[pos] || pos >= first_fed) && in_view(w, pos, e->pos);
    }
    return attended;
}

/* The scratch pool of one thread: the rows a query may see, gathered in
 * position order into blocks 0, 1, ... of a one-layer pool whose rows are
 * one KV head wide (the chapter's block size). */
static BlockPool gather_pool(const WindowCache *w, int hd)
{
#ifdef _OPENMP
    int slot = omp_get_thread_num() % w->n_gather; /* as the forward pass picks its score row */
#else
    int slot = 0;
#endif
    const int bs = w->server->kv.pool.shape.block_size;
    return (BlockPool){.shape = {.block_size = bs, .n_layers = 1, .kv_dim = hd, .elem_bytes = sizeof(float)},
                       .n_blocks = w->capacity,
                       .floats_per_block = 2u * (size_t)bs * (size_t)hd,
                       .storage = w->gather + (size_t)slot * (size_t)w->capacity * 2u * (size_t)bs * (size_t)hd};
}

/* Copies the K and V rows of KV head slice @p slice at the visible
 * positions of @p seq into @p view, in position order; returns how many. */
static int gather_visible(const WindowCache *w, int seq, int layer, size_t slice, int qpos, BlockPool *view)
{
    const BlockPool *pool = &w->server->kv.pool;
    const BlockTable *t = &w->server->kv.tables.tables[seq];
    const int bs = pool->shape.block_size, kv_dim = pool->shape.kv_dim, hd = view->shape.kv_dim;
    const unsigned char *held = w->held + (size_t)seq * w->seq_len; /* [seq_len] */
    const size_t row_bytes = (size_t)hd * sizeof(float);
    int n = 0;
    for (int pos = 0; pos <= qpos; pos++) {
        if (!visible(w, held, pos, qpos))
            continue;
        size_t from = slice + (size_t)(pos % bs) * (size_t)kv_dim, to = (size_t)(n % bs) * (size_t)hd;
        float *k = block_pool_keys(view, n / bs, 0) + to, *v = block_pool_values(view, n / bs, 0) + to;
        if (w->server->dtype) /* --kv-dtype: the values the stored row holds (chapter 4's ext/dtype.c) */
            paged_dtype_load_head(w->server->dtype, t->blocks[pos / bs], layer, pos % bs, (int)(slice / (size_t)hd),
                                  k, v);
        else {
            memcpy(k, block_pool_keys(pool, t->blocks[pos / bs], layer) + from, row_bytes);
            memcpy(v, block_pool_values(pool, t->blocks[pos / bs], layer) + from, row_bytes);
        }
        n++;
    }
    return n;
}

/* H2O's scores: adds to @p attn[pos] the weight the query gave each
 * visible position. The weights are computed again from the gathered keys
 * (the softmax paged_attention() computed; its scratch is its own). */
static void note_weights(const WindowCache *w, int seq, int qpos, const BlockPool *view, int n, const float *q,
                         float *weights, float *attn)
{
    const int bs = view->shape.block_size, hd = view->shape.kv_dim;
    for (int j = 0; j < n; j++)
        weights[j] = attention_score(q, block_pool_keys(view, j / bs, 0) + (size_t)(j % bs) * (size_t)hd, hd);
    softmax(weights, n);
    const unsigned char *held = w->held + (size_t)seq * w->seq_len; /* [seq_len] */
    for (int pos = 0, j = 0; pos <= qpos; pos++)
        if (visible(w, held, pos, qpos))
            attn[pos] += weights[j++];
}

void window_attention(WindowCache *w, int seq, int layer, int head, const float *q, int qpos, float *out,
                      float *scores, int note)
{
    const ModelConfig *c = &w->server->kv.cfg;
    const int hd = model_head_dim(c);
    const size_t slice = (size_t)(head / model_kv_mul(c)) * (size_t)hd; /* the KV head's part of a row */
    BlockPool view = gather_pool(w, hd);
    int n = gather_visible(w, seq, layer, slice, qpos, &view);
    /* Chapter 4's PagedAttention over the gathered rows, through a table
     * that names blocks 0, 1, ... of the scratch pool in order. */
    BlockTable in_order = {.blocks = w->identity, .n_blocks = block_count_for_tokens(n, view.shape.block_size),
                           .capacity = w->capacity};
    paged_attention(&view, &in_order, 0, 0, hd, q, n, out, scores);
    if (note && w->attn)
        note_weights(w, seq, qpos, &view, n, q, scores, w->attn + ((size_t)seq * w->n_heads + head) * w->seq_len);
}

static void window_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out,
                          float *scores)
{
    /* Only the token that is sampled adds to the heavy-hitter scores: one
     * (sequence, head) pair per step, so parallel heads never share a sum. */
    window_attention(ctx, e->seq, layer, head, q, e->pos, out, scores, e->logits_row >= 0);
}

KvSeam window_seam(WindowCache *w)
{
    return (KvSeam){.ctx = w, .store = window_store, .attend = window_attend};
}

/* ------------------------------------------------------------ eviction */

/* The positions of one sequence the query at @p next may not see: those
 * that left the window (window_slide()), or with h2o all but the heavy
 * hitters among them (window_evict_heavy()). */
static void evict_sequence(WindowCache *w, ServingRun *run, int seq, int next)
{
    int window_start = next - w->opt.window + 1; /* the query at next sees window_start..next */
    if (window_start <= w->opt.sinks)
        return;
    if (w->opt.evict == WINDOW_EVICT_H2O)
        window_evict_heavy(w, run, seq, window_start, next);
    else
        window_slide(w, run, seq, window_start, next);
}

void window_evict(WindowCache *w, ServingRun *run)
{
    if (!w->opt.window)
        return;
    const PagedServer *s = w->server;
    for (int k = 0; k < s->n_running; k++) {
        int seq = s->running[k];
        evict_sequence(w, run, seq, run->reqs[seq].n_cached);
    }
}

/* After the step's writes: the most positions and blocks one sequence
 * held, in decode steps (one position fed) and in steps that ran prompt
 * positions (all of them are written before any is attended to, so the
 * whole chunk is held for that step). */
static void note_peaks(WindowCache *w, const ServingRun *run)
{
    const PagedServer *s = w->server;
    for (int k = 0; k < s->n_running; k++)
        w->fed[s->running[k]] = 0;
    for (int i = 0; i < run->n_entries; i++)
        w->fed[run->entries[i].seq]++;
    for (int k = 0; k < s->n_running; k++) {
        int seq = s->running[k], blocks = 0;
        const BlockTable *t = &s->kv.tables.tables[seq];
        for (int i = 0; i < t->n_blocks; i++)
            blocks += t->blocks[i] != BLOCK_HOLE;
        int *positions = w->fed[seq] > 1 ? &w->prompt_peak_positions : &w->peak_positions;
        int *blocks_peak = w->fed[seq] > 1 ? &w->prompt_peak_blocks : &w->peak_blocks;
        if (blocks > *blocks_peak)
            *blocks_peak = blocks;
        if (w->n_held[seq] > *positions)
            *positions = w->n_held[seq];
    }
}

/* ------------------------------------------------------------ teacher forcing */

/* -log p(token) under a row of logits, in double, max subtracted first. */
static double neg_log_prob(const float *logits, int vocab, int token, double max)
{
    double sum = 0.0;
    for (int i = 0; i < vocab; i++)
        sum += exp((double)logits[i] - max);
    return log(sum) - ((double)logits[token] - max);
}

void window_force(WindowCache *w, ServingRun *run)
{
    int vocab = run->model->cfg.vocab_size;
    for (int k = 0; k < run->n_takers; k++) {
        const Request *r = &run->reqs[run->taker_req[k]];
        /* The run's own logits buffer (ForwardState.logits): the sampler
         * reads it next, so a change here is what it sees. */
        float *logits = (float *)run->logits + (size_t)run->taker_row[k] * vocab; /* [vocab] */
        if (w->opt.ignore_eos) /* --ignore-eos: the run goes to its length; the distribution is over the rest */
            logits[TOKEN_EOS] = logits[TOKEN_BOS] = -INFINITY;
        int step = r->n_tokens - r->n_prompt; /* which generated token this step takes */
        if (!w->forced[r->index] || step >= w->n_forced[r->index])
            continue;
        int forced = w->forced[r->index][step], best = 0;
        for (int i = 1; i < vocab; i++)
            if (logits[i] > logits[best])
                best = i;
        w->nll_sum += neg_log_prob(logits, vocab, forced, (double)logits[best]);
        w->forced_steps++;
        w->forced_agree += best == forced;
        if (w->argmax_buf) /* --kv-argmax: what this cache would have chosen, for comparing two caches */
            w->argmax_buf[(w->forced[r->index] - w->force_buf) + step] = best;
        logits[forced] = FLT_MAX; /* greedy sampling (window_check() refuses others) now takes it */
    }
}

/* ------------------------------------------------------------ one step */

int window_step(WindowCache *w, ServingRun *run, Err *err)
{
    PagedServer *s = w->server;
    if (!serving_step_begin(run))
        return 0;
    if (paged_plan(s, run, err)) /* chapter 4: room for every next token, admissions */
        return -1;
    if (w->opt.window) /* the cost model charges what the window lets attention read, not every position */
        serving_set_attended(run, window_attended(w, run));
    KvSeam seam = window_seam(w);
    if (serving_step_forward(run, &seam, err))
        return -1;
    note_peaks(w, run); /* every position written: the most a sequence holds */
    if (w->opt.force_path || w->opt.ignore_eos)
        window_force(w, run); /* the forced continuation's token wins the greedy choice */
    serving_step_sample(run);
    paged_account(s, run);
    window_evict(w, run);     /* what the next queries may not see goes */
    int n_finished = serving_step_finished(run);
    for (int i = 0; i < n_finished; i++)
        paged_finished(s, run, &run->reqs[run->finished_now[i]]);
    serving_step_end(run);
    return 0;
}
