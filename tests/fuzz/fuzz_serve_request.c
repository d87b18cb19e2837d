/* libFuzzer target: kvlab-serve's request-body parser
 * (tools/serve/serve_api.c, serve_parse_request()) on any bytes, at both
 * endpoints, and the JSON it writes back.
 *
 * Input: the first byte picks the endpoint (even: completions, odd:
 * chat), the rest is the body.
 *
 * Beyond "no crash, no leak, no sanitizer report": an accepted body gives
 * a request inside the documented ranges (a prompt, 1 <= n <= 16, at most
 * four non-empty stop strings, temperature in [0, 2], top_p in (0, 1]); a
 * refused one gives a 4xx status and a message; and every answer written
 * from it (the error object, a response and a chunk whose text is the
 * prompt's arbitrary bytes) is valid JSON that jansson reads back. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve_api.h"

/* JSON written by serve_api.c must read back: proof that it is complete
 * and that any byte of a prompt was escaped or replaced. */
static void must_parse(char *json)
{
    if (!json)
        abort();
    json_t *v = json_loads(json, 0, NULL);
    if (!v)
        abort();
    json_decref(v);
    free(json);
}

static void check_accepted(const ServeParams *p)
{
    if (!p->prompt || p->n < 1 || p->n > SERVE_MAX_N || p->n_stop < 0 || p->n_stop > SERVE_MAX_STOP ||
        p->max_tokens < 0)
        abort();
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0])
            abort();
    if ((p->has_temperature && !(p->temperature >= 0.0f && p->temperature <= 2.0f)) ||
        (p->has_top_p && !(p->top_p > 0.0f && p->top_p <= 1.0f)))
        abort();
    ServeResponseHead h = {.kind = p->kind, .id = "cmpl-1", .created = 1, .model = "m", .prompt_tokens = 1};
    ServeChoiceView c = {.text = p->prompt, .len = strlen(p->prompt), .finish = "stop"};
    must_parse(serve_response_json(&h, &c, 1));
    c.finish = NULL;
    must_parse(serve_chunk_json(&h, 0, &c, 1));
    must_parse(serve_usage_chunk_json(&h));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    ServeKind kind = data[0] % 2 ? SERVE_CHAT : SERVE_COMPLETION;
    ServeParams p;
    ServeError e;
    if (serve_parse_request((const char *)data + 1, size - 1, kind, "m", kind == SERVE_CHAT ? "Be brief." : NULL, &p,
                            &e) == 0) {
        check_accepted(&p);
    } else {
        if (e.status < 400 || e.status > 599 || !e.message[0])
            abort();
        must_parse(serve_error_json(&e));
    }
    serve_params_free(&p);
    return 0;
}
