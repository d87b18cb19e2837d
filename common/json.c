#include "json.h"

#include <math.h>

void json_init(JsonWriter *j, FILE *f, int pretty)
{
    j->f = f;
    j->pretty = pretty;
    j->depth = 0;
    j->has_items[0] = 0;
}

static void newline_indent(JsonWriter *j)
{
    if (!j->pretty)
        return;
    fputc('\n', j->f);
    for (int i = 0; i < j->depth; i++)
        fputs("  ", j->f);
}

void json_write_escaped(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
}

/* Writes the separator and the key that precede any value. */
static void begin_value(JsonWriter *j, const char *key)
{
    if (j->depth > 0) {
        if (j->has_items[j->depth])
            fputc(',', j->f);
        j->has_items[j->depth] = 1;
        newline_indent(j);
    }
    if (key) {
        fputc('"', j->f);
        json_write_escaped(j->f, key);
        fputs(j->pretty ? "\": " : "\":", j->f);
    }
}

static void open_level(JsonWriter *j, const char *key, char bracket)
{
    begin_value(j, key);
    fputc(bracket, j->f);
    if (j->depth + 1 < JSON_MAX_DEPTH)
        j->depth++;
    j->has_items[j->depth] = 0;
}

static void close_level(JsonWriter *j, char bracket)
{
    int had = j->has_items[j->depth];
    j->depth--;
    if (had)
        newline_indent(j);
    fputc(bracket, j->f);
    if (j->depth == 0 && j->pretty)
        fputc('\n', j->f);
}

void json_begin_object(JsonWriter *j, const char *key) { open_level(j, key, '{'); }
void json_end_object(JsonWriter *j) { close_level(j, '}'); }
void json_begin_array(JsonWriter *j, const char *key) { open_level(j, key, '['); }
void json_end_array(JsonWriter *j) { close_level(j, ']'); }

void json_int(JsonWriter *j, const char *key, long long v)
{
    begin_value(j, key);
    fprintf(j->f, "%lld", v);
}

void json_double(JsonWriter *j, const char *key, double v)
{
    begin_value(j, key);
    if (isfinite(v))
        fprintf(j->f, "%.9g", v);
    else
        fputs("null", j->f);
}

void json_string(JsonWriter *j, const char *key, const char *s)
{
    begin_value(j, key);
    if (!s) {
        fputs("null", j->f);
        return;
    }
    fputc('"', j->f);
    json_write_escaped(j->f, s);
    fputc('"', j->f);
}

void json_bool(JsonWriter *j, const char *key, int v)
{
    begin_value(j, key);
    fputs(v ? "true" : "false", j->f);
}
