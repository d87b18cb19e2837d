/* Chapter 7's prompt lookup: the proposer that needs no second model. */
#include "spec.h"

/* Whether tokens[start..start+n-1] equals the last n tokens. */
static int matches_suffix(const int *tokens, int n_tokens, int start, int n)
{
    for (int i = 0; i < n; i++)
        if (tokens[start + i] != tokens[n_tokens - n + i])
            return 0;
    return 1;
}

int spec_propose_ngram(const int *tokens, int n_tokens, int n_min, int n_max, int k, int *out)
{
    for (int n = n_max; n >= n_min; n--) {
        if (n >= n_tokens)
            continue; /* the suffix needs an earlier occurrence and a token after it */
        /* The latest earlier occurrence: it starts at most n_tokens - n - 1,
         * so at least one token follows it. */
        for (int start = n_tokens - n - 1; start >= 0; start--) {
            if (!matches_suffix(tokens, n_tokens, start, n))
                continue;
            int from = start + n, count = 0;
            while (count < k && from + count < n_tokens) {
                out[count] = tokens[from + count];
                count++;
            }
            return count;
        }
    }
    return 0;
}
