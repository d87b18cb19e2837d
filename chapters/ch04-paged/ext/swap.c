/* Chapter 4 extension: the swap space.
 * Adds: preemption by swapping to host blocks, instead of recomputing.
 * Options: --preempt swap, --swap-space SIZE. Taught in:
 * book/ch04-paged.md, "Extension: swapping instead of recomputing".
 * The blocks of a preempted request go to a pool of host blocks and come
 * back when it is readmitted, instead of being recomputed. A block that
 * several tables share is copied once each way, and its sharing survives
 * the round trip (see swap.h for the links that make that so). ext/budget.c
 * decides when; this file moves the blocks and keeps the books of what
 * moved. */
#include "swap.h"

#include <limits.h>
#include <string.h>

#include "mem.h"
#include "paged_device.h"
#include "scheduler.h"

/* The swap space's books are the swap space's: the ledger counts them
 * with its bytes, at MEM_SWAP. */
static void *swap_books(size_t count, size_t elem_size)
{
    return count > SIZE_MAX / elem_size ? NULL : mem_alloc_at(MEM_KV_METADATA, MEM_SWAP, count * elem_size);
}

int swap_space_init(SwapSpace *sw, const BlockPool *p, int n_slots, int n_tables, int capacity, int with_storage,
                    Err *err)
{
    memset(sw, 0, sizeof *sw);
    if (n_slots < 1)
        return err_set(err, "a swap space needs at least one block");
    sw->n_slots = n_slots;
    sw->bytes_per_block = p->bytes_per_block;
    sw->n_tables = n_tables;
    sw->capacity = capacity;
    sw->free_stack = swap_books((size_t)n_slots, sizeof(int));
    sw->ref_count = swap_books((size_t)n_slots, sizeof(int));
    sw->device_copy = swap_books((size_t)n_slots, sizeof(int));
    sw->tables = swap_books((size_t)n_tables * (size_t)capacity, sizeof(int));
    sw->n_blocks = swap_books((size_t)n_tables, sizeof(int));
    sw->cached = swap_books((size_t)n_tables, sizeof(int));
    sw->host_copy = swap_books((size_t)p->n_blocks, sizeof(int));
    sw->exact = swap_books((size_t)p->n_blocks, 1);
    if (with_storage && (size_t)n_slots <= SIZE_MAX / p->bytes_per_block)
        sw->storage = mem_alloc_at(MEM_KV, MEM_SWAP, (size_t)n_slots * p->bytes_per_block);
    if (!sw->free_stack || !sw->ref_count || !sw->device_copy || !sw->tables || !sw->n_blocks || !sw->cached ||
        !sw->host_copy || !sw->exact || (with_storage && !sw->storage))
        return err_set(err, "out of memory for a swap space of %d blocks", n_slots);
    /* Slot 0 is handed out first, as in the device pool. */
    for (int i = 0; i < n_slots; i++) {
        sw->free_stack[i] = n_slots - 1 - i;
        sw->device_copy[i] = -1;
    }
    sw->n_free = n_slots;
    for (int b = 0; b < p->n_blocks; b++)
        sw->host_copy[b] = -1;
    return 0;
}

void swap_space_free(SwapSpace *sw)
{
    void *bufs[] = {sw->free_stack, sw->ref_count, sw->device_copy, sw->tables, sw->n_blocks,
                    sw->cached,     sw->host_copy, sw->exact,       sw->storage};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        mem_free(bufs[i]);
    memset(sw, 0, sizeof *sw);
}

/* ------------------------------------------------------------ links */

static void link_pair(SwapSpace *sw, int block, int slot)
{
    if (sw->host_copy[block] >= 0) /* the block was linked to an older copy: that link goes */
        sw->device_copy[sw->host_copy[block]] = -1;
    if (sw->device_copy[slot] >= 0)
        sw->host_copy[sw->device_copy[slot]] = -1;
    sw->host_copy[block] = slot;
    sw->device_copy[slot] = block;
    sw->exact[block] = 1;
}

void swap_note_write(SwapSpace *sw, int block)
{
    if (sw->n_slots > 0)
        sw->exact[block] = 0;
}

void swap_forget_block(SwapSpace *sw, int block)
{
    if (sw->n_slots == 0 || sw->host_copy[block] < 0)
        return;
    sw->device_copy[sw->host_copy[block]] = -1;
    sw->host_copy[block] = -1;
    sw->exact[block] = 0;
}

/* The core's hook: a block that becomes free is nobody's copy any more. */
static void forget_block(PagedServer *s, int block)
{
    if (s->swap) /* NULL once swap_close() has run */
        swap_forget_block(s->swap, block);
}

/* Slots are handed out and taken back by the chapter's own allocator
 * (block_pool_alloc(), block_pool_release()), run over the swap space's
 * books: a pool whose blocks are the slots, with no bytes of its own. */
static BlockPool slot_books(const SwapSpace *sw)
{
    return (BlockPool){.n_blocks = sw->n_slots, .free_stack = sw->free_stack, .n_free = sw->n_free,
                       .ref_count = sw->ref_count};
}

/* A swapped-out table lets go of a slot; when it was the last, the slot
 * is free again and unlinked. */
static void release_slot(SwapSpace *sw, int slot)
{
    BlockPool books = slot_books(sw);
    int holders = block_pool_release(&books, slot);
    sw->n_free = books.n_free;
    if (holders != 0)
        return;
    if (sw->device_copy[slot] >= 0)
        sw->host_copy[sw->device_copy[slot]] = -1;
    sw->device_copy[slot] = -1;
}

/* A free slot with one holder (swap_slots_needed() said there is one). */
static int take_slot(SwapSpace *sw)
{
    BlockPool books = slot_books(sw);
    int slot = block_pool_alloc(&books);
    sw->n_free = books.n_free;
    return slot;
}

/* The exact host copy of a device block, or -1. */
static int exact_copy(const SwapSpace *sw, int block)
{
    return sw->host_copy[block] >= 0 && sw->exact[block] ? sw->host_copy[block] : -1;
}

/* ------------------------------------------------------------ bytes */

/* One whole block between the device pool and a slot: a memcpy on the
 * CPU, a copy on the device's stream with --device cuda, nothing in a
 * simulation (no bytes anywhere). */
static int copy_block(SwapSpace *sw, const BlockPool *p, ServingRun *run, int block, int slot, int to_device,
                      Err *err)
{
    unsigned char *host = sw->storage ? sw->storage + (size_t)slot * sw->bytes_per_block : NULL;
    if (run->device && host)
        return paged_device_swap_block(run, block, host, to_device, err);
    if (!host || !p->storage)
        return 0;
    unsigned char *dev = (unsigned char *)(p->storage + (size_t)block * p->floats_per_block);
    if (to_device)
        memcpy(dev, host, sw->bytes_per_block);
    else
        memcpy(host, dev, sw->bytes_per_block);
    return 0;
}

/* ------------------------------------------------------------ out and in */

int swap_slots_needed(const SwapSpace *sw, const BlockTable *t)
{
    int n = 0;
    for (int i = 0; i < t->n_blocks; i++)
        n += exact_copy(sw, t->blocks[i]) < 0;
    return n;
}

int swap_blocks_needed(const SwapSpace *sw, int seq)
{
    const int *slots = sw->tables + (size_t)seq * sw->capacity;
    int n = 0;
    for (int i = 0; i < sw->n_blocks[seq]; i++)
        n += sw->device_copy[slots[i]] < 0;
    return n;
}

/* The slot that will hold @p block for one more table: the exact copy
 * already there, or a fresh slot it is copied into (linked to the block
 * when other tables keep the block on the device). */
static int slot_for_block(SwapSpace *sw, const BlockPool *p, ServingRun *run, int block, int *copies, Err *err)
{
    int slot = exact_copy(sw, block);
    if (slot >= 0) {
        BlockPool books = slot_books(sw);
        block_pool_retain(&books, slot);
        return slot;
    }
    slot = take_slot(sw);
    if (copy_block(sw, p, run, block, slot, 0, err))
        return -1;
    (*copies)++;
    if (p->ref_count[block] > 1)
        link_pair(sw, block, slot);
    return slot;
}

/* The caller's on_free, after the freed block's link is gone. */
typedef struct {
    SwapSpace *sw;
    void (*on_free)(void *ctx, int block);
    void *ctx;
} FreeHook;

static void forget_freed(void *ctx, int block)
{
    FreeHook *h = ctx;
    swap_forget_block(h->sw, block);
    if (h->on_free)
        h->on_free(h->ctx, block);
}

int swap_out_table(SwapSpace *sw, BlockPool *p, BlockTable *t, int seq, int n_cached, ServingRun *run,
                   void (*on_free)(void *ctx, int block), void *ctx, int *copies, Err *err)
{
    int *slots = sw->tables + (size_t)seq * sw->capacity;
    *copies = 0;
    for (int i = 0; i < t->n_blocks; i++) {
        int slot = slot_for_block(sw, p, run, t->blocks[i], copies, err);
        if (slot < 0)
            return -1;
        slots[i] = slot;
    }
    sw->n_blocks[seq] = t->n_blocks;
    sw->cached[seq] = n_cached;
    FreeHook hook = {sw, on_free, ctx};
    block_table_release(p, t, forget_freed, &hook);
    return 0;
}

/* The device block that will hold @p slot for one more table: the block
 * it is still linked to, or a fresh one it is copied into. */
static int block_for_slot(SwapSpace *sw, BlockPool *p, ServingRun *run, int slot, int *copies, Err *err)
{
    int block = sw->device_copy[slot];
    if (block >= 0) {
        block_pool_retain(p, block);
        return block;
    }
    block = block_pool_alloc(p);
    if (block < 0)
        return err_set(err, "swap-in: no free block (the caller checks swap_blocks_needed())");
    if (copy_block(sw, p, run, block, slot, 1, err))
        return -1;
    (*copies)++;
    link_pair(sw, block, slot);
    return block;
}

int swap_in_table(SwapSpace *sw, BlockPool *p, BlockTable *t, Request *r, ServingRun *run, int *copies, Err *err)
{
    int seq = r->index, *slots = sw->tables + (size_t)seq * sw->capacity;
    *copies = 0;
    for (int i = 0; i < sw->n_blocks[seq]; i++) {
        int block = block_for_slot(sw, p, run, slots[i], copies, err);
        if (block < 0)
            return -1;
        t->blocks[t->n_blocks++] = block;
    }
    for (int i = 0; i < sw->n_blocks[seq]; i++)
        release_slot(sw, slots[i]);
    r->n_cached = sw->cached[seq];
    sw->n_blocks[seq] = 0;
    sw->cached[seq] = 0;
    return 0;
}

/* ------------------------------------------------------------ for the scheduler */

int swap_wanted(const CliOptions *o)
{
    return o->preempt && strcmp(o->preempt, "swap") == 0;
}

/* Host blocks of --swap-space (by default as many as the KV budget's). */
static size_t swap_slots(const ServingRun *run, size_t bytes_per_block)
{
    size_t bytes = run->opts->swap_space ? run->opts->swap_space : serving_kv_budget(run);
    return bytes / bytes_per_block;
}

int swap_check(const ServingRun *run, Err *err)
{
    const CliOptions *o = run->opts;
    size_t per_block = (size_t)o->block_size * run->kv_bytes_per_token, slots = swap_slots(run, per_block);
    size_t ram = mem_physical_bytes();
    char a[32], b[32];
    if (slots < 1)
        return err_set(err, "--swap-space %s holds no block of %s",
                       cli_format_bytes(a, sizeof a, (double)o->swap_space),
                       cli_format_bytes(b, sizeof b, (double)per_block));
    if (slots > INT_MAX / BLOCK_SIZE_MAX)
        return err_set(err, "--swap-space %s is %zu blocks, more than the swap space can index",
                       cli_format_bytes(a, sizeof a, (double)o->swap_space), slots);
    if (!run->simulated && ram > 0 && slots * per_block > ram)
        return err_set(err, "--swap-space %s is more than this machine's memory (%s)",
                       cli_format_bytes(a, sizeof a, (double)(slots * per_block)),
                       cli_format_bytes(b, sizeof b, (double)ram));
    return 0;
}

int swap_open(PagedServer *s, const ServingRun *run, Err *err)
{
    const BlockPool *p = &s->kv.pool;
    if (!(s->swap = mem_alloc(MEM_ACTIVATIONS, sizeof *s->swap)))
        return err_set(err, "out of memory");
    s->hooks.block_freed = forget_block;
    s->hooks.preemption_note = swap_preemption_note();
    /* swap_check() refused a swap space that holds no block or too many. */
    int slots = (int)swap_slots(run, p->bytes_per_block);
    /* On the device the host holds the swapped bytes; in a simulation nobody does. */
    int with_storage = p->storage != NULL || run->device != NULL;
    return swap_space_init(s->swap, p, slots, run->n_reqs, s->kv.tables.capacity, with_storage, err);
}

void swap_close(PagedServer *s)
{
    if (!s->swap)
        return;
    swap_space_free(s->swap);
    mem_free(s->swap);
    s->swap = NULL;
}

/* The blocks a swap-out frees are a preemption's: their unfilled rows were
 * for tokens still to come. */
typedef struct {
    PagedServer *s;
    KvBreakdown *breakdown;
} SwapOutBooks;

static void close_swapped_block(void *ctx, int block)
{
    SwapOutBooks *books = ctx;
    paged_block_freed(books->s, books->breakdown, block, 1);
}

int swap_out_request(PagedServer *s, ServingRun *run, Request *r, Err *err)
{
    SwapSpace *sw = s->swap;
    BlockTable *t = &s->kv.tables.tables[r->index];
    if (swap_slots_needed(sw, t) > sw->n_free) {
        sw->swap_fallbacks++;
        return 0;
    }
    SwapOutBooks books = {s, &run->breakdown};
    int copies = 0;
    if (swap_out_table(sw, &s->kv.pool, t, r->index, r->n_cached, run, close_swapped_block, &books, &copies, err))
        return -1;
    sw->swaps_out++;
    sw->swap_blocks_out += copies;
    serving_note_transfer(run, (double)copies * (double)sw->bytes_per_block); /* the cost model: bytes over the host link */
    sw->swapped_tokens += r->n_cached;
    sw->swapped_flops += paged_recompute_flops(&s->kv.cfg, r->n_cached);
    return 1;
}

int swap_in_request(PagedServer *s, ServingRun *run, Request *r, Err *err)
{
    SwapSpace *sw = s->swap;
    BlockTable *t = &s->kv.tables.tables[r->index];
    int copies = 0;
    if (swap_in_table(sw, &s->kv.pool, t, r, run, &copies, err))
        return -1;
    paged_track_table(s, t);
    sw->swaps_in++;
    sw->swap_blocks_in += copies;
    serving_note_transfer(run, (double)copies * (double)sw->bytes_per_block);
    return 0;
}

int swap_is_out(const PagedServer *s, int i)
{
    return s->swap && s->swap->n_blocks[i] > 0;
}

int swap_blocks_to_admit(const PagedServer *s, int i, int start, int end)
{
    const SwapSpace *sw = s->swap;
    const int bs = s->kv.pool.shape.block_size;
    int held = sw->n_blocks[i], grow = block_count_for_tokens(end, bs) - held;
    /* A slot that comes back as a block still shared with another table
     * needs a copy before its first write. */
    const int *slots = sw->tables + (size_t)i * sw->capacity;
    int cow = start < held * bs && sw->device_copy[slots[start / bs]] >= 0;
    return swap_blocks_needed(sw, i) + (grow > 0 ? grow : 0) + cow;
}

void swap_note_writes(PagedServer *s, const BlockTable *t, int start, int end)
{
    int bs = s->kv.pool.shape.block_size;
    for (int b = start / bs; b <= (end - 1) / bs; b++)
        swap_note_write(s->swap, t->blocks[b]);
}

double paged_recompute_flops(const ModelConfig *c, long n_positions)
{
    double dim = c->dim, kv_dim = model_kv_dim(c), hidden = c->hidden_dim, n = (double)n_positions;
    double weights_per_layer = 2.0 * dim * dim + 2.0 * dim * kv_dim + 3.0 * dim * hidden;
    double projections = 2.0 * weights_per_layer * n;
    /* Position p reads p + 1 positions: sum over p < n is n (n + 1) / 2. */
    double attention = 4.0 * dim * n * (n + 1.0) / 2.0;
    return c->n_layers * (projections + attention);
}

/* ------------------------------------------------------------ report */

const char *swap_preemption_note(void)
{
    return "blocks swapped to the host and back, or recomputed when the swap space was full";
}

void swap_print_setup(FILE *log, const SwapSpace *sw)
{
    char a[32];
    fprintf(log, "preemption swaps to %d host blocks (%s)\n", sw->n_slots,
            cli_format_bytes(a, sizeof a, (double)sw->n_slots * (double)sw->bytes_per_block));
}

void swap_report_table(FILE *f, const PagedServer *s)
{
    const SwapSpace *sw = s->swap;
    char a[32], b[32], c[32];
    double block = (double)s->kv.pool.bytes_per_block;
    fprintf(f, "  preemption     swap: %ld swapped out, %ld back in; %ld recomputed because the swap space (%d "
               "blocks) was full\n", sw->swaps_out, sw->swaps_in, sw->swap_fallbacks, sw->n_slots);
    fprintf(f, "  swap traffic   out %ld blocks = %s, in %ld blocks = %s (blocks x %s; shared blocks once)\n",
            sw->swap_blocks_out, cli_format_bytes(a, sizeof a, block * (double)sw->swap_blocks_out),
            sw->swap_blocks_in, cli_format_bytes(b, sizeof b, block * (double)sw->swap_blocks_in),
            cli_format_bytes(c, sizeof c, block));
    fprintf(f, "  cost           swapping moved %s for %ld positions; recomputing them would have cost %.4g "
               "GFLOP\n", cli_format_bytes(a, sizeof a, block * (double)(sw->swap_blocks_out + sw->swap_blocks_in)),
            sw->swapped_tokens, sw->swapped_flops / 1e9);
}

void swap_report_json(JsonWriter *j, const PagedServer *s)
{
    static const SwapSpace none;
    const SwapSpace *sw = s->swap ? s->swap : &none;
    long long block = (long long)s->kv.pool.bytes_per_block;
    json_int(j, "swap_space_blocks", sw->n_slots);
    json_int(j, "swaps_out", sw->swaps_out);
    json_int(j, "swaps_in", sw->swaps_in);
    json_int(j, "swap_blocks_out", sw->swap_blocks_out);
    json_int(j, "swap_blocks_in", sw->swap_blocks_in);
    json_int(j, "swap_bytes_out", sw->swap_blocks_out * block);
    json_int(j, "swap_bytes_in", sw->swap_blocks_in * block);
    json_int(j, "swap_fallbacks", sw->swap_fallbacks);
    json_int(j, "swapped_tokens", sw->swapped_tokens);
    json_double(j, "swapped_tokens_recompute_flops", sw->swapped_flops);
}
