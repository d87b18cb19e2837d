/* Chapter 6's options: --kv-window, --kv-sinks, --kv-evict, --kv-heavy,
 * --kv-force, --kv-tokens, --kv-argmax, --ignore-eos. They are taken out of argv before the common
 * parser sees the rest, so that common/ never learns of them. */
#include <string.h>

#include "cli.h"
#include "window.h"

/* Most positions any option may name (a window longer than the model's
 * context is refused later, once the model is known). */
#define WINDOW_MAX_POSITIONS 1000000

static int parse_count(const char *name, const char *text, long min, int *out, Err *err)
{
    long v;
    if (cli_parse_long(name + 2, text, min, WINDOW_MAX_POSITIONS, &v, err))
        return -1;
    *out = (int)v;
    return 0;
}

/* One of the chapter's options at argv[i]: parsed into @p o; returns the
 * argv entries it took (0: not one of them), or -1 on a bad value. */
static int take_option(int i, int argc, char **argv, WindowOptions *o, int given[4], Err *err)
{
    static const char *names[] = {"--kv-window", "--kv-sinks", "--kv-evict", "--kv-heavy", "--kv-force",
                                  "--kv-tokens", "--kv-argmax"};
    for (int k = 0; k < 7; k++) {
        int used = 0;
        const char *v = cli_option_value(names[k], i, argc, argv, &used, err);
        if (used < 0)
            return -1;
        if (!v)
            continue;
        int status = 0;
        switch (k) {
        case 0: status = parse_count(names[k], v, 1, &o->window, err); break;
        case 1: status = parse_count(names[k], v, 0, &o->sinks, err); break;
        case 2:
            if (strcmp(v, "h2o") == 0)
                o->evict = WINDOW_EVICT_H2O;
            else if (strcmp(v, "none") == 0)
                o->evict = WINDOW_EVICT_NONE;
            else
                status = err_set(err, "--kv-evict: '%s' is not none or h2o", v);
            break;
        case 3: status = parse_count(names[k], v, 1, &o->heavy, err); break;
        case 4: o->force_path = v; break;
        case 5: o->tokens_path = v; break;
        default: o->argmax_path = v; break;
        }
        if (k < 4)
            given[k] = 1;
        return status ? -1 : used;
    }
    return 0;
}

/* The options must make one policy: sinks and eviction only with a
 * window, heavy hitters only with h2o and h2o only with heavy hitters. */
static int check_policy(const WindowOptions *o, const int given[4], Err *err)
{
    if ((given[1] || given[2] || given[3]) && !given[0])
        return err_set(err, "--kv-sinks, --kv-evict and --kv-heavy need --kv-window N");
    if (o->evict == WINDOW_EVICT_H2O && !given[3])
        return err_set(err, "--kv-evict h2o needs --kv-heavy H (the heavy hitters kept besides the window)");
    if (given[3] && o->evict != WINDOW_EVICT_H2O)
        return err_set(err, "--kv-heavy needs --kv-evict h2o");
    if (o->argmax_path && !o->force_path)
        return err_set(err, "--kv-argmax needs --kv-force FILE (it writes the greedy id of every forced step)");
    return 0;
}

/* What window_parse_options() reads into. */
typedef struct {
    WindowOptions *o; /* the options */
    int given[4];     /* which of the policy's options were given */
} WindowParse;

/* One argument for cli_take_options(): --ignore-eos, or one of take_option()'s. */
static int take_argument(int i, int argc, char **argv, void *ctx, Err *err)
{
    WindowParse *wp = ctx;
    if (strcmp(argv[i], "--ignore-eos") == 0) {
        wp->o->ignore_eos = 1;
        return 1;
    }
    return take_option(i, argc, argv, wp->o, wp->given, err);
}

int window_parse_options(int *argc, char **argv, WindowOptions *o, Err *err)
{
    memset(o, 0, sizeof *o);
    WindowParse wp = {.o = o};
    if (cli_take_options(argc, argv, take_argument, &wp, err))
        return -1;
    return check_policy(o, wp.given, err);
}

int window_check(const WindowOptions *o, const ServingRun *run, Err *err)
{
    const CliOptions *c = run->opts;
    if (o->force_path && c->temperature > 0.0f)
        return err_set(err, "--kv-force needs greedy sampling (--temperature 0): the forced id must win the choice");
    if (c->beam_width > 0) /* chapter 4's beam search steps on its own (ext/beam.c), never through window_step() */
        return err_set(err, "--beam is chapter 4's (build/ch04-paged --beam %d): this chapter's step samples each "
                            "request on its own", c->beam_width);
    if (!o->window)
        return 0;
    if (o->window + o->sinks + o->heavy > run->model->cfg.seq_len)
        return err_set(err, "--kv-window %d + --kv-sinks %d + --kv-heavy %d is more than the model's context (%d)",
                       o->window, o->sinks, o->heavy, run->model->cfg.seq_len);
    if (c->n_samples > 1)
        return err_set(err, "--kv-window with --n %d: the samples share blocks, and each would drop other rows",
                       c->n_samples);
    if (c->preempt && strcmp(c->preempt, "swap") == 0)
        return err_set(err, "--kv-window with --preempt swap is not supported (a swapped table has holes)");
    if (c->device && strcmp(c->device, "cpu") != 0)
        return err_set(err, "--kv-window runs on the CPU only (--device %s)", c->device);
    return 0;
}
