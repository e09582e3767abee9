/* json: strict reader and compact writer. See json.h. */
#include "json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------- */
/* Arena: the document's nodes, strings and key arrays live in a chain of chunks. */

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    /* data follows */
} chunk;

struct vs_json_doc {
    chunk *chunks;
    vs_json root;
};

static void *arena_alloc(vs_json_doc *d, size_t n) {
    n = (n + 7) & ~(size_t)7;
    chunk *c = d->chunks;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        chunk *nc = vs_malloc(sizeof(chunk) + cap);
        if (!nc) return NULL;
        nc->next = c;
        nc->used = 0;
        nc->cap = cap;
        d->chunks = nc;
        c = nc;
    }
    void *p = (char *)(c + 1) + c->used;
    c->used += n;
    return p;
}

/* ---------------------------------------------------------------------------------------------- */
/* Parser */

typedef struct parser {
    const unsigned char *p, *end, *start;
    const char *name;
    vs_json_doc *doc;
    vs_error *err;
    bool failed;
} parser;

static bool fail(parser *ps, const unsigned char *at, const char *what) {
    if (!ps->failed) {
        ps->failed = true;
        vs_error_set(ps->err, VS_ERR_FORMAT, "%s: invalid JSON at byte %zu: %s", ps->name ? ps->name : "json",
                     (size_t)(at - ps->start), what);
    }
    return false;
}

static bool oom(parser *ps) {
    if (!ps->failed) {
        ps->failed = true;
        vs_error_set(ps->err, VS_ERR_NOMEM, "%s: out of memory while parsing JSON", ps->name ? ps->name : "json");
    }
    return false;
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool read_hex4(parser *ps, uint32_t *out) {
    if (ps->end - ps->p < 4) return fail(ps, ps->p, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(ps->p[i]);
        if (h < 0) return fail(ps, ps->p + i, "bad hex digit in \\u escape");
        v = v * 16 + (uint32_t)h;
    }
    ps->p += 4;
    *out = v;
    return true;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses a string at ps->p (which points at the opening quote). The decoded form is never longer
 * than the escaped form, so one arena allocation of the raw length suffices. */
static bool parse_string(parser *ps, const char **out, size_t *out_len) {
    const unsigned char *q = ps->p + 1;
    /* find the closing quote to size the buffer */
    const unsigned char *e = q;
    while (e < ps->end && *e != '"') {
        if (*e == '\\') e++;
        e++;
    }
    if (e >= ps->end) return fail(ps, ps->p, "unterminated string");
    char *buf = arena_alloc(ps->doc, (size_t)(e - q) + 1);
    if (!buf) return oom(ps);
    size_t n = 0;
    ps->p = q;
    while (ps->p < e) {
        unsigned char c = *ps->p;
        if (c < 0x20) return fail(ps, ps->p, "control character in string");
        if (c == '\\') {
            ps->p++;
            unsigned char x = *ps->p++;
            switch (x) {
            case '"': buf[n++] = '"'; break;
            case '\\': buf[n++] = '\\'; break;
            case '/': buf[n++] = '/'; break;
            case 'b': buf[n++] = '\b'; break;
            case 'f': buf[n++] = '\f'; break;
            case 'n': buf[n++] = '\n'; break;
            case 'r': buf[n++] = '\r'; break;
            case 't': buf[n++] = '\t'; break;
            case 'u': {
                uint32_t cp;
                if (!read_hex4(ps, &cp)) return false;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(ps, ps->p - 6, "lone low surrogate");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (e - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u')
                        return fail(ps, ps->p, "high surrogate without a low surrogate");
                    ps->p += 2;
                    uint32_t lo;
                    if (!read_hex4(ps, &lo)) return false;
                    if (lo < 0xDC00 || lo > 0xDFFF) return fail(ps, ps->p - 6, "bad low surrogate");
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                n += put_utf8(buf + n, cp);
                break;
            }
            default: return fail(ps, ps->p - 1, "bad escape");
            }
            continue;
        }
        int l = vs_utf8_valid_len(ps->p, (size_t)(e - ps->p));
        if (!l) return fail(ps, ps->p, "invalid UTF-8 in string");
        memcpy(buf + n, ps->p, (size_t)l);
        n += (size_t)l;
        ps->p += l;
    }
    buf[n] = 0;
    ps->p = e + 1;
    *out = buf;
    *out_len = n;
    return true;
}

static bool parse_number(parser *ps, vs_json *v) {
    const unsigned char *s = ps->p, *p = ps->p;
    bool neg = false, is_int = true;
    if (p < ps->end && *p == '-') neg = true, p++;
    if (p >= ps->end) return fail(ps, s, "truncated number");
    if (*p == '0') {
        p++;
        if (p < ps->end && *p >= '0' && *p <= '9') return fail(ps, p, "leading zero in number");
    } else if (*p >= '1' && *p <= '9') {
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    } else {
        return fail(ps, p, "bad number");
    }
    if (p < ps->end && *p == '.') {
        is_int = false;
        p++;
        if (p >= ps->end || *p < '0' || *p > '9') return fail(ps, p, "digit expected after '.'");
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < ps->end && (*p == 'e' || *p == 'E')) {
        is_int = false;
        p++;
        if (p < ps->end && (*p == '+' || *p == '-')) p++;
        if (p >= ps->end || *p < '0' || *p > '9') return fail(ps, p, "digit expected in exponent");
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    size_t n = (size_t)(p - s);
    char small[64];
    char *tmp = n < sizeof(small) ? small : vs_malloc(n + 1);
    if (!tmp) return oom(ps);
    memcpy(tmp, s, n);
    tmp[n] = 0;
    v->type = VS_JSON_NUMBER;
    v->num = strtod(tmp, NULL);
    if (tmp != small) vs_free(tmp);
    if (!isfinite(v->num)) return fail(ps, s, "number out of range");
    v->is_int = false;
    if (is_int) {
        /* exact int64 parse with overflow check */
        uint64_t acc = 0;
        bool ok = true;
        for (const unsigned char *d = s + (neg ? 1 : 0); d < p; d++) {
            uint64_t dig = (uint64_t)(*d - '0');
            if (acc > (UINT64_MAX - dig) / 10) {
                ok = false;
                break;
            }
            acc = acc * 10 + dig;
        }
        if (ok && !neg && acc <= (uint64_t)INT64_MAX) v->is_int = true, v->i = (int64_t)acc;
        else if (ok && neg && acc <= (uint64_t)INT64_MAX + 1) {
            v->is_int = true;
            v->i = acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc;
        }
    }
    ps->p = p;
    return true;
}

static bool match_lit(parser *ps, const char *lit) {
    size_t n = strlen(lit);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, lit, n) != 0) return fail(ps, ps->p, "unexpected token");
    ps->p += n;
    return true;
}

typedef struct {
    const char *key;
    size_t len;
} keyref;

static int keyref_cmp(const void *a, const void *b) {
    const keyref *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->key, y->key, n);
    if (c) return c;
    return (x->len > y->len) - (x->len < y->len);
}

static bool parse_value(parser *ps, vs_json *v, int depth);

/* Growable temporary vectors for one container while it is parsed. */
typedef struct {
    vs_json *items;
    keyref *keys;
    size_t n, cap;
} tmpvec;

static bool tmp_push(parser *ps, tmpvec *t, bool with_keys) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 8;
        vs_json *ni = vs_realloc(t->items, cap * sizeof(vs_json));
        if (!ni) return oom(ps);
        t->items = ni;
        if (with_keys) {
            keyref *nk = vs_realloc(t->keys, cap * sizeof(keyref));
            if (!nk) return oom(ps);
            t->keys = nk;
        }
        t->cap = cap;
    }
    memset(&t->items[t->n], 0, sizeof(vs_json));
    t->n++;
    return true;
}

static bool finish_container(parser *ps, vs_json *v, tmpvec *t, bool with_keys) {
    v->len = t->n;
    v->items = NULL;
    v->keys = NULL;
    if (t->n) {
        v->items = arena_alloc(ps->doc, t->n * sizeof(vs_json));
        if (!v->items) return oom(ps);
        memcpy(v->items, t->items, t->n * sizeof(vs_json));
        if (with_keys) {
            const char **k = arena_alloc(ps->doc, t->n * sizeof(char *));
            if (!k) return oom(ps);
            for (size_t i = 0; i < t->n; i++) k[i] = t->keys[i].key;
            v->keys = k;
            /* duplicate keys: sort a copy and compare neighbours (O(n log n)) */
            qsort(t->keys, t->n, sizeof(keyref), keyref_cmp);
            for (size_t i = 1; i < t->n; i++)
                if (keyref_cmp(&t->keys[i - 1], &t->keys[i]) == 0) return fail(ps, ps->p, "duplicate object key");
        }
    }
    return true;
}

static bool parse_container(parser *ps, vs_json *v, int depth, bool obj) {
    if (depth >= VS_JSON_MAX_DEPTH) return fail(ps, ps->p, "nesting too deep");
    char close = obj ? '}' : ']';
    v->type = obj ? VS_JSON_OBJECT : VS_JSON_ARRAY;
    ps->p++; /* '{' or '[' */
    tmpvec t = {0};
    bool ok = true;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return finish_container(ps, v, &t, obj);
    }
    for (;;) {
        if (!tmp_push(ps, &t, obj)) {
            ok = false;
            break;
        }
        if (obj) {
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != '"') {
                ok = fail(ps, ps->p, "object key (string) expected");
                break;
            }
            const char *k;
            size_t kl;
            if (!parse_string(ps, &k, &kl)) {
                ok = false;
                break;
            }
            t.keys[t.n - 1] = (keyref){k, kl};
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                ok = fail(ps, ps->p, "':' expected");
                break;
            }
            ps->p++;
        }
        if (!parse_value(ps, &t.items[t.n - 1], depth + 1)) {
            ok = false;
            break;
        }
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            break;
        }
        ok = fail(ps, ps->p, obj ? "',' or '}' expected" : "',' or ']' expected");
        break;
    }
    if (ok) ok = finish_container(ps, v, &t, obj);
    vs_free(t.items);
    vs_free(t.keys);
    return ok;
}

static bool parse_value(parser *ps, vs_json *v, int depth) {
    memset(v, 0, sizeof(*v));
    skip_ws(ps);
    if (ps->p >= ps->end) return fail(ps, ps->p, "value expected");
    switch (*ps->p) {
    case '{': return parse_container(ps, v, depth, true);
    case '[': return parse_container(ps, v, depth, false);
    case '"': v->type = VS_JSON_STRING; return parse_string(ps, &v->str, &v->len);
    case 't': v->type = VS_JSON_BOOL; v->b = true; return match_lit(ps, "true");
    case 'f': v->type = VS_JSON_BOOL; v->b = false; return match_lit(ps, "false");
    case 'n': v->type = VS_JSON_NULL; return match_lit(ps, "null");
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) return parse_number(ps, v);
        return fail(ps, ps->p, "unexpected character");
    }
}

vs_json_doc *vs_json_parse(const char *text, size_t len, const char *name, vs_error *err) {
    vs_json_doc *d = vs_calloc(1, sizeof(*d));
    if (!d) {
        vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", name ? name : "json");
        return NULL;
    }
    parser ps = {(const unsigned char *)text, (const unsigned char *)text + len, (const unsigned char *)text,
                 name, d, err, false};
    bool ok = parse_value(&ps, &d->root, 0);
    if (ok) {
        skip_ws(&ps);
        if (ps.p != ps.end) ok = fail(&ps, ps.p, "trailing characters after the value");
    }
    if (!ok) {
        vs_json_doc_free(d);
        return NULL;
    }
    return d;
}

void vs_json_doc_free(vs_json_doc *d) {
    if (!d) return;
    chunk *c = d->chunks;
    while (c) {
        chunk *n = c->next;
        vs_free(c);
        c = n;
    }
    vs_free(d);
}

const vs_json *vs_json_root(const vs_json_doc *d) { return d ? &d->root : NULL; }

const vs_json *vs_json_get(const vs_json *obj, const char *key) {
    if (!obj || obj->type != VS_JSON_OBJECT || !key) return NULL;
    for (size_t i = 0; i < obj->len; i++)
        if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
    return NULL;
}

const vs_json *vs_json_at(const vs_json *arr, size_t i) {
    if (!arr || (arr->type != VS_JSON_ARRAY && arr->type != VS_JSON_OBJECT) || i >= arr->len) return NULL;
    return &arr->items[i];
}

const char *vs_json_get_str(const vs_json *obj, const char *key, const char *fallback) {
    const vs_json *v = vs_json_get(obj, key);
    return v && v->type == VS_JSON_STRING ? v->str : fallback;
}

int64_t vs_json_get_int(const vs_json *obj, const char *key, int64_t fallback) {
    const vs_json *v = vs_json_get(obj, key);
    return v && v->type == VS_JSON_NUMBER && v->is_int ? v->i : fallback;
}

double vs_json_get_num(const vs_json *obj, const char *key, double fallback) {
    const vs_json *v = vs_json_get(obj, key);
    return v && v->type == VS_JSON_NUMBER ? v->num : fallback;
}

bool vs_json_get_bool(const vs_json *obj, const char *key, bool fallback) {
    const vs_json *v = vs_json_get(obj, key);
    return v && v->type == VS_JSON_BOOL ? v->b : fallback;
}

const char *vs_json_type_name(vs_json_type t) {
    switch (t) {
    case VS_JSON_NULL: return "null";
    case VS_JSON_BOOL: return "boolean";
    case VS_JSON_NUMBER: return "number";
    case VS_JSON_STRING: return "string";
    case VS_JSON_ARRAY: return "array";
    case VS_JSON_OBJECT: return "object";
    }
    return "?";
}

/* ---------------------------------------------------------------------------------------------- */
/* Writer */

void vs_json_writer_init(vs_json_writer *w) { memset(w, 0, sizeof(*w)); }

void vs_json_writer_free(vs_json_writer *w) {
    vs_free(w->buf);
    memset(w, 0, sizeof(*w));
}

void vs_json_writer_reset(vs_json_writer *w) {
    w->len = 0;
    if (w->buf) w->buf[0] = 0;
    w->depth = 0;
    w->need_comma[0] = false;
    w->after_key = false;
    w->oom = false;
}

char *vs_json_writer_take(vs_json_writer *w, size_t *len) {
    if (len) *len = 0;
    if (w->oom) {
        vs_json_writer_free(w);
        return NULL;
    }
    char *b = w->buf ? w->buf : vs_strdup("");
    if (len && w->buf) *len = w->len;
    w->buf = NULL;
    w->len = w->cap = 0;
    vs_json_writer_reset(w);
    return b;
}

static void put(vs_json_writer *w, const char *s, size_t n) {
    if (w->oom) return;
    if (w->len + n + 1 > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n + 1) cap *= 2;
        char *nb = vs_realloc(w->buf, cap);
        if (!nb) {
            w->oom = true;
            return;
        }
        w->buf = nb;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = 0;
}

/* Comma before a value (unless right after a key or first in its container). */
static void pre_value(vs_json_writer *w) {
    if (w->after_key) {
        w->after_key = false;
        return;
    }
    if (w->need_comma[w->depth]) put(w, ",", 1);
    w->need_comma[w->depth] = true;
}

static void jw_open(vs_json_writer *w, char c) {
    pre_value(w);
    put(w, &c, 1);
    if (w->depth < VS_JSON_MAX_DEPTH) w->depth++;
    w->need_comma[w->depth] = false;
}

static void jw_close(vs_json_writer *w, char c) {
    put(w, &c, 1);
    if (w->depth > 0) w->depth--;
}

void vs_json_obj_begin(vs_json_writer *w) { jw_open(w, '{'); }
void vs_json_obj_end(vs_json_writer *w) { jw_close(w, '}'); }
void vs_json_arr_begin(vs_json_writer *w) { jw_open(w, '['); }
void vs_json_arr_end(vs_json_writer *w) { jw_close(w, ']'); }

static void put_escaped(vs_json_writer *w, const char *s, size_t n) {
    put(w, "\"", 1);
    size_t run = 0; /* bytes not needing escape, flushed in one go */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char ubuf[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(ubuf, sizeof(ubuf), "\\u%04x", c);
                esc = ubuf;
            }
        }
        if (esc) {
            if (run) put(w, s + i - run, run);
            run = 0;
            put(w, esc, strlen(esc));
        } else {
            run++;
        }
    }
    if (run) put(w, s + n - run, run);
    put(w, "\"", 1);
}

void vs_json_key(vs_json_writer *w, const char *key) {
    if (w->need_comma[w->depth]) put(w, ",", 1);
    w->need_comma[w->depth] = true;
    put_escaped(w, key, strlen(key));
    put(w, ":", 1);
    w->after_key = true;
}

void vs_json_strn(vs_json_writer *w, const char *s, size_t n) {
    pre_value(w);
    put_escaped(w, s, n);
}

void vs_json_str(vs_json_writer *w, const char *s) {
    if (!s) {
        vs_json_null(w);
        return;
    }
    vs_json_strn(w, s, strlen(s));
}

void vs_json_int(vs_json_writer *w, int64_t v) {
    char b[32];
    int n = snprintf(b, sizeof(b), "%lld", (long long)v);
    pre_value(w);
    put(w, b, (size_t)n);
}

void vs_json_num(vs_json_writer *w, double v) {
    if (!isfinite(v)) {
        vs_json_null(w);
        return;
    }
    char b[40];
    int n = 0;
    /* shortest %.*g that reads back exactly */
    for (int prec = 1; prec <= 17; prec++) {
        n = snprintf(b, sizeof(b), "%.*g", prec, v);
        if (strtod(b, NULL) == v) break;
    }
    pre_value(w);
    put(w, b, (size_t)n);
}

void vs_json_bool(vs_json_writer *w, bool v) {
    pre_value(w);
    put(w, v ? "true" : "false", v ? 4 : 5);
}

void vs_json_null(vs_json_writer *w) {
    pre_value(w);
    put(w, "null", 4);
}

void vs_json_raw(vs_json_writer *w, const char *json, size_t n) {
    pre_value(w);
    put(w, json, n);
}

void vs_json_kv_str(vs_json_writer *w, const char *key, const char *s) {
    vs_json_key(w, key);
    vs_json_str(w, s);
}
void vs_json_kv_int(vs_json_writer *w, const char *key, int64_t v) {
    vs_json_key(w, key);
    vs_json_int(w, v);
}
void vs_json_kv_num(vs_json_writer *w, const char *key, double v) {
    vs_json_key(w, key);
    vs_json_num(w, v);
}
void vs_json_kv_bool(vs_json_writer *w, const char *key, bool v) {
    vs_json_key(w, key);
    vs_json_bool(w, v);
}
