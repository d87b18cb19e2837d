/* build/decode-bench: batched decode on the device, against the copy
 * bandwidth of the same device (a performance goal of the CUDA path).
 *
 *   build/decode-bench [--preset stories110M] [--batch 64] [--context 512] [--steps 20]
 *                      [--kv-dtype f32|f16|bf16] [--weight-dtype f32|f16|bf16] [--no-graph]
 *                      [--store contiguous|paged] [--block-size 16] [--markdown FILE]
 *   build/decode-bench --write-model PRESET MODEL_FILE TOKENIZER_FILE
 *
 * A synthetic model of the preset's shape (common/synth.h) is built in
 * memory and uploaded. Sequence 0 is prefilled for real with `context`
 * random tokens; its K/V are then copied to the other sequences of the
 * batch, each into storage of its own:
 *   --store contiguous (default): chapter 3's arena, one max-length region
 *     of rows per sequence (the contiguous attention kernel);
 *   --store paged: chapter 4's device pool, in blocks of --block-size that
 *     a chapter 4 block pool hands out (block_pool.h, accounting only on the
 *     host), one block per sequence in turn as if they had grown together,
 *     so that a sequence's blocks are scattered; each sequence's block
 *     table as chapter 4 keeps it (PagedAttention).
 * Then every step decodes one token for each of the `batch` sequences in
 * one forward call (captured once as a CUDA graph and replayed, unless
 * --no-graph).
 *
 * The goal: a step must read every weight once and the K/V of every
 * sequence up to its position; those bytes divided by the step's device
 * time should reach half the bandwidth of a device-to-device copy (which
 * reads and writes each byte: counted twice, as the step's bytes are).
 * Activations (about 1% of the bytes here) are not counted.
 *
 * --write-model writes the synthetic checkpoint and tokenizer to files
 * (for running the chapters on a model of that shape). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bandwidth.h"
#include "ext/batching_device.h" /* chapter 3's device arena (device_kv_open_arena()) */
#include "block_pool.h" /* chapter 4's blocks and block tables */
#include "cli.h"
#include "cuda_check.h"
#include "device.h"
#include "device_forward.h"
#include "device_kv.h"
#include "mem.h"
#include "outfile.h"
#include "ext/paged_device.h" /* chapter 4's device pool (device_kv_open_paged()) */
#include "report.h"
#include "sampler.h"
#include "synth.h"

#define GOAL_FRACTION 0.5

typedef struct {
    const char *preset;
    int batch, context, steps, graph;
    Dtype kv_type, weight_type;
    const char *markdown;
    int paged;      /* --store paged */
    int block_size; /* of the paged store */
} BenchOptions;

static int fail(const char *msg)
{
    fprintf(stderr, "decode-bench: error: %s\n", msg);
    return 1;
}

static int write_model(const char *preset, const char *model_path, const char *tok_path)
{
    SynthSpec spec = {.shared_classifier = 1, .ak42 = 0, .seed = 110};
    Err err = {{0}};
    if (synth_preset(preset, &spec.cfg)) {
        char msg[256];
        snprintf(msg, sizeof msg, "--write-model: unknown preset '%s' (%s)", preset, synth_preset_names());
        return fail(msg);
    }
    void *image;
    size_t bytes;
    if (synth_model_image(&spec, &image, &bytes, &err) || synth_write_file(model_path, image, bytes, &err))
        return fail(err.msg);
    mem_free(image);
    if (synth_tokenizer_image(spec.cfg.vocab_size, &image, &bytes, &err) ||
        synth_write_file(tok_path, image, bytes, &err))
        return fail(err.msg);
    mem_free(image);
    printf("decode-bench: wrote a synthetic %s model to %s and its tokenizer to %s\n", preset, model_path, tok_path);
    return 0;
}

static void usage(void)
{
    printf("Usage: decode-bench [options]\n"
           "       decode-bench --write-model PRESET MODEL_FILE TOKENIZER_FILE\n"
           "Batched decode of a synthetic model on the GPU against the device's copy bandwidth (goal: %.0f%%).\n\n"
           "  --preset NAME         %s (default stories110M)\n"
           "  --batch N             sequences decoded together (default 64)\n"
           "  --context N           positions each sequence holds before the timed steps (default 512)\n"
           "  --steps N             timed decode steps (default 20)\n"
           "  --kv-dtype T          f32, f16 or bf16 (default f32)\n"
           "  --weight-dtype T      f32, f16 or bf16 (default f32)\n"
           "  --no-graph            launch every kernel instead of replaying a CUDA graph\n"
           "  --store S             contiguous (chapter 3's arena) or paged (chapter 4's blocks; default contiguous)\n"
           "  --block-size N        tokens per block of --store paged, a power of two up to %d (default 16)\n"
           "  --markdown FILE       append the result as a Markdown table row\n"
           "  --help                show this help\n"
           "Without a GPU it prints a SKIP line and exits 0.\n",
           100 * GOAL_FRACTION, synth_preset_names(), BLOCK_SIZE_MAX);
}

/* Refuses every bad argument before a device is opened: a typo must not
 * cost a model upload, nor read as a SKIP on a machine without a GPU. */
static int parse(int argc, char **argv, BenchOptions *o, Err *err)
{
    static const char *const with_value[] = {"--preset",   "--batch",        "--context", "--steps",      "--markdown",
                                             "--kv-dtype", "--weight-dtype", "--store",   "--block-size", NULL};
    *o = (BenchOptions){"stories110M", 64, 512, 20, 1, DTYPE_F32, DTYPE_F32, NULL, 0, 16};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--no-graph") == 0) {
            o->graph = 0;
            continue;
        }
        int known = 0;
        for (int k = 0; with_value[k]; k++)
            known |= strcmp(a, with_value[k]) == 0;
        if (!known)
            return err_set(err, "unknown argument '%s' (see --help)", a);
        if (i + 1 >= argc)
            return err_set(err, "option '%s' needs a value (see --help)", a);
        const char *v = argv[++i];
        long n;
        if (strcmp(a, "--preset") == 0)
            o->preset = v;
        else if (strcmp(a, "--store") == 0) {
            if (strcmp(v, "contiguous") != 0 && strcmp(v, "paged") != 0)
                return err_set(err, "--store: '%s' is neither contiguous nor paged", v);
            o->paged = v[0] == 'p';
        }
        else if (strcmp(a, "--markdown") == 0)
            o->markdown = v;
        else if (strcmp(a, "--kv-dtype") == 0 || strcmp(a, "--weight-dtype") == 0) {
            if (dtype_parse(v, a[2] == 'k' ? &o->kv_type : &o->weight_type, err))
                return err_prefix(err, "%s", a);
        } else if (cli_parse_long(a + 2, v, 1, 1 << 20, &n, err)) {
            return -1;
        } else if (strcmp(a, "--batch") == 0) {
            o->batch = (int)n;
        } else if (strcmp(a, "--context") == 0) {
            o->context = (int)n;
        } else if (strcmp(a, "--block-size") == 0) {
            if (n > BLOCK_SIZE_MAX || (n & (n - 1)))
                return err_set(err, "--block-size: %ld is not a power of two up to %d", n, BLOCK_SIZE_MAX);
            o->block_size = (int)n;
        } else {
            o->steps = (int)n;
        }
    }
    ModelConfig cfg;
    if (synth_preset(o->preset, &cfg))
        return err_set(err, "--preset: unknown preset '%s' (%s)", o->preset, synth_preset_names());
    if (o->context + o->steps + 2 > cfg.seq_len)
        return err_set(err, "--context %d + --steps %d (+ 2 warm-up steps) do not fit %s's seq_len of %d",
                       o->context, o->steps, o->preset, cfg.seq_len);
    if (o->markdown && report_check_writable("--markdown", o->markdown, err))
        return -1;
    return 0;
}

/* Everything the benchmark holds, freed in one place. */
typedef struct {
    Device dev;
    void *image;
    Model model;
    DeviceModel dm;
    DeviceKv kv;
    DeviceForwardState fs;
    BatchEntry *entries;  /* [max(batch, context)] */
    BlockPool pool;       /* --store paged: chapter 4's books (no K/V bytes on the host) */
    BlockTables tables;   /* --store paged: [batch] */
} Bench;

static void bench_close(Bench *b)
{
    device_forward_state_free(&b->fs);
    device_kv_close(&b->kv);
    device_model_free(&b->dm);
    model_free(&b->model);
    mem_free(b->image);
    mem_free(b->entries);
    block_tables_free(&b->tables);
    block_pool_free(&b->pool);
    device_close(&b->dev);
}

/* Positions each sequence will hold: the context, the warm-up and the timed steps. */
static int positions_needed(const BenchOptions *o) { return o->context + 2 + o->steps; }

/* Chapter 3's arena: one region of seq_len rows per sequence. */
static int open_contiguous(Bench *b, const BenchOptions *o, int most, Err *err)
{
    const ModelConfig *c = &b->model.cfg;
    TRY(device_kv_open_arena(&b->kv, &b->dev, c, o->kv_type, (long long)o->batch * c->seq_len, o->batch, most, err));
    for (int s = 0; s < o->batch; s++)
        TRY(device_kv_arena_place(&b->kv, s, (long long)s * c->seq_len, c->seq_len, err));
    return 0;
}

/* Chapter 4's pool: the blocks every sequence needs, handed out by the
 * block pool one block per sequence in turn (as when they grow together),
 * and each sequence's table given to the device store. */
static int open_paged(Bench *b, const BenchOptions *o, int most, Err *err)
{
    const ModelConfig *c = &b->model.cfg;
    int per_seq = block_count_for_tokens(positions_needed(o), o->block_size);
    BlockShape shape = {.block_size = o->block_size, .n_layers = c->n_layers, .kv_dim = model_kv_dim(c),
                        .elem_bytes = (int)dtype_bytes(o->kv_type)};
    TRY(block_pool_init(&b->pool, &shape, o->batch * per_seq, 0, err));
    TRY(block_tables_init(&b->tables, o->batch, block_count_for_tokens(c->seq_len, o->block_size), err));
    for (int k = 1; k <= per_seq; k++)
        for (int s = 0; s < o->batch; s++)
            if (block_table_grow(&b->pool, &b->tables.tables[s], k * o->block_size))
                return err_set(err, "the block pool ran out of blocks (a bug of decode-bench)");
    TRY(device_kv_open_paged(&b->kv, &b->dev, c, o->kv_type, b->pool.n_blocks, o->block_size, o->batch, most, err));
    for (int s = 0; s < o->batch; s++)
        TRY(device_kv_paged_set_table(&b->kv, s, b->tables.tables[s].blocks, b->tables.tables[s].n_blocks, err));
    return 0;
}

static int bench_open(Bench *b, const BenchOptions *o, Err *err)
{
    SynthSpec spec = {.shared_classifier = 1, .ak42 = 0, .seed = 110};
    if (synth_preset(o->preset, &spec.cfg))
        return err_set(err, "unknown preset '%s' (%s)", o->preset, synth_preset_names());
    const ModelConfig *c = &spec.cfg;
    if (positions_needed(o) > c->seq_len)
        return err_set(err, "context %d + %d steps does not fit seq_len %d", o->context, o->steps + 2, c->seq_len);
    size_t bytes;
    int most = o->batch > o->context ? o->batch : o->context;
    b->entries = mem_alloc_array(MEM_ACTIVATIONS, (size_t)most, sizeof(BatchEntry));
    if (!b->entries)
        return err_set(err, "out of memory");
    if (synth_model_image(&spec, &b->image, &bytes, err) || model_open_image(&b->model, b->image, bytes, err) ||
        device_model_upload(&b->dm, &b->model, o->weight_type, &b->dev, err) ||
        (o->paged ? open_paged(b, o, most, err) : open_contiguous(b, o, most, err)) ||
        device_forward_state_init(&b->fs, &b->dm, most, o->batch, err))
        return -1;
    return 0;
}

/* Sequence 0's blocks holding its context, copied into every other
 * sequence's blocks (at most as many pairs per call as the store takes). */
static int copy_context_blocks(Bench *b, const BenchOptions *o, Err *err)
{
    int n = block_count_for_tokens(o->context, o->block_size), pairs[2 * 64];
    int chunk = o->batch < 64 ? o->batch : 64, done = 0;
    const BlockTable *first = &b->tables.tables[0];
    for (int s = 1; s < o->batch; s++)
        for (int k = 0; k < n; k++) {
            pairs[2 * done] = first->blocks[k];
            pairs[2 * done + 1] = b->tables.tables[s].blocks[k];
            if (++done == chunk || (s == o->batch - 1 && k == n - 1)) {
                TRY(device_kv_paged_copy_blocks(&b->kv, pairs, done, err));
                done = 0;
            }
        }
    return 0;
}

/* Sequence 0 gets a real prefill; the others a copy of its K/V. */
static int prefill(Bench *b, const BenchOptions *o, double *seconds, Err *err)
{
    unsigned long long rng = 7;
    const ModelConfig *c = &b->model.cfg;
    for (int t = 0; t < o->context; t++)
        b->entries[t] = (BatchEntry){.seq = 0, .pos = t,
                                     .token = (int)(sampler_random_f32(&rng) * (float)c->vocab_size) % c->vocab_size,
                                     .logits_row = t == o->context - 1 ? 0 : -1};
    double t0 = now_seconds();
    TRY(device_forward(&b->dev, &b->dm, &b->fs, &b->kv.seam, b->entries, o->context, 0, err));
    *seconds = now_seconds() - t0;
    if (o->paged)
        TRY(copy_context_blocks(b, o, err));
    else
        for (int s = 1; s < o->batch; s++)
            TRY(device_kv_arena_copy_rows(&b->kv, 0, (long long)s * c->seq_len, o->context, err));
    return device_sync(&b->dev, err);
}

/* One decode step of every sequence; the next tokens are the argmax. */
static int decode_step(Bench *b, const BenchOptions *o, int step, int *tokens, Err *err)
{
    int vocab = b->model.cfg.vocab_size;
    for (int s = 0; s < o->batch; s++)
        b->entries[s] = (BatchEntry){.seq = s, .pos = o->context + step, .token = tokens[s], .logits_row = s};
    TRY(device_forward(&b->dev, &b->dm, &b->fs, &b->kv.seam, b->entries, o->batch, o->graph, err));
    for (int s = 0; s < o->batch; s++)
        tokens[s] = sampler_argmax(b->fs.logits_host + (size_t)s * vocab, vocab);
    return 0;
}

/* Bytes a step must move: all weights once, each sequence's K/V up to its
 * position, and the new K/V rows written. */
static double step_bytes(const Bench *b, const BenchOptions *o, int step)
{
    const ModelConfig *c = &b->model.cfg;
    double per_position = 2.0 * c->n_layers * model_kv_dim(c) * (double)dtype_bytes(o->kv_type);
    double positions = (double)(o->context + step + 1);
    return (double)b->dm.bytes + o->batch * positions * per_position + o->batch * per_position;
}

/* The store and the attention kernel version the steps use, in words. */
static void store_text(const Bench *b, const BenchOptions *o, char *out, size_t size)
{
    KvkHeads h = device_kv_heads(&b->model.cfg);
    if (o->paged) {
        int v = kvk_paged_attention_pick(o->kv_type, h, o->batch);
        snprintf(out, size, "paged, blocks of %d (PagedAttention v%d %s)", o->block_size, v,
                 v ? kvk_paged_attention_versions[v - 1].name : "?");
    } else {
        int v = kvk_attention_pick(o->kv_type, h, b->model.cfg.seq_len);
        snprintf(out, size, "contiguous (attention v%d %s)", v, v ? kvk_attention_versions[v - 1].name : "?");
    }
}

/* What the timed steps measured. */
typedef struct {
    double device_ms, wall_s, bytes; /* over the timed steps */
    double prefill_s;
    CopyBandwidth copy;
} BenchResult;

/* Two warm-up steps, then the timed ones. */
static int timed_steps(Bench *b, const BenchOptions *o, BenchResult *r, Err *err)
{
    int *tokens = mem_alloc_array(MEM_ACTIVATIONS, (size_t)o->batch, sizeof(int));
    if (!tokens)
        return err_set(err, "out of memory");
    for (int s = 0; s < o->batch; s++)
        tokens[s] = sampler_argmax(b->fs.logits_host, b->model.cfg.vocab_size);
    int rc = 0, warm = 2;
    for (int step = 0; step < warm + o->steps && rc == 0; step++) {
        double t0 = now_seconds();
        rc = decode_step(b, o, step, tokens, err);
        if (rc == 0 && step >= warm) {
            r->wall_s += now_seconds() - t0;
            r->device_ms += b->fs.last_step_ms;
            r->bytes += step_bytes(b, o, step);
        }
    }
    mem_free(tokens);
    return rc;
}

static void print_result(const Bench *b, const BenchOptions *o, const BenchResult *r)
{
    const ModelConfig *c = &b->model.cfg;
    double step_ms = r->device_ms / o->steps, gbs = r->bytes / (r->device_ms * 1e6), fraction = gbs / r->copy.gbs;
    char store[160];
    store_text(b, o, store, sizeof store);
    printf("decode-bench on %s\n", b->dev.name);
    printf("  %s-shaped synthetic model (%d layers, dim %d), %s weights, %s K/V, batch %d, context %d..%d%s\n",
           o->preset, c->n_layers, c->dim, dtype_name(o->weight_type), dtype_name(o->kv_type), o->batch, o->context,
           positions_needed(o) - 1, o->graph ? ", CUDA graph" : "");
    printf("  K/V store: %s\n", store);
    printf("  prefill of sequence 0: %d tokens in %.3f s\n", o->context, r->prefill_s);
    printf("  decode step: %.3f ms on the device (%.3f ms wall), %.0f tokens/s\n", step_ms,
           1e3 * r->wall_s / o->steps, o->batch * o->steps / r->wall_s);
    printf("  bytes a step must move: %.1f MB (weights %.1f MB) -> %.0f GB/s\n", r->bytes / o->steps / 1e6,
           (double)b->dm.bytes / 1e6, gbs);
    printf("  copy bandwidth %.0f GB/s: the step reaches %.2f of it (goal >= %.2f): %s\n", r->copy.gbs, fraction,
           GOAL_FRACTION, fraction >= GOAL_FRACTION ? "goal met" : "goal MISSED");
}

/* Appends the row through a temporary copy renamed into place: a failed
 * write leaves the table as it was, never half a row. */
static int append_markdown(const Bench *b, const BenchOptions *o, const BenchResult *r, Err *err)
{
    double step_ms = r->device_ms / o->steps, gbs = r->bytes / (r->device_ms * 1e6), fraction = gbs / r->copy.gbs;
    char store[160];
    store_text(b, o, store, sizeof store);
    OutFile out;
    if (outfile_open_append(&out, "--markdown", o->markdown, err))
        return -1;
    fprintf(out.f, "| %s | %s | %s | %s | batch %d, context %d%s | %.3f ms | %.0f | %.0f GB/s | %.0f GB/s | %.2f | %s |\n",
            o->preset, dtype_name(o->weight_type), dtype_name(o->kv_type), store, o->batch, o->context,
            o->graph ? "" : ", no graph", step_ms, o->batch * o->steps / r->wall_s, gbs, r->copy.gbs, fraction,
            fraction >= GOAL_FRACTION ? "met" : "MISSED");
    return outfile_commit(&out, err);
}

static int run(Bench *b, const BenchOptions *o, Err *err)
{
    BenchResult r = {0};
    TRY(device_open(&b->dev, err));
    TRY(copy_bandwidth(&b->dev, &r.copy, err));
    TRY(bench_open(b, o, err));
    TRY(prefill(b, o, &r.prefill_s, err));
    TRY(timed_steps(b, o, &r, err));
    print_result(b, o, &r);
    return o->markdown ? append_markdown(b, o, &r, err) : 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--write-model") == 0)
        return write_model(argv[2], argv[3], argv[4]);
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0) {
            usage();
            return 0;
        }
    BenchOptions o;
    Err err = {{0}};
    if (parse(argc, argv, &o, &err))
        return fail(err.msg);
    Bench b;
    memset(&b, 0, sizeof b);
    if (!device_compiled_in()) {
        printf("decode-bench: SKIP: built without CUDA\n");
        return 0;
    }
    int rc = run(&b, &o, &err);
    if (rc && !b.dev.is_open && b.dm.bytes == 0 && strstr(err.msg, "no CUDA")) {
        printf("decode-bench: SKIP: no CUDA device: %s\n", err.msg);
        bench_close(&b);
        return 0;
    }
    bench_close(&b);
    return rc ? fail(err.msg) : 0;
}
