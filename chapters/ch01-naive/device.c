/* Chapter 1 on the device (--device cuda): the transient K/V of one layer
 * of the whole sequence, recomputed at every step, in device memory. */
#include "naive.h"

int naive_device_open(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype kv_type,
                      const CliOptions *opts, int n_prompt, int *max_step, Err *err)
{
    (void)opts, (void)n_prompt;
    *max_step = cfg->seq_len; /* the last step feeds the whole sequence */
    return device_kv_open_recompute(kv, dev, cfg, kv_type, *max_step, err);
}
