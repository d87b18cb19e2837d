#include "serving_device.h"

#include <string.h>

#include "cli.h"
#include "mem.h"

int serving_device_open(ServingDevice *d, const char *program, const CliOptions *opts, int *on_device, Err *err)
{
    memset(d, 0, sizeof *d);
    return device_run_open_if_asked(&d->run, opts, program, 1, on_device, err);
}

void serving_device_attach(ServingDevice *d, ServingRun *run)
{
    run->device = d;
    run->no_kv_storage = 1; /* the K/V bytes live on the device; the host keeps the books */
    if (run->model)
        run->kv_bytes_per_token = model_kv_bytes_per_token(&run->model->cfg, dtype_bytes(d->run.kv_type));
}

int serving_device_start(ServingDevice *d, ServingRun *run, int max_tokens, int max_logits, Err *err)
{
    DeviceRun *r = &d->run;
    if (!run->no_kv_storage || run->kv_bytes_per_token != model_kv_bytes_per_token(&run->model->cfg,
                                                                                    dtype_bytes(r->kv_type)))
        return err_set(err, "a run on the device must keep books only, at %zu B per token",
                       model_kv_bytes_per_token(&run->model->cfg, dtype_bytes(r->kv_type)));
    d->kv = (ServingDeviceKv){.kv = &r->kv};
    if (device_model_upload(&r->model, run->model, r->weight_type, &r->dev, err) ||
        device_forward_state_init(&r->fs, &r->model, max_tokens, max_logits, err))
        return err_prefix(err, "--device cuda");
    return 0;
}

int serving_device_forward(ServingDevice *d, ServingRun *run, const float **logits, Err *err)
{
    DeviceRun *r = &d->run;
    /* A copy the allocator decided during schedule() failed on the device:
     * the store no longer holds what the books say. */
    if (d->kv.fault.msg[0]) {
        *err = d->kv.fault;
        return err_prefix(err, "step %ld", run->step);
    }
    /* No CUDA graphs: the batch changes shape from step to step. */
    if (device_forward(&r->dev, &r->model, &r->fs, &r->kv.seam, run->entries, run->n_entries, 0, err))
        return err_prefix(err, "step %ld", run->step);
    *logits = r->fs.logits_host;
    return 0;
}

void serving_device_finish(ServingDevice *d)
{
    device_run_finish(&d->run);
}

void serving_device_close(ServingDevice *d)
{
    device_run_close(&d->run);
    memset(d, 0, sizeof *d);
}

void serving_device_report_table(FILE *f, const ServingDevice *d)
{
    char a[32];
    device_run_report_table(f, &d->run);
    fprintf(f, "  K/V store       %s of device memory at its peak; the host kept the books only\n",
            cli_format_bytes(a, sizeof a, (double)mem_peak(MEM_KV, MEM_DEVICE)));
}

void serving_device_report_json(JsonWriter *j, const ServingDevice *d)
{
    device_run_report_json(j, &d->run);
}
