/* kvlab-serve's routes over libmicrohttpd (serve_http.h). Each connection
 * has a thread of its own, so a handler may wait for the engine. */
#include "serve_http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* A stream with nothing to say for this long sends an SSE comment: it
 * keeps proxies from closing it, and finds a client that went away. */
#define KEEPALIVE_S 5.0

struct ServeHttp {
    ServeHttpConfig cfg;
    ServeEngine *engine;
    struct MHD_Daemon *daemon;
    long long started;  /* Unix time, for /v1/models */
};

/* What one request's body has brought so far. */
typedef struct {
    ServeBuf body;
    int too_big; /* 1: over the limit, the rest is dropped */
} Upload;

/* A streaming response: the job, and the events not yet sent. */
typedef struct {
    ServeEngine *engine;
    ServeJob *job;
    ServeBuf pending;
    size_t sent;  /* bytes of pending already handed to libmicrohttpd */
    int complete; /* 1: the last event is in pending */
} Stream;

/* ------------------------------------------------------------ answers */

static enum MHD_Result answer(struct MHD_Connection *conn, int status, const char *type, char *body)
{
    const char *text = body ? body : "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}";
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    free(body);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result rc = MHD_queue_response(conn, body ? (unsigned)status : 500u, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result answer_error(struct MHD_Connection *conn, const ServeError *e)
{
    return answer(conn, e->status, "application/json", serve_error_json(e));
}

static enum MHD_Result refuse(struct MHD_Connection *conn, int status, const char *fmt, const char *arg)
{
    ServeError e;
    serve_error(&e, status, NULL, fmt, arg);
    return answer_error(conn, &e);
}

/* ------------------------------------------------------------ streaming */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    Stream *s = cls;
    while (s->sent == s->pending.len) {
        if (s->complete)
            return MHD_CONTENT_READER_END_OF_STREAM;
        s->pending.len = s->sent = 0;
        int rc = serve_job_stream(s->engine, s->job, &s->pending, KEEPALIVE_S);
        if (rc < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        s->complete = rc == 1;
    }
    size_t n = s->pending.len - s->sent < max ? s->pending.len - s->sent : max;
    memcpy(buf, s->pending.data + s->sent, n);
    s->sent += n;
    return (ssize_t)n;
}

/* The response is gone: sent whole, or its client went away, which
 * cancels what is left of the job. */
static void stream_free(void *cls)
{
    Stream *s = cls;
    serve_job_release(s->engine, s->job);
    free(s->pending.data);
    free(s);
}

static enum MHD_Result answer_stream(struct MHD_Connection *conn, ServeEngine *engine, ServeJob *job)
{
    Stream *s = calloc(1, sizeof *s);
    if (!s) {
        serve_job_release(engine, job);
        return answer(conn, 500, "application/json", NULL);
    }
    s->engine = engine;
    s->job = job;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, s, stream_free);
    if (!r) {
        stream_free(s);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result rc = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}

/* ------------------------------------------------------------ routes */

static enum MHD_Result generate(ServeHttp *h, struct MHD_Connection *conn, ServeKind kind, const Upload *u)
{
    if (kind == SERVE_CHAT && !serve_engine_has_chat(h->engine))
        return refuse(conn, 400, "%s: this model has no chat template (a GGUF model with ChatML has one, e.g. "
                                 "SmolLM2-Instruct); use /v1/completions", "/v1/chat/completions");
    ServeParams p;
    ServeError e;
    ServeJob *job;
    int rc = serve_parse_request(u->body.data ? u->body.data : "", u->body.len, kind, h->cfg.model_name,
                                 serve_engine_system_message(h->engine), &p, &e);
    if (rc == 0 && serve_submit(h->engine, &p, &job, &e) == 0) {
        if (serve_job_streams(job))
            return answer_stream(conn, h->engine, job);
        int status;
        char *json = serve_job_response(h->engine, job, &status);
        serve_job_release(h->engine, job);
        return answer(conn, status, "application/json", json);
    }
    serve_params_free(&p);
    return answer_error(conn, &e);
}

static enum MHD_Result route(ServeHttp *h, struct MHD_Connection *conn, const char *url, const char *method,
                             const Upload *u)
{
    int get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    static const char *const GET_ROUTES[] = {"/health", "/v1/models", "/metrics", NULL};
    static const char *const POST_ROUTES[] = {"/v1/completions", "/v1/chat/completions", NULL};
    int is_get_route = 0, is_post_route = 0;
    for (int i = 0; GET_ROUTES[i]; i++)
        is_get_route |= strcmp(url, GET_ROUTES[i]) == 0;
    for (int i = 0; POST_ROUTES[i]; i++)
        is_post_route |= strcmp(url, POST_ROUTES[i]) == 0;
    if (!is_get_route && !is_post_route)
        return refuse(conn, 404, "no route %s (POST /v1/completions, /v1/chat/completions; GET /v1/models, /health, "
                                 "/metrics)", url);
    if ((is_get_route && !get) || (is_post_route && !post))
        return refuse(conn, 405, "%s: method not allowed", url);
    if (u->too_big) {
        char limit[64];
        snprintf(limit, sizeof limit, "%zu", h->cfg.max_body);
        return refuse(conn, 413, "the request body is larger than the server's limit of %s bytes (--max-body)",
                      limit);
    }
    if (strcmp(url, "/health") == 0)
        return answer(conn, 200, "text/plain", strdup(""));
    if (strcmp(url, "/v1/models") == 0)
        return answer(conn, 200, "application/json",
                      serve_models_json(h->cfg.model_name, h->started, serve_engine_context(h->engine)));
    if (strcmp(url, "/metrics") == 0)
        return answer(conn, 200, "text/plain; version=0.0.4", serve_engine_metrics(h->engine));
    return generate(h, conn, strcmp(url, "/v1/completions") == 0 ? SERVE_COMPLETION : SERVE_CHAT, u);
}

/* libmicrohttpd calls this once with the headers, then once per piece of
 * the body, then once more with none: the request is answered then. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *data, size_t *size, void **con_cls)
{
    (void)version;
    ServeHttp *h = cls;
    Upload *u = *con_cls;
    if (!u) {
        *con_cls = calloc(1, sizeof(Upload));
        return *con_cls ? MHD_YES : MHD_NO;
    }
    if (*size > 0) {
        if (!u->too_big && u->body.len + *size > h->cfg.max_body) {
            u->too_big = 1;
            free(u->body.data);
            u->body = (ServeBuf){0};
        }
        if (!u->too_big && serve_buf_put(&u->body, data, *size))
            return MHD_NO;
        *size = 0;
        return MHD_YES;
    }
    return route(h, conn, url, method, u);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)conn, (void)toe;
    Upload *u = *con_cls;
    if (u) {
        free(u->body.data);
        free(u);
    }
    *con_cls = NULL;
}

/* ------------------------------------------------------------ the daemon */

int serve_http_start(ServeHttp **out, const ServeHttpConfig *cfg, ServeEngine *engine, Err *err)
{
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof addr);
    struct sockaddr_in *v4 = (struct sockaddr_in *)&addr;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&addr;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD;
    if (inet_pton(AF_INET, cfg->host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)cfg->port);
    } else if (inet_pton(AF_INET6, cfg->host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)cfg->port);
        flags |= MHD_USE_IPv6;
    } else {
        return err_set(err, "--host: '%s' is not an IPv4 or IPv6 address (e.g. 127.0.0.1, 0.0.0.0, ::1)", cfg->host);
    }
    ServeHttp *h = calloc(1, sizeof *h);
    if (!h)
        return err_set(err, "out of memory");
    h->cfg = *cfg;
    h->engine = engine;
    h->started = (long long)time(NULL);
    h->daemon = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR,
                                 (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->timeout_s,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_END);
    if (!h->daemon) {
        free(h);
        return err_set(err, "cannot listen on %s port %d (in use, or not an address of this machine)", cfg->host,
                       cfg->port);
    }
    *out = h;
    return 0;
}

int serve_http_port(const ServeHttp *h)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : h->cfg.port;
}

void serve_http_stop(ServeHttp *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->daemon);
    free(h);
}
