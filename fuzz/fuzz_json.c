/* Fuzz target for the strict JSON reader: any input must parse or fail cleanly; a parsed document is
 * written back with the writer and must re-parse to an equal tree (reader/writer agree). The same
 * input is also read as a world dataset record (docs/world.md); a record that loads is run through
 * the checker, which must cope with any query the record holds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "world.h"

static void write_tree(vs_json_writer *w, const vs_json *v) {
    switch (v->type) {
    case VS_JSON_NULL: vs_json_null(w); break;
    case VS_JSON_BOOL: vs_json_bool(w, v->b); break;
    case VS_JSON_NUMBER:
        if (v->is_int) vs_json_int(w, v->i);
        else vs_json_num(w, v->num);
        break;
    case VS_JSON_STRING: vs_json_strn(w, v->str, v->len); break;
    case VS_JSON_ARRAY:
        vs_json_arr_begin(w);
        for (size_t i = 0; i < v->len; i++) write_tree(w, &v->items[i]);
        vs_json_arr_end(w);
        break;
    case VS_JSON_OBJECT:
        vs_json_obj_begin(w);
        for (size_t i = 0; i < v->len; i++) {
            vs_json_key(w, v->keys[i]);
            write_tree(w, &v->items[i]);
        }
        vs_json_obj_end(w);
        break;
    }
}

static int same(const vs_json *a, const vs_json *b) {
    if (a->type != b->type) return 0;
    switch (a->type) {
    case VS_JSON_NULL: return 1;
    case VS_JSON_BOOL: return a->b == b->b;
    case VS_JSON_NUMBER:
        if (a->is_int != b->is_int) return a->num == b->num; /* e.g. 1e2 written as 100 */
        return a->is_int ? a->i == b->i : (a->num == b->num || (a->num != a->num && b->num != b->num));
    case VS_JSON_STRING: return a->len == b->len && memcmp(a->str, b->str, a->len) == 0;
    case VS_JSON_ARRAY:
    case VS_JSON_OBJECT:
        if (a->len != b->len) return 0;
        for (size_t i = 0; i < a->len; i++) {
            if (a->type == VS_JSON_OBJECT && strcmp(a->keys[i], b->keys[i]) != 0) return 0;
            if (!same(&a->items[i], &b->items[i])) return 0;
        }
        return 1;
    }
    return 0;
}

static void world_record(const uint8_t *data, size_t size) {
    vs_error err;
    vs_world_sample s;
    if (vs_world_sample_from_json((const char *)data, size, NULL, "fuzz", &s, &err) != VS_OK) {
        if (err.msg[0] == 0) abort();
        return;
    }
    for (int t = 0; t < s.n_turns; t++) {
        char buf[128];
        vs_world_verdict v;
        vs_world_expected(&s, t, buf, sizeof(buf), &err);
        vs_world_check(&s, t, s.turns[t].assistant, &v);
        vs_world_check(&s, t, "yes no 3 red star top left LAMP K answer is", &v);
    }
    char *p = vs_world_prompt(&s, s.n_turns - 1, true);
    vs_free(p);
    size_t n;
    char *js = vs_world_sample_to_json(&s, &n);
    vs_free(js);
    vs_world_sample_clear(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    world_record(data, size);
    vs_error err;
    vs_json_doc *d = vs_json_parse((const char *)data, size, "fuzz", &err);
    if (!d) {
        if (err.msg[0] == 0) abort(); /* a failure must say why */
        return 0;
    }
    /* An object key decoded with an embedded NUL (\u0000) cannot go back through the C-string key
     * API unchanged; every other document must round-trip exactly. */
    bool nul_escape = memmem(data, size, "\\u0000", 6) != NULL;
    vs_json_writer w;
    vs_json_writer_init(&w);
    write_tree(&w, vs_json_root(d));
    size_t n;
    char *out = vs_json_writer_take(&w, &n);
    if (!out) abort();
    vs_json_doc *d2 = vs_json_parse(out, n, "fuzz-rewrite", &err);
    if (!nul_escape && (!d2 || !same(vs_json_root(d), vs_json_root(d2)))) abort();
    vs_json_doc_free(d2);
    vs_free(out);
    vs_json_writer_free(&w);
    vs_json_doc_free(d);
    return 0;
}
