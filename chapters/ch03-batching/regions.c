/* Chapter 3: where a request's region goes. The arena's pieces (first fit,
 * or the buddy extension), placing a region, and saying why one does not
 * fit, with the external fragmentation that refusal counts. Whom to place
 * is the lab's batching_admit() (solutions/ch03/batching_admit.c); when,
 * batching.c's. */
#include "batching.h"

#include <string.h>

#include "ext/buddy_arena.h" /* arena_ops(): buddy_arena_ops() */

/* ------------------------------------------------------------ --arena */

int arena_kind_parse(const char *name, ArenaKind *kind, Err *err)
{
    if (!name || strcmp(name, "first-fit") == 0)
        *kind = ARENA_FIRST_FIT;
    else if (strcmp(name, "buddy") == 0)
        *kind = ARENA_BUDDY;
    else
        return err_set(err, "--arena: '%s' is not one of first-fit, buddy", name);
    return 0;
}

const char *arena_kind_name(ArenaKind kind)
{
    return kind == ARENA_BUDDY ? "buddy" : "first-fit";
}

/* ------------------------------------------------------------ the arena */

/* First fit (kv_arena.h): the chapter's own allocator. Regions are exact
 * sizes, placed in the first hole that holds them. */

static int first_fit_slots(int tokens)
{
    return tokens;
}

static size_t first_fit_largest_placeable(size_t budget, size_t bytes_per_token)
{
    (void)bytes_per_token;
    return budget; /* the whole budget is one hole at first */
}

static int first_fit_take(BatchingState *b, int tokens, KvRegion *reg)
{
    size_t offset;
    if (kv_arena_alloc(&b->arena, (size_t)tokens * b->bytes_per_token, &offset) != 0)
        return -1;
    *reg = (KvRegion){.offset = offset, .tokens = tokens, .slots = tokens};
    return 0;
}

static int first_fit_give_back(BatchingState *b, const KvRegion *reg, Err *err)
{
    return kv_arena_release(&b->arena, reg->offset, (size_t)reg->tokens * b->bytes_per_token, err);
}

static size_t first_fit_free_bytes(const BatchingState *b)
{
    return b->arena.free_bytes;
}

static int first_fit_free_pieces(const BatchingState *b)
{
    return b->arena.n_holes;
}

static size_t first_fit_largest_free(const BatchingState *b)
{
    return kv_arena_largest_hole(&b->arena);
}

static size_t first_fit_free_bytes_below(const BatchingState *b, size_t bytes)
{
    return kv_arena_free_in_holes_below(&b->arena, bytes);
}

static const ArenaOps FIRST_FIT = {
    .slots = first_fit_slots,
    .largest_placeable = first_fit_largest_placeable,
    .take = first_fit_take,
    .give_back = first_fit_give_back,
    .free_bytes = first_fit_free_bytes,
    .free_pieces = first_fit_free_pieces,
    .largest_free = first_fit_largest_free,
    .free_bytes_below = first_fit_free_bytes_below,
};

const ArenaOps *arena_ops(ArenaKind kind)
{
    if (kind == ARENA_BUDDY) /* --arena buddy (ext/buddy_arena.c) */
        return buddy_arena_ops();
    return &FIRST_FIT;
}

/* The core asks whichever allocator `--arena` chose. */

int arena_region_slots(ArenaKind kind, int tokens)
{
    return arena_ops(kind)->slots(tokens);
}

size_t batching_free_bytes(const BatchingState *b)
{
    return arena_ops(b->arena_kind)->free_bytes(b);
}

int batching_free_pieces(const BatchingState *b)
{
    return arena_ops(b->arena_kind)->free_pieces(b);
}

int batching_take_region(BatchingState *b, int tokens, KvRegion *reg)
{
    return arena_ops(b->arena_kind)->take(b, tokens, reg);
}

int batching_give_back_region(BatchingState *b, const KvRegion *reg, Err *err)
{
    return arena_ops(b->arena_kind)->give_back(b, reg, err);
}

void batching_refused(BatchingState *b, const ServingRun *run, const Request *r, size_t bytes, const char *action)
{
    const ArenaOps *arena = arena_ops(b->arena_kind);
    char want[32], free_total[32], hole[32];
    size_t free_bytes = arena->free_bytes(b), largest = arena->largest_free(b);
    cli_format_bytes(want, sizeof want, (double)bytes);
    cli_format_bytes(free_total, sizeof free_total, (double)free_bytes);
    cli_format_bytes(hole, sizeof hole, (double)largest);
    b->last_refusal_fragmented = free_bytes >= bytes;
    if (free_bytes >= bytes) {
        b->stats.refusals_fragmentation++;
        if (!b->step_external_seen) {
            b->step_external = arena->free_bytes_below(b, bytes);
            b->step_external_seen = 1;
            b->stats.external_steps++;
        }
        snprintf(b->last_refusal, sizeof b->last_refusal,
                 "step %ld: request %d %s: needs %s; %s free in total but the largest hole is %s", run->step,
                 r->spec->id, action, want, free_total, hole);
    } else {
        b->stats.refusals_no_space++;
        snprintf(b->last_refusal, sizeof b->last_refusal, "step %ld: request %d %s: needs %s but only %s is free",
                 run->step, r->spec->id, action, want, free_total);
    }
}

/* ------------------------------------------------------------ regions */

float *batching_plane(const BatchingState *b, const KvRegion *reg, int layer, int which)
{
    size_t kv_dim = (size_t)model_kv_dim(&b->cfg);
    return b->storage + reg->offset / sizeof(float) + (size_t)(2 * layer + which) * (size_t)reg->tokens * kv_dim;
}

int batching_place(BatchingState *b, ServingRun *run, Request *r, int tokens)
{
    KvRegion reg;
    if (tokens <= 0 || batching_take_region(b, tokens, &reg) != 0) {
        size_t bytes = tokens > 0 ? (size_t)arena_region_slots(b->arena_kind, tokens) * b->bytes_per_token : 0;
        batching_refused(b, run, r, bytes, "waits");
        return -1;
    }
    b->regions[r->index] = reg;
    /* What the request holds: with a buddy block, its rounding too. */
    kv_track_set_reserved(&r->kv, (size_t)reg.slots * b->bytes_per_token);
    b->stats.reservations++;
    b->stats.reserved_tokens_sum += tokens;
    return 0;
}
