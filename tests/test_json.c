/* json: strict reader (accepts RFC 8259, rejects everything else with a located error) and the
 * writer (escaping, number forms, round trip through the reader). */
#include <string.h>

#include "json.h"
#include "testutil.h"

static vs_json_doc *parse(const char *s) {
    vs_error err = {0};
    return vs_json_parse(s, strlen(s), "t", &err);
}

static void expect_reject(const char *s, const char *why) {
    vs_error err = {0};
    vs_json_doc *d = vs_json_parse(s, strlen(s), "t", &err);
    VT_CHECK(d == NULL, "accepted invalid JSON (%s): %s", why, s);
    VT_CHECK(d != NULL || (err.code == VS_ERR_FORMAT && strstr(err.msg, "t: invalid JSON at byte")),
             "error message for %s: %s", why, err.msg);
    vs_json_doc_free(d);
}

static void expect_accept(const char *s) {
    vs_error err = {0};
    vs_json_doc *d = vs_json_parse(s, strlen(s), "t", &err);
    VT_CHECK(d != NULL, "rejected valid JSON %s: %s", s, err.msg);
    vs_json_doc_free(d);
}

int main(void) {
    /* --- accepted documents and their values --- */
    vs_json_doc *d = parse(" {\"a\": [1, -2.5, 3e2, true, false, null], \"s\": \"x\\u00e9\\ud83d\\ude00\\n\\\"\","
                           " \"big\": 9223372036854775807, \"neg\": -9223372036854775808, \"f\": 1.0,"
                           " \"o\": {}} ");
    VT_REQUIRE(d, "valid document rejected");
    const vs_json *r = vs_json_root(d);
    VT_CHECK(r->type == VS_JSON_OBJECT && r->len == 6, "root object with 6 keys");
    const vs_json *a = vs_json_get(r, "a");
    VT_CHECK(a && a->type == VS_JSON_ARRAY && a->len == 6, "array of 6");
    VT_CHECK(vs_json_at(a, 0)->is_int && vs_json_at(a, 0)->i == 1, "int 1");
    VT_CHECK(!vs_json_at(a, 1)->is_int && vs_json_at(a, 1)->num == -2.5, "-2.5");
    VT_CHECK(!vs_json_at(a, 2)->is_int && vs_json_at(a, 2)->num == 300.0, "3e2 is a number, not an int");
    VT_CHECK(vs_json_at(a, 3)->type == VS_JSON_BOOL && vs_json_at(a, 3)->b, "true");
    VT_CHECK(vs_json_at(a, 5)->type == VS_JSON_NULL, "null");
    VT_CHECK(vs_json_at(a, 6) == NULL, "out of range index gives NULL");
    const char *s = vs_json_get_str(r, "s", NULL);
    VT_CHECK(s && strcmp(s, "x\xc3\xa9\xf0\x9f\x98\x80\n\"") == 0, "escapes decoded to UTF-8: %s", s ? s : "(null)");
    VT_CHECK(vs_json_get_int(r, "big", 0) == INT64_MAX, "int64 max exact");
    VT_CHECK(vs_json_get_int(r, "neg", 0) == INT64_MIN, "int64 min exact");
    VT_CHECK(vs_json_get_int(r, "f", 7) == 7, "1.0 is not an int");
    VT_CHECK(vs_json_get_num(r, "f", 0) == 1.0, "1.0 as number");
    VT_CHECK(vs_json_get(r, "missing") == NULL && vs_json_get_str(r, "a", "fb")[0] == 'f', "fallbacks");
    vs_json_doc_free(d);

    expect_accept("0");
    expect_accept("-0.0e-0");
    expect_accept("\"\"");
    expect_accept("[[[[]]]]");
    expect_accept("\"caf\xc3\xa9\"");
    expect_accept("{\"a\":1,\"b\":{\"a\":2}}"); /* same key at different levels is fine */

    /* --- rejected documents --- */
    expect_reject("", "empty");
    expect_reject("   ", "only whitespace");
    expect_reject("[1,]", "trailing comma");
    expect_reject("{\"a\":1,}", "trailing comma in object");
    expect_reject("01", "leading zero");
    expect_reject("1.", "no digit after point");
    expect_reject(".5", "no integer part");
    expect_reject("+1", "plus sign");
    expect_reject("1e", "empty exponent");
    expect_reject("1e999", "out of double range");
    expect_reject("NaN", "NaN");
    expect_reject("[1] x", "trailing garbage");
    expect_reject("{a:1}", "unquoted key");
    expect_reject("{\"a\" 1}", "missing colon");
    expect_reject("{\"a\":1,\"a\":2}", "duplicate key");
    expect_reject("'x'", "single quotes");
    expect_reject("\"a\tb\"", "raw tab in string");
    expect_reject("\"\\x\"", "bad escape");
    expect_reject("\"\\u12\"", "short unicode escape");
    expect_reject("\"\\ud800\"", "lone high surrogate");
    expect_reject("\"\\udc00\"", "lone low surrogate");
    expect_reject("\"\xc0\x80\"", "overlong UTF-8");
    expect_reject("\"\xed\xa0\x80\"", "UTF-8 surrogate");
    expect_reject("\"\xff\"", "invalid byte");
    expect_reject("\"abc", "unterminated string");
    expect_reject("tru", "truncated literal");
    expect_reject("// c\n1", "comment");
    {
        char deep[VS_JSON_MAX_DEPTH * 2 + 8];
        int n = 0;
        for (int i = 0; i < VS_JSON_MAX_DEPTH + 1; i++) deep[n++] = '[';
        for (int i = 0; i < VS_JSON_MAX_DEPTH + 1; i++) deep[n++] = ']';
        deep[n] = 0;
        expect_reject(deep, "too deep");
    }
    {
        vs_error err = {0};
        VT_CHECK(!vs_json_parse("[1,\n 2,\n x]", 11, "file.jsonl:3", &err) && strstr(err.msg, "file.jsonl:3") &&
                     strstr(err.msg, "byte 9"),
                 "error names the input and offset: %s", err.msg);
    }
    /* a length shorter than the buffer: parse only that prefix */
    {
        vs_error err = {0};
        vs_json_doc *p = vs_json_parse("[1]garbage", 3, "t", &err);
        VT_CHECK(p != NULL, "prefix parse: %s", err.msg);
        vs_json_doc_free(p);
    }

    /* --- writer --- */
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_kv_str(&w, "t", "q\"b\\s\n\x01\xc3\xa9");
    vs_json_kv_int(&w, "i", -42);
    vs_json_kv_num(&w, "x", 0.1);
    vs_json_kv_num(&w, "inf", 1.0 / 0.0);
    vs_json_kv_bool(&w, "b", false);
    vs_json_key(&w, "arr");
    vs_json_arr_begin(&w);
    vs_json_int(&w, 1);
    vs_json_arr_begin(&w);
    vs_json_arr_end(&w);
    vs_json_obj_begin(&w);
    vs_json_obj_end(&w);
    vs_json_null(&w);
    vs_json_arr_end(&w);
    vs_json_obj_end(&w);
    size_t n;
    char *out = vs_json_writer_take(&w, &n);
    const char *want = "{\"t\":\"q\\\"b\\\\s\\n\\u0001\xc3\xa9\",\"i\":-42,\"x\":0.1,\"inf\":null,\"b\":false,"
                       "\"arr\":[1,[],{},null]}";
    VT_CHECK(out && strcmp(out, want) == 0 && n == strlen(want), "writer output:\n got %s\nwant %s", out, want);
    d = vs_json_parse(out, n, "w", NULL);
    VT_CHECK(d && strcmp(vs_json_get_str(vs_json_root(d), "t", ""), "q\"b\\s\n\x01\xc3\xa9") == 0,
             "string round trip");
    VT_CHECK(d && vs_json_get_num(vs_json_root(d), "x", 0) == 0.1, "0.1 round trip");
    vs_json_doc_free(d);
    vs_free(out);
    /* shortest round-trip numbers */
    double vals[] = {1.0 / 3.0, 1e-300, 123456789.125, -2.5e17, 5e-324};
    for (size_t k = 0; k < sizeof(vals) / sizeof(vals[0]); k++) {
        vs_json_writer_reset(&w);
        vs_json_num(&w, vals[k]);
        d = vs_json_parse(w.buf, w.len, "num", NULL);
        VT_CHECK(d && vs_json_root(d)->num == vals[k], "number %.17g round trip via %s", vals[k], w.buf);
        vs_json_doc_free(d);
    }
    vs_json_writer_free(&w);
    /* an empty writer yields an empty string */
    vs_json_writer_init(&w);
    out = vs_json_writer_take(&w, &n);
    VT_CHECK(out && n == 0 && out[0] == 0, "empty take");
    vs_free(out);
    vs_json_writer_free(&w);
    return vt_finish("json");
}
