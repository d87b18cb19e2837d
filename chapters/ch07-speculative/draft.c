/* Chapter 7's model proposers: a separate draft model (--spec draft), or
 * the target's first L layers and its head (--spec self:L). Either runs
 * with a contiguous K/V cache of its own per request (chapter 2's layout),
 * apart from chapter 4's pool: its memory is the price of proposing. */
#include <string.h>

#include "mem.h"
#include "ops.h"
#include "sampler.h"
#include "spec.h"

/* ------------------------------------------------------------ the cache */

/* The K (kv = 0) or V (kv = 1) row of position @p pos of layer @p layer
 * of request @p seq. */
static float *draft_row(const SpecDraft *g, int seq, int layer, int kv, int pos)
{
    const ModelConfig *c = &g->model->cfg;
    size_t rows = ((size_t)layer * 2u + (size_t)kv) * (size_t)g->capacity[seq] + (size_t)pos;
    return g->kv + g->offset[seq] + rows * (size_t)model_kv_dim(c);
}

static void draft_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v)
{
    const SpecDraft *g = ctx;
    size_t bytes = (size_t)model_kv_dim(&g->model->cfg) * sizeof(float);
    memcpy(draft_row(g, e->seq, layer, 0, e->pos), k, bytes);
    memcpy(draft_row(g, e->seq, layer, 1, e->pos), v, bytes);
}

static void draft_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out,
                         float *scores)
{
    const SpecDraft *g = ctx;
    const ModelConfig *c = &g->model->cfg;
    const int hd = model_head_dim(c);
    size_t slice = (size_t)(head / model_kv_mul(c)) * (size_t)hd; /* the KV head's part of a row */
    attention_reference(out, q, draft_row(g, e->seq, layer, 0, 0) + slice, draft_row(g, e->seq, layer, 1, 0) + slice,
                        e->pos + 1, model_kv_dim(c), hd, scores);
}

/* ------------------------------------------------------------ open, close */

/* The draft file: loaded, with the target's vocabulary and at least its
 * context. */
static int load_draft(SpecDraft *g, const char *path, const ModelConfig *target, Err *err)
{
    if (model_load(&g->own, path, err))
        return -1;
    const ModelConfig *c = &g->own.cfg;
    if (c->vocab_size != target->vocab_size)
        return err_set(err, "--draft-model %s has a vocabulary of %d tokens, the model %d: a draft must share the "
                            "model's vocabulary", path, c->vocab_size, target->vocab_size);
    if (c->seq_len < target->seq_len)
        return err_set(err, "--draft-model %s has a context of %d positions, shorter than the model's %d", path,
                       c->seq_len, target->seq_len);
    g->model = &g->own;
    return 0;
}

/* Where each request's cache starts: room for its max_tokens positions. */
static int place_caches(SpecDraft *g, const ServingRun *run, Err *err)
{
    const ModelConfig *c = &g->model->cfg;
    size_t n = (size_t)run->n_reqs, floats = 0;
    g->offset = mem_alloc_array(MEM_KV_METADATA, n, sizeof(size_t));
    g->capacity = mem_alloc_array(MEM_KV_METADATA, n, sizeof(int));
    g->cached = mem_alloc_array(MEM_KV_METADATA, n, sizeof(int));
    if (!g->offset || !g->capacity || !g->cached)
        return err_set(err, "out of memory for the draft's caches");
    for (int i = 0; i < run->n_reqs; i++) {
        g->offset[i] = floats;
        g->capacity[i] = run->reqs[i].max_tokens;
        g->cached[i] = 0;
        floats += (size_t)c->n_layers * 2u * (size_t)g->capacity[i] * (size_t)model_kv_dim(c);
    }
    g->kv_bytes = floats * sizeof(float);
    g->kv = mem_alloc_array(MEM_KV, floats ? floats : 1, sizeof(float));
    if (!g->kv)
        return err_set(err, "out of memory for the draft's K/V cache (%zu bytes)", g->kv_bytes);
    return 0;
}

int spec_draft_open(SpecDraft *g, const SpecOptions *o, const ServingRun *run, Err *err)
{
    memset(g, 0, sizeof *g);
    const ModelConfig *target = &run->model->cfg;
    if (o->method == SPEC_DRAFT) {
        if (load_draft(g, o->draft_path, target, err))
            return -1;
    } else {
        g->view = *run->model; /* the same weights, read by the first L layers only */
        g->view.cfg.n_layers = o->self_layers;
        g->model = &g->view;
    }
    g->max_entries = target->seq_len > run->n_reqs ? target->seq_len : run->n_reqs;
    g->entries = mem_alloc_array(MEM_ACTIVATIONS, (size_t)g->max_entries, sizeof(BatchEntry));
    if (!g->entries)
        return err_set(err, "out of memory for the draft's batch");
    if (forward_state_init(&g->fs, &g->model->cfg, g->max_entries, run->n_reqs, err))
        return -1;
    return place_caches(g, run, err);
}

void spec_draft_close(SpecDraft *g)
{
    forward_state_free(&g->fs);
    mem_free(g->entries);
    mem_free(g->kv);
    mem_free(g->offset);
    mem_free(g->capacity);
    mem_free(g->cached);
    if (g->model == &g->own)
        model_free(&g->own);
    memset(g, 0, sizeof *g);
}

void spec_draft_keep(SpecDraft *g, int seq, int keep)
{
    if (g->cached[seq] > keep)
        g->cached[seq] = keep;
}

/* ------------------------------------------------------------ proposing */

/* Proposal @p have of @p r from a row of the draft's logits, chosen as
 * the request samples (its penalties over the tokens so far, proposals
 * included): greedy, or a draw from the distribution it would sample
 * from, kept in @p q for the acceptance rule. The proposal is written
 * after the request's tokens (scratch until accepted). */
static int choose(const SpecDecoder *d, Request *r, int have, float *row, float *q)
{
    const int n_tokens = r->n_tokens + have;
    if (!d->sampled)
        return r->tokens[n_tokens] = sampler_sample_seq(&r->sampler, row, r->tokens, r->n_prompt, n_tokens);
    spec_distribution(&r->sampler, row, r->tokens, r->n_prompt, n_tokens, q);
    return r->tokens[n_tokens] = spec_draw(q, d->vocab, &r->sampler.rng_state);
}

/* Runs the batch of @p n entries; each entry with a logits row gives its
 * request the next proposal. */
static void run_batch(SpecDecoder *d, ServingRun *run, int n)
{
    SpecDraft *g = &d->draft;
    KvSeam seam = {.ctx = g, .store = draft_store, .attend = draft_attend};
    forward(g->model, &g->fs, &seam, g->entries, n);
    for (int i = 0; i < n; i++) {
        const BatchEntry *e = &g->entries[i];
        if (e->logits_row < 0)
            continue;
        Request *r = &run->reqs[e->seq];
        int have = d->n_proposed[e->seq], k = d->opt.k;
        float *q = d->q ? d->q + ((size_t)e->seq * k + have) * d->vocab : NULL; /* [vocab] */
        d->proposals[(size_t)e->seq * k + have] =
            choose(d, r, have, g->fs.logits + (size_t)e->logits_row * d->vocab, q);
        d->n_proposed[e->seq]++;
        if (e->pos + 1 > g->cached[e->seq])
            g->cached[e->seq] = e->pos + 1;
    }
}

/* The first proposal of every request with a budget: the positions its
 * cache lacks, up to its newest token, in batches of at most max_entries. */
static void catch_up(SpecDecoder *d, ServingRun *run)
{
    SpecDraft *g = &d->draft;
    int n = 0, rows = 0;
    for (int seq = 0; seq < d->n_seqs; seq++) {
        if (d->budget[seq] == 0)
            continue;
        const Request *r = &run->reqs[seq];
        int from = g->cached[seq];
        if (from >= r->n_tokens)
            from = r->n_tokens - 1; /* fed before, but its logits are needed again */
        if (n + (r->n_tokens - from) > g->max_entries) {
            run_batch(d, run, n);
            n = rows = 0;
        }
        for (int pos = from; pos < r->n_tokens; pos++)
            g->entries[n++] = (BatchEntry){.seq = seq, .pos = pos, .token = r->tokens[pos],
                                           .logits_row = pos == r->n_tokens - 1 ? rows++ : -1};
    }
    if (n > 0)
        run_batch(d, run, n);
}

void spec_draft_propose(SpecDecoder *d, ServingRun *run)
{
    SpecDraft *g = &d->draft;
    catch_up(d, run);
    for (int step = 1; step < d->opt.k; step++) {
        int n = 0;
        for (int seq = 0; seq < d->n_seqs; seq++) {
            if (d->n_proposed[seq] <= step - 1 || d->n_proposed[seq] >= d->budget[seq])
                continue;
            const Request *r = &run->reqs[seq];
            g->entries[n] = (BatchEntry){.seq = seq, .pos = r->n_tokens - 1 + step,
                                         .token = d->proposals[(size_t)seq * d->opt.k + step - 1], .logits_row = n};
            n++;
        }
        if (n == 0)
            return;
        run_batch(d, run, n);
    }
}
