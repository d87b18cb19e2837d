/**
 * @file serve_api.h
 * @brief kvlab-serve: the OpenAI request bodies it accepts and the JSON it
 *        answers with (jansson), kept apart from the network and the
 *        engine so that the parser can be fuzzed alone
 *        (tests/fuzz/fuzz_serve_request.c).
 *
 * A body is parsed into a ::ServeParams or refused with a ::ServeError:
 * the HTTP status and OpenAI's error object (`{"error": {"message",
 * "type", "param", "code"}}`). Every key OpenAI defines is either used or
 * refused by name; a key OpenAI does not define is refused too, so that a
 * parameter never silently does nothing.
 */
#ifndef KVLAB_SERVE_API_H
#define KVLAB_SERVE_API_H

#include <stddef.h>

/** Which endpoint a body was sent to. */
typedef enum {
    SERVE_COMPLETION, /**< POST /v1/completions: a prompt */
    SERVE_CHAT        /**< POST /v1/chat/completions: messages, rendered in the model's chat template */
} ServeKind;

/** Most stop strings a request may give (OpenAI's limit). */
#define SERVE_MAX_STOP 4
/** Most choices (`n`) one request may ask for. */
#define SERVE_MAX_N 16

/** One request, as the engine needs it. Strings are malloc'ed (serve_params_free()). */
typedef struct {
    ServeKind kind;          /**< the endpoint */
    char *prompt;            /**< completions: the prompt; chat: the conversation rendered in ChatML */
    int max_tokens;          /**< new tokens at most; 0: not given (the endpoint's default) */
    int has_temperature;     /**< 1: temperature was given */
    float temperature;       /**< in [0, 2] */
    int has_top_p;           /**< 1: top_p was given */
    float top_p;             /**< in (0, 1] */
    int has_presence;        /**< 1: presence_penalty was given */
    float presence_penalty;  /**< in [-2, 2] */
    int has_frequency;       /**< 1: frequency_penalty was given */
    float frequency_penalty; /**< in [-2, 2] */
    int n;                   /**< choices, 1 to SERVE_MAX_N */
    int has_seed;            /**< 1: seed was given */
    long long seed;          /**< the sampler's seed of choice 0 (choice i: seed + i) */
    char *stop[SERVE_MAX_STOP]; /**< stop strings (not part of the answer) */
    int n_stop;              /**< entries of stop */
    int stream;              /**< 1: Server-Sent Events */
    int include_usage;       /**< stream_options.include_usage: a last chunk with the token counts */
    int return_token_ids;    /**< vLLM's extension: each choice carries its token ids */
} ServeParams;

/** Why a request is refused: the HTTP status and OpenAI's error object. */
typedef struct {
    int status;         /**< 400, 404, 413, 503 ... */
    const char *type;   /**< "invalid_request_error", "not_found_error", ... */
    char param[64];     /**< the offending key, or "" */
    char message[256];  /**< one line */
} ServeError;

/**
 * Fills @p e and returns -1 (a one-line helper for every refusal).
 * @param e       receives the error
 * @param status  HTTP status
 * @param param   the key at fault, or NULL
 * @param fmt     printf format of the message
 * @return -1
 */
int serve_error(ServeError *e, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/**
 * Parses a request body.
 * @param body            the bytes (not NUL-terminated; may hold anything)
 * @param len             their count
 * @param kind            the endpoint
 * @param model_name      the name the server answers to (`model` must be it, or absent)
 * @param system_message  the chat template's default system turn, or NULL (chat only)
 * @param out             receives the request (serve_params_free() it, also on failure)
 * @param e               receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int serve_parse_request(const char *body, size_t len, ServeKind kind, const char *model_name,
                        const char *system_message, ServeParams *out, ServeError *e);

/**
 * Frees the strings of a request.
 * @param p  from serve_parse_request(), or zeroed
 */
void serve_params_free(ServeParams *p);

/**
 * OpenAI's error object for @p e, as a malloc'ed JSON string.
 * @param e  the error
 * @return the text (free() it), or NULL when memory runs out
 */
char *serve_error_json(const ServeError *e);

/** One finished or streaming choice, as the responses show it. */
typedef struct {
    const char *text;       /**< the text (UTF-8) */
    size_t len;             /**< its bytes */
    const char *finish;     /**< "stop", "length", or NULL while streaming */
    const int *token_ids;   /**< its tokens, or NULL (return_token_ids) */
    int n_token_ids;        /**< their count */
} ServeChoiceView;

/** What every response of one request shares. */
typedef struct {
    ServeKind kind;          /**< the endpoint */
    const char *id;          /**< "cmpl-N" or "chatcmpl-N" */
    long long created;       /**< Unix time */
    const char *model;       /**< the served name */
    int prompt_tokens;       /**< for usage */
    int completion_tokens;   /**< for usage */
} ServeResponseHead;

/**
 * The whole non-streaming response (`text_completion` or `chat.completion`).
 * @param h        the head
 * @param choices  [n] the choices
 * @param n        their count
 * @return malloc'ed JSON, or NULL when memory runs out
 */
char *serve_response_json(const ServeResponseHead *h, const ServeChoiceView *choices, int n);

/**
 * One streaming chunk of choice @p index: its new text (a chat's first
 * chunk also carries the assistant's role) or, with @p c->finish, its
 * finish reason.
 * @param h       the head
 * @param index   the choice
 * @param c       the new text and finish (token_ids: the new tokens)
 * @param first   1 for the choice's first chunk
 * @return malloc'ed JSON, or NULL when memory runs out
 */
char *serve_chunk_json(const ServeResponseHead *h, int index, const ServeChoiceView *c, int first);

/**
 * The last chunk of a stream with stream_options.include_usage: no
 * choices, the token counts.
 * @param h  the head
 * @return malloc'ed JSON, or NULL when memory runs out
 */
char *serve_usage_chunk_json(const ServeResponseHead *h);

/**
 * GET /v1/models: the one model served.
 * @param model        its name
 * @param created      Unix time the server started
 * @param max_model_len  the model's context
 * @return malloc'ed JSON, or NULL when memory runs out
 */
char *serve_models_json(const char *model, long long created, int max_model_len);

#endif
