/* Bug hunt "cached_prompt": a prompt's prefill with a prefix cache
 * (prefill_plan.h). */
#include "prefill_plan.h"

uint64_t prefix_block_key(const int *tokens, int b, int block_size)
{
    uint64_t key = 1469598103934665603ull; /* FNV-1a over every token up to the block's end */
    for (int i = 0; i < (b + 1) * block_size; i++) {
        key ^= (uint64_t)(uint32_t)tokens[i];
        key *= 1099511628211ull;
    }
    return key;
}

static int cache_has(const PrefixCache *c, uint64_t key)
{
    for (int i = 0; i < c->n; i++)
        if (c->keys[i] == key)
            return 1;
    return 0;
}

void prefix_cache_add(PrefixCache *c, const int *tokens, int n, int block_size)
{
    for (int b = 0; b < n / block_size && c->n < PREFIX_CACHE_MAX; b++) {
        uint64_t key = prefix_block_key(tokens, b, block_size);
        if (!cache_has(c, key))
            c->keys[c->n++] = key;
    }
}

int prefix_cache_match(const PrefixCache *c, const int *tokens, int n, int block_size)
{
    int b = 0;
    while (b < n / block_size && cache_has(c, prefix_block_key(tokens, b, block_size)))
        b++;
    return b;
}

int prefill_plan(const PrefixCache *c, const int *tokens, int n, int block_size, PrefillPlan *plan)
{
    if (n < 1 || block_size < 1)
        return -1;
    int reused = prefix_cache_match(c, tokens, n, block_size);
    // BUG BEGIN(bughunt.cached_prompt): a fully cached prompt leaves no position to compute, so no logits for its first token (nano-vllm #144); the fix computes its last block again, into a block of its own (never a write into a shared block)
    if (reused * block_size == n)
        reused--;
    // BUG PLANTED:
    // BUG END
    plan->reused_blocks = reused;
    plan->first = reused * block_size;
    plan->count = n - plan->first;
    plan->logits_row = plan->count - 1;
    return 0;
}
