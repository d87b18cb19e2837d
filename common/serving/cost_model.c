#include "cost_model.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "infile.h"
#include "latency.h"
#include "mem.h"
#include "parse.h"

void cost_shape_init(const ModelConfig *c, double weight_bytes, double kv_bytes_per_token, CostShape *out)
{
    double dim = c->dim, kv_dim = model_kv_dim(c), hidden = c->hidden_dim, layers = c->n_layers;
    /* Wq, Wo: dim x dim; Wk, Wv: dim x kv_dim; W1, W3: dim x hidden; W2: hidden x dim. */
    double projection_weights = 2.0 * dim * dim + 2.0 * dim * kv_dim + 3.0 * dim * hidden;
    *out = (CostShape){.weight_bytes = weight_bytes, .kv_bytes_per_position = kv_bytes_per_token,
                       .flops_per_token = layers * 2.0 * projection_weights,
                       .flops_per_attended = layers * 4.0 * dim,
                       .flops_per_logits_row = 2.0 * dim * (double)c->vocab_size};
}

double cost_step_seconds(const CostMachine *m, const CostShape *s, const StepWork *w)
{
    double bytes = s->weight_bytes + (double)w->attended * s->kv_bytes_per_position;
    double flops = (double)w->tokens * s->flops_per_token + (double)w->attended * s->flops_per_attended +
                   (double)w->logits_rows * s->flops_per_logits_row;
    double t_memory = bytes / m->read_bytes_per_s;
    double t_compute = flops / (m->fma_flops_per_s * m->compute_share);
    double t_work = m->overlap ? (t_memory > t_compute ? t_memory : t_compute) : t_memory + t_compute;
    return m->overhead_s + t_work + w->transfer_bytes / m->link_bytes_per_s;
}

/* ------------------------------------------------------------ machines */

static const CostMachine PRESETS[] = {
    {"a100-40gb", 1555e9, 312e12, 1.0, 32e9, 0.0, 1,
     "NVIDIA A100 datasheet (SXM4 40 GB): HBM2 1,555 GB/s, 312 TFLOP/s FP16 tensor (dense), PCIe 4.0 x16 32 GB/s "
     "each way"},
    {"a100-80gb", 2039e9, 312e12, 1.0, 32e9, 0.0, 1,
     "NVIDIA A100 datasheet (SXM4 80 GB): HBM2e 2,039 GB/s, 312 TFLOP/s FP16 tensor (dense), PCIe 4.0 x16 32 GB/s "
     "each way"},
    {"h100-80gb", 3350e9, 989e12, 1.0, 64e9, 0.0, 1,
     "NVIDIA H100 datasheet (SXM5 80 GB): HBM3 3,350 GB/s, 989 TFLOP/s FP16 tensor (dense), PCIe 5.0 x16 64 GB/s "
     "each way"},
    {"h200-141gb", 4800e9, 989e12, 1.0, 64e9, 0.0, 1,
     "NVIDIA H200 datasheet (SXM 141 GB): HBM3e 4,800 GB/s, 989 TFLOP/s FP16 tensor (dense), PCIe 5.0 x16 64 GB/s "
     "each way"},
    {"kvlab-cpu", 12.7e9, 167.8e9, 0.13, 6.35e9, 0.0, 0,
     "one core of this project's 2-core Intel Xeon build machine (AVX-512): build/machine-limits read 12.7 GB/s and "
     "an FMA peak of 167.8 GFLOP/s; kvlab's unfused kernels reach 12 to 16% of that peak on batched steps "
     "(README, make bench); a swap is a host copy, which reads and writes each byte; a step reads its weights, "
     "then computes"},
};
#define N_PRESETS (sizeof PRESETS / sizeof PRESETS[0])

int cost_machine_preset(const char *name, CostMachine *m)
{
    for (size_t i = 0; i < N_PRESETS; i++)
        if (strcmp(name, PRESETS[i].name) == 0) {
            *m = PRESETS[i];
            return 0;
        }
    return -1;
}

const char *cost_machine_names(void)
{
    return "a100-40gb, a100-80gb, h100-80gb, h200-141gb, kvlab-cpu";
}

/* The value of the line "NAME VALUE" in a machine-limits file, or -1. */
static double limits_value(const char *text, const char *name)
{
    size_t len = strlen(name);
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, name, len) != 0 || line[len] != ' ')
            continue;
        char value[64];
        size_t n = strcspn(line + len + 1, "\n");
        if (n == 0 || n >= sizeof value)
            return -1;
        memcpy(value, line + len + 1, n);
        value[n] = '\0';
        double v;
        return parse_double(value, 1e-3, 1e9, &v, NULL) ? -1 : v;
    }
    return -1;
}

/* A machine from a file of build/machine-limits (at most 64 KiB). */
static int load_limits_file(const char *path, CostMachine *m, Err *err)
{
    size_t len;
    int fd = infile_open(path, 64u << 10, &len, err);
    if (fd < 0)
        return -1;
    char *text = mem_alloc(MEM_ACTIVATIONS, len + 1); /* [len + 1] the file, NUL-terminated */
    int rc = !text ? err_set(err, "%s: out of memory", path) : infile_read_exact(fd, text, len, path, err);
    close(fd);
    double bw = rc ? -1 : limits_value(text, "read_gb_s_median");
    double flops = rc ? -1 : limits_value(text, "fma_gflop_s_median");
    mem_free(text);
    if (rc)
        return -1;
    if (bw <= 0 || flops <= 0)
        return err_set(err, "%s: no read_gb_s_median and fma_gflop_s_median lines (write it with build/machine-limits, "
                       "without --read-only)", path);
    cost_machine_preset("kvlab-cpu", m);
    snprintf(m->name, sizeof m->name, "%.47s", path);
    m->read_bytes_per_s = bw * 1e9;
    m->fma_flops_per_s = flops * 1e9;
    m->link_bytes_per_s = m->read_bytes_per_s / 2;
    m->source = "build/machine-limits: the median read bandwidth and FMA peak; the rest as kvlab-cpu";
    return 0;
}

/* One KEY=VALUE of --machine. */
static int apply_override(CostMachine *m, const char *item, Err *err)
{
    static const struct {
        const char *key;
        double min, max, scale;
    } KEYS[] = {{"bw", 1e-3, 1e9, 1e9},    {"flops", 1e-3, 1e12, 1e9}, {"share", 1e-6, 1.0, 1.0},
                {"link", 1e-3, 1e9, 1e9},  {"overhead", 0.0, 1e9, 1e-6}, {"overlap", 0.0, 1.0, 1.0}};
    const char *eq = strchr(item, '=');
    size_t klen = eq ? (size_t)(eq - item) : 0;
    for (size_t k = 0; eq && k < sizeof KEYS / sizeof KEYS[0]; k++) {
        if (strlen(KEYS[k].key) != klen || strncmp(item, KEYS[k].key, klen) != 0)
            continue;
        double v;
        if (parse_double(eq + 1, KEYS[k].min, KEYS[k].max, &v, err))
            return err_prefix(err, "--machine %s", KEYS[k].key);
        double *field[] = {&m->read_bytes_per_s, &m->fma_flops_per_s, &m->compute_share, &m->link_bytes_per_s,
                           &m->overhead_s, NULL};
        if (k == 5) {
            if (v != 0.0 && v != 1.0)
                return err_set(err, "--machine overlap: '%s' is not 0 or 1", eq + 1);
            m->overlap = (int)v;
        } else {
            *field[k] = v * KEYS[k].scale;
        }
        return 0;
    }
    return err_set(err, "--machine: '%.60s' is not KEY=VALUE with KEY one of bw, flops, share, link, overhead, overlap",
                   item);
}

int cost_machine_load(const char *spec, CostMachine *m, Err *err)
{
    char buf[1024];
    if (strlen(spec) >= sizeof buf)
        return err_set(err, "--machine: longer than %zu bytes", sizeof buf - 1);
    strcpy(buf, spec);
    char *rest = strchr(buf, ',');
    if (rest)
        *rest++ = '\0';
    if (buf[0] == '\0')
        return err_set(err, "--machine: empty; give one of %s, or a file of build/machine-limits",
                       cost_machine_names());
    if (cost_machine_preset(buf, m) != 0 && (strchr(buf, '/') || strchr(buf, '.'))) {
        if (load_limits_file(buf, m, err))
            return err_prefix(err, "--machine");
    } else if (cost_machine_preset(buf, m) != 0) {
        return err_set(err, "--machine: '%.60s' is not one of %s, nor a path to a file of build/machine-limits", buf,
                       cost_machine_names());
    }
    while (rest) {
        char *item = rest;
        rest = strchr(rest, ',');
        if (rest)
            *rest++ = '\0';
        if (apply_override(m, item, err))
            return -1;
    }
    return 0;
}

const char *cost_machine_describe(const CostMachine *m, char *buf, size_t n)
{
    snprintf(buf, n, "%s: %.4g GB/s, %.6g GFLOP/s FMA peak x %.4g, link %.4g GB/s, overhead %.4g us, %s", m->name,
             m->read_bytes_per_s / 1e9, m->fma_flops_per_s / 1e9, m->compute_share, m->link_bytes_per_s / 1e9,
             m->overhead_s * 1e6, m->overlap ? "memory and compute overlap" : "memory then compute");
    return buf;
}

/* ------------------------------------------------------------ the check */

void cost_check_add(CostCheck *c, double modelled, double measured)
{
    double r = modelled / measured;
    c->min = c->steps == 0 || r < c->min ? r : c->min;
    c->max = c->steps == 0 || r > c->max ? r : c->max;
    c->modelled_s += modelled;
    c->measured_s += measured;
    if (c->stride == 0)
        c->stride = 1;
    if (c->steps++ % c->stride != 0)
        return;
    if (c->n == COST_CHECK_CAP) {
        for (int i = 0; i < COST_CHECK_CAP / 2; i++)
            c->ratio[i] = c->ratio[2 * i];
        c->n = COST_CHECK_CAP / 2;
        c->stride *= 2;
        if ((c->steps - 1) % c->stride != 0)
            return;
    }
    c->ratio[c->n++] = r;
}

void cost_check_summarize(CostCheck *c, CostCheckSummary *out)
{
    memset(out, 0, sizeof *out);
    if (c->n == 0)
        return;
    LatencyStats s;
    latency_stats(c->ratio, c->n, &s); /* sorts them */
    *out = (CostCheckSummary){.steps = c->steps, .median = s.p50, .p10 = latency_percentile(c->ratio, c->n, 10),
                              .p90 = s.p90, .min = c->min, .max = c->max,
                              .total = c->measured_s > 0 ? c->modelled_s / c->measured_s : 0.0};
}
