/* paged_check_invariants() (chapter 4, block_pool.h): each invariant
 * broken by hand, on a pool and tables set up field by field (no lab
 * function), must be reported in one line that names the invariant and
 * the block; a consistent pool, with parked blocks and holes, must pass. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "block_pool.h"
#include "suites.h"

enum { N_BLOCKS = 6, N_TABLES = 3 };

typedef struct {
    BlockPool p;
    BlockTables bt;
} Books;

static void books_open(Books *w)
{
    Err err = {{0}};
    BlockShape s = {.block_size = 4, .n_layers = 1, .kv_dim = 2, .elem_bytes = sizeof(float)};
    ck_assert(block_pool_init(&w->p, &s, N_BLOCKS, 0, &err) == 0);
    ck_assert(block_tables_init(&w->bt, N_TABLES, N_BLOCKS, &err) == 0);
}

static void books_close(Books *w)
{
    block_tables_free(&w->bt);
    block_pool_free(&w->p);
}

/* Table t takes the block on top of the free stack, as an allocation does. */
static int take(Books *w, int t)
{
    int b = w->p.free_stack[--w->p.n_free];
    w->p.ref_count[b] = 1;
    BlockTable *tab = &w->bt.tables[t];
    tab->blocks[tab->n_blocks++] = b;
    return b;
}

/* Table t shares table from's block i, as a fork does. */
static void share(Books *w, int t, int from, int i)
{
    int b = w->bt.tables[from].blocks[i];
    w->p.ref_count[b]++;
    BlockTable *tab = &w->bt.tables[t];
    tab->blocks[tab->n_blocks++] = b;
}

/* Runs the check; returns its status and leaves its output in @p out. */
static int check(const Books *w, int all_done, char *out, size_t size)
{
    FILE *f = tmpfile();
    ck_assert(f != NULL);
    int rc = paged_check_invariants(&w->p, &w->bt, all_done, f);
    rewind(f);
    size_t n = fread(out, 1, size - 1, f);
    out[n] = '\0';
    fclose(f);
    return rc;
}

/* The check must fail with one line naming @p invariant and @p block. */
static void expect_broken(const Books *w, int all_done, const char *invariant, int block, const char *case_name)
{
    char out[512], at[32] = "";
    int rc = check(w, all_done, out, sizeof out);
    if (block >= 0)
        snprintf(at, sizeof at, "at block %d:", block);
    ck_assert_msg(rc == -1, "%s: the check passed", case_name);
    ck_assert_msg(strstr(out, invariant) && strstr(out, at), "%s: expected '%s' %s in: %s", case_name, invariant, at,
                  out);
    ck_assert_msg(strchr(out, '\n') == out + strlen(out) - 1, "%s: expected one line, got: %s", case_name, out);
}

START_TEST(consistent_books_pass)
{
    Books w;
    books_open(&w);
    char out[512];
    ck_assert_int_eq(check(&w, 1, out, sizeof out), 0); /* an empty pool, every request done */
    take(&w, 0);
    take(&w, 0);
    share(&w, 1, 0, 0);
    take(&w, 1);
    /* A parked block: off the stack, no holder, counted by n_parked. */
    int parked = take(&w, 2);
    w.bt.tables[2].n_blocks = 0;
    w.p.ref_count[parked] = 0;
    w.p.n_parked = 1;
    /* A hole (chapter 6) names no block. */
    w.bt.tables[2].blocks[0] = BLOCK_HOLE;
    w.bt.tables[2].n_blocks = 1;
    ck_assert_msg(check(&w, 0, out, sizeof out) == 0 && out[0] == '\0', "consistent books reported: %s", out);
    ck_assert_int_eq(paged_check_invariants(&w.p, &w.bt, 0, NULL), 0);
    books_close(&w);
}
END_TEST

START_TEST(each_broken_invariant_is_named_with_its_block)
{
    Books w;
    /* A reference count one too high (a fork that forgot its table). */
    books_open(&w);
    int b = take(&w, 0);
    w.p.ref_count[b] = 2;
    expect_broken(&w, 0, "reference count == tables holding the block", b, "count too high");
    books_close(&w);
    /* One too low (a release too many, while a table still holds it). */
    books_open(&w);
    b = take(&w, 0);
    share(&w, 1, 0, 0);
    w.p.ref_count[b] = 1;
    expect_broken(&w, 0, "reference count == tables holding the block", b, "count too low");
    books_close(&w);
    /* A free block pushed twice (a double free). */
    books_open(&w);
    take(&w, 0);
    b = w.p.free_stack[0];
    w.p.free_stack[w.p.n_free++] = b;
    expect_broken(&w, 0, "exactly once", b, "free twice");
    books_close(&w);
    /* Held and on the free stack (released while a table holds it). */
    books_open(&w);
    b = take(&w, 0);
    w.p.free_stack[w.p.n_free++] = b;
    expect_broken(&w, 0, "exactly once", b, "free and held");
    books_close(&w);
    /* A negative count. */
    books_open(&w);
    b = w.p.free_stack[2];
    w.p.ref_count[b] = -1;
    expect_broken(&w, 0, "exactly once", b, "negative count");
    books_close(&w);
    /* A block lost: its last holder let go, and it went nowhere. */
    books_open(&w);
    take(&w, 0);
    b = take(&w, 0);
    w.bt.tables[0].n_blocks = 1;
    w.p.ref_count[b] = 0;
    expect_broken(&w, 0, "free + held + cached == pool", b, "lost block");
    books_close(&w);
    /* Counted twice as free (sglang #35270): parked, and pushed too. */
    books_open(&w);
    b = take(&w, 0);
    w.bt.tables[0].n_blocks = 0;
    w.p.ref_count[b] = 0;
    w.p.free_stack[w.p.n_free++] = b;
    w.p.n_parked = 1;
    expect_broken(&w, 0, "counted twice as free", -1, "counted twice");
    books_close(&w);
    /* Held when every request is done. */
    books_open(&w);
    b = take(&w, 2);
    expect_broken(&w, 1, "nothing held once every request is done", b, "held at the end");
    char out[512];
    ck_assert_int_eq(check(&w, 0, out, sizeof out), 0); /* not done yet: fine */
    books_close(&w);
    /* A table entry outside the pool. */
    books_open(&w);
    take(&w, 0);
    w.bt.tables[0].blocks[0] = N_BLOCKS;
    expect_broken(&w, 0, "every table entry names a block of the pool", -1, "entry out of range");
    books_close(&w);
}
END_TEST

Suite *suite_invariants(void)
{
    Suite *s = suite_create("invariants");
    TCase *tc = tcase_create("paged_check_invariants");
    tcase_add_test(tc, consistent_books_pass);
    tcase_add_test(tc, each_broken_invariant_is_named_with_its_block);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(invariants)
