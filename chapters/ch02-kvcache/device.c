/* Chapter 2 on the device (--device cuda): one request's contiguous cache
 * [layer][position][kv_dim] in device memory, reserved for seq_len
 * (--kv-alloc max) or grown by doubling (--kv-alloc grow). */
#include <string.h>

#include "kvcache.h"

int kv_cache_device_open(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype kv_type,
                         const CliOptions *opts, int n_prompt, int *max_step, Err *err)
{
    *max_step = n_prompt; /* the prompt in one step, then one token per step */
    return device_kv_open_contiguous(kv, dev, cfg, kv_type, strcmp(opts->kv_alloc, "grow") == 0, n_prompt,
                                     *max_step, err);
}
