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

/* Length of the well-formed UTF-8 sequence at p (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF), or 0 if it is not one. */
static int utf8_sequence_length(const unsigned char *p)
{
    if (p[0] < 0x80)
        return 1;
    int n = p[0] >= 0xC2 && p[0] <= 0xDF ? 2 : p[0] >= 0xE0 && p[0] <= 0xEF ? 3 : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4 : 0;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (p[0] == 0xE0) lo = 0xA0;
    if (p[0] == 0xED) hi = 0x9F;
    if (p[0] == 0xF0) lo = 0x90;
    if (p[0] == 0xF4) hi = 0x8F;
    if (n == 0 || p[1] < lo || p[1] > hi)
        return 0;
    for (int i = 2; i < n; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

void json_write_escaped(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20) {
                fprintf(f, "\\u%04x", *p);
                break;
            }
            /* JSON is UTF-8: a byte that starts no valid sequence (a Latin-1
             * request file, a token cut mid-character) becomes U+FFFD
             * rather than making the whole document invalid. */
            int n = utf8_sequence_length(p);
            if (n == 0) {
                fputs("\\ufffd", f);
                p++;
            } else {
                fwrite(p, 1, (size_t)n, f);
                p += (size_t)n;
            }
            continue;
        }
        p++;
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
