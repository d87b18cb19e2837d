/* Chapter 1: naive decoding. Each step recomputes the K and V of the whole
 * sequence; see naive.h for the idea and solutions/ch01/naive.c for the
 * code a student writes. This file only wires the chapter into the shared
 * program (common/run_single.c). */
#include <stdio.h>

#include "mem.h"
#include "naive.h"
#include "run_single.h"

static NaiveKv naive_kv;
static ModelConfig model_cfg;                /* for the tables, on either device */
static size_t kv_elem_bytes = sizeof(float); /* bytes per transient K/V element */

static int open_kv(const Model *m, const CliOptions *opts, int n_prompt, SingleStreamKv *kv, int *max_step, Err *err)
{
    (void)opts;
    (void)n_prompt;
    model_cfg = m->cfg;
    if (naive_kv_init(&naive_kv, &m->cfg, err))
        return -1;
    *kv = naive_strategy(&naive_kv);
    *max_step = m->cfg.seq_len; /* the last step feeds the whole sequence */
    return 0;
}

/* --device cuda: the same recomputation, with the transient K/V on the GPU. */
static int open_kv_device(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype kv_type,
                          const CliOptions *opts, int n_prompt, int *max_step, Err *err)
{
    model_cfg = *cfg;
    kv_elem_bytes = dtype_bytes(kv_type);
    return device_run_recompute_kv(kv, dev, cfg, kv_type, opts, n_prompt, max_step, err);
}

static void close_kv(SingleStreamKv *kv)
{
    (void)kv;
    naive_kv_free(&naive_kv);
}

/* Positions fed by the last step: all tokens but the newest, unless the
 * last step sampled BOS/EOS, which is not appended (then all of them). */
static int last_step_positions(const Generation *g)
{
    return g->finish == FINISH_STOP ? g->n_tokens : g->n_tokens - 1;
}

/* The K/V this run computed and threw away, against what a cache would
 * have computed: one K/V row per layer per position, once. */
static void recompute_table(FILE *f, const SingleStreamKv *kv, const Generation *g)
{
    (void)kv;
    const ModelConfig *c = &model_cfg;
    size_t per_token = model_kv_bytes_per_token(c, kv_elem_bytes);
    int last = last_step_positions(g);
    size_t last_step = (size_t)last * per_token / (size_t)c->n_layers;
    fprintf(f, "recomputation\n");
    fprintf(f, "  K/V rows computed     %ld positions x %d layers (a cache would compute %d x %d)\n",
            g->positions_run, c->n_layers, last, c->n_layers);
    fprintf(f, "  transient K/V         %zu B at the last step (one layer of %d positions; activations)\n",
            last_step, last);
}

static void recompute_json(JsonWriter *j, const SingleStreamKv *kv, const Generation *g)
{
    (void)kv;
    const ModelConfig *c = &model_cfg;
    size_t per_layer_token = model_kv_bytes_per_token(c, kv_elem_bytes) / (size_t)c->n_layers;
    json_int(j, "transient_kv_bytes_last_step", (long long)((size_t)last_step_positions(g) * per_layer_token));
}

int main(int argc, char **argv)
{
    static const SingleStreamChapter chapter = {
        .program = {.name = "ch01-naive",
                    .summary = "Chapter 1: greedy decoding that recomputes K and V of the whole sequence at every step.",
                    .features = CLI_MODEL | CLI_PROMPT | CLI_SAMPLING | CLI_DEVICE},
        .kv_open = open_kv,
        .kv_close = close_kv,
        .extra_table = recompute_table,
        .extra_json = recompute_json,
        .keeps_kv = 0,
        .device_kv_open = open_kv_device,
    };
    return run_single_main(&chapter, argc, argv);
}
