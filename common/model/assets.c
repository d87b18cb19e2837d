#include "assets.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mem.h"
#include "synth.h"

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Folders that may hold models, nearest first: the working directory's
 * models/ and ../shared/models/, then the same beside each ancestor of the
 * executable's folder (build/ and build/lab/ live under the project root). */
static int candidate_dirs(char dirs[][PATH_MAX], int max)
{
    int n = 0;
    snprintf(dirs[n++], PATH_MAX, "models");
    snprintf(dirs[n++], PATH_MAX, "../shared/models");
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return n;
    exe[len] = '\0';
    for (int up = 0; up < 3 && n + 2 <= max; up++) {
        char *slash = strrchr(exe, '/');
        if (!slash || slash == exe)
            break;
        *slash = '\0';
        snprintf(dirs[n++], PATH_MAX, "%.*s/models", PATH_MAX - 8, exe);
        snprintf(dirs[n++], PATH_MAX, "%.*s/../shared/models", PATH_MAX - 20, exe);
    }
    return n;
}

int assets_find(const char *name, char *out, size_t n)
{
    char dirs[8][PATH_MAX];
    int count = candidate_dirs(dirs, 8);
    for (int i = 0; i < count; i++) {
        snprintf(out, n, "%s/%s", dirs[i], name);
        if (is_file(out))
            return 0;
    }
    return -1;
}

int assets_find_project_file(const char *relpath, char *out, size_t n)
{
    snprintf(out, n, "%s", relpath);
    if (is_file(out))
        return 0;
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return -1;
    exe[len] = '\0';
    for (int up = 0; up < 3; up++) {
        char *slash = strrchr(exe, '/');
        if (!slash || slash == exe)
            break;
        *slash = '\0';
        snprintf(out, n, "%.*s/%s", PATH_MAX - 256, exe, relpath);
        if (is_file(out))
            return 0;
    }
    return -1;
}

/* The tokenizer file name that llama2.c pairs with a vocabulary size. */
static void tokenizer_name_for(int vocab_size, char *out, size_t n)
{
    if (vocab_size == 32000)
        snprintf(out, n, "tokenizer.bin");
    else
        snprintf(out, n, "tok%d.bin", vocab_size);
}

static int find_tokenizer(const Assets *a, char *out, size_t n, Err *err)
{
    char name[64];
    tokenizer_name_for(a->model.cfg.vocab_size, name, sizeof name);
    const char *slash = strrchr(a->model_path, '/');
    int dir_len = slash ? (int)(slash - a->model_path) : 1;
    snprintf(out, n, "%.*s/%s", dir_len, slash ? a->model_path : ".", name);
    if (is_file(out) || assets_find(name, out, n) == 0)
        return 0;
    return err_set(err, "no tokenizer given and no %s found next to %s or in models/ (use --tokenizer)", name,
                   a->model_path);
}

static int open_synthetic(Assets *a, Err *err)
{
    SynthSpec spec = {.shared_classifier = 1, .ak42 = 0, .seed = 260};
    synth_preset("stories260K", &spec.cfg);
    size_t bytes;
    if (synth_model_image(&spec, &a->synthetic_image, &bytes, err) ||
        model_open_image(&a->model, a->synthetic_image, bytes, err))
        return -1;
    void *tok_image;
    size_t tok_bytes;
    if (synth_tokenizer_image(spec.cfg.vocab_size, &tok_image, &tok_bytes, err))
        return -1;
    int rc = tokenizer_open_image(&a->tokenizer, tok_image, tok_bytes, spec.cfg.vocab_size, err);
    mem_free(tok_image);
    a->synthetic = 1;
    snprintf(a->model_path, sizeof a->model_path, "(synthetic stories260K, seed 260)");
    snprintf(a->tokenizer_path, sizeof a->tokenizer_path, "(synthetic)");
    return rc;
}

/* The tokenizer of a GGUF model is in its metadata (tokenizer.ggml.*),
 * read from the file the model already has open. */
static int open_gguf_tokenizer(Assets *a, Err *err)
{
    snprintf(a->tokenizer_path, sizeof a->tokenizer_path, "(in %.*s)", PATH_MAX - 8, a->model_path);
    if (tokenizer_open_gguf(&a->tokenizer, &a->model.gguf, err))
        return err_prefix(err, "%s", a->model_path);
    if (a->tokenizer.vocab_size != a->model.cfg.vocab_size) {
        int tokens = a->tokenizer.vocab_size;
        tokenizer_free(&a->tokenizer);
        return err_set(err, "%s: the tokenizer has %d tokens but the embedding table %d rows", a->model_path, tokens,
                       a->model.cfg.vocab_size);
    }
    return 0;
}

/* --weight-dtype f32 on the CPU: every matrix dequantized at load, to
 * compare memory and speed with the weights as stored. */
static int apply_weight_dtype(Assets *a, const CliOptions *opts, Err *err)
{
    int on_cpu = !opts->device || strcmp(opts->device, "cpu") == 0;
    if (!on_cpu || !opts->weight_dtype || strcmp(opts->weight_dtype, "f32") != 0)
        return 0;
    return model_dequantize(&a->model, err);
}

int assets_open(Assets *a, const CliOptions *opts, Err *err)
{
    memset(a, 0, sizeof *a);
    if (!opts->model_path) {
        if (assets_find("stories260K.bin", a->model_path, sizeof a->model_path) != 0) {
            if (open_synthetic(a, err)) {
                assets_close(a);
                return -1;
            }
            return 0;
        }
    } else {
        snprintf(a->model_path, sizeof a->model_path, "%s", opts->model_path);
    }
    if (model_load(&a->model, a->model_path, err))
        return -1;
    if (apply_weight_dtype(a, opts, err)) {
        assets_close(a);
        return -1;
    }
    if (!opts->tokenizer_path && a->model.format == MODEL_FORMAT_GGUF) {
        if (open_gguf_tokenizer(a, err)) {
            assets_close(a);
            return -1;
        }
        return 0;
    }
    if (opts->tokenizer_path)
        snprintf(a->tokenizer_path, sizeof a->tokenizer_path, "%s", opts->tokenizer_path);
    else if (find_tokenizer(a, a->tokenizer_path, sizeof a->tokenizer_path, err)) {
        assets_close(a);
        return -1;
    }
    if (tokenizer_load(&a->tokenizer, a->tokenizer_path, a->model.cfg.vocab_size, err)) {
        assets_close(a);
        return -1;
    }
    return 0;
}

void assets_close(Assets *a)
{
    tokenizer_free(&a->tokenizer);
    model_free(&a->model);
    mem_free(a->synthetic_image);
    memset(a, 0, sizeof *a);
}

const char *assets_describe(const Assets *a, char *buf, size_t n)
{
    const ModelConfig *c = &a->model.cfg;
    char types[64], stored[32], f32[32], weights[160] = "";
    if (a->model.format == MODEL_FORMAT_GGUF)
        snprintf(weights, sizeof weights, ", weights %s: %s, %s in f32",
                 model_weight_types(&a->model, types, sizeof types),
                 cli_format_bytes(stored, sizeof stored, (double)a->model.weight_bytes),
                 cli_format_bytes(f32, sizeof f32, (double)a->model.weight_f32_bytes));
    snprintf(buf, n, "model %s (dim %d, %d layers, %d heads, %d kv heads, vocab %d, seq_len %d)%s%s, tokenizer %s",
             a->model_path, c->dim, c->n_layers, c->n_heads, c->n_kv_heads, c->vocab_size, c->seq_len, weights,
             a->synthetic ? " [no model file found: random weights, the text will be gibberish]" : "",
             a->tokenizer_path);
    return buf;
}
