#include "report.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "mem.h"
#include "outfile.h"

int report_check_writable(const char *option, const char *path, Err *err)
{
    return outfile_check(option, path, err);
}

double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double process_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void kv_timeline_record(KvTimeline *t, long step, size_t reserved, size_t used)
{
    t->reserved = reserved;
    t->used = used;
    if (reserved > t->peak_reserved)
        t->peak_reserved = reserved;
    if (used > t->peak_used || t->steps == 0) {
        /* How well memory is used when it is needed most: at peak use. */
        t->peak_used = used;
        t->util_at_peak = reserved ? (double)used / (double)reserved : 0.0;
    }
    if (reserved > 0) {
        t->util_sum += (double)used / (double)reserved;
        t->util_steps++;
    }
    if (t->stride == 0)
        t->stride = 1;
    if (t->steps++ % t->stride != 0)
        return;
    if (t->n_samples == KV_TIMELINE_CAP) {
        /* Full: keep every other sample and sample half as often. */
        for (int i = 0; i < KV_TIMELINE_CAP / 2; i++)
            t->samples[i] = t->samples[2 * i];
        t->n_samples = KV_TIMELINE_CAP / 2;
        t->stride *= 2;
        if ((t->steps - 1) % t->stride != 0)
            return;
    }
    t->samples[t->n_samples++] = (KvSample){step, reserved, used};
}

double kv_timeline_avg_utilization(const KvTimeline *t)
{
    return t->util_steps ? t->util_sum / (double)t->util_steps : 0.0;
}

static size_t run_weights_bytes(const RunReport *r)
{
    MemPlace p = strcmp(r->device, "cuda") == 0 ? MEM_DEVICE : MEM_HOST;
    return mem_peak(MEM_WEIGHTS, p);
}

static size_t run_activation_bytes(const RunReport *r)
{
    MemPlace p = strcmp(r->device, "cuda") == 0 ? MEM_DEVICE : MEM_HOST;
    return mem_peak(MEM_ACTIVATIONS, p);
}

/* The places a table shows: the host always, the device and the swap
 * space only when something was ever held there. */
static int place_shown(MemPlace p)
{
    return p == MEM_HOST || mem_peak_total(p) > 0;
}

static void print_ledger(FILE *f)
{
    static const char *const headers[MEM_PLACE_COUNT] = {"     host now    host peak", "  device now  device peak",
                                                         "     swap now    swap peak"};
    char a[32], b[32];
    fprintf(f, "  %-14s", "category");
    for (int p = 0; p < MEM_PLACE_COUNT; p++)
        if (place_shown((MemPlace)p))
            fputs(headers[p], f);
    fputc('\n', f);
    for (int i = 0; i < MEM_CATEGORY_COUNT; i++) {
        fprintf(f, "  %-14s", mem_category_name((MemCategory)i));
        for (int p = 0; p < MEM_PLACE_COUNT; p++)
            if (place_shown((MemPlace)p))
                fprintf(f, " %12s %12s",
                        cli_format_bytes(a, sizeof a, (double)mem_current((MemCategory)i, (MemPlace)p)),
                        cli_format_bytes(b, sizeof b, (double)mem_peak((MemCategory)i, (MemPlace)p)));
        fputc('\n', f);
    }
    fprintf(f, "  %-14s", "total (peak)");
    for (int p = 0; p < MEM_PLACE_COUNT; p++)
        if (place_shown((MemPlace)p))
            fprintf(f, " %12s %12s", "", cli_format_bytes(a, sizeof a, (double)mem_peak_total((MemPlace)p)));
    fputc('\n', f);
}

/* A quantized model's weights as the file stores them, beside what the
 * same weights take in f32 (an f32 model has one number: the ledger's). */
static void print_weights(FILE *f, const RunReport *r)
{
    const Model *m = r->model;
    if (!m || (m->stored_types == 1u << WEIGHT_F32 && !m->dequantized))
        return;
    char types[64], a[32], b[32];
    fprintf(f, "weights\n  %-14s %s (%s)\n  %-14s %s (%zu B)\n", m->dequantized ? "stored as" : "as stored",
            cli_format_bytes(a, sizeof a, (double)(m->dequantized ? m->weight_f32_bytes : m->weight_bytes)),
            model_weight_types(m, types, sizeof types), "in f32",
            cli_format_bytes(b, sizeof b, (double)m->weight_f32_bytes), m->weight_f32_bytes);
}

static void print_kv(FILE *f, const RunReport *r)
{
    const ModelConfig *c = &r->cfg;
    size_t per_token = kv_dtype_bytes_per_token(c, r->kv_dtype);
    char a[32], b[32], head[64];
    fprintf(f, "KV cache\n  per token      2 (K,V) x %d layers x %d kv heads x %s = %zu B\n", c->n_layers,
            c->n_kv_heads, kv_dtype_head_formula(head, sizeof head, r->kv_dtype, model_head_dim(c)), per_token);
    if (!r->kv) {
        fprintf(f, "  (no KV cache is kept)\n");
        return;
    }
    const KvTimeline *t = r->kv;
    /* The timeline's last sample: the last step, before its finished
     * requests gave their memory back (at the end of a run all is free). */
    fprintf(f, "  reserved       last step %s, peak %s\n", cli_format_bytes(a, sizeof a, (double)t->reserved),
            cli_format_bytes(b, sizeof b, (double)t->peak_reserved));
    fprintf(f, "  used           last step %s (%zu tokens), peak %s\n", cli_format_bytes(a, sizeof a, (double)t->used),
            per_token ? t->used / per_token : 0, cli_format_bytes(b, sizeof b, (double)t->peak_used));
    fprintf(f, "  utilization    %.1f%% averaged over %ld steps, %.1f%% at peak use\n",
            100.0 * kv_timeline_avg_utilization(t), t->util_steps, 100.0 * t->util_at_peak);
}

void report_print(FILE *f, const RunReport *r)
{
    fprintf(f, "\n== memory: %s on %s ==\n", r->chapter, r->device);
    print_ledger(f);
    print_weights(f, r);
    print_kv(f, r);
    if (r->extra_table)
        r->extra_table(f, r->extra);
    double tps = r->elapsed_s > 0 ? (double)r->tokens_generated / r->elapsed_s : 0.0;
    fprintf(f, "time\n  %ld tokens generated in %.3f s: %.1f tokens/s\n", r->tokens_generated, r->elapsed_s, tps);
    if (r->latency_table)
        r->latency_table(f, r->extra);
}

static void json_ledger(JsonWriter *j)
{
    json_begin_object(j, "memory");
    static const char *places[MEM_PLACE_COUNT] = {"host", "device", "swap"};
    for (int p = 0; p < MEM_PLACE_COUNT; p++) {
        if (p == MEM_SWAP && !place_shown(MEM_SWAP))
            continue; /* no swap space in this run */
        json_begin_object(j, places[p]);
        for (int i = 0; i < MEM_CATEGORY_COUNT; i++) {
            json_begin_object(j, mem_category_name((MemCategory)i));
            json_int(j, "current", (long long)mem_current((MemCategory)i, (MemPlace)p));
            json_int(j, "peak", (long long)mem_peak((MemCategory)i, (MemPlace)p));
            json_end_object(j);
        }
        json_int(j, "peak_total", (long long)mem_peak_total((MemPlace)p));
        json_end_object(j);
    }
    json_end_object(j);
}

static void json_model(JsonWriter *j, const RunReport *r)
{
    const ModelConfig *c = &r->cfg;
    json_string(j, "model_path", r->model_path);
    json_begin_object(j, "model");
    json_int(j, "dim", c->dim);
    json_int(j, "hidden_dim", c->hidden_dim);
    json_int(j, "n_layers", c->n_layers);
    json_int(j, "n_heads", c->n_heads);
    json_int(j, "n_kv_heads", c->n_kv_heads);
    json_int(j, "vocab_size", c->vocab_size);
    json_int(j, "seq_len", c->seq_len);
    json_end_object(j);
}

static void json_kv(JsonWriter *j, const RunReport *r)
{
    const KvTimeline *t = r->kv;
    static const KvTimeline none;
    if (!t)
        t = &none;
    json_int(j, "kv_bytes_per_token", (long long)kv_dtype_bytes_per_token(&r->cfg, r->kv_dtype));
    json_int(j, "kv_reserved_bytes", (long long)t->reserved);
    json_int(j, "kv_used_bytes", (long long)t->used);
    json_int(j, "kv_peak_reserved_bytes", (long long)t->peak_reserved);
    json_int(j, "kv_peak_used_bytes", (long long)t->peak_used);
    json_double(j, "kv_utilization_avg", kv_timeline_avg_utilization(t));
    json_double(j, "kv_utilization_at_peak", t->util_at_peak);
    json_begin_array(j, "kv_timeline");
    for (int i = 0; i < t->n_samples; i++) {
        int was_pretty = j->pretty;
        json_begin_array(j, NULL);
        j->pretty = 0; /* one [step, reserved, used] triple per line */
        json_int(j, NULL, t->samples[i].step);
        json_int(j, NULL, (long long)t->samples[i].reserved);
        json_int(j, NULL, (long long)t->samples[i].used);
        json_end_array(j);
        j->pretty = was_pretty;
    }
    json_end_array(j);
}

int report_write_json(const char *path, const RunReport *r, Err *err)
{
    OutFile out;
    if (outfile_open(&out, "--json", path, err))
        return -1;
    JsonWriter j;
    json_init(&j, out.f, 1);
    json_begin_object(&j, NULL);
    json_string(&j, "chapter", r->chapter);
    json_string(&j, "device", r->device);
    json_model(&j, r);
    json_int(&j, "weights_bytes", (long long)run_weights_bytes(r));
    if (r->model) {
        json_int(&j, "weights_tensor_bytes", (long long)r->model->weight_bytes);
        json_int(&j, "weights_f32_bytes", (long long)r->model->weight_f32_bytes);
    }
    json_int(&j, "activations_bytes", (long long)run_activation_bytes(r));
    json_kv(&j, r);
    json_int(&j, "tokens_generated", r->tokens_generated);
    json_double(&j, "elapsed_s", r->elapsed_s);
    json_double(&j, "tokens_per_s", r->elapsed_s > 0 ? (double)r->tokens_generated / r->elapsed_s : 0.0);
    json_ledger(&j);
    if (r->extra_json)
        r->extra_json(&j, r->extra);
    json_end_object(&j);
    return outfile_commit(&out, err);
}
