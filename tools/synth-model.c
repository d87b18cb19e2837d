/* synth-model: writes a synthetic checkpoint (deterministic random weights)
 * and, on request, a matching tokenizer, of any Llama shape.
 *
 *   build/synth-model --preset stories15M --out /tmp/s15.bin --tokenizer-out /tmp/tokenizer.bin
 *   build/synth-model --dim 96 --hidden-dim 256 --layers 4 --heads 6 --kv-heads 2 \
 *                     --vocab 512 --seq-len 128 --format ak42 --out /tmp/m.bin
 *
 * The same arguments always give the same bytes: the weights are a function
 * of the shape, the format and the seed only (common/model/synth.c). Tests and
 * benchmarks use these models so that nothing depends on a download. */
#define _GNU_SOURCE /* getopt_long */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "model.h"
#include "outfile.h"
#include "parse.h"
#include "report.h"
#include "synth.h"

#define PROGRAM "synth-model"

/* What the command line asked for. */
typedef struct {
    SynthSpec spec;
    const char *out_path;       /* the checkpoint */
    const char *tokenizer_path; /* NULL: no tokenizer */
} SynthOptions;

enum {
    OPT_PRESET = 1000, OPT_DIM, OPT_HIDDEN_DIM, OPT_LAYERS, OPT_HEADS, OPT_KV_HEADS, OPT_VOCAB, OPT_SEQ_LEN,
    OPT_SEED, OPT_FORMAT, OPT_UNSHARED, OPT_OUT, OPT_TOKENIZER_OUT, OPT_HELP
};

static const struct option LONG_OPTIONS[] = {
    {"preset", required_argument, NULL, OPT_PRESET},
    {"dim", required_argument, NULL, OPT_DIM},
    {"hidden-dim", required_argument, NULL, OPT_HIDDEN_DIM},
    {"layers", required_argument, NULL, OPT_LAYERS},
    {"heads", required_argument, NULL, OPT_HEADS},
    {"kv-heads", required_argument, NULL, OPT_KV_HEADS},
    {"vocab", required_argument, NULL, OPT_VOCAB},
    {"seq-len", required_argument, NULL, OPT_SEQ_LEN},
    {"seed", required_argument, NULL, OPT_SEED},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"unshared-classifier", no_argument, NULL, OPT_UNSHARED},
    {"out", required_argument, NULL, OPT_OUT},
    {"tokenizer-out", required_argument, NULL, OPT_TOKENIZER_OUT},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

static void print_help(void)
{
    printf("Usage: %s --out FILE [options]\n"
           "Writes a llama2.c checkpoint with deterministic random weights, and optionally a\n"
           "matching tokenizer. The same options always give the same bytes.\n\n"
           "Options:\n"
           "  --preset NAME           start from a named shape: %s (default tiny)\n"
           "  --dim N                 width of the residual stream\n"
           "  --hidden-dim N          width of the feed-forward layer\n"
           "  --layers N              transformer blocks\n"
           "  --heads N               query heads\n"
           "  --kv-heads N            key/value heads (fewer than --heads: grouped-query attention)\n"
           "  --vocab N               vocabulary size (a tokenizer needs at least 354)\n"
           "  --seq-len N             longest sequence\n"
           "  --seed N                seed of the weights (default 1)\n"
           "  --format legacy|ak42    checkpoint format (default legacy)\n"
           "  --unshared-classifier   store a separate output classifier\n"
           "  --out FILE              where to write the checkpoint (required)\n"
           "  --tokenizer-out FILE    also write a tokenizer for the vocabulary; the programs find it\n"
           "                          next to the model when it is named tok<vocab>.bin (tokenizer.bin\n"
           "                          for 32000)\n"
           "  --help                  show this help and exit\n\n"
           "The explicit sizes override the preset's. Example: --preset stories15M --seq-len 1024.\n",
           PROGRAM, synth_preset_names());
}

/* A whole number that fits an int; the model's own checks judge its value. */
static int parse_int(const char *name, const char *text, int *out, Err *err)
{
    long v;
    if (parse_long(text, INT_MIN, INT_MAX, &v, NULL))
        return err_set(err, "--%s: '%s' is not a whole number", name, text);
    *out = (int)v;
    return 0;
}

static int parse_seed(const char *text, unsigned long long *out, Err *err)
{
    uint64_t v;
    if (parse_u64(text, UINT64_MAX, &v, err))
        return err_prefix(err, "--seed");
    *out = v;
    return 0;
}

/* The size options, in the order of the ModelConfig fields they set. */
static int *size_field(ModelConfig *c, int id)
{
    switch (id) {
    case OPT_DIM: return &c->dim;
    case OPT_HIDDEN_DIM: return &c->hidden_dim;
    case OPT_LAYERS: return &c->n_layers;
    case OPT_HEADS: return &c->n_heads;
    case OPT_KV_HEADS: return &c->n_kv_heads;
    case OPT_VOCAB: return &c->vocab_size;
    case OPT_SEQ_LEN: return &c->seq_len;
    }
    return NULL;
}

/* Parses argv. Returns 0 to run, 1 when --help was printed, -1 on error.
 * The preset is applied first wherever it appears, so explicit sizes
 * always win. */
static int parse_options(int argc, char **argv, SynthOptions *o, Err *err)
{
    memset(o, 0, sizeof *o);
    o->spec.shared_classifier = 1;
    o->spec.seed = 1;
    const char *preset = "tiny";
    struct { int id; const char *arg, *name; } sizes[16];
    int n_sizes = 0;
    opterr = 0;
    optind = 1;
    for (;;) {
        int index = -1;
        int c = getopt_long(argc, argv, ":h", LONG_OPTIONS, &index);
        if (c == -1)
            break;
        const char *name = index >= 0 ? LONG_OPTIONS[index].name : "?";
        switch (c) {
        case 'h':
        case OPT_HELP: print_help(); return 1;
        case ':': return err_set(err, "option '%s' needs a value (see --help)", argv[optind - 1]);
        case '?':
            if (optopt > 0 && optopt < 256)
                return err_set(err, "unknown option '-%c' (see --help)", optopt);
            return err_set(err, "unknown option '%s' (see --help)", argv[optind - 1]);
        case OPT_PRESET: preset = optarg; break;
        case OPT_SEED:
            if (parse_seed(optarg, &o->spec.seed, err))
                return -1;
            break;
        case OPT_FORMAT:
            if (strcmp(optarg, "legacy") != 0 && strcmp(optarg, "ak42") != 0)
                return err_set(err, "--format: '%s' is not one of legacy, ak42", optarg);
            o->spec.ak42 = strcmp(optarg, "ak42") == 0;
            break;
        case OPT_UNSHARED: o->spec.shared_classifier = 0; break;
        case OPT_OUT: o->out_path = optarg; break;
        case OPT_TOKENIZER_OUT: o->tokenizer_path = optarg; break;
        default: /* a size: remembered, applied after the preset */
            if (n_sizes == 16)
                return err_set(err, "too many size options");
            sizes[n_sizes].id = c;
            sizes[n_sizes].arg = optarg;
            sizes[n_sizes].name = name;
            n_sizes++;
        }
    }
    if (optind < argc)
        return err_set(err, "unexpected argument '%s' (options start with --; see --help)", argv[optind]);
    if (synth_preset(preset, &o->spec.cfg) != 0)
        return err_set(err, "--preset: '%s' is not one of %s", preset, synth_preset_names());
    for (int i = 0; i < n_sizes; i++)
        if (parse_int(sizes[i].name, sizes[i].arg, size_field(&o->spec.cfg, sizes[i].id), err))
            return -1;
    if (!o->out_path)
        return err_set(err, "--out FILE is required (see --help)");
    return 0;
}

static int fail(const Err *err)
{
    fprintf(stderr, "%s: error: %s\n", PROGRAM, err->msg);
    return 1;
}

/* Writes the checkpoint and (when asked) the tokenizer; both are renamed
 * into place together at the end, or neither is. */
static int write_both(const SynthOptions *o, const void *model_image, size_t model_bytes, const void *tok_image,
                      size_t tok_bytes, Err *err)
{
    outfile_hold();
    if (synth_write_file(o->out_path, model_image, model_bytes, err) ||
        (o->tokenizer_path && synth_write_file(o->tokenizer_path, tok_image, tok_bytes, err)) ||
        outfile_release(err)) {
        outfile_discard();
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    SynthOptions o;
    Err err = {{0}};
    int parsed = parse_options(argc, argv, &o, &err);
    if (parsed != 0)
        return parsed > 0 ? 0 : fail(&err);

    /* Build both images, and find out that both files can be written,
     * before writing either, so that a failure leaves no half-finished pair
     * behind. */
    void *tok_image = NULL, *model_image = NULL;
    size_t tok_bytes = 0, model_bytes = 0;
    int status = 0;
    if (model_config_validate(&o.spec.cfg, &err) || report_check_writable("--out", o.out_path, &err) ||
        (o.tokenizer_path && report_check_writable("--tokenizer-out", o.tokenizer_path, &err)) ||
        (o.tokenizer_path && synth_tokenizer_image(o.spec.cfg.vocab_size, &tok_image, &tok_bytes, &err)) ||
        synth_model_image(&o.spec, &model_image, &model_bytes, &err) || write_both(&o, model_image, model_bytes,
                                                                                    tok_image, tok_bytes, &err)) {
        status = fail(&err);
    } else {
        const ModelConfig *c = &o.spec.cfg;
        fprintf(stderr,
                "%s: wrote %s (%s, dim %d, hidden %d, %d layers, %d heads, %d kv heads, vocab %d, seq_len %d, "
                "%s classifier, seed %llu, %zu bytes)%s%s\n",
                PROGRAM, o.out_path, o.spec.ak42 ? "ak42 v1" : "legacy", c->dim, c->hidden_dim, c->n_layers,
                c->n_heads, c->n_kv_heads, c->vocab_size, c->seq_len, o.spec.shared_classifier ? "shared" : "unshared",
                o.spec.seed, model_bytes, o.tokenizer_path ? " and " : "", o.tokenizer_path ? o.tokenizer_path : "");
    }
    mem_free(model_image);
    mem_free(tok_image);
    return status;
}
