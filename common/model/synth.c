#include "synth.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

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
