/* Chapter 3 extension: the regions placed by the buddy allocator.
 * Adds: the glue between the chapter's regions and buddy.c. Option:
 * --arena buddy. Taught in: book/ch03-batching.md, "Extension: the buddy
 * arena". Offsets stay bytes, as the core's books count them; the
 * allocator counts in token slots. See buddy_arena.h. */
#include "buddy_arena.h"

#include "mem.h"

/* The allocator indexes slots with ints: a larger budget is cut there. */
static int slots_of(size_t budget, size_t bytes_per_token)
{
    size_t slots = budget / bytes_per_token;
    return slots > (1u << 30) ? 1 << 30 : (int)slots;
}

/* Makes b->buddy: a buddy allocator over the budget's token slots, for a
 * full batch and the new region of a move in progress. */
static int buddy_arena_open(BatchingState *b, size_t budget, Err *err)
{
    if (!(b->buddy = mem_alloc(MEM_KV_METADATA, sizeof *b->buddy)))
        return err_set(err, "out of memory for the buddy arena");
    /* Live regions: a full batch, plus the new region of a move in progress. */
    return buddy_init(b->buddy, slots_of(budget, b->bytes_per_token), b->max_batch + 1, err);
}

/* Frees b->buddy (none: nothing). */
static void buddy_arena_close(BatchingState *b)
{
    if (b->buddy)
        buddy_free(b->buddy);
    mem_free(b->buddy);
    b->buddy = NULL;
}

/* A block for a region of @p tokens positions. */
static int buddy_arena_take(BatchingState *b, int tokens, KvRegion *reg)
{
    int slot, slots = buddy_alloc(b->buddy, tokens, &slot);
    if (slots < 0)
        return -1;
    *reg = (KvRegion){.offset = (size_t)slot * b->bytes_per_token, .tokens = tokens, .slots = slots};
    return 0;
}

/* A region's block goes back, merging with its buddy. */
static int buddy_arena_give_back(BatchingState *b, const KvRegion *reg, Err *err)
{
    return buddy_release(b->buddy, (int)(reg->offset / b->bytes_per_token), reg->slots, err);
}

/* Free bytes: the free blocks' slots. */
static size_t buddy_arena_free_bytes(const BatchingState *b)
{
    return (size_t)b->buddy->free_slots * b->bytes_per_token;
}

/* Free blocks now. */
static int buddy_arena_free_pieces(const BatchingState *b)
{
    return b->buddy->n_free;
}

/* Bytes of the largest free block. */
static size_t buddy_arena_largest_free(const BatchingState *b)
{
    return (size_t)buddy_largest_free(b->buddy) * b->bytes_per_token;
}

/* Free bytes in blocks too small for a region of @p bytes. */
static size_t buddy_arena_free_below(const BatchingState *b, size_t bytes)
{
    size_t sum = 0;
    for (int i = 0; i < b->buddy->n_free; i++) {
        size_t block = ((size_t)1 << b->buddy->free[i].order) * b->bytes_per_token;
        if (block < bytes)
            sum += block;
    }
    return sum;
}

/* The largest region a budget can ever place with blocks: its largest
 * top-level block. */
static size_t buddy_arena_largest_placeable(size_t budget, size_t bytes_per_token)
{
    if (budget / bytes_per_token == 0)
        return 0;
    return (size_t)buddy_largest_top_for(slots_of(budget, bytes_per_token)) * bytes_per_token;
}

/* batching_check()'s refusal with blocks: the smallest request's block
 * exceeds the budget's largest block. */
static int buddy_arena_refuse(const ServingRun *run, ReservePolicy policy, size_t smallest, int id, Err *err)
{
    size_t budget = serving_kv_budget(run), per_token = run->kv_bytes_per_token;
    size_t largest = buddy_arena_largest_placeable(budget, per_token);
    if (smallest <= largest)
        return 0;
    char a[32];
    return err_set(err,
                   "--kv-budget %s holds no request: the smallest block under --reserve %s, --arena buddy is %zu "
                   "positions but the largest block of the budget is %zu (request %d)",
                   cli_format_bytes(a, sizeof a, (double)budget), reserve_policy_name(policy), smallest / per_token,
                   largest / per_token, id);
}

/* Rejects @p r, whose largest block (@p bytes) exceeds the budget's
 * largest block (@p room). */
static void buddy_arena_reject(const BatchingState *b, ServingRun *run, Request *r, size_t bytes, size_t room)
{
    char need[32];
    serving_reject(run, r, "its largest block under --reserve %s, --arena buddy is %zu positions (%s) but the "
                   "largest block of the KV budget is %zu", reserve_policy_name(b->policy),
                   bytes / b->bytes_per_token, cli_format_bytes(need, sizeof need, (double)bytes),
                   room / b->bytes_per_token);
}

static const ArenaOps BUDDY = {
    .open = buddy_arena_open,
    .close = buddy_arena_close,
    .slots = buddy_block_slots,
    .largest_placeable = buddy_arena_largest_placeable,
    .refuse = buddy_arena_refuse,
    .reject = buddy_arena_reject,
    .take = buddy_arena_take,
    .give_back = buddy_arena_give_back,
    .free_bytes = buddy_arena_free_bytes,
    .free_pieces = buddy_arena_free_pieces,
    .largest_free = buddy_arena_largest_free,
    .free_bytes_below = buddy_arena_free_below,
};

const ArenaOps *buddy_arena_ops(void)
{
    return &BUDDY;
}
