/* Chapter 7's options: --spec, --spec-k, --spec-ngram-min, --spec-ngram-max,
 * --draft-model, --spec-check. They are taken out of argv before the common
 * parser sees the rest, so that common/ never learns of them. */
#include <string.h>

#include "cli.h"
#include "ext/budget.h"
#include "spec.h"

/* ngram, self:L or draft. */
static int parse_method(const char *v, SpecOptions *o, Err *err)
{
    if (strcmp(v, "ngram") == 0) {
        o->method = SPEC_NGRAM;
        return 0;
    }
    if (strcmp(v, "draft") == 0) {
        o->method = SPEC_DRAFT;
        return 0;
    }
    if (strncmp(v, "self:", 5) == 0) {
        long layers;
        if (cli_parse_long("spec self:L", v + 5, 1, 1000, &layers, err))
            return -1;
        o->method = SPEC_SELF;
        o->self_layers = (int)layers;
        return 0;
    }
    return err_set(err, "--spec: '%s' is not ngram, self:L or draft", v);
}

/* One of the chapter's options at argv[i], parsed into @p o; returns the
 * argv entries it took (0: not one of them), or -1 on a bad value. */
static int take_option(int i, int argc, char **argv, SpecOptions *o, int given[6], Err *err)
{
    static const char *names[] = {"--spec-k", "--spec-ngram-min", "--spec-ngram-max", "--draft-model", "--spec"};
    for (int k = 0; k < 5; k++) {
        int used = 0;
        const char *v = cli_option_value(names[k], i, argc, argv, &used, err);
        if (used < 0)
            return -1;
        if (!v)
            continue;
        long n = 0;
        int status = 0;
        switch (k) {
        case 0: status = cli_parse_long("spec-k", v, 1, SPEC_MAX_K, &n, err); o->k = (int)n; break;
        case 1: status = cli_parse_long("spec-ngram-min", v, 1, 64, &n, err); o->ngram_min = (int)n; break;
        case 2: status = cli_parse_long("spec-ngram-max", v, 1, 64, &n, err); o->ngram_max = (int)n; break;
        case 3: o->draft_path = v; break;
        default: status = parse_method(v, o, err); break;
        }
        given[k] = 1;
        return status ? -1 : used;
    }
    return 0;
}

/* The options must make one proposer. */
static int check_combination(const SpecOptions *o, const int given[6], Err *err)
{
    if ((given[0] || given[1] || given[2] || given[3] || o->check) && !given[4])
        return err_set(err, "--spec-k, --spec-ngram-min/max, --draft-model and --spec-check need --spec "
                            "ngram|self:L|draft");
    if ((given[1] || given[2]) && o->method != SPEC_NGRAM)
        return err_set(err, "--spec-ngram-min and --spec-ngram-max need --spec ngram");
    if (o->ngram_min > o->ngram_max)
        return err_set(err, "--spec-ngram-min %d is more than --spec-ngram-max %d", o->ngram_min, o->ngram_max);
    if (o->method == SPEC_DRAFT && !o->draft_path)
        return err_set(err, "--spec draft needs --draft-model FILE");
    if (o->draft_path && o->method != SPEC_DRAFT)
        return err_set(err, "--draft-model needs --spec draft");
    return 0;
}

/* What spec_parse_options() reads into. */
typedef struct {
    SpecOptions *o; /* the options */
    int given[6];   /* which of take_option()'s names were given */
} SpecParse;

/* One argument for cli_take_options(): a flag, or one of take_option()'s. */
static int take_argument(int i, int argc, char **argv, void *ctx, Err *err)
{
    SpecParse *sp = ctx;
    if (strcmp(argv[i], "--spec-check") == 0) {
        sp->o->check = 1;
        return 1;
    }
    return take_option(i, argc, argv, sp->o, sp->given, err);
}

int spec_parse_options(int *argc, char **argv, SpecOptions *o, Err *err)
{
    memset(o, 0, sizeof *o);
    o->k = 4;
    o->ngram_min = 1;
    o->ngram_max = 3;
    SpecParse sp = {.o = o};
    if (cli_take_options(argc, argv, take_argument, &sp, err))
        return -1;
    return check_combination(o, sp.given, err);
}

int spec_check(const SpecOptions *o, const ServingRun *run, Err *err)
{
    const CliOptions *c = run->opts;
    if (!o->method)
        return 0;
    if (c->beam_width > 0)
        return err_set(err, "--spec with --beam %d: beam search is chapter 4's own step (build/ch04-paged --beam)",
                       c->beam_width);
    if (c->device && strcmp(c->device, "cpu") != 0)
        return err_set(err, "--spec runs on the CPU only (--device %s)", c->device);
    if (budget_wanted(c))
        return err_set(err, "--spec with --max-num-batched-tokens, --max-num-seqs, --preempt or --swap-space: "
                            "the proposals are not in chapter 4's token budget");
    if (o->method == SPEC_SELF && o->self_layers >= run->model->cfg.n_layers)
        return err_set(err, "--spec self:%d: the model has %d layers; L must be 1..%d", o->self_layers,
                       run->model->cfg.n_layers, run->model->cfg.n_layers - 1);
    return 0;
}
