/* Chapter 3 lab: batching_admit(), whom a batch admits (first come, first
 * served). exercises/ch03/batching_admit.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=3` grades yours. */
#include "batching.h"
#include "lab.h"

int batching_admit(BatchingState *b, ServingRun *run)
{
    int admitted = 0;
    // LAB BEGIN(ch03.admit): admit WAITING requests in file order, from b->first_waiting to the last arrived (run->n_arrived), while the batch has room (b->max_batch) and batching_place() fits their reservation; stop at the first refusal
    for (int i = b->first_waiting; i < run->n_arrived && b->n_batch < b->max_batch; i++) {
        Request *r = &run->reqs[i];
        if (r->phase != REQ_WAITING)
            continue;
        int tokens = reserve_initial_tokens(b->policy, r->n_tokens, r->max_tokens, b->cfg.seq_len);
        if (batching_place(b, run, r, tokens) != 0)
            break; /* first come, first served: nobody overtakes the request at the head */
        serving_admit(run, r);
        b->batch[b->n_batch++] = i;
        admitted++;
    }
    // LAB STUB:
    // (void)b; (void)run;
    // LAB_TODO("admit waiting requests in file order while their reservation fits");
    // LAB END
    return admitted;
}
