/* build/decode-bench: batched decode on the device, against the copy
 * bandwidth of the same device (a performance goal of the CUDA path).
 *
 *   build/decode-bench [--preset stories110M] [--batch 64] [--context 512] [--steps 20]
 *                      [--kv-dtype f32|f16|bf16] [--weight-dtype f32|f16|bf16] [--no-graph]
 *                      [--markdown FILE]
 *   build/decode-bench --write-model PRESET MODEL_FILE TOKENIZER_FILE
 *
 * A synthetic model of the preset's shape (common/synth.h) is built in
 * memory and uploaded. Sequence 0 is prefilled for real with `context`
 * random tokens; its K/V rows are then copied into the regions of the other
 * sequences of the batch (an arena as in chapter 3: one max-length region
 * per sequence). Then every step decodes one token for each of the `batch`
 * sequences in one forward call (captured once as a CUDA graph and
 * replayed, unless --no-graph).
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

#include "ext/batching_device.h" /* chapter 3's device arena (device_kv_open_arena()) */
#include "cli.h"
#include "cuda_check.h"
#include "device.h"
#include "device_forward.h"
#include "device_kv.h"
#include "mem.h"
#include "outfile.h"
#include "report.h"
#include "sampler.h"
#include "synth.h"

#define GOAL_FRACTION 0.5

typedef struct {
    const char *preset;
    int batch, context, steps, graph;
    Dtype kv_type, weight_type;
    const char *markdown;
} BenchOptions;

static int fail(const char *msg)
{
    fprintf(stderr, "decode-bench: error: %s\n", msg);
    return 1;
}

/* Device-to-device copy bandwidth in GB/s, counting bytes read and written. */
static int copy_bandwidth(const Device *dev, double *gbs, Err *err)
{
    size_t bytes = (size_t)1 << 30;
    if (dev->mem_free_now / 4 < bytes)
        bytes = dev->mem_free_now / 4;
    void *a = NULL, *b = NULL;
    if (device_alloc(&a, bytes, MEM_ACTIVATIONS, err) || device_alloc(&b, bytes, MEM_ACTIVATIONS, err)) {
        device_free(a, NULL);
        return -1;
    }
    cudaEvent_t start, stop;
    int rc = 0, repeats = 10;
    if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess)
        rc = err_set(err, "cudaEventCreate failed");
    for (int i = 0; i < repeats + 2 && rc == 0; i++) {
        if (i == 2 && cudaEventRecord(start, dev->stream) != cudaSuccess)
            rc = err_set(err, "cudaEventRecord failed");
        if (rc == 0 && cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, dev->stream) != cudaSuccess)
            rc = err_set(err, "%s:%d: cudaMemcpyAsync failed", __FILE__, __LINE__);
    }
    float ms = 0;
    if (rc == 0 && (cudaEventRecord(stop, dev->stream) != cudaSuccess || cudaEventSynchronize(stop) != cudaSuccess ||
                    cudaEventElapsedTime(&ms, start, stop) != cudaSuccess))
        rc = err_set(err, "timing the copy failed: %s", cudaGetErrorString(cudaGetLastError()));
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    device_free(a, NULL);
    device_free(b, NULL);
    *gbs = rc == 0 ? 2.0 * (double)bytes * repeats / (ms * 1e6) : 0.0;
    return rc;
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
           "  --markdown FILE       append the result as a Markdown table row\n"
           "  --help                show this help\n"
           "Without a GPU it prints a SKIP line and exits 0.\n",
           100 * GOAL_FRACTION, synth_preset_names());
}

/* Refuses every bad argument before a device is opened: a typo must not
 * cost a model upload, nor read as a SKIP on a machine without a GPU. */
static int parse(int argc, char **argv, BenchOptions *o, Err *err)
{
    static const char *const with_value[] = {"--preset", "--batch", "--context", "--steps",
                                             "--markdown", "--kv-dtype", "--weight-dtype", NULL};
    *o = (BenchOptions){"stories110M", 64, 512, 20, 1, DTYPE_F32, DTYPE_F32, NULL};
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
    BatchEntry *entries; /* [max(batch, context)] */
} Bench;

static void bench_close(Bench *b)
{
    device_forward_state_free(&b->fs);
    device_kv_close(&b->kv);
    device_model_free(&b->dm);
    model_free(&b->model);
    mem_free(b->image);
    mem_free(b->entries);
    device_close(&b->dev);
}

static int bench_open(Bench *b, const BenchOptions *o, Err *err)
{
    SynthSpec spec = {.shared_classifier = 1, .ak42 = 0, .seed = 110};
    if (synth_preset(o->preset, &spec.cfg))
        return err_set(err, "unknown preset '%s' (%s)", o->preset, synth_preset_names());
    const ModelConfig *c = &spec.cfg;
    if (o->context + o->steps + 2 > c->seq_len)
        return err_set(err, "context %d + %d steps does not fit seq_len %d", o->context, o->steps + 2, c->seq_len);
    size_t bytes;
    int most = o->batch > o->context ? o->batch : o->context;
    b->entries = mem_alloc_array(MEM_ACTIVATIONS, (size_t)most, sizeof(BatchEntry));
    if (!b->entries)
        return err_set(err, "out of memory");
    if (synth_model_image(&spec, &b->image, &bytes, err) || model_open_image(&b->model, b->image, bytes, err) ||
        device_model_upload(&b->dm, &b->model, o->weight_type, &b->dev, err) ||
        device_kv_open_arena(&b->kv, &b->dev, c, o->kv_type, (long long)o->batch * c->seq_len, o->batch, most, err) ||
        device_forward_state_init(&b->fs, &b->dm, most, o->batch, err))
        return -1;
    for (int s = 0; s < o->batch; s++)
        TRY(device_kv_arena_place(&b->kv, s, (long long)s * c->seq_len, c->seq_len, err));
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

static int run(Bench *b, const BenchOptions *o, Err *err)
{
    double copy_gbs, prefill_s;
    TRY(device_open(&b->dev, err));
    TRY(copy_bandwidth(&b->dev, &copy_gbs, err));
    TRY(bench_open(b, o, err));
    TRY(prefill(b, o, &prefill_s, err));
    int *tokens = mem_alloc_array(MEM_ACTIVATIONS, (size_t)o->batch, sizeof(int));
    if (!tokens)
        return err_set(err, "out of memory");
    for (int s = 0; s < o->batch; s++)
        tokens[s] = sampler_argmax(b->fs.logits_host, b->model.cfg.vocab_size);
    double device_ms = 0, wall = 0, bytes = 0;
    int rc = 0, warm = 2;
    for (int step = 0; step < warm + o->steps && rc == 0; step++) {
        double t0 = now_seconds();
        rc = decode_step(b, o, step, tokens, err);
        if (rc == 0 && step >= warm) {
            wall += now_seconds() - t0;
            device_ms += b->fs.last_step_ms;
            bytes += step_bytes(b, o, step);
        }
    }
    mem_free(tokens);
    if (rc)
        return -1;
    double step_ms = device_ms / o->steps, gbs = bytes / (device_ms * 1e6), fraction = gbs / copy_gbs;
    const ModelConfig *c = &b->model.cfg;
    char line[4][160];
    snprintf(line[0], sizeof line[0], "%s-shaped synthetic model (%d layers, dim %d), %s weights, %s K/V, batch %d, "
             "context %d..%d%s", o->preset, c->n_layers, c->dim, dtype_name(o->weight_type), dtype_name(o->kv_type),
             o->batch, o->context, o->context + warm + o->steps - 1, o->graph ? ", CUDA graph" : "");
    snprintf(line[1], sizeof line[1], "decode step: %.3f ms on the device (%.3f ms wall), %.0f tokens/s", step_ms,
             1e3 * wall / o->steps, o->batch * o->steps / wall);
    snprintf(line[2], sizeof line[2], "bytes a step must move: %.1f MB (weights %.1f MB) -> %.0f GB/s", bytes / o->steps / 1e6,
             (double)b->dm.bytes / 1e6, gbs);
    snprintf(line[3], sizeof line[3], "copy bandwidth %.0f GB/s: the step reaches %.2f of it (goal >= %.2f): %s",
             copy_gbs, fraction, GOAL_FRACTION, fraction >= GOAL_FRACTION ? "goal met" : "goal MISSED");
    printf("decode-bench on %s\n  %s\n  prefill of sequence 0: %d tokens in %.3f s\n  %s\n  %s\n  %s\n", b->dev.name,
           line[0], o->context, prefill_s, line[1], line[2], line[3]);
    if (o->markdown) {
        /* Appended through a temporary copy renamed into place: a failed
         * write leaves the table as it was, never half a row. */
        OutFile out;
        if (outfile_open_append(&out, "--markdown", o->markdown, err))
            return -1;
        FILE *f = out.f;
        fprintf(f, "| %s | %s | %s | batch %d, context %d | %.3f ms | %.0f | %.0f GB/s | %.0f GB/s | %.2f | %s |\n",
                o->preset, dtype_name(o->weight_type), dtype_name(o->kv_type), o->batch, o->context, step_ms,
                o->batch * o->steps / wall, gbs, copy_gbs, fraction, fraction >= GOAL_FRACTION ? "met" : "MISSED");
        return outfile_commit(&out, err);
    }
    return 0;
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
