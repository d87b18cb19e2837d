/* The CUDA lab (exercises/cuda/paged_attention_lab.cu, region cuda.attend):
 * PagedAttention's block loop as a kernel, graded against a plain CPU
 * attention over the same rows gathered in order. `make lab CH=cuda` runs it
 * on the GPU where there is one, else on the CPU emulator (one fiber per
 * GPU thread, switched at each barrier: a missing __syncthreads() reads
 * what another thread has not written yet, every time).
 *
 * Every case fills the rows past a sequence's length, and the blocks no
 * table names, with garbage (K 0.5, V 1000): a kernel that reads one of
 * them is off by hundreds. The tables scatter the blocks out of order, and
 * each sequence has its own. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/grading.h"
#include "paged_attention_lab.h"

#define KERNEL "lab_paged_attention_kernel()"

/* A case's arrays, host side. */
typedef struct {
    LabPagedArgs a;
    float *q, *k, *v; /* as LabPagedArgs says */
    int *tables, *lens;
} Step;

static unsigned next_random(unsigned *state)
{
    *state = *state * 1664525u + 1013904223u;
    return *state >> 8;
}

static float uniform(unsigned *state)
{
    return (float)next_random(state) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* A step with random queries and rows, each sequence's blocks scattered
 * through the pool (a shuffled permutation), the rest garbage. */
static Step make_step(int n_seqs, int n_heads, int n_kv_heads, int head_dim, int block_size, const int *lens,
                      unsigned seed)
{
    Step s;
    int max_blocks = 1;
    for (int i = 0; i < n_seqs; i++)
        if ((lens[i] + block_size - 1) / block_size > max_blocks)
            max_blocks = (lens[i] + block_size - 1) / block_size;
    int n_phys = n_seqs * max_blocks + 2; /* two blocks no table names */
    size_t row = (size_t)n_kv_heads * head_dim, cache_n = (size_t)n_phys * block_size * row;
    s.q = malloc(sizeof(float) * (size_t)n_seqs * n_heads * head_dim);
    s.k = malloc(sizeof(float) * cache_n);
    s.v = malloc(sizeof(float) * cache_n);
    s.tables = malloc(sizeof(int) * (size_t)n_seqs * max_blocks);
    s.lens = malloc(sizeof(int) * (size_t)n_seqs);
    ck_assert(s.q && s.k && s.v && s.tables && s.lens);
    unsigned state = seed;
    for (int i = 0; i < n_seqs * n_heads * head_dim; i++)
        s.q[i] = uniform(&state);
    for (size_t i = 0; i < cache_n; i++) {
        s.k[i] = 0.5f;
        s.v[i] = 1000.0f;
    }
    int *perm = malloc(sizeof(int) * (size_t)n_phys);
    ck_assert(perm != NULL);
    for (int i = 0; i < n_phys; i++)
        perm[i] = i;
    for (int i = n_phys - 1; i > 0; i--) {
        int j = (int)(next_random(&state) % (unsigned)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int sq = 0; sq < n_seqs; sq++) {
        s.lens[sq] = lens[sq];
        for (int b = 0; b < max_blocks; b++)
            s.tables[sq * max_blocks + b] = perm[sq * max_blocks + b];
        for (int pos = 0; pos < lens[sq]; pos++) {
            size_t at = ((size_t)s.tables[sq * max_blocks + pos / block_size] * block_size + pos % block_size) * row;
            for (size_t e = 0; e < row; e++) {
                s.k[at + e] = uniform(&state);
                s.v[at + e] = uniform(&state);
            }
        }
    }
    free(perm);
    s.a = (LabPagedArgs){.q = s.q, .k_cache = s.k, .v_cache = s.v, .block_tables = s.tables, .seq_lens = s.lens,
                         .n_seqs = n_seqs, .n_heads = n_heads, .n_kv_heads = n_kv_heads, .head_dim = head_dim,
                         .block_size = block_size, .max_blocks = max_blocks, .n_phys_blocks = n_phys,
                         .threads = 0};
    return s;
}

static void free_step(Step *s)
{
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->tables);
    free(s->lens);
}

/* How the reference reads the cache: right, or as a known mistake does
 * (to name the mistake when a kernel's output equals it). */
typedef struct {
    int rows_past_length; /* every row of the last block, filled or not */
    int table_of_seq_0;   /* every sequence through the first one's table */
    int logical_keys;     /* keys at physical block = logical block */
    int logical_values;   /* values likewise */
    const char *diagnosis;
} Reading;

static const Reading READINGS[] = {
    {0, 0, 0, 0, NULL},
    {1, 0, 0, 0, "it equals attention over every row of the last block, filled or not: only the first seq_lens[seq] "
                 "rows are the sequence's"},
    {0, 1, 0, 0, "it equals attention through sequence 0's block table: sequence seq's table starts at "
                 "block_tables + seq x max_blocks"},
    {0, 0, 1, 0, "it equals attention with the keys read at physical block b for logical block b: look the keys' "
                 "block up in the sequence's block table"},
    {0, 0, 0, 1, "it equals attention with the values read at physical block b for logical block b: look the "
                 "values' block up in the sequence's block table too"},
    {0, 0, 1, 1, "it equals attention over physical block b for logical block b: look each block up in the "
                 "sequence's block table"},
};

/* The physical block of logical block b of sequence sq, as reading r sees it. */
static int block_of(const LabPagedArgs *a, int sq, int b, const Reading *r, int logical)
{
    if (logical)
        return b;
    return a->block_tables[(r->table_of_seq_0 ? 0 : sq) * a->max_blocks + b];
}

/* The CPU reference: softmax(q . k / sqrt(d)) . v over the filled rows, in
 * order, in double, read as @p r says. out: [n_seqs][n_heads][head_dim]. */
static void reference(const LabPagedArgs *a, const Reading *r, double *out)
{
    size_t row = (size_t)a->n_kv_heads * a->head_dim;
    double *scores = malloc(sizeof(double) * (size_t)a->max_blocks * a->block_size);
    ck_assert(scores != NULL);
    for (int sq = 0; sq < a->n_seqs; sq++)
        for (int h = 0; h < a->n_heads; h++) {
            int kv_h = h / (a->n_heads / a->n_kv_heads);
            int len = a->seq_lens[sq];
            if (r->rows_past_length)
                len = (len + a->block_size - 1) / a->block_size * a->block_size;
            const float *q = a->q + ((size_t)sq * a->n_heads + h) * a->head_dim;
            double max_score = -INFINITY, sum = 0.0;
            for (int pos = 0; pos < len; pos++) {
                int phys = block_of(a, sq, pos / a->block_size, r, r->logical_keys);
                const float *k = a->k_cache + ((size_t)phys * a->block_size + pos % a->block_size) * row +
                                 (size_t)kv_h * a->head_dim;
                double dot = 0.0;
                for (int d = 0; d < a->head_dim; d++)
                    dot += (double)q[d] * k[d];
                scores[pos] = dot / sqrt((double)a->head_dim);
                max_score = fmax(max_score, scores[pos]);
            }
            for (int pos = 0; pos < len; pos++)
                sum += exp(scores[pos] - max_score);
            double *o = out + ((size_t)sq * a->n_heads + h) * a->head_dim;
            for (int d = 0; d < a->head_dim; d++)
                o[d] = 0.0;
            for (int pos = 0; pos < len; pos++) {
                int phys = block_of(a, sq, pos / a->block_size, r, r->logical_values);
                const float *v = a->v_cache + ((size_t)phys * a->block_size + pos % a->block_size) * row +
                                 (size_t)kv_h * a->head_dim;
                for (int d = 0; d < a->head_dim; d++)
                    o[d] += exp(scores[pos] - max_score) / sum * v[d];
            }
        }
    free(scores);
}

/* The first element where got and want differ, or -1. */
static long first_difference(const float *got, const double *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= 1e-4 + 1e-4 * fabs(want[i])))
            return (long)i;
    return -1;
}

/* Why the output is wrong, as far as the grader can tell: a race (right
 * with one thread per block, wrong with 32), one of READINGS' mistakes, or
 * what a wrong value of that size usually means. */
static const char *diagnose(const Step *s, float got_i, size_t n, const float *got)
{
    static char why[400];
    LabPagedArgs one = s->a;
    one.threads = 1;
    float *alone = malloc(sizeof(float) * n);
    double *want = malloc(sizeof(double) * n);
    ck_assert(alone && want);
    char err[200];
    const char *found = NULL;
    reference(&s->a, &READINGS[0], want);
    if (lab_cuda_paged_attention(&one, alone, err, (int)sizeof err) == 0 && first_difference(alone, want, n) < 0)
        found = "it is right with 1 thread per block and wrong with 32: a thread reads shared memory (q_s, scores) "
                "that another writes, with no __syncthreads() between the write and the read";
    for (size_t k = 1; !found && k < sizeof READINGS / sizeof READINGS[0]; k++) {
        reference(&s->a, &READINGS[k], want);
        if (first_difference(got, want, n) < 0)
            found = READINGS[k].diagnosis;
    }
    free(alone);
    free(want);
    if (!found)
        found = got_i == 0.0f ? "0, as the stub writes (is the kernel written?)"
              : isnan(got_i) ? "not written, or a NaN (is every output element written, with a stride of blockDim.x?)"
              : fabs(got_i) > 10.0 ? "far outside the values' range (-1..1): a row past the sequence's length, or a "
                                      "block its table does not name"
                                    : "is each row scored once, scaled by 1/sqrt(head_dim), and the KV head the query "
                                      "head's group's (h / (n_heads / n_kv_heads))?";
    snprintf(why, sizeof why, "%s", found);
    return why;
}

/* Runs the kernel on the step and compares every output with the
 * reference; the failure names the case, the first wrong element and, as
 * far as the grader can tell, the mistake. */
static void expect_reference(const char *what, int n_seqs, int n_heads, int n_kv_heads, int head_dim,
                             int block_size, const int *lens, unsigned seed)
{
    Step s = make_step(n_seqs, n_heads, n_kv_heads, head_dim, block_size, lens, seed);
    size_t n = (size_t)n_seqs * n_heads * head_dim;
    float *got = malloc(sizeof(float) * n);
    double *want = malloc(sizeof(double) * n);
    ck_assert(got && want);
    char err[200] = "";
    int rc = lab_cuda_paged_attention(&s.a, got, err, (int)sizeof err);
    ck_assert_msg(rc == 0, "expected the kernel to run (%s), got the CUDA error \"%s\"; hint: " KERNEL
                  " (an index out of bounds? a barrier some threads never reach?)", what, err);
    reference(&s.a, &READINGS[0], want);
    long i = first_difference(got, want, n);
    if (i >= 0) {
        int sq = (int)(i / ((long)n_heads * head_dim)), h = (int)(i / head_dim % n_heads), d = (int)(i % head_dim);
        ck_assert_msg(0, "expected %.6f at sequence %d (length %d), head %d, dimension %d (%s), got %.6f; hint: " KERNEL
                      ": %s", want[i], sq, lens[sq], h, d, what, (double)got[i], diagnose(&s, got[i], n, got));
    }
    free(got);
    free(want);
    free_step(&s);
}

START_TEST(one_sequence_one_block)
{
    int lens[1] = {5};
    expect_reference("one sequence, one block of 8 with 5 rows filled", 1, 1, 1, 8, 8, lens, 11u);
}
END_TEST

START_TEST(several_sequences_scattered_blocks)
{
    int lens[3] = {9, 4, 12};
    expect_reference("3 sequences in blocks of 4 scattered through the pool", 3, 2, 2, 16, 4, lens, 22u);
}
END_TEST

START_TEST(last_block_partly_filled)
{
    int lens[2] = {3, 11};
    expect_reference("the last block of each sequence partly filled, garbage after", 2, 1, 1, 8, 8, lens, 33u);
}
END_TEST

START_TEST(grouped_query_heads_share_a_kv_head)
{
    int lens[2] = {6, 10};
    expect_reference("4 query heads on 2 KV heads", 2, 4, 2, 8, 4, lens, 44u);
}
END_TEST

START_TEST(more_rows_and_dimensions_than_threads)
{
    int lens[2] = {100, 64};
    expect_reference("blocks of 64 rows and head_dim 64, more than the 32 threads", 2, 2, 1, 64, 64, lens, 55u);
}
END_TEST

START_TEST(long_context_many_blocks)
{
    int lens[1] = {203};
    expect_reference("203 positions in 13 blocks of 16", 1, 2, 2, 32, 16, lens, 66u);
}
END_TEST

Suite *lab_suite(void)
{
    Suite *s = suite_create("cuda");
    lab_add_test(s, one_sequence_one_block, LAB_UNIT_S, 1, KERNEL);
    lab_add_test(s, several_sequences_scattered_blocks, LAB_UNIT_S, 2, KERNEL);
    lab_add_test(s, last_block_partly_filled, LAB_UNIT_S, 1, KERNEL);
    lab_add_test(s, grouped_query_heads_share_a_kv_head, LAB_UNIT_S, 1, KERNEL);
    lab_add_test(s, more_rows_and_dimensions_than_threads, LAB_UNIT_S, 1, KERNEL);
    lab_add_test(s, long_context_many_blocks, LAB_UNIT_S, 1, KERNEL);
    return s;
}
