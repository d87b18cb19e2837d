/* Chapter 4: the pool's books, checked against the block tables
 * (paged_check_invariants(), declared in block_pool.h). A debugging aid
 * for the labs and the tests: it recounts every block from the tables and
 * the free stack, independently of the reference counts it checks. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "block_pool.h"

/* Prints the broken invariant, the block (when one is to blame; -1: none)
 * and the details, in one line, and returns -1. */
__attribute__((format(printf, 4, 5))) static int broken(FILE *log, const char *invariant, int block, const char *fmt,
                                                        ...)
{
    if (!log)
        return -1;
    fprintf(log, "paged_check_invariants: broken: %s", invariant);
    if (block >= 0)
        fprintf(log, ", at block %d", block);
    fputs(": ", log);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(log, fmt, ap);
    va_end(ap);
    fputc('\n', log);
    return -1;
}

/* Counts, in @p holders, the entries of every table that name each
 * block. Returns the first entry out of range, or -1. */
static int count_holders(const BlockPool *p, const BlockTables *bt, int *holders, int *bad_table)
{
    for (int t = 0; bt && t < bt->count; t++) {
        const BlockTable *tab = &bt->tables[t];
        for (int i = 0; i < tab->n_blocks; i++) {
            int b = tab->blocks[i];
            if (b == BLOCK_HOLE)
                continue;
            if (b < 0 || b >= p->n_blocks) {
                *bad_table = t;
                return b;
            }
            holders[b]++;
        }
    }
    return -1;
}

int paged_check_invariants(const BlockPool *p, const BlockTables *bt, int all_done, FILE *log)
{
    /* Outside the memory ledger (mem.h): a check must not change the
     * figures the run reports. */
    int *holders = calloc((size_t)p->n_blocks, sizeof *holders);      /* [n_blocks] table entries naming each */
    unsigned char *on_stack = calloc((size_t)p->n_blocks, 1);         /* [n_blocks] 1: on the free stack */
    if (!holders || !on_stack) {
        free(holders);
        free(on_stack);
        return broken(log, "nothing (out of memory for the check)", -1, "%d blocks", p->n_blocks);
    }
    int rc = 0, bad_table = -1, bad;
    if ((bad = count_holders(p, bt, holders, &bad_table)) != -1) {
        rc = broken(log, "every table entry names a block of the pool", -1, "table %d holds block id %d", bad_table,
                    bad);
        goto done;
    }
    if (p->n_free < 0 || p->n_free > p->n_blocks || p->n_parked < 0) {
        rc = broken(log, "free + held + cached == pool", -1, "n_free is %d, n_parked %d", p->n_free, p->n_parked);
        goto done;
    }
    /* 1. Every block is free, held or cached, and exactly one of them. */
    for (int i = 0; i < p->n_free; i++) {
        int b = p->free_stack[i];
        if (b < 0 || b >= p->n_blocks) {
            rc = broken(log, "the free stack holds blocks of the pool", -1, "free_stack[%d] is %d", i, b);
            goto done;
        }
        if (on_stack[b]) {
            rc = broken(log, "every block is free, held or cached, exactly once", b,
                        "it is on the free stack twice (again at free_stack[%d] of %d)", i, p->n_free);
            goto done;
        }
        on_stack[b] = 1;
    }
    int held = 0, cached = 0;
    for (int b = 0; b < p->n_blocks; b++) {
        if (p->ref_count[b] < 0) {
            rc = broken(log, "every block is free, held or cached, exactly once", b,
                        "reference count %d: neither held nor free (%d tables hold it)", p->ref_count[b], holders[b]);
            goto done;
        }
        if (on_stack[b] && p->ref_count[b] > 0) {
            rc = broken(log, "every block is free, held or cached, exactly once", b,
                        "it is on the free stack and held (reference count %d, %d tables)", p->ref_count[b],
                        holders[b]);
            goto done;
        }
        /* 2. Reference counts equal the number of tables holding the block. */
        if (p->ref_count[b] != holders[b]) {
            rc = broken(log, "reference count == tables holding the block", b, "reference count %d, %d tables hold it",
                        p->ref_count[b], holders[b]);
            goto done;
        }
        held += p->ref_count[b] > 0;
        cached += !on_stack[b] && p->ref_count[b] == 0;
    }
    /* 3. Free + held + cached == pool: a block off the stack with no
     * holder must be one the cache above the pool parked (n_parked). */
    if (cached != p->n_parked) {
        int lost = -1;
        for (int b = 0; b < p->n_blocks && lost < 0; b++)
            if (!on_stack[b] && p->ref_count[b] == 0)
                lost = b;
        rc = cached > p->n_parked
                 ? broken(log, "free + held + cached == pool", lost,
                          "no table holds it and it is not on the free stack, but the pool counts only %d parked "
                          "blocks (%d found: a block lost)", p->n_parked, cached)
                 : broken(log, "free + held + cached == pool", -1,
                          "the pool counts %d parked blocks, but only %d are off the free stack with no holder (a "
                          "block counted twice as free)", p->n_parked, cached);
        goto done;
    }
    /* 4. Nothing is held once every request is done. */
    if (all_done && held > 0) {
        int first = 0;
        while (p->ref_count[first] == 0)
            first++;
        rc = broken(log, "nothing held once every request is done", first, "%d blocks still held (this one by %d)",
                    held, p->ref_count[first]);
    }
done:
    free(holders);
    free(on_stack);
    return rc;
}
