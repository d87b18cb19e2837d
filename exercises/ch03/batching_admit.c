/* GENERATED from solutions/ch03/batching_admit.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=3`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 3 lab: batching_admit(), whom a batch admits (first come, first
 * served). exercises/ch03/batching_admit.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=3` grades yours. */
#include "batching.h"
#include "lab.h"

int batching_admit(BatchingState *b, ServingRun *run)
{
    int admitted = 0;
    // TODO(lab ch03.admit): admit WAITING requests in file order, from b->first_waiting to the last arrived (run->n_arrived), while the batch has room (b->max_batch) and batching_place() fits their reservation; stop at the first refusal
    (void)b; (void)run;
    LAB_TODO("admit waiting requests in file order while their reservation fits");
    return admitted;
}
