/* libFuzzer target: the request-file parser (common/serving/requests.c).
 *
 * Input: the bytes of a request file. Beyond "no crash, no leak", a parse
 * that succeeds must describe the file: at least one request, ids 0..n-1
 * in order, line numbers increasing, each max_new_tokens in range, each
 * prompt non-empty, inside the parser's copy of the text, with no newline
 * and no NUL, on a line no longer than the limit; arrivals (`@N`, `@Xs`)
 * in range, in one unit, never decreasing; and a file with a NUL byte is
 * always refused. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "requests.h"

/* Arrivals: in range, never earlier than the line before, and only in
 * the unit the file says it uses. */
static void check_arrival(const RequestFile *rf, int i)
{
    const RequestSpec *r = &rf->items[i];
    if (!(r->arrival_s >= 0 && r->arrival_s <= REQUEST_MAX_ARRIVAL_S) || r->arrival_step < 0 ||
        r->arrival_step > REQUEST_MAX_ARRIVAL_STEP)
        abort();
    if ((rf->arrivals != REQUEST_ARRIVAL_SECONDS && r->arrival_s != 0) ||
        (rf->arrivals != REQUEST_ARRIVAL_STEPS && r->arrival_step != 0))
        abort();
    if (i > 0 && (r->arrival_s < r[-1].arrival_s || r->arrival_step < r[-1].arrival_step))
        abort();
}

static void check_parsed(const RequestFile *rf, const uint8_t *data, size_t size)
{
    if (rf->count < 1 || rf->count > REQUEST_FILE_MAX_REQUESTS || memchr(data, '\0', size))
        abort();
    int last_line = 0;
    for (int i = 0; i < rf->count; i++) {
        const RequestSpec *r = &rf->items[i];
        size_t len = strlen(r->prompt);
        if (r->id != i || r->line <= last_line || r->max_new_tokens < 1 ||
            r->max_new_tokens > REQUEST_MAX_NEW_TOKENS || len == 0 || len > REQUEST_LINE_MAX_BYTES ||
            strchr(r->prompt, '\n') || r->prompt < rf->text || r->prompt + len > rf->text + size)
            abort();
        last_line = r->line;
        check_arrival(rf, i);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    RequestFile rf;
    Err err = {{0}};
    if (request_file_parse(&rf, (const char *)data, size, "fuzz.tsv", &err) == 0) {
        check_parsed(&rf, data, size);
        request_file_free(&rf);
    } else if (err.msg[0] == '\0' || strchr(err.msg, '\n')) {
        abort(); /* a refusal is one line that says why */
    }
    if (mem_live_buffers() != 0)
        abort();
    return 0;
}
