/**
 * @file serve_engine.h
 * @brief kvlab-serve's engine: chapter 4's paged server (with chapter 5's
 *        prefix cache when asked) stepping on a thread of its own, fed by
 *        the HTTP threads between steps.
 *
 * **Two kinds of thread.** The engine thread owns the run, the pool and
 * the model: it alone calls chapter 4 and 5 (and the memory ledger of
 * common/accounting/mem.h, which is not thread-safe). The HTTP threads
 * own the connections. They meet in a ServeJob, under one mutex: an HTTP
 * thread submits a job and waits for it to be accepted (tokenized, and
 * its prompt found to fit) or refused; the engine places each of its
 * choices in the run, steps, and after every step appends each choice's
 * new tokens and text to the job and wakes the HTTP threads, which stream
 * them out. A step never waits for the network, and the network never
 * waits for more than one step.
 *
 * **Requests join a running batch.** Chapter 4's run is made for a request
 * file whose requests are all known at the start, arriving at given times.
 * The engine opens it with ::ServeEngineConfig.slots requests that have
 * not arrived yet (REQ_PENDING, with no arrival time); an HTTP request
 * takes the next free slots, and its arrival is set to the run's clock
 * now, so that chapter 4's next step lets it in and its scheduler admits
 * it into the running batch (continuous batching), exactly as it admits
 * the requests of a file. When every slot of the run has been used, the
 * engine waits for the run to finish and opens a fresh one (a new
 * generation; the prefix cache starts empty again).
 *
 * **Cancelling.** A choice whose client went away, or whose text reached a
 * stop string, ends through chapter 4's own paths: a request still
 * waiting is rejected (serving_reject()), a running one is given one more
 * token as its last (its max_tokens), and its blocks go back to the pool
 * when it finishes, as every finished request's do.
 */
#ifndef KVLAB_SERVE_ENGINE_H
#define KVLAB_SERVE_ENGINE_H

#include "assets.h"
#include "cli.h"
#include "err.h"
#include "serve_api.h"

/** The engine's settings (kvlab-serve's options). */
typedef struct {
    const char *model_name; /**< the name served (GET /v1/models, `model`) */
    int slots;              /**< requests of one run (a generation) */
    int max_waiting;        /**< choices waiting at most; one more is refused with 503 */
    const char *prefix;     /**< --prefix-cache: NULL (chapter 4 alone), "off", "hash" or "radix" */
    int threads;            /**< OpenMP threads of the forward pass (set on the engine thread: its own setting) */
    double step_delay_s;    /**< --step-delay: a pause after each step, so that a class (or a test) can watch */
} ServeEngineConfig;

/** The engine: the run, chapter 4's server on it, the jobs (serve_engine.c). */
typedef struct ServeEngine ServeEngine;
/** One HTTP request handed to the engine: its choices and their output so far (serve_engine.c). */
typedef struct ServeJob ServeJob;

/** A growing byte buffer (malloc'ed): what a stream writes next. */
typedef struct {
    char *data; /**< [cap] the bytes */
    size_t len; /**< bytes held */
    size_t cap; /**< room */
} ServeBuf;

/**
 * Appends bytes (growing the buffer).
 * @param b  the buffer
 * @param s  the bytes
 * @param n  their count
 * @return 0, or -1 when memory runs out
 */
int serve_buf_put(ServeBuf *b, const char *s, size_t n);

/**
 * Opens the engine on an open model: the chat template (when the model has
 * one), the first run and chapter 4's server (and chapter 5's cache).
 * @param e       receives the engine (serve_engine_close() it, also on failure)
 * @param opts    the command line (the run's budget, block size, sampling defaults)
 * @param assets  the model and tokenizer (must outlive the engine)
 * @param cfg     the settings
 * @param err     receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int serve_engine_open(ServeEngine **e, const CliOptions *opts, const Assets *assets, const ServeEngineConfig *cfg,
                      Err *err);

/**
 * Starts the engine thread.
 * @param e    the engine
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int serve_engine_start(ServeEngine *e, Err *err);

/**
 * Stops serving: every job not finished fails ("the server is shutting
 * down"), the HTTP threads waiting on one are woken, and the engine thread
 * ends after its current step.
 * @param e  the engine
 */
void serve_engine_stop(ServeEngine *e);

/**
 * Frees the engine, its runs and every job it still holds (call once no
 * HTTP thread uses it: after the HTTP daemon has stopped).
 * @param e  the engine, or NULL
 */
void serve_engine_close(ServeEngine *e);

/**
 * The chat template's default system turn, or NULL.
 * @param e  the engine
 * @return the text
 */
const char *serve_engine_system_message(const ServeEngine *e);

/**
 * Whether the model has a chat template (POST /v1/chat/completions).
 * @param e  the engine
 * @return 1 or 0
 */
int serve_engine_has_chat(const ServeEngine *e);

/**
 * The model's context in tokens (seq_len).
 * @param e  the engine
 * @return tokens
 */
int serve_engine_context(const ServeEngine *e);

/**
 * Hands a parsed request to the engine and waits until it is accepted
 * (tokenized, and found to fit the model's context and the pool) or
 * refused. On success the caller holds a reference (serve_job_release()).
 * @param e       the engine
 * @param params  the request; the engine takes its strings (it is zeroed)
 * @param job     receives the job
 * @param error   receives the refusal: 400 (too long), 503 (queue full, shutting down)
 * @return 0 when accepted, -1 when refused
 */
int serve_submit(ServeEngine *e, ServeParams *params, ServeJob **job, ServeError *error);

/**
 * Whether the job asked for a stream (`"stream": true`).
 * @param job  a job of the caller's
 * @return 1 or 0
 */
int serve_job_streams(const ServeJob *job);

/**
 * Streams a job: waits up to @p wait_s for something new, then appends
 * to @p out the Server-Sent Events that are due: a chunk per choice with
 * its new text, a chunk with each finish reason, then (all finished) the
 * usage chunk when asked and `data: [DONE]`; an error event and
 * `data: [DONE]` when the job failed (shutdown); a comment when nothing
 * came (a keep-alive, which also finds clients that went away).
 * @param e       the engine
 * @param job     a job of the caller's
 * @param out     where the events go
 * @param wait_s  seconds to wait for something new
 * @return 1 when the stream is complete, 0 when more will come, -1 when memory runs out
 */
int serve_job_stream(ServeEngine *e, ServeJob *job, ServeBuf *out, double wait_s);

/**
 * Waits until every choice of a job has finished (or the job failed) and
 * writes the whole response.
 * @param e       the engine
 * @param job     a job of the caller's
 * @param status  receives the HTTP status (200, or the failure's)
 * @return malloc'ed JSON (the response or the error object), or NULL when memory runs out
 */
char *serve_job_response(ServeEngine *e, ServeJob *job, int *status);

/**
 * The caller lets go of its job. When its choices are not all finished
 * (the client went away), they are cancelled and their blocks go back to
 * the pool.
 * @param e    the engine
 * @param job  the job
 */
void serve_job_release(ServeEngine *e, ServeJob *job);

/**
 * GET /metrics: the Prometheus text format, with vLLM's names (and
 * kvlab's own for the pool's blocks).
 * @param e  the engine
 * @return malloc'ed text, or NULL when memory runs out
 */
char *serve_engine_metrics(ServeEngine *e);

#endif
