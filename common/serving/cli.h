/**
 * @file cli.h
 * @brief One command line for every kvlab program.
 *
 * All chapters share one table of options; each program declares which
 * groups it accepts (::CliFeature), and both parsing and `--help` follow
 * from that. An option a program does not accept is refused like any other
 * unknown option, so a typo never silently does nothing.
 */
#ifndef KVLAB_CLI_H
#define KVLAB_CLI_H

#include <stddef.h>

#include "err.h"
#include "sampler.h"

/** Option groups a program can accept. */
typedef enum {
    CLI_MODEL = 1 << 0,     /**< --model --tokenizer --threads --json --quiet */
    CLI_PROMPT = 1 << 1,    /**< --prompt --steps */
    CLI_SAMPLING = 1 << 2,  /**< --repetition-penalty --frequency-penalty --presence-penalty --temperature --min-p --top-k --top-p --seed (in the order the sampler applies them) */
    CLI_KV_ALLOC = 1 << 3,  /**< --kv-alloc (chapter 2) */
    CLI_SERVING = 1 << 4,   /**< --requests --out --kv-budget --trace --show-tables, and latency: --clock --machine --arrival-rate --arrival --arrival-seed --slo-ttft --slo-tpot (the serving chapters) */
    CLI_BATCHING = 1 << 5,  /**< --max-batch --reserve --batching --arena (chapter 3) */
    CLI_PAGED = 1 << 6,     /**< --block-size --n --beam --watermark --max-num-batched-tokens --max-num-seqs --preempt --swap-space (chapter 4 and the chapters built on its scheduler) */
    CLI_DEVICE = 1 << 7,    /**< --device --kv-dtype --weight-dtype */
    CLI_PREFIX = 1 << 8,    /**< --prefix-cache (chapter 5) */
    CLI_CHAT = 1 << 9,      /**< --chat (the chapters: the prompt, or each prompt of the request file) */
    CLI_KV_DTYPE = 1 << 10, /**< the CPU path stores K/V in any --kv-dtype (chapter 2); without it, the CPU stores f32 and only the device takes another */
} CliFeature;

/** Every option of every program, with its default. */
typedef struct {
    const char *model_path;     /**< --model; NULL: find the default model */
    const char *tokenizer_path; /**< --tokenizer; NULL: find one that fits the model */
    const char *prompt;         /**< --prompt */
    int chat;                   /**< --chat: each prompt is one user message in the model's ChatML template */
    int steps;                  /**< --steps: new tokens after the prompt */
    float temperature;          /**< --temperature: 0 = greedy */
    float top_p;                /**< --top-p: 0 or 1 = off */
    int top_k;                  /**< --top-k: 0 = off */
    float min_p;                /**< --min-p: 0 = off */
    float repetition_penalty;   /**< --repetition-penalty: 1 = off */
    float frequency_penalty;    /**< --frequency-penalty: 0 = off */
    float presence_penalty;     /**< --presence-penalty: 0 = off */
    unsigned long long seed;    /**< --seed */
    const char *json_path;      /**< --json: write the run report here */
    int threads;                /**< --threads: 0 = OpenMP default */
    int quiet;                  /**< --quiet: no memory table on stderr */
    const char *kv_alloc;       /**< --kv-alloc: max | grow */
    const char *requests_path;  /**< --requests */
    const char *out_path;       /**< --out: JSON Lines of the requests */
    size_t kv_budget;           /**< --kv-budget in bytes; 0 = not given */
    const char *trace_path;     /**< --trace: one JSON line per step (trace.h); NULL: none */
    long show_tables;           /**< --show-tables: the step whose regions or block tables go to stderr; -1: none */
    int max_batch;              /**< --max-batch */
    const char *reserve;        /**< --reserve: max | request | pow2 | grow */
    const char *batching;       /**< --batching: static | continuous (NULL: static) */
    const char *arena;          /**< --arena: first-fit | buddy (NULL: first-fit) */
    int block_size;             /**< --block-size */
    int n_samples;              /**< --n: samples per prompt */
    int beam_width;             /**< --beam: beams per prompt (beam search); 0 = off */
    int watermark;              /**< --watermark: free blocks kept back, percent of the pool */
    int max_num_batched_tokens; /**< --max-num-batched-tokens: tokens of one step, prompts in chunks (0: not given) */
    int max_num_seqs;           /**< --max-num-seqs: most requests running at once (0: not given) */
    const char *preempt;        /**< --preempt: recompute | swap (NULL: not given, which recomputes) */
    size_t swap_space;          /**< --swap-space in bytes (0: not given) */
    const char *device;         /**< --device: cpu | cuda */
    const char *kv_dtype;       /**< --kv-dtype: f32 | f16 | bf16 | int8 | fp8-e4m3 | fp8-e5m2 (kv_dtype.h) */
    const char *weight_dtype;   /**< --weight-dtype: f32 | f16 | bf16; NULL: as stored (CPU), f32 (device) */
    const char *prefix_cache;   /**< --prefix-cache: off | hash | radix */
    const char *clock;          /**< --clock: wall | model (NULL: not given, which is wall) */
    const char *machine;        /**< --machine: the cost model's machine (cost_machine_load()); NULL: not given */
    double arrival_rate;        /**< --arrival-rate or --arrival: requests per second (0: arrivals as the request file says) */
    double arrival_cv;          /**< --arrival gamma: the gaps' coefficient of variation (1: Poisson) */
    unsigned long long arrival_seed; /**< --arrival-seed (default: --seed) */
    int arrival_seed_given;     /**< 1: --arrival-seed was given */
    double slo_ttft;            /**< --slo-ttft: seconds (0: no objective) */
    double slo_tpot;            /**< --slo-tpot: seconds (0: no objective) */
} CliOptions;

/** What the program is, for --help. */
typedef struct {
    const char *name;     /**< e.g. "ch01-naive" */
    const char *summary;  /**< one line: what the program shows */
    unsigned features;    /**< OR of ::CliFeature */
} CliProgram;

/** Result of cli_parse(). */
typedef enum {
    CLI_RUN = 0,   /**< options are valid: run */
    CLI_EXIT_OK,   /**< --help was printed: exit 0 */
    CLI_ERROR      /**< bad option: the message is in err, exit 1 */
} CliResult;

/**
 * Fills @p opts with defaults.
 * @param opts  receives the defaults
 */
void cli_defaults(CliOptions *opts);

/**
 * Parses argv with getopt_long. Prints --help to stdout itself.
 * @param prog  the program's name, summary and accepted groups
 * @param argc  from main
 * @param argv  from main
 * @param opts  receives the options (defaults first)
 * @param err   receives a one-line message on CLI_ERROR
 * @return what main should do
 */
CliResult cli_parse(const CliProgram *prog, int argc, char **argv, CliOptions *opts, Err *err);

/**
 * The sampling options as the sampler takes them.
 * @param opts  parsed options
 * @return --temperature, --top-p, --top-k, --min-p and the three penalties
 */
SamplingParams cli_sampling_params(const CliOptions *opts);

/**
 * Parses a whole number of an option strictly (parse_long()): digits and
 * an optional leading '-', nothing else, in range (" 12", "+12", "12abc"
 * and "" are refused, unlike strtol).
 * @param name  the option without its dashes, for the message
 * @param text  the value
 * @param min   smallest allowed
 * @param max   largest allowed
 * @param out   receives the number
 * @param err   receives "--NAME: ..." on failure
 * @return 0 on success, -1 on failure
 */
int cli_parse_long(const char *name, const char *text, long min, long max, long *out, Err *err);

/**
 * A chapter's own option at argv[@p i], before the common parser sees the
 * rest: "--name=value" or "--name value" (chapters 6 and 7 take theirs out
 * of argv this way, so that common/ never learns of them).
 * @param name  the option with its dashes, e.g. "--kv-window"
 * @param i     the argument to look at
 * @param argc  argument count
 * @param argv  the arguments
 * @param used  receives the argv entries the option takes (1 or 2), or -1
 *              when the value is missing (then @p err says so)
 * @param err   receives "NAME needs a value"
 * @return the value, or NULL when argv[i] is not this option (or has no value)
 */
const char *cli_option_value(const char *name, int i, int argc, char **argv, int *used, Err *err);

/**
 * Takes a chapter's own options out of argv before the common parser sees
 * the rest: @p take is called at every argument before "--" and says how
 * many entries of argv it took (0: not one of the chapter's options); the
 * entries it took are removed, the rest kept in order ("--" and whatever
 * follows it too), and argv[*argc] becomes NULL for getopt_long.
 * @param argc  in: argument count; out: what is left
 * @param argv  the arguments (compacted in place)
 * @param take  reads argv[i]: returns the entries it took, or -1 on a bad
 *              option (then it has set @p err)
 * @param ctx   passed to @p take
 * @param err   passed to @p take
 * @return 0 on success, -1 when @p take refused an option
 */
int cli_take_options(int *argc, char **argv, int (*take)(int i, int argc, char **argv, void *ctx, Err *err), void *ctx,
                     Err *err);

/**
 * Parses a size such as 4096, 512KiB, 4MiB, 2GiB, 1.5GB or 80GB (KiB/MiB/GiB
 * are powers of 1024, KB/MB/GB powers of 1000; a bare K/M/G means 1024)
 * strictly and exactly (parse_size()): no sign, no exponent, nothing past
 * 2^64 - 1 bytes.
 * @param text   the size
 * @param bytes  receives the size in bytes
 * @param err    receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int cli_parse_size(const char *text, size_t *bytes, Err *err);

/**
 * Whether any latency option was given (--clock, --machine, an arrival
 * process, an objective): then `--out` lines carry each request's times.
 * @param opts  parsed options
 * @return 1 if so
 */
int cli_latency_asked(const CliOptions *opts);

/**
 * Formats a byte count for people: "1.50 MiB", "512 B" (format_bytes(),
 * by the name every program's tables use).
 * @param buf    output buffer
 * @param n      its size
 * @param bytes  the count
 * @return buf
 */
const char *cli_format_bytes(char *buf, size_t n, double bytes);

#endif
