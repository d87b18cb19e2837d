/* paged_attention_bench: what reading K/V through a block table costs on
 * the CPU, for every block size, against contiguous attention
 * (attention_reference over a [n_pos][kv_dim] cache). A benchmark, never a
 * test: `make bench` runs it (sections ch04_paged, through scripts/bench-ch04.sh,
 * and attention).
 *
 *   build/paged_attention_bench [HEAD_DIM [REPEATS]]
 *
 * For each length and block size, the sequence's blocks are scattered over
 * the pool in a random order (as they are after a while of serving), the
 * same query attends over all positions, and the best time of REPEATS
 * rounds of thread CPU time is kept (the least disturbed by other work on
 * the machine). Every
 * paged result is checked to be bitwise equal to the contiguous one.
 *
 *   build/paged_attention_bench --kv-dtype [HEAD_DIM [REPEATS [POSITIONS]]]
 *
 * PagedAttention over blocks of 16 stored in every --kv-dtype (chapter 4's
 * ext/dtype.c), the types timed one after the other in each round; per
 * type the median and range over the rounds of its time over f32's in the
 * same round, and its best time. Each typed result is checked to be
 * bitwise equal to chapter 2's attention over the same stored rows laid
 * out contiguously (kv_attention_rows()). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "block_pool.h"
#include "cli.h"
#include "ext/paged_dtype.h"
#include "mem.h"
#include "ops.h"
#include "paged.h"
#include "sampler.h"

enum { KV_HEADS = 4, LAYERS = 1 };

/* CPU time of this thread: a machine shared with other work deschedules
 * us at random, and wall time would charge that to whichever variant was
 * running. */
static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    int head_dim, n_pos, calls;
    float *keys, *values; /* [n_pos][kv_dim] contiguous cache */
    float *q, *out, *scores;
} Bench;

/* A random contiguous cache of n_pos positions and a query; calls per
 * round so that a round does about @p work multiply-adds per position and
 * head value. */
static void bench_open(Bench *b, int head_dim, int n_pos, long work, unsigned long long *rng)
{
    int kv_dim = KV_HEADS * head_dim;
    *b = (Bench){head_dim, n_pos, (int)(work / ((long)n_pos * head_dim)) + 8, NULL, NULL, NULL, NULL, NULL};
    b->keys = mem_alloc_array(MEM_KV, (size_t)n_pos * kv_dim, sizeof(float));
    b->values = mem_alloc_array(MEM_KV, (size_t)n_pos * kv_dim, sizeof(float));
    b->q = mem_alloc_array(MEM_ACTIVATIONS, (size_t)head_dim, sizeof(float));
    b->out = mem_alloc_array(MEM_ACTIVATIONS, (size_t)head_dim, sizeof(float));
    b->scores = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n_pos, sizeof(float));
    for (int i = 0; i < n_pos * kv_dim; i++) {
        b->keys[i] = sampler_random_f32(rng) - 0.5f;
        b->values[i] = sampler_random_f32(rng) - 0.5f;
    }
    for (int i = 0; i < head_dim; i++)
        b->q[i] = sampler_random_f32(rng) - 0.5f;
}

static void bench_close(Bench *b)
{
    mem_free(b->keys);
    mem_free(b->values);
    mem_free(b->q);
    mem_free(b->out);
    mem_free(b->scores);
}

/* Seconds per call of one round of b->calls contiguous calls. */
static double round_contiguous(const Bench *b)
{
    int kv_dim = KV_HEADS * b->head_dim;
    double t0 = cpu_seconds();
    for (int c = 0; c < b->calls; c++)
        attention_reference(b->out, b->q, b->keys + (c % KV_HEADS) * b->head_dim,
                            b->values + (c % KV_HEADS) * b->head_dim, b->n_pos, kv_dim, b->head_dim, b->scores);
    return (cpu_seconds() - t0) / b->calls;
}

/* The same through a block table. */
static double round_paged(const Bench *b, const BlockPool *p, const BlockTable *t)
{
    double t0 = cpu_seconds();
    for (int c = 0; c < b->calls; c++)
        paged_attention(p, t, 0, c % KV_HEADS, b->head_dim, b->q, b->n_pos, b->out, b->scores);
    return (cpu_seconds() - t0) / b->calls;
}

/* Scatters the contiguous cache over the pool's blocks in a random order. */
static void scatter(BlockPool *p, BlockTable *t, const Bench *b, unsigned long long *rng)
{
    int kv_dim = KV_HEADS * b->head_dim, bs = p->shape.block_size;
    t->n_blocks = block_count_for_tokens(b->n_pos, bs);
    for (int i = 0; i < t->n_blocks; i++)
        t->blocks[i] = i;
    for (int i = t->n_blocks - 1; i > 0; i--) {
        int j = (int)(sampler_random_f32(rng) * (float)(i + 1)) % (i + 1), tmp = t->blocks[i];
        t->blocks[i] = t->blocks[j];
        t->blocks[j] = tmp;
    }
    for (int pos = 0; pos < b->n_pos; pos++) {
        int offset, block = block_table_slot(t, pos, bs, &offset);
        memcpy(block_pool_keys(p, block, 0) + offset * kv_dim, b->keys + pos * kv_dim, kv_dim * sizeof(float));
        memcpy(block_pool_values(p, block, 0) + offset * kv_dim, b->values + pos * kv_dim, kv_dim * sizeof(float));
    }
}

#define N_SIZES 9 /* block sizes 1, 2, 4, ..., 256 */

/* Builds one scattered pool per block size, then runs rounds that time the
 * contiguous baseline and every block size back to back (so that a slow
 * moment of the machine hits them all alike), keeping each one's best. */
static int bench_length(int head_dim, int n_pos, int repeats)
{
    int kv_dim = KV_HEADS * head_dim;
    unsigned long long rng = 2024;
    Bench b;
    bench_open(&b, head_dim, n_pos, 10000000L, &rng);
    float *want = mem_alloc_array(MEM_ACTIVATIONS, (size_t)head_dim, sizeof(float));
    BlockPool pools[N_SIZES];
    BlockTables tables[N_SIZES];
    for (int k = 0; k < N_SIZES; k++) {
        Err err = {{0}};
        BlockShape shape = {1 << k, LAYERS, kv_dim, sizeof(float), 0};
        int n_blocks = block_count_for_tokens(n_pos, 1 << k);
        if (block_pool_init(&pools[k], &shape, n_blocks, 1, &err) ||
            block_tables_init(&tables[k], 1, n_blocks, &err)) {
            fprintf(stderr, "paged_attention_bench: error: %s\n", err.msg);
            return 1;
        }
        scatter(&pools[k], &tables[k].tables[0], &b, &rng);
    }
    double best_contiguous = 1e30, best[N_SIZES];
    int status = 0;
    for (int k = 0; k < N_SIZES; k++)
        best[k] = 1e30;
    for (int r = 0; r < repeats; r++) {
        double t = round_contiguous(&b);
        best_contiguous = t < best_contiguous ? t : best_contiguous;
        memcpy(want, b.out, (size_t)head_dim * sizeof(float)); /* the last call's KV head */
        for (int k = 0; k < N_SIZES; k++) {
            t = round_paged(&b, &pools[k], &tables[k].tables[0]);
            best[k] = t < best[k] ? t : best[k];
            if (memcmp(want, b.out, (size_t)head_dim * sizeof(float)) != 0) {
                fprintf(stderr, "paged_attention_bench: error: block size %d differs from contiguous\n", 1 << k);
                status = 1;
            }
        }
    }
    printf("| %5d | contiguous | %9.2f | 1.00 |\n", n_pos, 1e6 * best_contiguous);
    for (int k = 0; k < N_SIZES; k++) {
        printf("| %5d | %10d | %9.2f | %4.2f |\n", n_pos, 1 << k, 1e6 * best[k], best[k] / best_contiguous);
        block_tables_free(&tables[k]);
        block_pool_free(&pools[k]);
    }
    mem_free(want);
    bench_close(&b);
    return status;
}

/* ------------------------------------------------------------ --kv-dtype */

enum { TYPED_BLOCK = 16, MAX_ROUNDS = 1000 };

/* One type's pool: the sequence's rows stored in scattered blocks of 16,
 * and the same rows contiguous (the check). */
typedef struct {
    PagedKv kv;
    BlockTables tables;
    PagedDtype d;
    unsigned char *rows_k, *rows_v; /* [n_pos][row_bytes] contiguous copies of the stored rows */
    double ratio[MAX_ROUNDS];       /* time over f32's, per round */
    double best;
} TypedPool;

static int typed_open(TypedPool *tp, KvDtype type, const Bench *b, unsigned long long *rng, Err *err)
{
    int kv_dim = KV_HEADS * b->head_dim;
    memset(tp, 0, sizeof *tp);
    if (kv_row_format_init(&tp->d.row, type, KV_HEADS, b->head_dim, err))
        return -1;
    tp->d.row_bytes = kv_row_bytes(&tp->d.row);
    tp->d.kv = &tp->kv;
    BlockShape shape = {TYPED_BLOCK, LAYERS, kv_dim, (int)kv_dtype_elem_bytes(type),
                        KV_HEADS * (int)kv_dtype_scale_bytes(type)};
    int n_blocks = block_count_for_tokens(b->n_pos, TYPED_BLOCK);
    if (block_pool_init(&tp->kv.pool, &shape, n_blocks, 1, err) || block_tables_init(&tp->tables, 1, n_blocks, err))
        return -1;
    tp->rows_k = mem_alloc_array(MEM_KV, (size_t)b->n_pos, tp->d.row_bytes);
    tp->rows_v = mem_alloc_array(MEM_KV, (size_t)b->n_pos, tp->d.row_bytes);
    if (!tp->rows_k || !tp->rows_v)
        return err_set(err, "out of memory");
    BlockTable *t = &tp->tables.tables[0];
    t->n_blocks = n_blocks;
    for (int i = 0; i < n_blocks; i++)
        t->blocks[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)(sampler_random_f32(rng) * (float)(i + 1)) % (i + 1), tmp = t->blocks[i];
        t->blocks[i] = t->blocks[j];
        t->blocks[j] = tmp;
    }
    for (int pos = 0; pos < b->n_pos; pos++) {
        int offset, block = block_table_slot(t, pos, TYPED_BLOCK, &offset);
        kv_row_store(tp->rows_k + (size_t)pos * tp->d.row_bytes, b->keys + (size_t)pos * kv_dim, &tp->d.row);
        kv_row_store(tp->rows_v + (size_t)pos * tp->d.row_bytes, b->values + (size_t)pos * kv_dim, &tp->d.row);
        memcpy(paged_dtype_row(&tp->d, block, 0, 0, offset), tp->rows_k + (size_t)pos * tp->d.row_bytes,
               tp->d.row_bytes);
        memcpy(paged_dtype_row(&tp->d, block, 0, 1, offset), tp->rows_v + (size_t)pos * tp->d.row_bytes,
               tp->d.row_bytes);
    }
    tp->best = 1e30;
    return 0;
}

static void typed_close(TypedPool *tp)
{
    block_tables_free(&tp->tables);
    block_pool_free(&tp->kv.pool);
    mem_free(tp->rows_k);
    mem_free(tp->rows_v);
}

/* Seconds per call of one round over a typed pool (f32: the chapter's own
 * paged_attention(), the core). */
static double round_typed(const Bench *b, const TypedPool *tp)
{
    const BlockTable *t = &tp->tables.tables[0];
    double t0 = cpu_seconds();
    for (int c = 0; c < b->calls; c++) {
        if (tp->d.row.type == KV_DTYPE_FP32)
            paged_attention(&tp->kv.pool, t, 0, c % KV_HEADS, b->head_dim, b->q, b->n_pos, b->out, b->scores);
        else
            paged_attention_typed(&tp->d, t, 0, c % KV_HEADS, b->q, b->n_pos, b->out, b->scores);
    }
    return (cpu_seconds() - t0) / b->calls;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int bench_types(int head_dim, int n_pos, int repeats)
{
    int status = 0;
    unsigned long long rng = 2024;
    Bench b;
    bench_open(&b, head_dim, n_pos, 40000000L, &rng);
    float *want = mem_alloc_array(MEM_ACTIVATIONS, (size_t)head_dim, sizeof(float));
    TypedPool *pools = mem_alloc_array(MEM_ACTIVATIONS, KV_DTYPE_COUNT, sizeof(TypedPool));
    for (int k = 0; k < KV_DTYPE_COUNT; k++) {
        Err err = {{0}};
        if (typed_open(&pools[k], (KvDtype)k, &b, &rng, &err)) {
            fprintf(stderr, "paged_attention_bench: error: %s\n", err.msg);
            return 1;
        }
    }
    for (int r = 0; r < repeats; r++) {
        double f32 = 0;
        for (int k = 0; k < KV_DTYPE_COUNT; k++) {
            double t = round_typed(&b, &pools[k]);
            f32 = k == 0 ? t : f32;
            pools[k].ratio[r] = t / f32;
            pools[k].best = t < pools[k].best ? t : pools[k].best;
            int last = (b.calls - 1) % KV_HEADS; /* the last call's KV head */
            kv_attention_rows(want, b.q, pools[k].rows_k, pools[k].rows_v, n_pos, pools[k].d.row_bytes, last,
                              &pools[k].d.row, b.scores);
            if (memcmp(want, b.out, (size_t)head_dim * sizeof(float)) != 0) {
                fprintf(stderr, "paged_attention_bench: error: %s differs from the contiguous rows\n",
                        kv_dtype_name((KvDtype)k));
                status = 1;
            }
        }
    }
    printf("| --kv-dtype | K+V bytes read per position | best us per call | time / f32's: median (range) |\n"
           "|---|---:|---:|---:|\n");
    for (int k = 0; k < KV_DTYPE_COUNT; k++) {
        TypedPool *tp = &pools[k];
        qsort(tp->ratio, (size_t)repeats, sizeof tp->ratio[0], compare_doubles);
        printf("| %s | %zu | %.2f | %.2f (%.2f-%.2f) |\n", kv_dtype_name((KvDtype)k),
               2 * kv_dtype_head_bytes((KvDtype)k, head_dim), 1e6 * tp->best, tp->ratio[repeats / 2], tp->ratio[0],
               tp->ratio[repeats - 1]);
        typed_close(tp);
    }
    mem_free(pools);
    mem_free(want);
    bench_close(&b);
    return status;
}

#define USAGE "paged_attention_bench [HEAD_DIM (even, 2-256, default 64) [REPEATS (default 7)]]"
#define USAGE_TYPES "paged_attention_bench --kv-dtype [HEAD_DIM (1-256, default 64) [REPEATS (default 15) [POSITIONS (default 4096)]]]"

/* --kv-dtype [HEAD_DIM [REPEATS [POSITIONS]]]: every type at one length. */
static int main_types(int argc, char **argv)
{
    long dim = 64, rounds = 15, positions = 4096;
    Err err = {{0}};
    if (argc > 5 || (argc > 2 && cli_parse_long("HEAD_DIM", argv[2], 2, KV_DTYPE_HEAD_DIM_MAX, &dim, &err)) ||
        (argc > 3 && cli_parse_long("REPEATS", argv[3], 1, MAX_ROUNDS, &rounds, &err)) ||
        (argc > 4 && cli_parse_long("POSITIONS", argv[4], 1, 1L << 20, &positions, &err))) {
        fprintf(stderr, "paged_attention_bench: error: %s (usage: " USAGE_TYPES ")\n",
                err.msg[0] ? err.msg + 2 : "too many arguments");
        return 1;
    }
    printf("PagedAttention over blocks of %d in every --kv-dtype, one query head of %ld over %ld positions, %d KV "
           "heads (%ld rounds, the types one after the other in each)\n\n",
           TYPED_BLOCK, dim, positions, KV_HEADS, rounds);
    return bench_types((int)dim, (int)positions, (int)rounds);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--help") == 0) {
        printf("Usage: " USAGE "\n       " USAGE_TYPES "\nPagedAttention against contiguous attention on the CPU, "
               "every block size, 128 to 2048 positions; with --kv-dtype, every K/V element type at one length "
               "(default 4096 positions).\n");
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--kv-dtype") == 0)
        return main_types(argc, argv);
    long dim = 64, rounds = 7;
    Err err = {{0}};
    if (argc > 3 || (argc > 1 && cli_parse_long("HEAD_DIM", argv[1], 2, 256, &dim, &err)) ||
        (argc > 2 && cli_parse_long("REPEATS", argv[2], 1, 1000, &rounds, &err)) || dim % 2) {
        /* + 2: the arguments are positional, without the "--" cli_parse_long puts in front */
        fprintf(stderr, "paged_attention_bench: error: %s (usage: " USAGE ")\n",
                err.msg[0] ? err.msg + 2 : argc > 3 ? "too many arguments" : "HEAD_DIM must be even");
        return 1;
    }
    int head_dim = (int)dim, repeats = (int)rounds;
    printf("PagedAttention vs contiguous attention, one query head of %d over n positions, %d KV heads "
           "(best of %d rounds)\n\n",
           head_dim, KV_HEADS, repeats);
    printf("| positions | block size | us per call | vs contiguous |\n|---:|---:|---:|---:|\n");
    int status = 0;
    int lengths[] = {128, 512, 2048};
    for (int i = 0; i < 3; i++)
        status |= bench_length(head_dim, lengths[i], repeats);
    return status;
}
