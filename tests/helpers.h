/**
 * @file helpers.h
 * @brief What many test files need: the shared model, synthetic models,
 *        running a program and capturing what it printed.
 */
#ifndef KVLAB_TESTS_HELPERS_H
#define KVLAB_TESTS_HELPERS_H

#include <stddef.h>

#include "dtype.h"
#include "kv_dtype.h"
#include "model.h"
#include "sampler.h"
#include "serving.h"
#include "tokenizer.h"

/**
 * Path of a model file, searched as the programs search (assets.h): in
 * models/ first (a clone has stories260K.bin, tok512.bin and the golden
 * text there), then in ../shared/models, then in $KVLAB_SHARED_MODELS (a
 * copy of that folder carried to a machine without ../shared); NULL when
 * it is in none of them, and then the caller calls test_skip() with
 * TEST_NOT_FOUND(name).
 * @param name  e.g. "stories260K.bin"
 * @return one of four rotating static buffers, or NULL
 */
const char *test_shared_file(const char *name);

/** The SKIP reason for a model file that test_shared_file() did not find. */
#define TEST_NOT_FOUND(name) name " is in neither models/ nor ../shared/models/"

/**
 * Prints a visible "SKIP: <test>: <why>" line on stderr.
 * @param test  the test's name
 * @param why   the reason
 */
void test_skip(const char *test, const char *why);

/** What a program printed and how it ended. */
typedef struct {
    char *out;    /**< stdout, NUL-terminated (malloc'd) */
    size_t out_len;
    char *err;    /**< stderr, NUL-terminated (malloc'd) */
    int status;   /**< exit status, or 128 + signal number */
} ProgramResult;

/**
 * Runs a program with arguments and captures its output.
 * @param argv  NULL-terminated; argv[0] is a path under the build folder,
 *              e.g. "ch01-naive" (KVLAB_BUILD names the folder, default build)
 * @param r     receives output and status; free with test_result_free()
 * @return 0 when the program ran, -1 when it could not be started
 */
int test_run_program(const char *const *argv, ProgramResult *r);

/**
 * Frees what test_run_program() captured.
 * @param r  the result
 */
void test_result_free(ProgramResult *r);

/**
 * Number of lines in a string (a final line without newline counts).
 * @param s  text
 * @return line count
 */
int test_count_lines(const char *s);

/**
 * Writes a synthetic model and its tokenizer to temporary files.
 * @param cfg        shape
 * @param seed       weights seed
 * @param ak42       1 for the ak42 v1 format
 * @param shared     1 for a shared classifier
 * @param model_out  receives the model path (PATH_MAX bytes)
 * @param tok_out    receives the tokenizer path (PATH_MAX bytes)
 */
void test_write_synthetic(const ModelConfig *cfg, unsigned long long seed, int ak42, int shared, char *model_out,
                          char *tok_out);

/**
 * The CPU's logits at every position of a token sequence, fed as one
 * forward step with a plain contiguous K/V store that rounds K/V to
 * @p kv_type (DTYPE_F32: the CPU path itself; f16/bf16: the values a
 * device store of that type keeps). The reference of the GPU tests.
 * @param m        the model
 * @param tokens   [n] the sequence
 * @param n        positions, 1..seq_len
 * @param kv_type  what K/V are rounded to
 * @return [n][vocab_size] logits (malloc'd; row i predicts token i + 1)
 */
float *test_cpu_logits(const Model *m, const int *tokens, int n, Dtype kv_type);

/**
 * test_cpu_logits() for any K/V type of a CPU cache: K/V rounded to what a
 * row of @p kv_type holds (kv_row_store() then kv_row_load(): int8 with
 * its scale per token and KV head), and attention_reference() over them.
 * @param m        the model
 * @param tokens   [n] the sequence
 * @param n        positions, 1..seq_len
 * @param kv_type  what K/V are rounded to
 * @return [n][vocab_size] logits (malloc'd; row i predicts token i + 1)
 */
float *test_cpu_logits_kv(const Model *m, const int *tokens, int n, KvDtype kv_type);

/**
 * test_cpu_logits() with every K/V element multiplied by 1 + e, e uniform
 * in [-jitter, jitter], before it is rounded: how much the logits depend
 * on where each element falls between two 16-bit values, which a device
 * that sums in another order sees differently (tests/test_cuda_forward.c).
 * @param m        the model
 * @param tokens   [n] the sequence
 * @param n        positions, 1..seq_len
 * @param kv_type  what K/V are rounded to
 * @param jitter   relative size of the noise (0: test_cpu_logits())
 * @param seed     seed of the noise (sampler_random_f32())
 * @return [n][vocab_size] logits (malloc'd)
 */
float *test_cpu_logits_jittered(const Model *m, const int *tokens, int n, Dtype kv_type, double jitter,
                                unsigned long long seed);

/**
 * The gap between the largest and the second largest logit of a row: where
 * it is small, a tiny change of the logits may change the greedy token.
 * @param row    [vocab] logits
 * @param vocab  entries
 * @return top-1 minus top-2
 */
float test_top_gap(const float *row, int vocab);

/**
 * Reads a whole text file.
 * @param path  the file (the test fails if it cannot be read)
 * @return its bytes, NUL-terminated (malloc'd)
 */
char *test_slurp(const char *path);

/**
 * The integers of the JSON array that follows the key @p key in @p text
 * (the first occurrence of "key": [ ... ]).
 * @param text  JSON text
 * @param key   the key, without quotes
 * @param out   receives up to @p max integers
 * @param max   capacity of out
 * @return how many were read (the test fails when the key or its array is missing)
 */
int test_json_ints(const char *text, const char *key, int *out, int max);

/**
 * Writes bytes to a new temporary file.
 * @param data   bytes
 * @param n      count
 * @param out    receives the path (PATH_MAX bytes)
 */
void test_write_temp(const void *data, size_t n, char *out);

/**
 * A prompt's tokens when it runs alone through the generation loop with a
 * plain contiguous cache written in the test helpers (independent of every
 * chapter's code, so of any lab exercise): the reference every batched
 * chapter must match.
 * @param m            the model
 * @param t            the tokenizer
 * @param prompt       the prompt text
 * @param steps        most new tokens
 * @param temperature  0 for greedy
 * @param seed         the sampler's seed
 * @param out          receives the new tokens (room for seq_len + 1)
 * @return how many new tokens
 */
int test_solo_tokens_sampled(const Model *m, const Tokenizer *t, const char *prompt, int steps, float temperature,
                             unsigned long long seed, int *out);

/**
 * test_solo_tokens_sampled() with every sampling setting (filters and
 * penalties too).
 * @param m       the model
 * @param t       the tokenizer
 * @param prompt  the prompt text
 * @param steps   most new tokens
 * @param p       the sampling settings
 * @param seed    the sampler's seed
 * @param out     receives the new tokens (room for seq_len + 1)
 * @return how many new tokens
 */
int test_solo_tokens_params(const Model *m, const Tokenizer *t, const char *prompt, int steps, const SamplingParams *p,
                            unsigned long long seed, int *out);

/**
 * Greedy test_solo_tokens_sampled() (temperature 0, seed 1).
 * @param m       the model
 * @param t       the tokenizer
 * @param prompt  the prompt text
 * @param steps   most new tokens
 * @param out     receives the new tokens (room for seq_len + 1)
 * @return how many new tokens
 */
int test_solo_tokens(const Model *m, const Tokenizer *t, const char *prompt, int steps, int *out);

/**
 * The tokens each request of a served run would get alone
 * (test_solo_tokens_sampled(), with the run's temperature and the seed
 * its request has: --seed + its index): what every serving chapter must
 * give it, whatever it shares, preempts or evicts.
 */
typedef struct {
    int count;   /**< requests */
    int stride;  /**< ints per request in tokens: the model's seq_len + 1 */
    int *n;      /**< [count] new tokens of each */
    int *tokens; /**< [count][stride] its new tokens */
} TestSolo;

/**
 * Runs every request of @p run alone (the run may be served already: only
 * its requests' specs and options are read). Free with test_solo_close().
 * @param s    receives the tokens
 * @param m    the model
 * @param t    the tokenizer
 * @param run  an initialised run
 */
void test_solo_open(TestSolo *s, const Model *m, const Tokenizer *t, const ServingRun *run);

/**
 * test_solo_open() for the requests of a request file's text run with
 * options @p o (their temperature and seed), before any chapter serves
 * them.
 * @param s         receives the tokens
 * @param m         the model
 * @param t         the tokenizer
 * @param requests  the request file's text
 * @param o         the options the chapter will run them with
 */
void test_solo_of_requests(TestSolo *s, const Model *m, const Tokenizer *t, const char *requests, const CliOptions *o);

/**
 * Frees what test_solo_open() computed.
 * @param s  the tokens
 */
void test_solo_close(TestSolo *s);

/**
 * Fails the test unless every request of the served @p run finished
 * (length or stop; a rejected one too when @p allow_rejected, whose
 * tokens are not compared) with exactly its solo tokens.
 * @param s               test_solo_open() of the same requests
 * @param run             the served run
 * @param allow_rejected  1: a rejected request is left out; 0: it fails the test
 * @param what            the run, for the message ("block size 4, budget 1234")
 */
void test_expect_solo(const TestSolo *s, const ServingRun *run, int allow_rejected, const char *what);

/** A model and its tokenizer opened for a test; the images are set for a
 *  synthetic model only. Close with test_model_free(). */
typedef struct {
    Model m;
    Tokenizer t;
    void *image, *tok_image; /**< a synthetic model's file images (mem_alloc'd), or NULL */
} TestModel;

/** The synthetic shape most serving tests use: grouped-query attention (6
 *  query heads on 2 KV heads), seq_len 64 so that requests reach it. */
extern const ModelConfig TEST_SYNTH_GQA;

/**
 * Opens a synthetic model of shape @p cfg (weights from @p seed) with its
 * tokenizer, and sets the thread count the programs would (fails the test
 * on error).
 * @param f     receives the model
 * @param cfg   the shape
 * @param seed  the weights' seed
 */
void test_model_synthetic(TestModel *f, ModelConfig cfg, unsigned long long seed);

/**
 * Opens stories260K and tok512 (models/, or ../shared/models), or prints SKIP.
 * @param f     receives the model
 * @param test  the test's name, for the SKIP line
 * @return 1 when opened, 0 when the files are absent (SKIP printed)
 */
int test_model_stories(TestModel *f, const char *test);

/**
 * Opens SmolLM2-135M-Instruct (Q4_1 GGUF) with the tokenizer its file
 * holds, or prints SKIP.
 * @param f     receives the model
 * @param test  the test's name, for the SKIP line
 * @return 1 when opened, 0 when the file is absent (SKIP printed)
 */
int test_model_smollm2(TestModel *f, const char *test);

/**
 * Closes what a test_model_*() opened.
 * @param f  the model
 */
void test_model_free(TestModel *f);

#endif
