/* GENERATED from solutions/ch04/paged_can_admit.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=4`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 4 lab: paged_can_admit(), the admission rule with its watermark.
 * exercises/ch04/paged_can_admit.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=4` grades yours. */
#include "lab.h"
#include "paged.h"

int paged_can_admit(int n_free, int needed, int watermark_blocks)
{
    // TODO(lab ch04.admit): admit only if taking `needed` blocks still leaves at least `watermark_blocks` free
    (void)n_free; (void)needed; (void)watermark_blocks;
    LAB_TODO("the admission rule: enough free blocks, with the watermark to spare");
    return 0;
}
