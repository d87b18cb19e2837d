/* Kernel check: the embedding lookup (kernels/embedding.cu) against the
 * row copy at the top of forward() (common/cpu/forward.c), from a table
 * of each type.
 *
 * Tolerance: 0 (bitwise). A row is copied, converted from f16/bf16 to the
 * exact f32 value of the stored element. */
#include "kcase.h"

#include <stdio.h>
#include <string.h>

#include "mem.h"
#include "sampler.h"

#define TOL_EXACT 0.0

typedef struct {
    const Device *dev;
    float *out;
    void *table;
    int *tokens;
    Dtype t;
    int n, dim;
} EmbArgs;

static int emb_launch(void *p, int v, Err *err)
{
    EmbArgs *a = p;
    return kvk_embedding(v, a->out, a->table, a->t, a->tokens, a->n, a->dim, a->dev->stream, err);
}

static int case_embedding(KcaseRun *run, int vocab, int dim, int n, Dtype t, Err *err)
{
    unsigned long long rng = 15;
    size_t cells = (size_t)vocab * dim;
    float *table = kcase_host_floats(cells), *want = kcase_host_floats((size_t)n * dim);
    float *got = kcase_host_floats((size_t)n * dim);
    void *typed = mem_alloc_array(MEM_ACTIVATIONS, cells, dtype_bytes(t));
    int *tokens = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n, sizeof(int));
    void *host[] = {table, want, got, typed, tokens};
    EmbArgs a = {.dev = run->dev, .t = t, .n = n, .dim = dim};
    void *devs[3] = {0};
    int rc = -1;
    if (!table || !want || !got || !typed || !tokens) {
        err_set(err, "out of memory");
        goto done;
    }
    kcase_fill(table, cells, -1.0f, 1.0f, &rng);
    dtype_from_f32(typed, table, cells, t);
    dtype_to_f32(table, typed, cells, t); /* the values the device holds */
    for (int i = 0; i < n; i++) {
        tokens[i] = i == 0 ? vocab - 1 : (int)(sampler_random_f32(&rng) * (float)vocab) % vocab;
        memcpy(want + (size_t)i * dim, table + (size_t)tokens[i] * dim, (size_t)dim * 4);
    }
    if (kcase_device_copy(&a.table, typed, cells * dtype_bytes(t), run->dev, err) ||
        kcase_device_copy((void **)&a.tokens, tokens, (size_t)n * sizeof(int), run->dev, err) ||
        kcase_device_copy((void **)&a.out, NULL, (size_t)n * dim * 4, run->dev, err))
        goto done;
    for (int v = 1; v <= kvk_embedding_n_versions; v++) {
        KcaseResult r = kcase_result("embedding", kvk_embedding_versions, v, dtype_name(t), TOL_EXACT,
                                     (double)n * dim * (4.0 + (double)dtype_bytes(t)));
        snprintf(r.shape, sizeof r.shape, "%d tokens of %d x %d", n, vocab, dim);
        if (kcase_check_floats(run, &r, emb_launch, &a, a.out, got, want, NULL, (size_t)n * dim, err))
            goto done;
    }
    rc = 0;
done:
    devs[0] = a.table, devs[1] = a.tokens, devs[2] = a.out;
    KCASE_RELEASE(devs, host);
    return rc;
}

int kcase_check_embedding(KcaseRun *run, Err *err)
{
    for (int t = 0; t < DTYPE_COUNT; t++) {
        TRY(case_embedding(run, 512, 64, 9, (Dtype)t, err)); /* stories260K */
        if (!run->o->quick)
            TRY(case_embedding(run, 32000, 768, 64, (Dtype)t, err)); /* stories110M, batch 64 */
    }
    return 0;
}
