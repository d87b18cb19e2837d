#include "requests.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infile.h"
#include "mem.h"
#include "parse.h"

/* Request bookkeeping is small and lives for the run: charged to
 * kv_metadata would be wrong (it is not about KV), so to activations. */
#define REQ_MEM MEM_ACTIVATIONS

static int is_blank_or_comment(const char *line)
{
    while (*line == ' ' || *line == '\t')
        line++;
    return *line == '\0' || *line == '#';
}

/* An arrival field "@N" (a step) or "@Xs" (seconds), without its '@'. */
static int parse_arrival(const char *text, int line_no, const char *name, RequestSpec *out,
                         RequestArrivalKind *kind, Err *err)
{
    size_t len = strlen(text);
    char number[64];
    if (len > 1 && text[len - 1] == 's' && len - 1 < sizeof number) {
        memcpy(number, text, len - 1);
        number[len - 1] = '\0';
        *kind = REQUEST_ARRIVAL_SECONDS;
        if (parse_double(number, 0.0, REQUEST_MAX_ARRIVAL_S, &out->arrival_s, NULL) == 0)
            return 0;
    } else {
        *kind = REQUEST_ARRIVAL_STEPS;
        if (parse_long(text, 0, REQUEST_MAX_ARRIVAL_STEP, &out->arrival_step, NULL) == 0)
            return 0;
    }
    return err_set(err, "%s:%d: the arrival '@%.40s' is not @SECONDSs (0 to %.0f, e.g. @1.25s) or @STEP (0 to %ld)",
                   name, line_no, text, REQUEST_MAX_ARRIVAL_S, REQUEST_MAX_ARRIVAL_STEP);
}

/* Cuts off and parses a leading "@arrival<TAB>" field; @p line then starts
 * at the rest. */
static int take_arrival(char **line, int line_no, const char *name, RequestSpec *out, RequestArrivalKind *kind,
                        Err *err)
{
    *kind = REQUEST_ARRIVAL_NONE;
    if ((*line)[0] != '@')
        return 0;
    char *tab = strchr(*line, '\t');
    if (!tab)
        return err_set(err, "%s:%d: expected '@ARRIVAL<TAB>max_new_tokens<TAB>prompt', found no tab", name, line_no);
    *tab = '\0';
    if (parse_arrival(*line + 1, line_no, name, out, kind, err))
        return -1;
    *line = tab + 1;
    return 0;
}

/* Parses one non-comment line "[@arrival<TAB>]N<TAB>prompt" in place. */
static int parse_line(char *line, int line_no, const char *name, RequestSpec *out, RequestArrivalKind *kind,
                      Err *err)
{
    if (take_arrival(&line, line_no, name, out, kind, err))
        return -1;
    char *tab = strchr(line, '\t');
    if (!tab)
        return err_set(err, "%s:%d: expected 'max_new_tokens<TAB>prompt', found no tab", name, line_no);
    *tab = '\0';
    long n;
    /* Strictly digits (parse_long): " 5", "+5" and "5x" are typos, not 5. */
    if (parse_long(line, LONG_MIN, LONG_MAX, &n, NULL))
        return err_set(err, "%s:%d: max_new_tokens '%.40s' is not a whole number", name, line_no, line);
    if (n < 1 || n > REQUEST_MAX_NEW_TOKENS)
        return err_set(err, "%s:%d: max_new_tokens %ld is outside 1..%d", name, line_no, n, REQUEST_MAX_NEW_TOKENS);
    const char *prompt = tab + 1;
    if (prompt[0] == '\0')
        return err_set(err, "%s:%d: the prompt is empty", name, line_no);
    out->line = line_no;
    out->max_new_tokens = (int)n;
    out->prompt = prompt;
    return 0;
}

/* Arrivals follow file order, in one unit per file: the queue is first
 * come, first served in file order. @p r is the line just read, @p prev
 * the one before (NULL for the first). */
static int check_arrival(RequestFile *rf, const RequestSpec *r, const RequestSpec *prev, RequestArrivalKind kind,
                         const char *name, Err *err)
{
    if (kind != REQUEST_ARRIVAL_NONE) {
        if (rf->arrivals != REQUEST_ARRIVAL_NONE && rf->arrivals != kind)
            return err_set(err, "%s:%d: an arrival in %s, after arrivals in %s: a file gives them in one unit", name,
                           r->line, kind == REQUEST_ARRIVAL_STEPS ? "steps" : "seconds",
                           kind == REQUEST_ARRIVAL_STEPS ? "seconds" : "steps");
        rf->arrivals = kind;
    }
    if (prev && (r->arrival_step < prev->arrival_step || r->arrival_s < prev->arrival_s))
        return err_set(err, "%s:%d: arrives before line %d: arrivals follow file order (a line without @ arrives at "
                       "the start)", name, r->line, prev->line);
    return 0;
}

/* Room for the requests of text: one per line, at most the file limit
 * (plus one, so that going over it is noticed, not written past). */
static size_t request_capacity(const char *text, size_t len)
{
    size_t lines = 1;
    for (const char *p = text; (p = memchr(p, '\n', len - (size_t)(p - text))) != NULL; p++)
        if (++lines > REQUEST_FILE_MAX_REQUESTS)
            break;
    return lines;
}

/* Cuts text (len bytes plus a NUL, owned by rf from now on) into requests,
 * in one pass: each line is found with memchr from where the last ended. */
static int parse_text(RequestFile *rf, char *text, size_t len, const char *name, Err *err)
{
    rf->text = text;
    if (len > REQUEST_FILE_MAX_BYTES)
        return err_set(err, "%s: %zu bytes is more than the limit of %u bytes", name, len, REQUEST_FILE_MAX_BYTES);
    if (memchr(text, '\0', len))
        return err_set(err, "%s: contains a NUL byte; not a text file", name);
    size_t capacity = request_capacity(text, len);
    rf->items = mem_alloc_array(REQ_MEM, capacity, sizeof(RequestSpec));
    if (!rf->items)
        return err_set(err, "%s: out of memory", name);
    char *line = text, *end = text + len;
    for (int line_no = 1; line < end; line_no++) {
        char *next = memchr(line, '\n', (size_t)(end - line));
        size_t l = next ? (size_t)(next - line) : (size_t)(end - line);
        if (l > REQUEST_LINE_MAX_BYTES)
            return err_set(err, "%s:%d: the line is %zu bytes, more than the limit of %u", name, line_no, l,
                           REQUEST_LINE_MAX_BYTES);
        line[l] = '\0';
        if (l > 0 && line[l - 1] == '\r')
            line[l - 1] = '\0'; /* files written on Windows */
        if (!is_blank_or_comment(line)) {
            if (rf->count == REQUEST_FILE_MAX_REQUESTS)
                return err_set(err, "%s:%d: more than %d requests in one file", name, line_no,
                               REQUEST_FILE_MAX_REQUESTS);
            RequestSpec *r = &rf->items[rf->count];
            RequestArrivalKind kind;
            if (parse_line(line, line_no, name, r, &kind, err) ||
                check_arrival(rf, r, rf->count > 0 ? r - 1 : NULL, kind, name, err))
                return -1;
            r->id = rf->count++;
        }
        line += l + 1;
    }
    if (rf->count == 0)
        return err_set(err, "%s: no requests (every line is blank or a comment)", name);
    return 0;
}

int request_file_parse(RequestFile *rf, const char *text, size_t len, const char *name, Err *err)
{
    memset(rf, 0, sizeof *rf);
    char *copy = mem_alloc(REQ_MEM, len + 1);
    if (!copy)
        return err_set(err, "%s: out of memory", name);
    memcpy(copy, text, len);
    if (parse_text(rf, copy, len, name, err)) {
        request_file_free(rf);
        return -1;
    }
    return 0;
}

int request_file_load(RequestFile *rf, const char *path, Err *err)
{
    memset(rf, 0, sizeof *rf);
    size_t len;
    int fd = infile_open(path, REQUEST_FILE_MAX_BYTES, &len, err);
    if (fd < 0)
        return -1;
    char *text = mem_alloc(REQ_MEM, len + 1); /* zeroed: text[len] ends the last line */
    int rc = !text ? err_set(err, "%s: out of memory", path) : infile_read_exact(fd, text, len, path, err);
    close(fd);
    if (rc == 0) {
        rc = parse_text(rf, text, len, path, err);
        text = NULL; /* rf owns it now */
    }
    if (rc) {
        mem_free(text);
        request_file_free(rf);
    }
    return rc;
}

void request_file_free(RequestFile *rf)
{
    mem_free(rf->items);
    mem_free(rf->text);
    memset(rf, 0, sizeof *rf);
}
