#include "requests.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"

/* Request bookkeeping is small and lives for the run: charged to
 * kv_metadata would be wrong (it is not about KV), so to activations. */
#define REQ_MEM MEM_ACTIVATIONS

static int is_blank_or_comment(const char *line)
{
    while (*line == ' ' || *line == '\t')
        line++;
    return *line == '\0' || *line == '#';
}

/* Parses one non-comment line "N<TAB>prompt" in place. */
static int parse_line(char *line, int line_no, const char *name, RequestSpec *out, Err *err)
{
    char *tab = strchr(line, '\t');
    if (!tab)
        return err_set(err, "%s:%d: expected 'max_new_tokens<TAB>prompt', found no tab", name, line_no);
    *tab = '\0';
    char *end;
    errno = 0;
    long n = strtol(line, &end, 10);
    if (end == line || *end != '\0' || errno)
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

int request_file_parse(RequestFile *rf, const char *text, size_t len, const char *name, Err *err)
{
    memset(rf, 0, sizeof *rf);
    if (memchr(text, '\0', len))
        return err_set(err, "%s: contains a NUL byte; not a text file", name);
    rf->text = mem_alloc(REQ_MEM, len + 1);
    size_t max_lines = 1;
    for (size_t i = 0; i < len; i++)
        max_lines += text[i] == '\n';
    rf->items = mem_alloc_array(REQ_MEM, max_lines, sizeof(RequestSpec));
    if (!rf->text || !rf->items) {
        request_file_free(rf);
        return err_set(err, "%s: out of memory", name);
    }
    memcpy(rf->text, text, len);
    char *line = rf->text;
    for (int line_no = 1; line && *line; line_no++) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        size_t l = strlen(line);
        if (l > 0 && line[l - 1] == '\r')
            line[l - 1] = '\0'; /* files written on Windows */
        if (!is_blank_or_comment(line)) {
            RequestSpec *r = &rf->items[rf->count];
            if (parse_line(line, line_no, name, r, err)) {
                request_file_free(rf);
                return -1;
            }
            r->id = rf->count++;
        }
        line = next;
    }
    if (rf->count == 0) {
        request_file_free(rf);
        return err_set(err, "%s: no requests (every line is blank or a comment)", name);
    }
    return 0;
}

int request_file_load(RequestFile *rf, const char *path, Err *err)
{
    memset(rf, 0, sizeof *rf);
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(err, "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            char *bigger = realloc(buf, cap = 2 * cap + 4096);
            if (!bigger) {
                free(buf);
                fclose(f);
                return err_set(err, "%s: out of memory", path);
            }
            buf = bigger;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    int read_error = ferror(f);
    fclose(f);
    int rc = read_error ? err_set(err, "%s: cannot read (is it a directory?)", path)
                        : request_file_parse(rf, buf ? buf : "", len, path, err);
    free(buf);
    return rc;
}

void request_file_free(RequestFile *rf)
{
    mem_free(rf->items);
    mem_free(rf->text);
    memset(rf, 0, sizeof *rf);
}
