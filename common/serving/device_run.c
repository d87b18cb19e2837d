#include "device_run.h"

#include <string.h>

#include "kv_dtype.h"

int device_run_open(DeviceRun *r, const CliOptions *opts, Err *err)
{
    memset(r, 0, sizeof *r);
    KvDtype kv;
    if (kv_dtype_parse(opts->kv_dtype, &kv, err))
        return err_prefix(err, "--kv-dtype");
    if (kv_dtype_to_device(kv, &r->kv_type))
        return err_set(err, "--kv-dtype %s: the CUDA path stores K/V as f32, f16 or bf16 (int8 and fp8 run on the CPU)",
                       opts->kv_dtype);
    if (dtype_parse(opts->weight_dtype ? opts->weight_dtype : "f32", &r->weight_type, err))
        return err_prefix(err, "--weight-dtype");
    return device_open(&r->dev, err);
}

int device_run_open_if_asked(DeviceRun *r, const CliOptions *opts, const char *program, int has_cuda_path,
                             int *on_device, Err *err)
{
    memset(r, 0, sizeof *r);
    *on_device = strcmp(opts->device, "cuda") == 0;
    if (!*on_device) {
        /* On the CPU, --weight-dtype f32 dequantizes at load (assets.c);
         * --kv-dtype is the program's (cli_parse() refused it where the
         * CPU path stores f32 only). */
        if (opts->weight_dtype && strcmp(opts->weight_dtype, "f32") != 0)
            return err_set(err, "--weight-dtype other than f32 needs --device cuda (the CPU path computes in f32)");
        return 0;
    }
    if (!has_cuda_path)
        return err_set(err, "--device cuda: %s has no CUDA path yet", program);
    if (device_run_open(r, opts, err))
        return err_prefix(err, "--device cuda");
    return 0;
}

/* SingleStreamKv.step: one forward step on the device. */
static int device_step(void *ctx, const BatchEntry *entries, int n, float **logits, Err *err)
{
    DeviceRun *r = ctx;
    if (device_forward(&r->dev, &r->model, &r->fs, &r->kv.seam, entries, n, 0, err))
        return -1;
    *logits = r->fs.logits_host;
    return 0;
}

int device_run_start(DeviceRun *r, const Model *m, const CliOptions *opts, DeviceKvOpenFn open_kv, int n_prompt,
                     SingleStreamKv *kv, Err *err)
{
    int max_step = 0;
    if (device_model_upload(&r->model, m, r->weight_type, &r->dev, err) ||
        open_kv(&r->kv, &r->dev, &m->cfg, r->kv_type, opts, n_prompt, &max_step, err) ||
        device_forward_state_init(&r->fs, &r->model, max_step, 1, err))
        return -1;
    *kv = (SingleStreamKv){
        .seam = {.ctx = r->kv.seam.ctx}, /* the CPU seam is not used: step runs everything */
        .prepare = r->kv.prepare,
        .usage = r->kv.usage,
        .step = device_step,
        .step_ctx = r,
    };
    return 0;
}

void device_run_close(DeviceRun *r)
{
    device_forward_state_free(&r->fs);
    device_kv_close(&r->kv);
    device_model_free(&r->model);
    device_close(&r->dev);
    memset(r, 0, sizeof *r);
}

void device_run_finish(DeviceRun *r)
{
    device_mem_refresh(&r->dev, NULL);
}

void device_run_report_table(FILE *f, const DeviceRun *r)
{
    device_report_table(f, &r->dev);
    fprintf(f, "  element types   weights %s, K/V %s (f32 arithmetic throughout)\n", dtype_name(r->weight_type),
            dtype_name(r->kv_type));
}

void device_run_report_json(JsonWriter *j, const DeviceRun *r)
{
    device_report_json(j, &r->dev);
    json_string(j, "kv_dtype", dtype_name(r->kv_type));
    json_string(j, "weight_dtype", dtype_name(r->weight_type));
}
