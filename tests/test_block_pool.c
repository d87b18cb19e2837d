/* Chapter 4's block allocator, on its own (no model): allocation and the
 * free list, reference counts, block tables and the slot mapping,
 * copy-on-write, running out of blocks, and a randomized check of long
 * sequences of operations against an independent model of who holds what. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "block_pool.h"
#include "mem.h"
#include "suites.h"

static BlockShape small_shape(int block_size)
{
    return (BlockShape){.block_size = block_size, .n_layers = 2, .kv_dim = 3, .elem_bytes = sizeof(float)};
}

START_TEST(shape_and_sizes)
{
    /* stories260K: 5 layers, kv_dim 32, f32: 16 tokens x 1280 B. */
    BlockShape s = {.block_size = 16, .n_layers = 5, .kv_dim = 32, .elem_bytes = 4};
    ck_assert_uint_eq(block_shape_bytes(&s), 20480);
    /* LLaMA-13B in f16: 40 layers x 5120 x 2 x 2 B = 800 KiB per token. */
    BlockShape big = {.block_size = 16, .n_layers = 40, .kv_dim = 5120, .elem_bytes = 2};
    ck_assert_uint_eq(block_shape_bytes(&big), 16u * 819200u);
    ck_assert_int_eq(block_count_for_tokens(0, 16), 0);
    ck_assert_int_eq(block_count_for_tokens(1, 16), 1);
    ck_assert_int_eq(block_count_for_tokens(16, 16), 1);
    ck_assert_int_eq(block_count_for_tokens(17, 16), 2);
    ck_assert_int_eq(block_count_for_tokens(7, 1), 7);
}
END_TEST

START_TEST(bad_shapes_refused)
{
    BlockPool p;
    Err err = {{0}};
    int bad_sizes[] = {0, 3, 12, 512, -4};
    for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++) {
        BlockShape s = small_shape(bad_sizes[i]);
        ck_assert_int_eq(block_pool_init(&p, &s, 4, 1, &err), -1);
        ck_assert_msg(strstr(err.msg, "power of two"), "%s", err.msg);
    }
    BlockShape s = small_shape(4);
    ck_assert_int_eq(block_pool_init(&p, &s, 0, 1, &err), -1);
    s.elem_bytes = 0; /* no element size */
    ck_assert_int_eq(block_pool_init(&p, &s, 4, 1, &err), -1);
    s.elem_bytes = 1;
    s.scale_bytes = -4;
    ck_assert_int_eq(block_pool_init(&p, &s, 4, 1, &err), -1);
    s.scale_bytes = 0;
    ck_assert_int_eq(block_pool_init(&p, &s, 4, 0, &err), 0);
    block_pool_free(&p);
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

START_TEST(alloc_until_empty_then_reuse)
{
    long live = mem_live_buffers();
    BlockPool p;
    Err err = {{0}};
    BlockShape s = small_shape(4);
    ck_assert_int_eq(block_pool_init(&p, &s, 5, 1, &err), 0);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 5 * block_shape_bytes(&s));
    ck_assert_uint_eq(mem_current(MEM_KV_METADATA, MEM_HOST), 2 * 5 * sizeof(int));
    int seen[5] = {0};
    for (int i = 0; i < 5; i++) {
        int b = block_pool_alloc(&p);
        ck_assert_int_ge(b, 0);
        ck_assert_int_lt(b, 5);
        ck_assert_msg(!seen[b], "block %d handed out twice", b);
        seen[b] = 1;
        ck_assert_int_eq(p.ref_count[b], 1);
        ck_assert_int_eq(p.n_free, 4 - i);
    }
    ck_assert_int_eq(block_pool_alloc(&p), -1); /* empty */
    ck_assert_int_eq(block_pool_used(&p), 5);
    ck_assert_int_eq(block_pool_release(&p, 3), 0);
    ck_assert_int_eq(p.n_free, 1);
    ck_assert_int_eq(block_pool_alloc(&p), 3); /* the freed block comes back */
    /* Double free: a block with no holder cannot be released again. */
    ck_assert_int_eq(block_pool_release(&p, 2), 0);
    ck_assert_int_eq(block_pool_release(&p, 2), -1);
    ck_assert_int_eq(p.n_free, 1);
    ck_assert_int_eq(p.ref_count[2], 0);
    /* Shared block: free only when its last holder lets go. */
    block_pool_retain(&p, 4);
    ck_assert_int_eq(block_pool_release(&p, 4), 1);
    ck_assert_int_eq(p.n_free, 1);
    ck_assert_int_eq(block_pool_release(&p, 4), 0);
    ck_assert_int_eq(p.n_free, 2);
    block_pool_free(&p);
    ck_assert_int_eq(mem_live_buffers(), live);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
}
END_TEST

START_TEST(accounting_only_pool)
{
    BlockPool p;
    Err err = {{0}};
    BlockShape s = {.block_size = 16, .n_layers = 32, .kv_dim = 4096, .elem_bytes = 2}; /* LLaMA-7B, f16 */
    ck_assert_int_eq(block_pool_init(&p, &s, 6000, 0, &err), 0);
    ck_assert_ptr_null(p.storage);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
    ck_assert_uint_eq(p.bytes_per_block, 8u << 20); /* 16 tokens x 512 KiB */
    int a = block_pool_alloc(&p), b = block_pool_alloc(&p);
    block_pool_copy(&p, b, a); /* no storage: nothing to copy, nothing to crash */
    ck_assert_int_eq(block_pool_used(&p), 2);
    block_pool_free(&p);
}
END_TEST

START_TEST(slot_mapping_at_block_boundaries)
{
    int sizes[] = {1, 2, 16, 256};
    for (size_t k = 0; k < 4; k++) {
        int bs = sizes[k];
        int ids[3] = {7, 2, 5};
        BlockTable t = {.blocks = ids, .n_blocks = 3, .capacity = 3};
        struct {
            int pos, block, offset;
        } cases[] = {{0, 7, 0},          {bs - 1, 7, bs - 1}, {bs, 2, 0},
                     {2 * bs - 1, 2, bs - 1}, {2 * bs, 5, 0},  {3 * bs - 1, 5, bs - 1}};
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            int offset = -1;
            int block = block_table_slot(&t, cases[c].pos, bs, &offset);
            ck_assert_msg(block == cases[c].block && offset == cases[c].offset,
                          "block size %d, position %d: expected (block %d, offset %d), got (%d, %d)", bs,
                          cases[c].pos, cases[c].block, cases[c].offset, block, offset);
        }
    }
}
END_TEST

START_TEST(grow_is_all_or_nothing)
{
    BlockPool p;
    BlockTables bt;
    Err err = {{0}};
    BlockShape s = small_shape(4);
    ck_assert_int_eq(block_pool_init(&p, &s, 3, 1, &err), 0);
    ck_assert_int_eq(block_tables_init(&bt, 2, 4, &err), 0);
    BlockTable *a = &bt.tables[0], *b = &bt.tables[1];
    ck_assert_int_eq(block_table_grow(&p, a, 9), 0); /* 9 tokens: 3 blocks */
    ck_assert_int_eq(a->n_blocks, 3);
    ck_assert_int_eq(p.n_free, 0);
    ck_assert_int_eq(block_table_blocks_to_write(&p, a, 9), 0);
    ck_assert_int_eq(block_table_blocks_to_write(&p, a, 12), 1);
    ck_assert_int_eq(block_table_grow(&p, b, 1), -1); /* out of blocks */
    ck_assert_int_eq(b->n_blocks, 0);
    ck_assert_int_eq(block_table_release(&p, a, NULL, NULL), 0);
    ck_assert_int_eq(p.n_free, 3);
    ck_assert_int_eq(block_table_grow(&p, b, 4), 0);
    ck_assert_int_eq(block_table_grow(&p, a, 12), -1); /* needs 3, 2 free: nothing taken */
    ck_assert_int_eq(a->n_blocks, 0);
    ck_assert_int_eq(p.n_free, 2);
    ck_assert_int_eq(block_table_grow(&p, b, 17), -1); /* beyond the table's capacity of 4 blocks */
    block_table_release(&p, b, NULL, NULL);
    block_tables_free(&bt);
    block_pool_free(&p);
    ck_assert_uint_eq(mem_current(MEM_KV_METADATA, MEM_HOST), 0);
}
END_TEST

/* Fills every float of one block with a value that says which it is. */
static void paint_block(BlockPool *p, int block, float value)
{
    for (size_t i = 0; i < p->floats_per_block; i++)
        p->storage[(size_t)block * p->floats_per_block + i] = value + (float)i;
}

static int block_is(const BlockPool *p, int block, const float *expect)
{
    return memcmp(p->storage + (size_t)block * p->floats_per_block, expect, p->floats_per_block * sizeof(float)) ==
           0;
}

START_TEST(copy_on_write_copies_exactly_the_written_block)
{
    BlockPool p;
    BlockTables bt;
    Err err = {{0}};
    BlockShape s = small_shape(4);
    ck_assert_int_eq(block_pool_init(&p, &s, 8, 1, &err), 0);
    ck_assert_int_eq(block_tables_init(&bt, 2, 4, &err), 0);
    BlockTable *parent = &bt.tables[0], *child = &bt.tables[1];
    ck_assert_int_eq(block_table_grow(&p, parent, 10), 0); /* blocks for 0-3, 4-7, 8-9 */
    for (int i = 0; i < 3; i++)
        paint_block(&p, parent->blocks[i], 1000.0f * (float)(i + 1));
    block_table_fork(&p, parent, child);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(child->blocks[i], parent->blocks[i]);
        ck_assert_int_eq(p.ref_count[parent->blocks[i]], 2);
    }
    ck_assert_int_eq(block_table_blocks_to_write(&p, child, 5), 1);
    float *before = malloc((size_t)p.n_blocks * p.floats_per_block * sizeof(float));
    memcpy(before, p.storage, (size_t)p.n_blocks * p.floats_per_block * sizeof(float));

    int copied = 0, free_before = p.n_free;
    ck_assert_int_eq(block_table_make_writable(&p, child, 5, &copied), 0); /* position 5: logical block 1 */
    ck_assert_int_eq(copied, 1);
    ck_assert_int_eq(p.n_free, free_before - 1); /* exactly one block taken */
    int fresh = child->blocks[1], shared = parent->blocks[1];
    ck_assert_int_ne(fresh, shared);
    ck_assert_int_eq(child->blocks[0], parent->blocks[0]); /* the others are still shared */
    ck_assert_int_eq(child->blocks[2], parent->blocks[2]);
    ck_assert_int_eq(p.ref_count[parent->blocks[0]], 2);
    ck_assert_int_eq(p.ref_count[shared], 1);
    ck_assert_int_eq(p.ref_count[fresh], 1);
    ck_assert_int_eq(p.ref_count[parent->blocks[2]], 2);
    /* The copy holds the original's bytes, and no other block changed. */
    ck_assert(block_is(&p, fresh, before + (size_t)shared * p.floats_per_block));
    for (int b = 0; b < p.n_blocks; b++)
        if (b != fresh)
            ck_assert_msg(block_is(&p, b, before + (size_t)b * p.floats_per_block), "block %d changed", b);

    /* Writing the private block again copies nothing; the parent's block 1
     * is now its own as well. */
    ck_assert_int_eq(block_table_make_writable(&p, child, 6, &copied), 0);
    ck_assert_int_eq(copied, 0);
    ck_assert_int_eq(block_table_make_writable(&p, parent, 7, &copied), 0);
    ck_assert_int_eq(copied, 0);
    /* The last holder of a once-shared block writes in place. */
    ck_assert_int_eq(block_table_make_writable(&p, child, 9, &copied), 0);
    ck_assert_int_eq(copied, 1);
    ck_assert_int_eq(block_table_make_writable(&p, parent, 9, &copied), 0);
    ck_assert_int_eq(copied, 0);

    /* No block free: a write into a shared block fails and changes nothing. */
    BlockTable *extra = child;
    block_table_release(&p, extra, NULL, NULL);
    block_table_fork(&p, parent, extra);
    while (block_pool_alloc(&p) >= 0)
        ;
    int id = extra->blocks[0];
    ck_assert_int_eq(block_table_make_writable(&p, extra, 0, &copied), -1);
    ck_assert_int_eq(extra->blocks[0], id);
    ck_assert_int_eq(p.ref_count[id], 2);
    free(before);
    block_tables_free(&bt);
    block_pool_free(&p);
}
END_TEST

/* ------------------------------------------------ randomized model check */

#define R_SEQS 6
#define R_CAP 10  /* blocks per table */
#define R_BLOCKS 14

typedef struct {
    BlockPool p;
    BlockTables bt;
    int len[R_SEQS];                          /* tokens each sequence holds */
    float expect[R_SEQS][R_CAP * 8];          /* the value written at each position */
    int freed_reported[R_BLOCKS];             /* on_free calls per block since the last check */
    int copies;                               /* copy-on-write copies made */
    unsigned long long rng;
} World;

static unsigned rnd(World *w, unsigned n)
{
    w->rng = w->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)(w->rng >> 33) % n;
}

static void note_freed(void *ctx, int block)
{
    World *w = ctx;
    w->freed_reported[block]++;
}

/* Check's assertions record where they passed (a write to a pipe per
 * call), so the hot checks below test first and assert only on failure. */
#define EXPECT(cond, ...)               \
    do {                                \
        if (!(cond))                    \
            ck_abort_msg(__VA_ARGS__);  \
    } while (0)

/* Holders of each block according to the tables alone (the independent
 * model), against the pool's reference counts and free list. */
static void check_invariants(World *w, const char *after)
{
    int holders[R_BLOCKS] = {0}, in_free[R_BLOCKS] = {0};
    for (int s = 0; s < R_SEQS; s++) {
        const BlockTable *t = &w->bt.tables[s];
        EXPECT(t->n_blocks == block_count_for_tokens(w->len[s], w->p.shape.block_size),
               "after %s: sequence %d has %d tokens in %d blocks", after, s, w->len[s], t->n_blocks);
        for (int i = 0; i < t->n_blocks; i++) {
            EXPECT(t->blocks[i] >= 0 && t->blocks[i] < R_BLOCKS, "after %s: block id %d", after, t->blocks[i]);
            holders[t->blocks[i]]++;
        }
    }
    for (int i = 0; i < w->p.n_free; i++) {
        int b = w->p.free_stack[i];
        EXPECT(in_free[b] == 0, "after %s: block %d is on the free list twice", after, b);
        in_free[b] = 1;
    }
    for (int b = 0; b < R_BLOCKS; b++) {
        EXPECT(w->p.ref_count[b] == holders[b], "after %s: block %d has refcount %d but %d tables hold it", after, b,
               w->p.ref_count[b], holders[b]);
        EXPECT(in_free[b] == (holders[b] == 0), "after %s: block %d held by %d tables, on free list %d", after, b,
               holders[b], in_free[b]);
    }
    /* What each sequence reads through its table is what it wrote: a write
     * by one sequence is never seen by another. */
    for (int s = 0; s < R_SEQS; s++)
        for (int pos = 0; pos < w->len[s]; pos++) {
            int offset, block = block_table_slot(&w->bt.tables[s], pos, w->p.shape.block_size, &offset);
            for (int layer = 0; layer < 2; layer++) {
                const float *k = block_pool_keys(&w->p, block, layer) + offset * 3;
                const float *v = block_pool_values(&w->p, block, layer) + offset * 3;
                EXPECT(k[0] == w->expect[s][pos] && v[2] == -w->expect[s][pos],
                       "after %s: sequence %d position %d reads %g, wrote %g", after, s, pos, (double)k[0],
                       (double)w->expect[s][pos]);
            }
        }
}

static void write_token(World *w, int s, float value)
{
    int pos = w->len[s], offset;
    int block = block_table_slot(&w->bt.tables[s], pos, w->p.shape.block_size, &offset);
    for (int layer = 0; layer < 2; layer++)
        for (int e = 0; e < 3; e++) {
            block_pool_keys(&w->p, block, layer)[offset * 3 + e] = value;
            block_pool_values(&w->p, block, layer)[offset * 3 + e] = -value;
        }
    w->expect[s][pos] = value;
    w->len[s]++;
}

/* Append one token: grow, copy on write, write. Returns 0 when the pool was
 * out of blocks (and checks that nothing changed then). */
static int op_append(World *w, int s, float value)
{
    BlockTable *t = &w->bt.tables[s];
    int bs = w->p.shape.block_size, pos = w->len[s];
    if (pos >= R_CAP * bs)
        return 1;
    int logical = pos / bs;
    int shared = logical < t->n_blocks && w->p.ref_count[t->blocks[logical]] > 1;
    int need = block_table_blocks_to_write(&w->p, t, pos);
    EXPECT(need == (logical >= t->n_blocks) + shared, "blocks to write %d, expected %d", need,
           (logical >= t->n_blocks) + shared);
    if (need > w->p.n_free) {
        int free_before = w->p.n_free, n_before = t->n_blocks;
        if (logical >= t->n_blocks)
            EXPECT(block_table_grow(&w->p, t, pos + 1) == -1, "grow succeeded with %d free blocks", w->p.n_free);
        EXPECT(w->p.n_free == free_before, "a failed grow took blocks");
        EXPECT(t->n_blocks == n_before, "a failed grow changed the table");
        return 0;
    }
    int copied;
    EXPECT(block_table_grow(&w->p, t, pos + 1) == 0, "grow failed with %d free blocks", w->p.n_free);
    EXPECT(block_table_make_writable(&w->p, t, pos, &copied) == 0, "copy-on-write failed with %d free blocks",
           w->p.n_free);
    EXPECT(copied == shared, "copied %d, block shared %d", copied, shared);
    w->copies += copied;
    write_token(w, s, value);
    return 1;
}

static void op_release(World *w, int s)
{
    int holders_before[R_BLOCKS];
    memcpy(holders_before, w->p.ref_count, sizeof holders_before);
    memset(w->freed_reported, 0, sizeof w->freed_reported);
    const BlockTable *t = &w->bt.tables[s];
    int mine[R_BLOCKS] = {0};
    for (int i = 0; i < t->n_blocks; i++)
        mine[t->blocks[i]]++;
    EXPECT(block_table_release(&w->p, &w->bt.tables[s], note_freed, w) == 0, "double free releasing sequence %d", s);
    for (int b = 0; b < R_BLOCKS; b++)
        EXPECT(w->freed_reported[b] == (mine[b] > 0 && holders_before[b] == mine[b]),
               "block %d reported freed %d times; it had %d holders, %d of them this table", b,
               w->freed_reported[b], holders_before[b], mine[b]);
    w->len[s] = 0;
}

static void op_fork(World *w, int from, int to)
{
    op_release(w, to);
    block_table_fork(&w->p, &w->bt.tables[from], &w->bt.tables[to]);
    w->len[to] = w->len[from];
    memcpy(w->expect[to], w->expect[from], sizeof w->expect[from]);
}

START_TEST(random_operations_never_leak_or_share_wrongly)
{
    int sizes[] = {1, 2, 4, 8};
    for (int round = 0; round < 40; round++) {
        World *w = calloc(1, sizeof *w);
        w->rng = 0x9e3779b97f4a7c15ull * (unsigned long long)(round + 1);
        Err err = {{0}};
        BlockShape shape = small_shape(sizes[round % 4]);
        ck_assert_int_eq(block_pool_init(&w->p, &shape, R_BLOCKS, 1, &err), 0);
        ck_assert_int_eq(block_tables_init(&w->bt, R_SEQS, R_CAP, &err), 0);
        int out_of_blocks = 0, forks = 0;
        for (int step = 0; step < 1000; step++) {
            /* Larger blocks hold more tokens, so let go less often, or
             * the pool would never run dry. */
            int s = (int)rnd(w, R_SEQS), kind = (int)rnd(w, 100), churn = 24 / shape.block_size;
            const char *what;
            if (kind >= churn) {
                what = "append";
                if (!op_append(w, s, (float)(round * 100000 + step + 1)))
                    out_of_blocks++;
            } else if (kind < churn / 2) {
                int to = (int)rnd(w, R_SEQS);
                what = "fork";
                if (to != s) {
                    op_fork(w, s, to);
                    forks++;
                }
            } else {
                what = step % 2 ? "free" : "preempt"; /* the same to the pool: every block let go */
                op_release(w, s);
            }
            check_invariants(w, what);
        }
        /* With one token per block a write never lands in a shared block. */
        ck_assert_msg(out_of_blocks > 0 && forks > 0 && (w->copies > 0 || shape.block_size == 1),
                      "round %d exercised too little (out of blocks %d, forks %d, copies %d)", round, out_of_blocks,
                      forks, w->copies);
        for (int s = 0; s < R_SEQS; s++)
            op_release(w, s);
        check_invariants(w, "releasing everything");
        ck_assert_int_eq(w->p.n_free, R_BLOCKS);
        for (int b = 0; b < R_BLOCKS; b++)
            ck_assert_int_eq(w->p.ref_count[b], 0);
        block_tables_free(&w->bt);
        block_pool_free(&w->p);
        free(w);
    }
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

Suite *suite_block_pool(void)
{
    Suite *s = suite_create("block_pool");
    TCase *tc = tcase_create("block_pool");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, shape_and_sizes);
    tcase_add_test(tc, bad_shapes_refused);
    tcase_add_test(tc, alloc_until_empty_then_reuse);
    tcase_add_test(tc, accounting_only_pool);
    tcase_add_test(tc, slot_mapping_at_block_boundaries);
    tcase_add_test(tc, grow_is_all_or_nothing);
    tcase_add_test(tc, copy_on_write_copies_exactly_the_written_block);
    tcase_add_test(tc, random_operations_never_leak_or_share_wrongly);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_LAB_SUITE(block_pool)
