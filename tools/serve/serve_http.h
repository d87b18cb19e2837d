/**
 * @file serve_http.h
 * @brief kvlab-serve's network side: libmicrohttpd, one thread per
 *        connection, the OpenAI routes on top of serve_engine.h.
 *
 * | route | answer |
 * |---|---|
 * | POST /v1/completions | a completion, or with `"stream": true` Server-Sent Events in OpenAI's chunk format ending with `data: [DONE]` |
 * | POST /v1/chat/completions | the same for a conversation in the model's chat template |
 * | GET /v1/models | the one model served |
 * | GET /health | 200 while the server serves |
 * | GET /metrics | Prometheus text (serve_metrics.h) |
 *
 * Every refusal is OpenAI's error object with its status: 400 for a bad
 * body or a prompt too long, 404 for an unknown route or model, 405 for a
 * wrong method, 413 for a body over the limit, 503 when too many requests
 * wait or the server is shutting down.
 */
#ifndef KVLAB_SERVE_HTTP_H
#define KVLAB_SERVE_HTTP_H

#include <stddef.h>

#include "err.h"
#include "serve_engine.h"

/** The HTTP side's settings. */
typedef struct {
    const char *host;     /**< address to bind (an IPv4 or IPv6 literal) */
    int port;             /**< port; 0: any free one (serve_http_port() says which) */
    size_t max_body;      /**< largest request body, bytes */
    int timeout_s;        /**< a connection idle this long is closed */
    int max_connections;  /**< connections at once (one thread each) */
    const char *model_name; /**< the name served */
} ServeHttpConfig;

/** The HTTP server: its settings, the engine, libmicrohttpd's daemon (serve_http.c). */
typedef struct ServeHttp ServeHttp;

/**
 * Binds and starts serving.
 * @param h       receives the server
 * @param cfg     the settings
 * @param engine  the engine (started)
 * @param err     receives the reason on failure (address in use, bad host)
 * @return 0 on success, -1 on failure
 */
int serve_http_start(ServeHttp **h, const ServeHttpConfig *cfg, ServeEngine *engine, Err *err);

/**
 * The port bound.
 * @param h  the server
 * @return the port
 */
int serve_http_port(const ServeHttp *h);

/**
 * Stops accepting, waits for every connection's thread to end (their
 * jobs must have been failed first: serve_engine_stop()) and frees.
 * @param h  the server, or NULL
 */
void serve_http_stop(ServeHttp *h);

#endif
