/* The JSON writer: structure, escaping, and that every document it writes
 * is valid UTF-8 whatever bytes it is given. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "suites.h"

/* Runs fn on a writer over a memory stream and returns what it wrote. */
static char *written(void (*fn)(JsonWriter *), int pretty)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    JsonWriter j;
    json_init(&j, f, pretty);
    fn(&j);
    fclose(f);
    return buf;
}

static void nested(JsonWriter *j)
{
    json_begin_object(j, NULL);
    json_int(j, "a", 1);
    json_begin_array(j, "b");
    json_int(j, NULL, 2);
    json_double(j, NULL, 0.5);
    json_bool(j, NULL, 1);
    json_string(j, NULL, NULL);
    json_end_array(j);
    json_begin_object(j, "c");
    json_end_object(j);
    json_double(j, "nan", 0.0 / 0.0);
    json_end_object(j);
}

START_TEST(structure_and_commas)
{
    char *s = written(nested, 0);
    ck_assert_str_eq(s, "{\"a\":1,\"b\":[2,0.5,true,null],\"c\":{},\"nan\":null}");
    free(s);
}
END_TEST

static void strings(JsonWriter *j)
{
    json_begin_array(j, NULL);
    json_string(j, NULL, "quote \" backslash \\ newline \n tab \t bell \a");
    json_string(j, NULL, "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80");   /* valid UTF-8 passes through */
    json_string(j, NULL, "latin-1 caf\xe9 end");                                   /* a lone 0xE9 */
    json_string(j, NULL, "cut \xe6\x97");                                          /* a sequence cut short */
    json_string(j, NULL, "overlong \xc0\xaf surrogate \xed\xa0\x80 big \xf5\x80\x80\x80");
    json_end_array(j);
}

START_TEST(escapes_and_invalid_utf8)
{
    char *s = written(strings, 0);
    ck_assert_str_eq(s, "[\"quote \\\" backslash \\\\ newline \\n tab \\t bell \\u0007\","
                        "\"caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80\","
                        "\"latin-1 caf\\ufffd end\","
                        "\"cut \\ufffd\\ufffd\","
                        "\"overlong \\ufffd\\ufffd surrogate \\ufffd\\ufffd\\ufffd big \\ufffd\\ufffd\\ufffd\\ufffd\"]");
    free(s);
}
END_TEST

START_TEST(pretty_output_ends_in_newline)
{
    char *s = written(nested, 1);
    ck_assert_msg(strstr(s, "\n  \"a\": 1,\n") != NULL, "%s", s);
    ck_assert(s[strlen(s) - 1] == '\n');
    free(s);
}
END_TEST

Suite *suite_json(void)
{
    Suite *s = suite_create("json");
    TCase *tc = tcase_create("json");
    tcase_add_test(tc, structure_and_commas);
    tcase_add_test(tc, escapes_and_invalid_utf8);
    tcase_add_test(tc, pretty_output_ends_in_newline);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(json)
