/* GENERATED from solutions/ch03/reserve_initial_tokens.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=3`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 3 lab: reserve_initial_tokens(), how much each --reserve policy
 * reserves at admission. exercises/ch03/reserve_initial_tokens.c is
 * generated from this file by scripts/make-exercises.sh; `make lab CH=3`
 * grades yours. */
#include "kv_arena.h"
#include "lab.h"

static int min_int(int a, int b) { return a < b ? a : b; }
static int max_int(int a, int b) { return a > b ? a : b; }

int reserve_initial_tokens(ReservePolicy policy, int n_tokens, int max_tokens, int seq_len)
{
    // TODO(lab ch03.reserve): the region size each policy reserves at admission (see the table in kv_arena.h)
    (void)policy; (void)max_tokens; (void)seq_len; (void)min_int; (void)max_int;
    LAB_TODO("reserve seq_len, max_tokens, its power of two, or a small first region");
    return n_tokens;
}
