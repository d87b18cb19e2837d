/* GENERATED from solutions/ch07/spec_accept_greedy.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=7`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 7 lab: spec_accept_greedy(), the greedy acceptance rule.
 * exercises/ch07/spec_accept_greedy.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=7` grades yours. */
#include "lab.h"
#include "spec.h"

int spec_accept_greedy(const int *targets, const int *proposals, int n)
{
    int accepted = 0;
    // TODO(lab ch07.accept): count the proposals, from the first, that equal the verifier's choice at their position (targets[i]), stopping at the first that does not: the model's own token after them is targets[accepted]
    (void)targets; (void)proposals; (void)n;
    LAB_TODO("how many proposals the greedy rule keeps");
    return accepted;
}
