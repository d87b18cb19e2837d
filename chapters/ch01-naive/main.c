/* Chapter 1: naive decoding. Each step recomputes the K and V of the whole
 * sequence; see naive.h for the idea and where each part of it lives, and
 * solutions/ch01/ for the code a student writes. */
#include <stdio.h>

#include "naive.h"
#include "run_single.h"

static const CliProgram PROGRAM = {
    .name = "ch01-naive",
    .summary = "Chapter 1: greedy decoding that recomputes K and V of the whole sequence at every step.",
    .features = CLI_MODEL | CLI_PROMPT | CLI_CHAT | CLI_SAMPLING | CLI_DEVICE,
};

/* Positions fed by the last step: all tokens but the newest, unless the
 * last step sampled BOS/EOS, which is not appended (then all of them). */
static int last_step_positions(const Generation *g)
{
    return g->finish == FINISH_STOP ? g->n_tokens : g->n_tokens - 1;
}

/* The K/V this run computed and threw away, against what a cache would
 * have computed: one K/V row per layer per position, once. */
static void recompute_table(FILE *f, void *ctx, const Generation *g)
{
    const SingleRun *run = ctx;
    const ModelConfig *c = &run->assets.model.cfg;
    size_t per_token = kv_dtype_bytes_per_token(c, single_run_kv_dtype(run));
    int last = last_step_positions(g);
    size_t last_step = (size_t)last * per_token / (size_t)c->n_layers;
    fprintf(f, "recomputation\n");
    fprintf(f, "  K/V rows computed     %ld positions x %d layers (a cache would compute %d x %d)\n",
            g->positions_run, c->n_layers, last, c->n_layers);
    fprintf(f, "  transient K/V         %zu B at the last step (one layer of %d positions; activations)\n",
            last_step, last);
}

static void recompute_json(JsonWriter *j, void *ctx, const Generation *g)
{
    const SingleRun *run = ctx;
    const ModelConfig *c = &run->assets.model.cfg;
    size_t per_layer_token = kv_dtype_bytes_per_token(c, single_run_kv_dtype(run)) / (size_t)c->n_layers;
    json_int(j, "transient_kv_bytes_last_step", (long long)((size_t)last_step_positions(g) * per_layer_token));
}

/* The transient K/V, and the strategy the loop reaches it through. */
static int open_kv(SingleRun *run, NaiveKv *naive, SingleStreamKv *kv)
{
    if (run->on_device) /* --device cuda: the same recomputation, the transient K/V on the GPU */
        return single_run_start_device(run, naive_device_open, kv);
    if (naive_kv_init(naive, &run->assets.model.cfg, &run->err))
        return -1;
    *kv = naive_strategy(naive);
    return single_run_start(run, run->assets.model.cfg.seq_len); /* the last step feeds the whole sequence */
}

int main(int argc, char **argv)
{
    SingleRun run; /* options, model, sampler, the prompt: run_single.h */
    NaiveKv naive = {0};
    SingleStreamKv kv;
    /* The loop (generate(), common/serving/generate.c) asks naive_prepare()
     * how many positions to skip (none), runs them all through the model,
     * whose attention reads what naive_store() kept (naive_attend()), and
     * samples the next token. */
    int ok = single_run_open(&run, &PROGRAM, argc, argv) == 0 && open_kv(&run, &naive, &kv) == 0 &&
             single_run_generate(&run, &kv) == 0;
    if (ok)
        single_run_report(&run, 0, recompute_table, recompute_json, &run);
    naive_kv_free(&naive);
    return single_run_close(&run);
}
