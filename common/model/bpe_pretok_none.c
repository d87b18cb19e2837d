/* The GPT-2 pre-tokenizer of a build without PCRE2 (make PCRE2=0): the
 * Makefile compiles this file instead of bpe_pretok.c. Opening it fails
 * with one line that says why, so byte-level BPE models (SmolLM2) are
 * refused and everything else builds and runs: scripts/gpu-check.sh falls
 * back to it on a GPU machine that has no PCRE2 and was given none. */
#include "bpe_pretok.h"

#include <string.h>

struct BpePretok {
    int unused;
};

int bpe_pretok_open(BpePretok **out, const char *name, Err *err)
{
    *out = NULL;
    if (strcmp(name, "smollm") != 0)
        return err_set(err, "pre-tokenizer '%s' is not supported (kvlab knows 'smollm')", name);
    return err_set(err, "this build has no PCRE2 (built with make PCRE2=0), which the '%s' pre-tokenizer needs: "
                        "install libpcre2-dev and rebuild", name);
}

void bpe_pretok_close(BpePretok *p)
{
    (void)p;
}

int bpe_pretok_split(const BpePretok *p, const char *text, size_t len, BpePieceFn fn, void *ctx, Err *err)
{
    (void)p, (void)text, (void)len, (void)fn, (void)ctx;
    return err_set(err, "this build has no PCRE2 (built with make PCRE2=0)");
}
