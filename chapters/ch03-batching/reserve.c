/* Chapter 3's reservation policies: their names, and the sizes around the
 * lab's reserve_initial_tokens() (solutions/ch03/): a power of two, a
 * region grown by doubling. See the table in kv_arena.h. */
#include <string.h>

#include "kv_arena.h"

static const char *const POLICY_NAMES[] = {"max", "request", "pow2", "grow"};

int reserve_policy_parse(const char *name, ReservePolicy *policy, Err *err)
{
    for (int p = RESERVE_MAX; p <= RESERVE_GROW; p++)
        if (strcmp(name, POLICY_NAMES[p]) == 0) {
            *policy = (ReservePolicy)p;
            return 0;
        }
    return err_set(err, "--reserve: '%s' is not one of max, request, pow2, grow", name);
}

const char *reserve_policy_name(ReservePolicy policy)
{
    return policy >= RESERVE_MAX && policy <= RESERVE_GROW ? POLICY_NAMES[policy] : "?";
}

int reserve_round_up_pow2(int n)
{
    int p = 1;
    while (p < n)
        p *= 2;
    return p;
}

int reserve_grown_tokens(int current, int needed, int seq_len)
{
    int tokens = current > 0 ? current : 1;
    while (tokens < needed && tokens < seq_len)
        tokens *= 2;
    return tokens < seq_len ? tokens : seq_len;
}
