#include "kvmath.h"

#include <strings.h>

unsigned kvmath_dtype_bytes(KvDtype dtype)
{
    return (unsigned)kv_dtype_elem_bytes(dtype);
}

/* kvcalc's names: what the serving literature writes (fp16), where the
 * chapters' --kv-dtype writes f16. */
static const struct {
    const char *name;
    KvDtype dtype;
} NAMES[] = {{"fp32", KV_DTYPE_FP32}, {"fp16", KV_DTYPE_FP16},         {"bf16", KV_DTYPE_BF16},
             {"int8", KV_DTYPE_INT8}, {"fp8-e4m3", KV_DTYPE_FP8_E4M3}, {"fp8-e5m2", KV_DTYPE_FP8_E5M2},
             {"f32", KV_DTYPE_FP32},  {"f16", KV_DTYPE_FP16}};

const char *kvmath_dtype_name(KvDtype dtype)
{
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (NAMES[i].dtype == dtype)
            return NAMES[i].name;
    return "?";
}

int kvmath_dtype_parse(const char *name, KvDtype *dtype, Err *err)
{
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (strcasecmp(name, NAMES[i].name) == 0) {
            *dtype = NAMES[i].dtype;
            return 0;
        }
    return err_set(err, "'%s' is not a dtype (use fp32, fp16, bf16, int8, fp8-e4m3 or fp8-e5m2)", name);
}

/* Published shapes. OPT-13B and LLaMA-13B differ in their feed-forward
 * layers and vocabularies, not in what their caches hold. */
static const KvShape PRESETS[] = {
    {"llama-7b", 32, 32, 32, 128, 2048},
    {"llama-13b", 40, 40, 40, 128, 2048},
    {"opt-13b", 40, 40, 40, 128, 2048},
    {"llama-2-70b", 80, 64, 8, 128, 4096},
    /* The llama.* keys of SmolLM2-135M-Instruct.Q4_1.gguf (block_count,
     * head_count, head_count_kv, embedding_length / head_count,
     * context_length); tests/test_gguf_model.c reads them from the file
     * and compares. 46,080 B per token in f32. */
    {"smollm2-135m", 30, 9, 3, 64, 8192},
};

int kvmath_preset(const char *name, KvShape *shape)
{
    for (size_t i = 0; i < sizeof PRESETS / sizeof PRESETS[0]; i++)
        if (strcasecmp(name, PRESETS[i].name) == 0) {
            *shape = PRESETS[i];
            return 0;
        }
    return -1;
}

const char *kvmath_preset_names(void)
{
    return "llama-7b, llama-13b, opt-13b, llama-2-70b, smollm2-135m";
}

KvShape kvmath_shape_from_config(const ModelConfig *cfg, const char *name)
{
    return (KvShape){name, cfg->n_layers, cfg->n_heads, cfg->n_kv_heads, model_head_dim(cfg), cfg->seq_len};
}

uint64_t kvmath_bytes_per_token(const KvShape *s, KvDtype dtype)
{
    return 2ULL * (uint64_t)s->n_layers * (uint64_t)s->n_kv_heads * (uint64_t)kv_dtype_head_bytes(dtype, s->head_dim);
}

uint64_t kvmath_bytes_per_request(const KvShape *s, KvDtype dtype, uint64_t tokens)
{
    return kvmath_bytes_per_token(s, dtype) * tokens;
}

int kvmath_kv_bytes_left(const KvBudget *b, uint64_t *left, Err *err)
{
    /* Each size is below 2^64, their sum need not be: saturate instead of
     * wrapping round to a small number that would leave room for KV. */
    uint64_t spent = b->weights_bytes;
    spent = b->activations_bytes > UINT64_MAX - spent ? UINT64_MAX : spent + b->activations_bytes;
    spent = b->reserve_bytes > UINT64_MAX - spent ? UINT64_MAX : spent + b->reserve_bytes;
    if (spent == UINT64_MAX)
        return err_set(err, "weights, activations and reserve take more than 2^64 bytes together");
    if (spent >= b->gpu_bytes)
        return err_set(err,
                       "weights, activations and reserve take %llu bytes, which leaves nothing of the GPU's %llu "
                       "bytes for the KV cache",
                       (unsigned long long)spent, (unsigned long long)b->gpu_bytes);
    *left = b->gpu_bytes - spent;
    return 0;
}

uint64_t kvmath_requests_that_fit(uint64_t left, uint64_t request_bytes)
{
    return request_bytes ? left / request_bytes : 0;
}

double kvmath_unused_fraction(uint64_t used, uint64_t reserved)
{
    if (reserved == 0 || used >= reserved)
        return 0.0;
    return (double)(reserved - used) / (double)reserved;
}
