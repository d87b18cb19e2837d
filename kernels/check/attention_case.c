/* An attention case for the contiguous and the paged kernel checks: see
 * attention_case.h. */
#include "attention_case.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mem.h"
#include "ops.h"
#include "paged.h"
#include "sampler.h"

typedef struct {
    const Device *dev;
    AttnCase *c;
    int paged;
} AttnArgs;

static KvkHeads case_heads(const AttnCase *c) { return (KvkHeads){c->s.heads, c->s.kv_heads, c->s.head_dim}; }

static int attn_launch(void *p, int v, Err *err)
{
    AttnArgs *a = p;
    AttnCase *c = a->c;
    if (!a->paged)
        return kvk_attention(v, c->s.t, c->d_out, c->d_q, c->d_k, c->d_v, c->d_base, c->d_pos, c->n, c->max_pos,
                             case_heads(c), c->d_scratch, a->dev->stream, err);
    KvkBlockTables tables = {c->d_tables, c->max_blocks, c->d_entry, c->s.block_size, ATTN_PAGED_LAYERS};
    return kvk_paged_attention(v, c->s.t, c->d_out, c->d_q, c->d_pool, ATTN_PAGED_LAYERS - 1, tables, c->d_pos, c->n,
                               c->max_pos, case_heads(c), c->d_scratch, a->dev->stream, err);
}

/* The shapes of the chapters, the small ones first. */
static const AttnShape SHAPES[] = {
    /* stories260K: 8 heads over 4 K/V heads of 8 */
    {1, 1, 37, 8, 4, 8, 4, DTYPE_F32},
    {3, 5, 40, 8, 4, 8, 16, DTYPE_F32},
    {2, 1, 300, 8, 4, 8, 1, DTYPE_F32}, /* blocks of 1; two partitions of the split versions */
    /* SmolLM2-135M's heads, 9 over 3 K/V heads of 64: paged v3 serves a
     * GQA group of 3, in partitions shorter than a block */
    {2, 1, 200, 9, 3, 64, 64, DTYPE_F32},
    /* 8 query heads a K/V head (paged v3: two blocks of 4 each), heads of
     * 16, sequences of mixed lengths */
    {3, 3, 70, 16, 2, 16, 8, DTYPE_F32},
    /* enough (entry, head) blocks that paged v3 does not split: positions
     * past 256 take a second chunk of block ids */
    {1, 1, 264, 8, 4, 8, 8, DTYPE_F32},
    /* stories110M: 12 heads of 64 */
    {1, 1, 512, 12, 12, 64, 16, DTYPE_F32},
    {2, 1, 4096, 12, 12, 64, 16, DTYPE_F32},
    {3, 64, 1024, 12, 12, 64, 16, DTYPE_F32},
    /* a GQA shape with 128-wide heads (Llama-2-70B's 64/8) */
    {3, 16, 2048, 64, 8, 128, 256, DTYPE_F32},
};
#define QUICK_SHAPES 6

const AttnShape *attn_case_shapes(int quick, size_t *n)
{
    *n = quick ? QUICK_SHAPES : sizeof SHAPES / sizeof SHAPES[0];
    return SHAPES;
}

/* ----------------------------------------------------------- references */

/* Reference output and magnitude (sum_t a_t |v_td|, a_t the softmax
 * weights) of every (entry, head), reading the contiguous copy through
 * attention_reference(). */
static void attention_expected(AttnCase *c, float *scores)
{
    int hd = c->s.head_dim, dim = c->s.heads * hd, kv_dim = c->s.kv_heads * hd, mul = c->s.heads / c->s.kv_heads;
    for (int i = 0; i < c->n; i++)
        for (int h = 0; h < c->s.heads; h++) {
            const float *q = c->q + (size_t)i * dim + h * hd;
            const float *k = c->k + (size_t)c->base[i] * kv_dim + (h / mul) * hd;
            const float *v = c->v + (size_t)c->base[i] * kv_dim + (h / mul) * hd;
            int n_pos = c->pos[i] + 1;
            attention_reference(c->want + (size_t)i * dim + h * hd, q, k, v, n_pos, kv_dim, hd, scores);
            for (int t = 0; t < n_pos; t++)
                scores[t] = attention_score(q, k + (size_t)t * kv_dim, hd);
            softmax(scores, n_pos);
            for (int d = 0; d < hd; d++) {
                double m = 0.0;
                for (int t = 0; t < n_pos; t++)
                    m += (double)scores[t] * fabs((double)v[(size_t)t * kv_dim + d]);
                c->mag[(size_t)i * dim + h * hd + d] = (float)m;
            }
        }
}

/* The paged kernels' reference: chapter 4's paged_attention() for every
 * (entry, head), reading the pool through the entry's block table. It
 * reads the same values as attention_reference() did in the same order,
 * so it must give its bits (the lab checks the same); if it does not, the
 * reference is wrong and no kernel is judged by it. */
static int paged_expected(AttnCase *c, float *scores, Err *err)
{
    int hd = c->s.head_dim, dim = c->s.heads * hd, mul = c->s.heads / c->s.kv_heads;
    for (int i = 0; i < c->n; i++) {
        int seq = c->entry_table[i];
        BlockTable table = {c->tables + (size_t)seq * c->max_blocks, c->table_blocks[seq], c->max_blocks};
        for (int h = 0; h < c->s.heads; h++) {
            size_t at = (size_t)i * dim + (size_t)h * hd;
            paged_attention(&c->pool, &table, ATTN_PAGED_LAYERS - 1, h / mul, hd, c->q + at, c->pos[i] + 1,
                            c->want_paged + at, scores);
        }
    }
    if (memcmp(c->want_paged, c->want, (size_t)c->n * dim * sizeof(float)) != 0)
        return err_set(err, "paged_attention() (chapter 4, the lab) does not give attention_reference()'s bits on "
                            "the same K/V; fix it (make lab CH=4) before checking the paged kernels against it");
    return 0;
}

/* --------------------------------------------------------------- layout */

/* Sequence lengths and regions: batches mix lengths (the last one is
 * full); regions are len rows apart. Entries: every position of the one
 * sequence (kind 1), or the last position of each. */
static void case_sequences(AttnCase *c, int *seq_len, long long *seq_base, int *seq_of, unsigned long long *rng)
{
    const AttnShape *s = &c->s;
    for (int q = 0; q < s->n_seqs; q++) {
        seq_len[q] = s->kind == 3 && q != s->n_seqs - 1 ? 1 + (int)(sampler_random_f32(rng) * (float)s->len) % s->len
                                                        : s->len;
        seq_base[q] = (long long)q * s->len;
    }
    for (int i = 0; i < c->n; i++) {
        seq_of[i] = s->kind == 1 ? 0 : i;
        c->pos[i] = s->kind == 1 ? i : seq_len[i] - 1;
    }
}

/* Each sequence's blocks, spread over a shuffled pool with a few blocks
 * nobody uses. */
static int case_tables(AttnCase *c, const int *seq_len, unsigned long long *rng)
{
    int n_seqs = c->s.n_seqs, bs = c->s.block_size;
    c->max_blocks = (c->max_pos + bs - 1) / bs;
    c->tables = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n_seqs * c->max_blocks, sizeof(int));
    c->table_blocks = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n_seqs, sizeof(int));
    int total = 3;
    for (int q = 0; q < n_seqs; q++)
        total += (seq_len[q] + bs - 1) / bs;
    int *perm = mem_alloc_array(MEM_ACTIVATIONS, (size_t)total, sizeof(int));
    if (!c->tables || !c->table_blocks || !perm) {
        mem_free(perm);
        return -1;
    }
    kcase_shuffle(perm, total, rng);
    int next = 0;
    for (int q = 0; q < n_seqs; q++) {
        c->table_blocks[q] = 0;
        for (int b = 0; b < c->max_blocks; b++) {
            int used = b * bs < seq_len[q];
            c->tables[(size_t)q * c->max_blocks + b] = used ? perm[next++] : -1;
            c->table_blocks[q] += used;
        }
    }
    c->n_blocks = total;
    mem_free(perm);
    return 0;
}

/* The pool: every element NaN (rows no sequence holds, the other layer),
 * then the K/V of each sequence copied from its contiguous rows into its
 * blocks, in the last layer. */
static int case_pool(AttnCase *c, const long long *seq_base, const int *seq_len, Err *err)
{
    int kv_dim = c->s.kv_heads * c->s.head_dim, bs = c->s.block_size;
    BlockShape shape = {.block_size = bs, .n_layers = ATTN_PAGED_LAYERS, .kv_dim = kv_dim, .elem_bytes = sizeof(float)};
    if (block_pool_init(&c->pool, &shape, c->n_blocks, 1, err))
        return -1;
    memset(c->pool.storage, 0xff, (size_t)c->n_blocks * c->pool.floats_per_block * sizeof(float));
    size_t row_bytes = (size_t)kv_dim * sizeof(float);
    for (int q = 0; q < c->s.n_seqs; q++)
        for (int t = 0; t < seq_len[q]; t++) {
            int block = c->tables[(size_t)q * c->max_blocks + t / bs];
            size_t row = (size_t)(t % bs) * kv_dim, from = (size_t)(seq_base[q] + t) * kv_dim;
            memcpy(block_pool_keys(&c->pool, block, ATTN_PAGED_LAYERS - 1) + row, c->k + from, row_bytes);
            memcpy(block_pool_values(&c->pool, block, ATTN_PAGED_LAYERS - 1) + row, c->v + from, row_bytes);
        }
    return 0;
}

/* Scratch for every version of both kernels on this case. */
static size_t case_scratch_floats(const AttnCase *c)
{
    KvkHeads h = case_heads(c);
    size_t most = 0, each[] = {kvk_attention_scratch_floats(1, c->n, c->max_pos, h),
                               kvk_attention_scratch_floats(4, c->n, c->max_pos, h),
                               kvk_paged_attention_scratch_floats(2, c->s.t, c->n, c->max_pos, h),
                               kvk_paged_attention_scratch_floats(3, c->s.t, c->n, c->max_pos, h)};
    for (size_t i = 0; i < sizeof each / sizeof each[0]; i++)
        most = each[i] > most ? each[i] : most;
    return most;
}

static int case_upload(AttnCase *c, const Device *dev, Err *err)
{
    int dim = c->s.heads * c->s.head_dim;
    size_t cells = (size_t)c->rows * c->s.kv_heads * c->s.head_dim;
    if (kcase_device_copy((void **)&c->d_q, c->q, (size_t)c->n * dim * 4, dev, err) ||
        kcase_device_copy((void **)&c->d_out, NULL, (size_t)c->n * dim * 4, dev, err) ||
        kcase_device_copy((void **)&c->d_scratch, NULL, case_scratch_floats(c) * 4, dev, err) ||
        kcase_upload_typed(&c->d_k, c->k, cells, c->s.t, dev, err) ||
        kcase_upload_typed(&c->d_v, c->v, cells, c->s.t, dev, err) ||
        kcase_device_copy((void **)&c->d_base, c->base, (size_t)c->n * sizeof(long long), dev, err) ||
        kcase_device_copy((void **)&c->d_pos, c->pos, (size_t)c->n * sizeof(int), dev, err) ||
        kcase_device_copy((void **)&c->d_entry, c->entry_table, (size_t)c->n * sizeof(int), dev, err))
        return -1;
    return kcase_device_copy((void **)&c->d_tables, c->tables, (size_t)c->s.n_seqs * c->max_blocks * sizeof(int),
                             dev, err);
}

/* Host buffers and the layout; then the values, both references (the
 * paged one only when paged) and the device copies. */
static int case_build(AttnCase *c, int paged, const Device *dev, int *seq_len, long long *seq_base, int *seq_of,
                      Err *err)
{
    unsigned long long rng = 19 + (unsigned long long)c->s.kind;
    int dim = c->s.heads * c->s.head_dim;
    size_t cells = (size_t)c->rows * c->s.kv_heads * c->s.head_dim;
    c->q = kcase_host_floats((size_t)c->n * dim);
    c->k = kcase_host_floats(cells);
    c->v = kcase_host_floats(cells);
    c->base = mem_alloc_array(MEM_ACTIVATIONS, (size_t)c->n, sizeof(long long));
    c->entry_table = mem_alloc_array(MEM_ACTIVATIONS, (size_t)c->n, sizeof(int));
    c->want = kcase_host_floats((size_t)c->n * dim);
    c->want_paged = kcase_host_floats((size_t)c->n * dim);
    c->mag = kcase_host_floats((size_t)c->n * dim);
    float *scores = kcase_host_floats((size_t)c->max_pos);
    int rc = -1;
    if (!c->q || !c->k || !c->v || !c->base || !c->entry_table || !c->want || !c->want_paged || !c->mag || !scores) {
        err_set(err, "out of memory for an attention case");
        goto done;
    }
    case_sequences(c, seq_len, seq_base, seq_of, &rng);
    if (case_tables(c, seq_len, &rng)) {
        err_set(err, "out of memory for an attention case");
        goto done;
    }
    kcase_fill(c->q, (size_t)c->n * dim, -1.0f, 1.0f, &rng);
    kcase_fill(c->k, cells, -1.0f, 1.0f, &rng);
    kcase_fill(c->v, cells, -1.0f, 1.0f, &rng);
    /* The device stores K/V in type t: both references read the rounded values. */
    dtype_round(c->k, cells, c->s.t);
    dtype_round(c->v, cells, c->s.t);
    for (int i = 0; i < c->n; i++) {
        c->base[i] = seq_base[seq_of[i]];
        c->entry_table[i] = seq_of[i];
    }
    attention_expected(c, scores);
    if (paged && (case_pool(c, seq_base, seq_len, err) || paged_expected(c, scores, err) ||
                  kcase_upload_typed(&c->d_pool, c->pool.storage, (size_t)c->n_blocks * c->pool.floats_per_block,
                                     c->s.t, dev, err)))
        goto done;
    rc = case_upload(c, dev, err);
done:
    mem_free(scores);
    return rc;
}

int attn_case_open(AttnCase *c, const AttnShape *s, int paged, const Device *dev, Err *err)
{
    memset(c, 0, sizeof *c);
    c->s = *s;
    c->n = s->kind == 1 ? s->len : s->n_seqs;
    c->max_pos = s->len;
    c->rows = (long long)s->n_seqs * s->len;
    int *seq_len = mem_alloc_array(MEM_ACTIVATIONS, (size_t)s->n_seqs, sizeof(int));
    long long *seq_base = mem_alloc_array(MEM_ACTIVATIONS, (size_t)s->n_seqs, sizeof(long long));
    int *seq_of = mem_alloc_array(MEM_ACTIVATIONS, (size_t)c->n, sizeof(int));
    c->pos = mem_alloc_array(MEM_ACTIVATIONS, (size_t)c->n, sizeof(int));
    int rc = !seq_len || !seq_base || !seq_of || !c->pos ? err_set(err, "out of memory")
                                                         : case_build(c, paged, dev, seq_len, seq_base, seq_of, err);
    mem_free(seq_len);
    mem_free(seq_base);
    mem_free(seq_of);
    if (rc)
        attn_case_close(c);
    return rc;
}

int attn_case_for_each(KcaseRun *run, int paged, int (*each)(KcaseRun *run, AttnCase *c, Err *err), Err *err)
{
    size_t n_shapes;
    const AttnShape *shapes = attn_case_shapes(run->o->quick, &n_shapes);
    for (int t = 0; t < DTYPE_COUNT; t++)
        for (size_t i = 0; i < n_shapes; i++) {
            AttnShape s = shapes[i];
            s.t = (Dtype)t;
            AttnCase c;
            TRY(attn_case_open(&c, &s, paged, run->dev, err));
            int rc = each(run, &c, err);
            attn_case_close(&c);
            TRY(rc);
        }
    return 0;
}

void attn_case_close(AttnCase *c)
{
    void *devs[] = {c->d_q, c->d_out, c->d_scratch, c->d_k, c->d_v, c->d_pool, c->d_base, c->d_pos, c->d_entry,
                    c->d_tables};
    void *host[] = {c->q, c->k, c->v, c->base, c->pos, c->entry_table, c->tables, c->table_blocks, c->want,
                    c->mag, c->want_paged};
    KCASE_RELEASE(devs, host);
    block_pool_free(&c->pool);
    memset(c, 0, sizeof *c);
}

void attn_case_label(const AttnCase *c, int paged, char *out, size_t size)
{
    static const char *const what[] = {"", "whole sequence", "decode", "batched decode"};
    int n = snprintf(out, size, "%s %d: %d x %d/%d heads of %d", what[c->s.kind], c->s.len, c->n, c->s.heads,
                     c->s.kv_heads, c->s.head_dim);
    if (paged && n > 0 && (size_t)n < size)
        snprintf(out + n, size - (size_t)n, ", blocks of %d", c->s.block_size);
}

/* ------------------------------------------------------------- versions */

/* Bytes a call must move: each entry's K and V rows and its query, plus
 * its output. */
static double case_bytes(const AttnCase *c)
{
    double rows = 0.0;
    for (int i = 0; i < c->n; i++)
        rows += c->pos[i] + 1;
    int dim = c->s.heads * c->s.head_dim, kv_dim = c->s.kv_heads * c->s.head_dim;
    return rows * 2.0 * kv_dim * (double)dtype_bytes(c->s.t) + 2.0 * c->n * dim * 4;
}

static int version_supported(const AttnCase *c, int paged, int version)
{
    return paged ? kvk_paged_attention_supports(version, c->s.t, case_heads(c))
                 : kvk_attention_supports(version, c->s.t, case_heads(c), c->max_pos);
}

/* Runs a version once on poisoned outputs; *error: against its reference. */
static int run_checked(KcaseRun *run, AttnCase *c, int paged, int version, double *error, Err *err)
{
    size_t no = (size_t)c->n * c->s.heads * c->s.head_dim;
    float *got = kcase_host_floats(no);
    AttnArgs a = {run->dev, c, paged};
    int rc = !got ? err_set(err, "out of memory") : kcase_run_poisoned(run, attn_launch, &a, version, c->d_out, got,
                                                                       no * 4, err);
    if (rc == 0)
        *error = kcase_scaled_error(got, paged ? c->want_paged : c->want, c->mag, no);
    mem_free(got);
    return rc;
}

int attn_case_version(KcaseRun *run, AttnCase *c, int paged, int version, double *us, Err *err)
{
    const char *kernel = paged ? "paged_attention" : "attention";
    KcaseResult r = kcase_result(kernel, paged ? kvk_paged_attention_versions : kvk_attention_versions, version,
                                 dtype_name(c->s.t), ATTN_TOLERANCE, case_bytes(c));
    attn_case_label(c, paged, r.shape, sizeof r.shape);
    r.supported = version_supported(c, paged, version);
    if (r.supported) {
        TRY(run_checked(run, c, paged, version, &r.max_error, err));
        r.outputs = (long long)c->n * c->s.heads * c->s.head_dim;
    }
    AttnArgs a = {run->dev, c, paged};
    TRY(kcase_finish(run, &r, attn_launch, &a, err));
    *us = r.passed ? r.us : 0.0;
    return 0;
}

int attn_case_time_quietly(KcaseRun *run, AttnCase *c, int paged, int version, double *us, Err *err)
{
    double error = INFINITY;
    *us = 0.0;
    if (!version_supported(c, paged, version))
        return 0;
    TRY(run_checked(run, c, paged, version, &error, err));
    if (!(error <= ATTN_TOLERANCE))
        return 0;
    AttnArgs a = {run->dev, c, paged};
    return kcase_time(run, attn_launch, &a, version, us, err);
}
