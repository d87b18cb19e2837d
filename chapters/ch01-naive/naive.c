/* Chapter 1: the transient K/V buffers, and the strategy that hands
 * naive_prepare(), naive_store() and naive_attend() (the lab,
 * solutions/ch01/) to the generation loop. */
#include "naive.h"

#include <string.h>

#include "mem.h"

int naive_kv_init(NaiveKv *kv, const ModelConfig *cfg, Err *err)
{
    memset(kv, 0, sizeof *kv);
    kv->cfg = *cfg;
    kv->capacity = cfg->seq_len;
    size_t rows = (size_t)cfg->seq_len * (size_t)model_kv_dim(cfg);
    kv->keys = mem_alloc_array(MEM_ACTIVATIONS, rows, sizeof(float));
    kv->values = mem_alloc_array(MEM_ACTIVATIONS, rows, sizeof(float));
    if (!kv->keys || !kv->values) {
        naive_kv_free(kv);
        return err_set(err, "out of memory for transient K/V of %d positions", cfg->seq_len);
    }
    return 0;
}

void naive_kv_free(NaiveKv *kv)
{
    mem_free(kv->keys);
    mem_free(kv->values);
    memset(kv, 0, sizeof *kv);
}

SingleStreamKv naive_strategy(NaiveKv *kv)
{
    return (SingleStreamKv){
        .seam = {.ctx = kv, .store = naive_store, .attend = naive_attend},
        .prepare = naive_prepare,
        .usage = NULL, /* nothing is kept between steps */
    };
}
