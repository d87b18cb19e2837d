/* Chapter 1 on the device (--device cuda): the transient K/V of one layer
 * of the whole sequence, recomputed at every step, in device memory: a
 * row store (common/cuda/device_kv.h) of one layer that every layer
 * reuses, charged to activations. */
#include "naive.h"

#include <string.h>

#ifdef KVLAB_CUDA

#include "cuda_check.h"

static int recompute_prepare(void *ctx, int n_tokens, int *cached, Err *err)
{
    (void)ctx, (void)n_tokens, (void)err;
    *cached = 0; /* chapter 1: nothing survives a step */
    return 0;
}

int device_kv_open_recompute(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, int max_tokens,
                             Err *err)
{
    TRY(device_row_store_open(kv, sizeof(DeviceRowStore), "recompute", dev, cfg, t, 1, cfg->seq_len,
                              MEM_ACTIVATIONS, max_tokens, 0, err));
    kv->prepare = recompute_prepare;
    return 0;
}

#else /* built without CUDA: device_open() fails first */

int device_kv_open_recompute(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, int max_tokens,
                             Err *err)
{
    (void)dev, (void)cfg, (void)t, (void)max_tokens;
    memset(kv, 0, sizeof *kv);
    return err_set(err, "this build has no CUDA support");
}

#endif

int naive_device_open(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype kv_type,
                      const CliOptions *opts, int n_prompt, int *max_step, Err *err)
{
    (void)opts, (void)n_prompt;
    *max_step = cfg->seq_len; /* the last step feeds the whole sequence */
    return device_kv_open_recompute(kv, dev, cfg, kv_type, *max_step, err);
}
