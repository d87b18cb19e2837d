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
    // LAB BEGIN(ch03.reserve): the region size each policy reserves at admission (see the table in kv_arena.h)
    switch (policy) {
    case RESERVE_MAX:
        return seq_len;
    case RESERVE_REQUEST:
        return min_int(max_tokens, seq_len); /* the last token's K/V is never stored */
    case RESERVE_POW2:
        return min_int(reserve_round_up_pow2(max_tokens), seq_len);
    case RESERVE_GROW:
        /* Room for what it has and the token it is about to produce, so
         * that a fresh region never has to grow at once. */
        return min_int(reserve_round_up_pow2(max_int(n_tokens + 1, RESERVE_GROW_MIN_TOKENS)), seq_len);
    }
    return seq_len;
    // LAB STUB:
    // (void)policy; (void)max_tokens; (void)seq_len; (void)min_int; (void)max_int;
    // LAB_TODO("reserve seq_len, max_tokens, its power of two, or a small first region");
    // return n_tokens;
    // LAB END
}
