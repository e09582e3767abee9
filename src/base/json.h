/* json: a small strict JSON (RFC 8259) reader and a compact writer, for JSON Lines datasets, reports
 * and requests.
 * Owns: the parsed document (a tree of vs_json nodes in one arena, freed with the document) and the
 * writer's growing buffer.
 * Reader: rejects everything RFC 8259 does not allow (comments, trailing commas, leading zeros, bare
 * control characters in strings, invalid UTF-8, lone surrogates in \u escapes, duplicate object keys,
 * trailing garbage) and nesting deeper than VS_JSON_MAX_DEPTH; errors name the input and the byte
 * offset. Strings are decoded to UTF-8 and NUL-terminated (they may contain NUL from \u0000: use len).
 * Writer: compact output (no spaces, one line), escapes control characters, '"' and '\\'; the caller
 * writes valid UTF-8 (bytes are copied as is). */
#ifndef VS_JSON_H
#define VS_JSON_H

#include "common.h"

#define VS_JSON_MAX_DEPTH 256

typedef enum vs_json_type {
    VS_JSON_NULL = 0,
    VS_JSON_BOOL,
    VS_JSON_NUMBER,
    VS_JSON_STRING,
    VS_JSON_ARRAY,
    VS_JSON_OBJECT,
} vs_json_type;

typedef struct vs_json vs_json;
struct vs_json {
    vs_json_type type;
    bool b;           /* BOOL */
    double num;       /* NUMBER (as strtod reads it) */
    bool is_int;      /* NUMBER written without fraction/exponent and exactly representable in int64 */
    int64_t i;        /* NUMBER when is_int */
    const char *str;  /* STRING: decoded, NUL-terminated */
    size_t len;       /* STRING: bytes; ARRAY / OBJECT: element count */
    vs_json *items;   /* ARRAY / OBJECT: elements [len] */
    const char **keys; /* OBJECT: keys [len] (decoded, NUL-terminated), in input order */
};

typedef struct vs_json_doc vs_json_doc;

/* Parses text[0..len) (need not be NUL-terminated). `name` is used in error messages. */
vs_json_doc *vs_json_parse(const char *text, size_t len, const char *name, vs_error *err);
void vs_json_doc_free(vs_json_doc *d);
const vs_json *vs_json_root(const vs_json_doc *d);

/* Lookups; all accept NULL and return NULL / the fallback when absent or of another type. */
const vs_json *vs_json_get(const vs_json *obj, const char *key);
const vs_json *vs_json_at(const vs_json *arr, size_t i);
const char *vs_json_get_str(const vs_json *obj, const char *key, const char *fallback);
int64_t vs_json_get_int(const vs_json *obj, const char *key, int64_t fallback);
double vs_json_get_num(const vs_json *obj, const char *key, double fallback);
bool vs_json_get_bool(const vs_json *obj, const char *key, bool fallback);
const char *vs_json_type_name(vs_json_type t);

/* --- writer --- */
typedef struct vs_json_writer {
    char *buf;         /* NUL-terminated output so far (vs_malloc'd) */
    size_t len, cap;
    int depth;
    bool need_comma[VS_JSON_MAX_DEPTH + 1];
    bool after_key;
    bool oom;          /* an allocation failed: output is incomplete */
} vs_json_writer;

void vs_json_writer_init(vs_json_writer *w);
void vs_json_writer_free(vs_json_writer *w);
void vs_json_writer_reset(vs_json_writer *w); /* empties the buffer, keeps its memory */
/* Hands the buffer to the caller (vs_free it); the writer is empty afterwards. NULL if oom. */
char *vs_json_writer_take(vs_json_writer *w, size_t *len);

void vs_json_obj_begin(vs_json_writer *w);
void vs_json_obj_end(vs_json_writer *w);
void vs_json_arr_begin(vs_json_writer *w);
void vs_json_arr_end(vs_json_writer *w);
void vs_json_key(vs_json_writer *w, const char *key);
void vs_json_str(vs_json_writer *w, const char *s);
void vs_json_strn(vs_json_writer *w, const char *s, size_t n);
void vs_json_int(vs_json_writer *w, int64_t v);
void vs_json_num(vs_json_writer *w, double v); /* shortest round-trip form; NaN/inf -> null */
void vs_json_bool(vs_json_writer *w, bool v);
void vs_json_null(vs_json_writer *w);
/* Key + value shorthands. */
void vs_json_kv_str(vs_json_writer *w, const char *key, const char *s);
void vs_json_kv_int(vs_json_writer *w, const char *key, int64_t v);
void vs_json_kv_num(vs_json_writer *w, const char *key, double v);
void vs_json_kv_bool(vs_json_writer *w, const char *key, bool v);
/* Appends an already-serialised JSON value verbatim (caller guarantees it is valid). */
void vs_json_raw(vs_json_writer *w, const char *json, size_t n);

#endif
