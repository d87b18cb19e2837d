/* GENERATED from solutions/ch07/spec_rollback.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=7`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 7 lab: spec_rollback(), a table gives back the positions of its
 * rejected proposals.
 * exercises/ch07/spec_rollback.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=7` grades yours. */
#include "lab.h"
#include "scheduler.h"
#include "spec.h"

int spec_rollback(PagedServer *s, ServingRun *run, Request *r, int keep)
{
    BlockPool *p = &s->kv.pool;
    BlockTable *t = &s->kv.tables.tables[r->index];
    int freed = 0;
    // TODO(lab ch07.rollback): keep the blocks that hold positions 0..keep-1 (block_count_for_tokens()); for each block past them, from the last, drop this table's hold (block_pool_release()) and, when that was its last holder, close its history with paged_block_freed(s, &run->breakdown, block, 0) and count it
    (void)p; (void)t; (void)run;
    LAB_TODO("give back the blocks past the accepted positions");
    r->n_cached = keep;
    return freed;
}
