/* Chapter 5: the prefix cache on chapter 4's server. The scheduler is
 * chapter 4's; this file fills the hooks it offers a cache above its pool
 * (chapter 4's ext/paged_cache.h: PagedCache), parks the blocks it keeps
 * (parking.h), registers full blocks as they are scheduled, and keeps the
 * books. */
#include <string.h>

#include "mem.h"
#include "prefix.h"

int prefix_cache_mode_parse(const char *name, PrefixCacheMode *mode)
{
    static const char *const names[] = {"off", "hash", "radix"};
    for (int m = 0; m < 3; m++)
        if (strcmp(name, names[m]) == 0) {
            *mode = (PrefixCacheMode)m;
            return 0;
        }
    return -1;
}

const char *prefix_cache_mode_name(PrefixCacheMode mode)
{
    return mode == PREFIX_CACHE_HASH ? "hash" : mode == PREFIX_CACHE_RADIX ? "radix" : "off";
}

int prefix_check(const ServingRun *run, Err *err)
{
    const CliOptions *o = run->opts;
    /* Swapping out copies a table's blocks to the host and frees them on
     * the device without the cache's release: a block the cache keeps, or
     * shares with other tables, would be freed under it. */
    if (o->preempt && strcmp(o->preempt, "swap") == 0)
        return err_set(err, "--preempt swap is chapter 4's only: the prefix cache's shared blocks do not go to the "
                            "swap space (preemption recomputes here; build/ch04-paged has swapping)");
    return 0;
}

double prefix_cache_hit_rate(const PrefixCache *c)
{
    return c->query_tokens ? (double)c->hit_tokens / (double)c->query_tokens : 0.0;
}

/* ------------------------------------------------------------ registration */

static BlockTable *table_of(const PrefixCache *c, const Request *r)
{
    return &c->server->kv.tables.tables[r->index];
}

/* The cache stands nothing for r's blocks any more (its table is empty). */
static void forget_request(PrefixCache *c, const Request *r)
{
    int i = r->index;
    c->n_known[i] = 0;
    c->last_key[i] = HASH_CHAIN_ROOT_KEY;
    c->last_id[i] = HASH_CHAIN_ROOT_ID;
    c->last_block[i] = -1;
    c->stopped[i] = 0;
}

/* Block i of r is full: the hash chain learns it, or finds that an equal
 * block (same key, same chain, same tokens) is registered already. */
static void hash_know_block(PrefixCache *c, const Request *r, int i)
{
    HashChain *h = &c->hash;
    const int *tokens = r->tokens + (size_t)i * (size_t)c->block_size;
    int block = table_of(c, r)->blocks[i], k = r->index;
    uint64_t key = hash_block_key(c->last_key[k], tokens, c->block_size);
    if (h->entries[block].id != 0) { /* registered by a request that shares it */
        c->last_id[k] = h->entries[block].id;
    } else {
        int equal = hash_chain_find(h, key, c->last_id[k], tokens);
        if (equal >= 0) {
            c->last_id[k] = h->entries[equal].id; /* later blocks chain to the one a lookup finds */
            c->duplicates++;
        } else {
            c->last_id[k] = hash_chain_register(h, block, key, c->last_id[k], tokens);
        }
    }
    c->last_key[k] = key;
    c->n_known[k] = i + 1;
}

/* The same in the tree. A block the tree already has an equal of stays
 * out, and so do r's later blocks: they would hang below a block r does
 * not hold, which could then be evicted from above them. (radix_insert()
 * refuses, -1, to hang a block below one that has left the tree.) */
static void radix_know_block(PrefixCache *c, const Request *r, int i)
{
    int k = r->index, block = table_of(c, r)->blocks[i];
    if (c->stopped[k])
        return;
    int in_tree = block;
    if (c->radix.block_node[block] < 0)
        in_tree = radix_insert(&c->radix, c->last_block[k], block, r->tokens + (size_t)i * (size_t)c->block_size);
    if (in_tree != block) {
        c->stopped[k] = 1;
        c->duplicates += in_tree >= 0;
        return;
    }
    c->last_block[k] = block;
    c->n_known[k] = i + 1;
}

/* Positions of each running request that have K/V once the step planned
 * so far has run: those cached, and those in this step's batch. */
static void note_planned_positions(PrefixCache *c)
{
    const PagedServer *s = c->server;
    ServingRun *run = c->run;
    for (int k = 0; k < s->n_running; k++)
        c->fed_until[s->running[k]] = run->reqs[s->running[k]].n_cached;
    for (int e = 0; e < run->n_entries; e++) {
        const BatchEntry *b = &run->entries[e];
        if (b->pos + 1 > c->fed_until[b->seq])
            c->fed_until[b->seq] = b->pos + 1;
    }
}

void prefix_cache_register_planned(PrefixCache *c)
{
    if (c->mode == PREFIX_CACHE_OFF)
        return;
    note_planned_positions(c);
    const PagedServer *s = c->server;
    for (int k = 0; k < s->n_running; k++) {
        const Request *r = &c->run->reqs[s->running[k]];
        int full = c->fed_until[r->index] / c->block_size, held = table_of(c, r)->n_blocks;
        if (full > held)
            full = held;
        for (int i = c->n_known[r->index]; i < full && !c->stopped[r->index]; i++) {
            if (c->mode == PREFIX_CACHE_HASH)
                hash_know_block(c, r, i);
            else
                radix_know_block(c, r, i);
        }
    }
}

/* ------------------------------------------------------------ chapter 4's extension points */

/* Whether the block that holds r's last position is cached too, after the
 * n leading blocks found (it is recomputed anyway, for the logits). */
static int last_block_cached(PrefixCache *c, const Request *r, int n)
{
    const int bs = c->block_size;
    if (r->n_tokens % bs != 0 || n != r->n_tokens / bs - 1)
        return 0;
    if (c->mode == PREFIX_CACHE_HASH)
        return hash_chain_find(&c->hash, c->keys[n], n ? c->hash.entries[c->hit[n - 1]].id : HASH_CHAIN_ROOT_ID,
                               r->tokens + (size_t)n * (size_t)bs) >= 0;
    /* one token more: the last block becomes one a match may cover */
    return radix_match(&c->radix, r->tokens, r->n_tokens + 1, c->hit) == n + 1;
}

static PagedCachedPrefix cache_lookup(void *ctx, const Request *r)
{
    PrefixCache *c = ctx;
    PagedCachedPrefix found = {0, 0, c->hit};
    c->recompute[r->index] = 0;
    if (c->mode == PREFIX_CACHE_OFF)
        return found;
    prefix_cache_register_planned(c); /* what this step fills is findable already */
    int n;
    if (c->mode == PREFIX_CACHE_HASH) {
        hash_chain_keys(r->tokens, r->n_tokens, c->block_size, c->keys);
        n = hash_chain_match(&c->hash, r->tokens, r->n_tokens, c->keys, c->hit);
    } else {
        n = radix_match(&c->radix, r->tokens, r->n_tokens, c->hit);
    }
    if (last_block_cached(c, r, n)) {
        c->recompute[r->index] = c->block_size;
        if (c->mode == PREFIX_CACHE_RADIX) /* last_block_cached() used the buffer */
            radix_match(&c->radix, r->tokens, r->n_tokens, c->hit);
    }
    found.n_blocks = n;
    for (int i = 0; i < n; i++)
        found.n_free += c->server->kv.pool.ref_count[c->hit[i]] == 0;
    return found;
}

static void cache_admitted(void *ctx, Request *r, BlockTable *t, const PagedCachedPrefix *hit)
{
    PrefixCache *c = ctx;
    int n = hit->n_blocks, k = r->index;
    c->admissions++;
    c->query_tokens += r->n_tokens;
    c->hit_tokens += (long)n * c->block_size;
    c->recomputed_tokens += c->recompute[k];
    if (c->mode == PREFIX_CACHE_HASH) {
        hash_chain_take(&c->hash, t, hit->blocks, n);
        if (n > 0) {
            c->last_key[k] = c->hash.entries[hit->blocks[n - 1]].key;
            c->last_id[k] = c->hash.entries[hit->blocks[n - 1]].id;
        }
    } else if (c->mode == PREFIX_CACHE_RADIX) {
        radix_take(&c->radix, t, hit->blocks, n);
        if (n > 0)
            c->last_block[k] = hit->blocks[n - 1];
    }
    c->n_known[k] = n;
}

static void cache_release(void *ctx, Request *r, BlockTable *t, void (*on_free)(void *ctx, int block),
                          void *on_free_ctx)
{
    PrefixCache *c = ctx;
    prefix_cache_register_planned(c); /* r's last full block included */
    if (c->mode == PREFIX_CACHE_HASH)
        hash_chain_release(&c->hash, t, on_free, on_free_ctx);
    else if (c->mode == PREFIX_CACHE_RADIX)
        radix_release(&c->radix, t, on_free, on_free_ctx);
    else
        block_table_release(&c->server->kv.pool, t, on_free, on_free_ctx); /* chapter 4's own */
    forget_request(c, r);
}

static int cache_reclaim(void *ctx)
{
    PrefixCache *c = ctx;
    int block = c->mode == PREFIX_CACHE_HASH    ? hash_chain_evict(&c->hash)
                : c->mode == PREFIX_CACHE_RADIX ? radix_evict(&c->radix)
                                                : -1; /* off parks nothing */
    return block >= 0 ? 0 : -1;
}

/* ------------------------------------------------------------ the books, every step */

static void record_sample(PrefixCache *c, long step, int held, int cached_free)
{
    if (c->steps++ % c->stride != 0)
        return;
    if (c->n_samples == PREFIX_TIMELINE_CAP) { /* full: keep every other sample, sample half as often */
        for (int i = 0; i < PREFIX_TIMELINE_CAP / 2; i++)
            c->samples[i] = c->samples[2 * i];
        c->n_samples = PREFIX_TIMELINE_CAP / 2;
        c->stride *= 2;
        if ((c->steps - 1) % c->stride != 0)
            return;
    }
    c->samples[c->n_samples++] = (PrefixSample){step, held, cached_free};
}

/* At the step of peak use: how many blocks two or more tables share, and
 * how many table entries they stand for beyond one each. */
static void note_peak(PrefixCache *c, int held)
{
    const PagedServer *s = c->server;
    const BlockPool *p = &s->kv.pool;
    int shared = 0, entries = 0;
    for (int b = 0; b < p->n_blocks; b++)
        shared += p->ref_count[b] >= 2;
    for (int k = 0; k < s->n_running; k++)
        entries += s->kv.tables.tables[s->running[k]].n_blocks;
    c->held_peak = held;
    c->held_peak_step = c->run->step;
    c->shared_at_peak = shared;
    c->saved_at_peak = entries - held;
}

/* Serving time (the steps' wall time, as run->elapsed_s counts it) at
 * which each running request has its first token. A file's requests all
 * arrive at step 0, so this is their time to first token. */
static void note_first_tokens(PrefixCache *c, const ServingRun *run)
{
    const PagedServer *s = c->server;
    double now = run->elapsed_s + (now_seconds() - run->step_started_s);
    for (int k = 0; k < s->n_running; k++) {
        const Request *r = &run->reqs[s->running[k]];
        if (c->first_token_s[r->index] >= 0 || (r->n_tokens == r->n_prompt && r->phase != REQ_DONE))
            continue;
        c->first_token_s[r->index] = now;
        c->ttft_sum += now;
        c->ttft_max = now > c->ttft_max ? now : c->ttft_max;
        c->ttft_count++;
    }
}

/* The run's observer: after chapter 4 has accounted the step, before the
 * requests that finished let go (the moment chapter 4's peak is taken). */
static void cache_observe(void *ctx, const ServingRun *run)
{
    PrefixCache *c = ctx;
    const BlockPool *p = &c->server->kv.pool;
    int held = block_pool_used(p), parked = p->n_parked;
    double usage = (double)held / p->n_blocks, with_cached = (double)(held + parked) / p->n_blocks;
    c->usage_sum += usage;
    c->usage_with_cached_sum += with_cached;
    if (usage > c->usage_peak)
        c->usage_peak = usage;
    if (with_cached > c->usage_with_cached_peak)
        c->usage_with_cached_peak = with_cached;
    if (held > c->held_peak)
        note_peak(c, held);
    if (parked > c->cached_free_peak)
        c->cached_free_peak = parked;
    record_sample(c, run->step, held, parked);
    note_first_tokens(c, run);
}

/* ------------------------------------------------------------ open, close */

static int alloc_books(PrefixCache *c, int n_reqs, int capacity, Err *err)
{
    c->n_known = mem_alloc_array(MEM_KV_METADATA, (size_t)n_reqs, sizeof(int));
    c->last_key = mem_alloc_array(MEM_KV_METADATA, (size_t)n_reqs, sizeof(uint64_t));
    c->last_id = mem_alloc_array(MEM_KV_METADATA, (size_t)n_reqs, sizeof(long));
    c->last_block = mem_alloc_array(MEM_KV_METADATA, (size_t)n_reqs, sizeof(int));
    c->stopped = mem_alloc_array(MEM_KV_METADATA, (size_t)n_reqs, sizeof(int));
    c->fed_until = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n_reqs, sizeof(int));
    c->recompute = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n_reqs, sizeof(int));
    c->keys = mem_alloc_array(MEM_ACTIVATIONS, (size_t)capacity, sizeof(uint64_t));
    c->hit = mem_alloc_array(MEM_ACTIVATIONS, (size_t)capacity, sizeof(int));
    c->first_token_s = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n_reqs, sizeof(double));
    if (!c->n_known || !c->last_key || !c->last_id || !c->last_block || !c->stopped || !c->fed_until ||
        !c->recompute || !c->keys || !c->hit || !c->first_token_s)
        return err_set(err, "out of memory for the prefix cache's books of %d requests", n_reqs);
    return 0;
}

int prefix_cache_open(PagedServer *s, ServingRun *run, PrefixCacheMode mode, PrefixCache **cache, Err *err)
{
    PrefixCache *c = mem_alloc(MEM_ACTIVATIONS, sizeof *c);
    *cache = c;
    if (!c)
        return err_set(err, "out of memory");
    memset(c, 0, sizeof *c);
    c->mode = mode;
    c->server = s;
    c->run = run;
    c->block_size = s->kv.pool.shape.block_size;
    c->stride = 1;
    /* One token more than a table covers: last_block_cached() matches n_tokens + 1. */
    if (alloc_books(c, run->n_reqs, s->kv.tables.capacity + 1, err))
        return -1;
    for (int i = 0; i < run->n_reqs; i++) {
        forget_request(c, &run->reqs[i]);
        c->first_token_s[i] = -1.0;
    }
    if ((mode == PREFIX_CACHE_HASH && hash_chain_init(&c->hash, &s->kv.pool, err)) ||
        (mode == PREFIX_CACHE_RADIX && radix_init(&c->radix, &s->kv.pool, err)))
        return -1;
    /* Off keeps the books only: admissions are counted, nothing is found
     * or parked, and blocks go back as chapter 4 gives them back. */
    c->hooks = (PagedCache){.ctx = c, .lookup = cache_lookup, .admitted = cache_admitted, .release = cache_release,
                            .reclaim = cache_reclaim};
    s->cache = &c->hooks;
    return serving_add_observer(run, cache_observe, c, NULL, err); /* prefix_cache_close() takes it off */
}

void prefix_cache_close(PrefixCache *c)
{
    if (!c)
        return;
    if (c->server && c->server->cache == &c->hooks)
        c->server->cache = NULL;
    if (c->run)
        serving_remove_observer(c->run, c);
    hash_chain_free(&c->hash);
    radix_free(&c->radix);
    mem_free(c->n_known);
    mem_free(c->last_key);
    mem_free(c->last_id);
    mem_free(c->last_block);
    mem_free(c->stopped);
    mem_free(c->fed_until);
    mem_free(c->recompute);
    mem_free(c->keys);
    mem_free(c->hit);
    mem_free(c->first_token_s);
    mem_free(c);
}

int prefix_serve(ServingRun *run, PrefixCacheMode mode, PagedServer **server, PrefixCache **cache, Err *err)
{
    *cache = NULL;
    *server = NULL;
    if (prefix_check(run, err) || paged_open(run, server, NULL, err) || prefix_cache_open(*server, run, mode, cache, err))
        return -1;
    while (serving_unfinished(run))
        if (paged_step(*server, run, err))
            return -1;
    return 0;
}

void prefix_print_setup(const PrefixCache *c, const char *name, FILE *log)
{
    paged_print_setup(c->server, c->run, name, log);
    const char *what = c->mode == PREFIX_CACHE_HASH    ? "vLLM's chain of block hashes (FNV-1a), an LRU queue of free cached blocks"
                       : c->mode == PREFIX_CACHE_RADIX ? "SGLang's radix tree over token ids, LRU eviction at the leaves"
                                                       : "off: chapter 4's server, nothing shared between requests";
    fprintf(log, "%s: prefix cache %s: %s\n", name, prefix_cache_mode_name(c->mode), what);
}
