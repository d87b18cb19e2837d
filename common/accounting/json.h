/**
 * @file json.h
 * @brief A small streaming JSON writer for reports and JSON Lines output.
 *
 * The writer tracks nesting and commas, so callers only say what to write:
 * @code
 * JsonWriter j; json_init(&j, f, 1);
 * json_begin_object(&j, NULL);
 * json_int(&j, "tokens", 42);
 * json_end_object(&j);
 * @endcode
 */
#ifndef KVLAB_JSON_H
#define KVLAB_JSON_H

#include <stdio.h>

/** Deepest nesting the writer supports. */
#define JSON_MAX_DEPTH 16

/** Writer state: the output and, per open level, whether a value was written. */
typedef struct {
    FILE *f;                   /**< where the JSON goes */
    int pretty;                /**< 1: indented, one member per line; 0: one line */
    int depth;                 /**< open objects/arrays */
    int has_items[JSON_MAX_DEPTH]; /**< per open level: 1 once a member was written (a comma comes next) */
} JsonWriter;

/**
 * Starts writing to a stream.
 * @param j       the writer
 * @param f       output stream
 * @param pretty  1 for indented output, 0 for a single line (JSON Lines)
 */
void json_init(JsonWriter *j, FILE *f, int pretty);

/**
 * Opens an object, as a member @p key of the enclosing object or, with key
 * NULL, as an array element or the top-level value.
 * @param j    the writer
 * @param key  member name, or NULL
 */
void json_begin_object(JsonWriter *j, const char *key);

/**
 * Closes the innermost object.
 * @param j  the writer
 */
void json_end_object(JsonWriter *j);

/**
 * Opens an array (see json_begin_object() for @p key).
 * @param j    the writer
 * @param key  member name, or NULL
 */
void json_begin_array(JsonWriter *j, const char *key);

/**
 * Closes the innermost array.
 * @param j  the writer
 */
void json_end_array(JsonWriter *j);

/**
 * Writes an integer member or element.
 * @param j    the writer
 * @param key  member name, or NULL inside arrays
 * @param v    value
 */
void json_int(JsonWriter *j, const char *key, long long v);

/**
 * Writes a number; non-finite values become null.
 * @param j    the writer
 * @param key  member name, or NULL inside arrays
 * @param v    value
 */
void json_double(JsonWriter *j, const char *key, double v);

/**
 * Writes a string, escaped (control characters and invalid bytes as \\u).
 * @param j    the writer
 * @param key  member name, or NULL inside arrays
 * @param s    NUL-terminated UTF-8, or NULL for null
 */
void json_string(JsonWriter *j, const char *key, const char *s);

/**
 * Writes true or false.
 * @param j    the writer
 * @param key  member name, or NULL inside arrays
 * @param v    nonzero for true
 */
void json_bool(JsonWriter *j, const char *key, int v);

/**
 * Writes a string with JSON escaping but no quotes or key (for building
 * strings piece by piece).
 * @param f  output stream
 * @param s  NUL-terminated text
 */
void json_write_escaped(FILE *f, const char *s);

#endif
