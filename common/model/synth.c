#include "synth.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gguf_write.h"
#include "mem.h"
#include "outfile.h"
#include "sampler.h"

typedef struct {
    const char *name;
    ModelConfig cfg;
} Preset;

/* The TinyStories shapes are those of Karpathy's tinyllamas checkpoints. */
static const Preset PRESETS[] = {
    {"tiny", {32, 64, 2, 4, 2, 512, 64}},
    {"stories260K", {64, 172, 5, 8, 4, 512, 512}},
    {"stories15M", {288, 768, 6, 6, 6, 32000, 256}},
    {"stories42M", {512, 1376, 8, 8, 8, 32000, 1024}},
    {"stories110M", {768, 2048, 12, 12, 12, 32000, 1024}},
};

int synth_preset(const char *name, ModelConfig *cfg)
{
    for (size_t i = 0; i < sizeof PRESETS / sizeof PRESETS[0]; i++)
        if (strcmp(name, PRESETS[i].name) == 0) {
            *cfg = PRESETS[i].cfg;
            return 0;
        }
    return -1;
}

const char *synth_preset_names(void)
{
    return "tiny, stories260K, stories15M, stories42M, stories110M";
}

static void put_i32(unsigned char *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    p[0] = (unsigned char)u;
    p[1] = (unsigned char)(u >> 8);
    p[2] = (unsigned char)(u >> 16);
    p[3] = (unsigned char)(u >> 24);
}

/* Fills n floats uniformly in [center - scale, center + scale]. */
static float *fill(float *p, size_t n, float center, float scale, unsigned long long *rng)
{
    for (size_t i = 0; i < n; i++)
        p[i] = center + scale * (2.0f * sampler_random_f32(rng) - 1.0f);
    return p + n;
}

int synth_model_image(const SynthSpec *spec, void **image, size_t *bytes, Err *err)
{
    const ModelConfig *c = &spec->cfg;
    if (model_config_validate(c, err))
        return -1;
    size_t L = (size_t)c->n_layers, dim = (size_t)c->dim, kv = (size_t)model_kv_dim(c);
    size_t hid = (size_t)c->hidden_dim, vocab = (size_t)c->vocab_size;
    size_t rope = spec->ak42 ? 0 : (size_t)c->seq_len * (size_t)model_head_dim(c);
    size_t floats = vocab * dim + 2 * L * dim + dim + 2 * L * dim * dim + 2 * L * kv * dim + 3 * L * hid * dim +
                    rope + (spec->shared_classifier ? 0 : vocab * dim);
    size_t header = spec->ak42 ? 256 : 28;
    unsigned char *buf = mem_alloc(MEM_WEIGHTS, header + 4 * floats);
    if (!buf)
        return err_set(err, "out of memory for a synthetic model of %zu weights", floats);

    int32_t vals[7] = {c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads,
                       spec->shared_classifier || spec->ak42 ? c->vocab_size : -c->vocab_size, c->seq_len};
    unsigned char *h = buf;
    if (spec->ak42) {
        put_i32(h, 0x616b3432);
        put_i32(h + 4, 1);
        h += 8;
    }
    for (int i = 0; i < 7; i++)
        put_i32(h + 4 * i, vals[i]);
    if (spec->ak42)
        buf[36] = (unsigned char)(spec->shared_classifier != 0);

    unsigned long long rng = spec->seed * 0x9E3779B97F4A7C15ull + 1;
    float *p = (float *)(buf + header);
    /* Init scales like a trained network's: matrices ~ 1/sqrt(fan_in), so
     * activations neither vanish nor explode through the layers. */
    float s_dim = 1.0f / sqrtf((float)dim), s_hid = 1.0f / sqrtf((float)hid);
    if (spec->ak42) {
        p = fill(p, 2 * L * dim + dim, 1.0f, 0.1f, &rng); /* rms_att, rms_ffn, rms_final */
        p = fill(p, vocab * dim, 0.0f, 1.0f, &rng);       /* embeddings */
        p = fill(p, L * dim * dim, 0.0f, s_dim, &rng);    /* wq */
        p = fill(p, 2 * L * kv * dim, 0.0f, s_dim, &rng); /* wk, wv */
        p = fill(p, L * dim * dim, 0.0f, s_dim, &rng);    /* wo */
        p = fill(p, L * hid * dim, 0.0f, s_dim, &rng);    /* w1 */
        p = fill(p, L * dim * hid, 0.0f, s_hid, &rng);    /* w2 */
        p = fill(p, L * hid * dim, 0.0f, s_dim, &rng);    /* w3 */
    } else {
        p = fill(p, vocab * dim, 0.0f, 1.0f, &rng);
        p = fill(p, L * dim, 1.0f, 0.1f, &rng);
        p = fill(p, L * dim * dim, 0.0f, s_dim, &rng);
        p = fill(p, 2 * L * kv * dim, 0.0f, s_dim, &rng);
        p = fill(p, L * dim * dim, 0.0f, s_dim, &rng);
        p = fill(p, L * dim, 1.0f, 0.1f, &rng);
        p = fill(p, L * hid * dim, 0.0f, s_dim, &rng);
        p = fill(p, L * dim * hid, 0.0f, s_hid, &rng);
        p = fill(p, L * hid * dim, 0.0f, s_dim, &rng);
        p = fill(p, dim, 1.0f, 0.1f, &rng);
        p = fill(p, rope, 0.0f, 0.0f, &rng); /* legacy RoPE tables: never read */
    }
    if (!spec->shared_classifier)
        p = fill(p, vocab * dim, 0.0f, s_dim, &rng);
    *image = buf;
    *bytes = header + 4 * floats;
    return 0;
}

/* One tensor of a synthetic GGUF model: random f32 rows stored as @p t. */
static void *gguf_tensor(GgufWriter *w, const char *name, WeightType t, int rows, int cols, float center, float scale,
                         unsigned long long *rng, Err *err)
{
    size_t rb = weight_row_bytes(t, cols);
    unsigned char *data = mem_alloc(MEM_WEIGHTS, rb * (size_t)rows);
    float *row = mem_alloc_array(MEM_ACTIVATIONS, (size_t)cols, sizeof(float));
    if (!data || !row) {
        mem_free(data);
        mem_free(row);
        err_set(err, "out of memory for synthetic tensor %s", name);
        return NULL;
    }
    for (int r = 0; r < rows; r++) {
        fill(row, (size_t)cols, center, scale, rng);
        weight_quantize_row(t, row, cols, data + (size_t)r * rb);
    }
    mem_free(row);
    static const uint32_t GGUF_TYPES[WEIGHT_TYPE_COUNT] = {GGUF_TENSOR_F32,  GGUF_TENSOR_F16,  GGUF_TENSOR_BF16,
                                                           GGUF_TENSOR_Q8_0, GGUF_TENSOR_Q4_0, GGUF_TENSOR_Q4_1};
    GgufWriterTensor wt = {.name = name, .type = GGUF_TYPES[t], .n_dims = rows > 1 ? 2 : 1,
                           .dims = {(uint64_t)cols, (uint64_t)rows}, .data = data, .bytes = rb * (size_t)rows};
    gguf_writer_tensor(w, &wt);
    return data;
}

static void gguf_metadata(GgufWriter *w, const SynthGgufSpec *spec)
{
    const ModelConfig *c = &spec->cfg;
    gguf_writer_string(w, "general.architecture", "llama");
    gguf_writer_string(w, "general.name", "kvlab synthetic");
    gguf_writer_u32(w, "llama.block_count", (uint32_t)c->n_layers);
    gguf_writer_u32(w, "llama.context_length", (uint32_t)c->seq_len);
    gguf_writer_u32(w, "llama.embedding_length", (uint32_t)c->dim);
    gguf_writer_u32(w, "llama.feed_forward_length", (uint32_t)c->hidden_dim);
    gguf_writer_u32(w, "llama.attention.head_count", (uint32_t)c->n_heads);
    gguf_writer_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads);
    gguf_writer_f32(w, "llama.rope.freq_base", spec->rope_theta > 0 ? spec->rope_theta : MODEL_DEFAULT_ROPE_THETA);
    gguf_writer_f32(w, "llama.attention.layer_norm_rms_epsilon", MODEL_DEFAULT_RMS_EPS);
    gguf_writer_u32(w, "llama.vocab_size", (uint32_t)c->vocab_size);
    gguf_writer_u32(w, "llama.rope.dimension_count", (uint32_t)model_head_dim(c));
}

/* The tensors of block l, in llama.cpp's order. */
static int gguf_layer(GgufWriter *w, const SynthGgufSpec *spec, int l, void **held, int *n_held,
                      unsigned long long *rng, Err *err)
{
    const ModelConfig *c = &spec->cfg;
    int dim = c->dim, kv = model_kv_dim(c), hid = c->hidden_dim;
    float s_dim = 1.0f / sqrtf((float)dim), s_hid = 1.0f / sqrtf((float)hid);
    WeightType mt = spec->matrix_type;
    struct {
        const char *suffix;
        WeightType type;
        int rows, cols;
        float center, scale;
    } parts[] = {
        {"attn_norm", WEIGHT_F32, 1, dim, 1.0f, 0.1f}, {"attn_q", mt, dim, dim, 0.0f, s_dim},
        {"attn_k", mt, kv, dim, 0.0f, s_dim},          {"attn_v", mt, kv, dim, 0.0f, s_dim},
        {"attn_output", mt, dim, dim, 0.0f, s_dim},    {"ffn_norm", WEIGHT_F32, 1, dim, 1.0f, 0.1f},
        {"ffn_gate", mt, hid, dim, 0.0f, s_dim},       {"ffn_up", mt, hid, dim, 0.0f, s_dim},
        {"ffn_down", mt, dim, hid, 0.0f, s_hid},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.%s.weight", l, parts[i].suffix);
        held[*n_held] = gguf_tensor(w, name, parts[i].type, parts[i].rows, parts[i].cols, parts[i].center,
                                    parts[i].scale, rng, err);
        if (!held[(*n_held)++])
            return -1;
    }
    return 0;
}

int synth_gguf_image(const SynthGgufSpec *spec, void **image, size_t *bytes, Err *err)
{
    const ModelConfig *c = &spec->cfg;
    if (model_config_validate(c, err))
        return -1;
    int block = weight_type_block_elems(spec->matrix_type) > weight_type_block_elems(spec->embedding_type)
                    ? weight_type_block_elems(spec->matrix_type)
                    : weight_type_block_elems(spec->embedding_type);
    if (c->dim % block != 0 || c->hidden_dim % block != 0)
        return err_set(err, "dim %d and hidden_dim %d must be multiples of %d for %s/%s weights", c->dim,
                       c->hidden_dim, block, weight_type_name(spec->matrix_type), weight_type_name(spec->embedding_type));
    if (c->n_layers > 100)
        return err_set(err, "a synthetic GGUF model has at most 100 layers");
    GgufWriter w;
    gguf_writer_init(&w);
    gguf_metadata(&w, spec);
    void *held[2 + 9 * 100 + 2];
    int n_held = 0, rc = 0;
    unsigned long long rng = spec->seed * 0x9E3779B97F4A7C15ull + 3;
    held[n_held] = gguf_tensor(&w, "token_embd.weight", spec->embedding_type, c->vocab_size, c->dim, 0.0f, 1.0f,
                               &rng, err);
    rc = held[n_held++] ? 0 : -1;
    for (int l = 0; l < c->n_layers && rc == 0; l++)
        rc = gguf_layer(&w, spec, l, held, &n_held, &rng, err);
    if (rc == 0) {
        held[n_held] = gguf_tensor(&w, "output_norm.weight", WEIGHT_F32, 1, c->dim, 1.0f, 0.1f, &rng, err);
        rc = held[n_held++] ? 0 : -1;
    }
    if (rc == 0 && !spec->shared_classifier) {
        held[n_held] = gguf_tensor(&w, "output.weight", spec->embedding_type, c->vocab_size, c->dim, 0.0f,
                                   1.0f / sqrtf((float)c->dim), &rng, err);
        rc = held[n_held++] ? 0 : -1;
    }
    if (rc == 0)
        rc = gguf_writer_finish(&w, image, bytes, err);
    for (int i = 0; i < n_held; i++)
        mem_free(held[i]);
    gguf_writer_free(&w);
    return rc;
}

/* Letters and space: the alphabet of the merged tokens. */
static const char MERGE_ALPHABET[] = " etaoinshrdlucmfwypvbgkjqxz";

/* Appends one token record (score, length, bytes) to the image. */
static unsigned char *put_token(unsigned char *p, float score, const char *s, int len)
{
    memcpy(p, &score, 4);
    put_i32(p + 4, len);
    memcpy(p + 8, s, (size_t)len);
    return p + 8 + len;
}

int synth_tokenizer_image(int vocab_size, void **image, size_t *bytes, Err *err)
{
    const int fixed = 3 + 256 + 95;
    if (vocab_size < fixed)
        return err_set(err, "a synthetic tokenizer needs at least %d tokens, asked for %d", fixed, vocab_size);
    /* Merged tokens are all strings of length 2, then 3, ... over the
     * alphabet; each is reachable by merging its prefix with its last
     * letter. Length 4 gives 27^4 strings, more than any vocabulary here. */
    const int max_len = 6; /* "<0xXX>" */
    unsigned char *buf = mem_alloc(MEM_ACTIVATIONS, 4 + (size_t)vocab_size * (8 + max_len));
    if (!buf)
        return err_set(err, "out of memory");
    put_i32(buf, max_len);
    unsigned char *p = buf + 4;
    p = put_token(p, 0.0f, "<unk>", 5);
    p = put_token(p, 0.0f, "\n<s>\n", 5);
    p = put_token(p, 0.0f, "\n</s>\n", 6);
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        p = put_token(p, 0.0f, s, 6);
    }
    for (int ch = 0x20; ch < 0x7F; ch++) {
        char s = (char)ch;
        p = put_token(p, -1e6f, &s, 1);
    }
    const int A = (int)strlen(MERGE_ALPHABET);
    int id = fixed;
    for (int len = 2; len <= 4 && id < vocab_size; len++) {
        long combos = 1;
        for (int i = 0; i < len; i++)
            combos *= A;
        for (long k = 0; k < combos && id < vocab_size; k++, id++) {
            char s[8];
            long rest = k;
            for (int i = len - 1; i >= 0; i--) {
                s[i] = MERGE_ALPHABET[rest % A];
                rest /= A;
            }
            p = put_token(p, -(float)(id - fixed), s, len);
        }
    }
    *image = buf;
    *bytes = (size_t)(p - buf);
    return 0;
}

int synth_write_file(const char *path, const void *image, size_t bytes, Err *err)
{
    return outfile_write_all(NULL, path, image, bytes, err);
}
