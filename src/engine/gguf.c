/* gguf: reading and writing GGUF files. See gguf.h.
 *
 * Reader: one forward pass over the bytes with a cursor that checks every read against the bytes left
 * BEFORE it happens (lengths and counts are compared by division, never by a sum that could wrap).
 * Nothing is allocated in proportion to a count read from the file before the entries behind that
 * count have actually been parsed, so a lying header costs nothing. After the pass: hash indexes for
 * keys and tensor names (duplicates are errors), general.alignment, then every tensor's size, offset,
 * alignment and overlap.
 *
 * Writer: keys and tensors are kept in insertion order, each metadata value already serialised
 * (the bytes after the type field), so copying a key from a reader is a memcpy of its raw span. */
#include "gguf.h"
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant.h"

#define GGUF_MAGIC_LE 0x46554747u /* "GGUF" read as a little-endian u32 */
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_DIMS 4
#define GGUF_NAME_MAX 64 /* tensor names are < 64 bytes */
#define GGUF_HEADER_BYTES 24
/* Smallest possible encodings, used to bound counts by the bytes left before allocating anything. */
#define GGUF_MIN_KV_BYTES 13     /* u64 key length + 1 key byte + i32 type + 1 value byte */
#define GGUF_MIN_TENSOR_BYTES 33 /* u64 name length + 1 + u32 n_dims + one i64 + i32 type + u64 offset */

/* ---------------------------------------------------------------------------------------------- */
/* ggml type table (sizes of every ggml type id a GGUF file may hold, facts from ggml's traits).  */

typedef struct ggml_type_info {
    const char *name;
    int64_t blck;  /* values per block */
    uint32_t size; /* bytes per block */
} ggml_type_info;

static const ggml_type_info ggml_types[] = {
    [0] = {"F32", 1, 4},         [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},      [6] = {"Q5_0", 32, 22},      [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},      [9] = {"Q8_1", 32, 36},      [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},   [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74},  [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},   [21] = {"IQ3_S", 256, 110},  [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},         [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},        [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},   [30] = {"BF16", 1, 2},       [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},   [39] = {"MXFP4", 32, 17},
};

static const ggml_type_info *ggml_type_get(int type) {
    if (type < 0 || (size_t)type >= VS_ARRAY_LEN(ggml_types) || !ggml_types[type].name) return NULL;
    return &ggml_types[type];
}

/* The types vlmspec computes with: quant.h's vs_type values. Kept here (not vs_type_supported) so the
 * reader does not link against quant.c; keep in step with quant.h when a type is added there. */
static bool computable_type(int type) {
    switch (type) {
    case VS_TYPE_F32: case VS_TYPE_F16: case VS_TYPE_BF16: case VS_TYPE_Q8_0: case VS_TYPE_Q4_0: return true;
    case VS_TYPE_Q4_K: case VS_TYPE_Q5_K: case VS_TYPE_Q6_K: return true;
    default: return false;
    }
}

const char *vs_gguf_ggml_type_name(int type) {
    const ggml_type_info *t = ggml_type_get(type);
    return t ? t->name : "unknown";
}

/* Bytes of a tensor of this ggml type and shape; false if ne[0] is not a multiple of the block size,
 * a dimension is negative or the size overflows 64 bits. */
static bool tensor_nbytes(const ggml_type_info *t, int n_dims, const int64_t *ne, uint64_t *out) {
    int64_t n_el = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 0) return false;
        if (ne[d] != 0 && n_el > INT64_MAX / ne[d]) return false;
        n_el *= ne[d];
    }
    if (ne[0] % t->blck) return false;
    uint64_t bytes = (uint64_t)(ne[0] / t->blck) * t->size; /* < 2^63 / 1 * 292: may wrap, check */
    if (ne[0] / t->blck != 0 && bytes / t->size != (uint64_t)(ne[0] / t->blck)) return false;
    for (int d = 1; d < n_dims; d++) {
        if (ne[d] != 0 && bytes > UINT64_MAX / (uint64_t)ne[d]) return false;
        bytes *= (uint64_t)ne[d];
    }
    *out = bytes;
    return true;
}

const char *vs_gguf_kv_type_name(vs_gguf_type t) {
    static const char *const names[] = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    return (unsigned)t < VS_ARRAY_LEN(names) ? names[t] : "invalid";
}

/* Bytes of one scalar of this type; 0 for string/array/invalid. */
static size_t scalar_size(int t) {
    switch (t) {
    case VS_GGUF_U8: case VS_GGUF_I8: case VS_GGUF_BOOL: return 1;
    case VS_GGUF_U16: case VS_GGUF_I16: return 2;
    case VS_GGUF_U32: case VS_GGUF_I32: case VS_GGUF_F32: return 4;
    case VS_GGUF_U64: case VS_GGUF_I64: case VS_GGUF_F64: return 8;
    default: return 0;
    }
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; } /* callers bound x */

static uint64_t hash_bytes(const void *p, size_t n) { /* FNV-1a */
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

/* ---------------------------------------------------------------------------------------------- */
/* reader                                                                                          */

typedef struct gguf_kv {
    vs_gguf_str key;
    vs_gguf_type type;
    vs_gguf_type arr_type; /* arrays only */
    uint64_t n;            /* arrays: element count; strings: byte length */
    const uint8_t *data;   /* scalar value, string bytes, or first array element (unaligned) */
    const uint8_t *raw;    /* serialised value (the bytes after the type field) */
    uint64_t raw_size;
    uint64_t *str_off;     /* string arrays: offset from data of element j's length field, [n] */
} gguf_kv;

struct vs_gguf {
    char *name;
    const uint8_t *base; /* the file's bytes */
    size_t size;
    void *map;           /* mmap'ed region (NULL for open_memory) */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset; /* start of the tensor data section */
    int64_t n_kv;
    gguf_kv *kv;          /* [n_kv] */
    int64_t n_tensors;
    vs_gguf_tensor *tensors; /* [n_tensors] */
    int64_t *kv_slots;    /* open-addressing hash over keys: index or -1, [kv_cap] */
    uint64_t kv_cap;
    int64_t *t_slots;     /* same over tensor names, [t_cap] */
    uint64_t t_cap;
};

typedef struct reader {
    const uint8_t *b;
    size_t size, pos;
    const char *name;
    vs_error *err;
} reader;

static size_t rd_left(const reader *r) { return r->size - r->pos; }

static bool rd_need(reader *r, uint64_t n, const char *what, int64_t index) {
    if (n <= rd_left(r)) return true;
    char w[96];
    if (index >= 0) snprintf(w, sizeof(w), "%s %" PRId64, what, index);
    else snprintf(w, sizeof(w), "%s", what);
    vs_error_set(r->err, VS_ERR_FORMAT,
                 "%s: truncated or corrupt: %s at byte %zu needs %" PRIu64 " bytes, only %zu left", r->name,
                 w, r->pos, n, rd_left(r));
    return false;
}

static bool rd_bytes(reader *r, void *out, size_t n, const char *what, int64_t index) {
    if (!rd_need(r, n, what, index)) return false;
    memcpy(out, r->b + r->pos, n);
    r->pos += n;
    return true;
}

static bool rd_u32(reader *r, uint32_t *v, const char *what, int64_t i) { return rd_bytes(r, v, 4, what, i); }
static bool rd_i32(reader *r, int32_t *v, const char *what, int64_t i) { return rd_bytes(r, v, 4, what, i); }
static bool rd_u64(reader *r, uint64_t *v, const char *what, int64_t i) { return rd_bytes(r, v, 8, what, i); }
static bool rd_i64(reader *r, int64_t *v, const char *what, int64_t i) { return rd_bytes(r, v, 8, what, i); }

/* A length-prefixed string; the bytes stay in the file. */
static bool rd_str(reader *r, vs_gguf_str *s, const char *what, int64_t i) {
    uint64_t len;
    if (!rd_u64(r, &len, what, i)) return false;
    if (!rd_need(r, len, what, i)) return false;
    s->ptr = (const char *)(r->b + r->pos);
    s->len = len;
    r->pos += len;
    return true;
}

static void gguf_free_parts(vs_gguf *g) {
    if (!g) return;
    for (int64_t i = 0; i < g->n_kv; i++) vs_free(g->kv[i].str_off);
    vs_free(g->kv);
    vs_free(g->tensors);
    vs_free(g->kv_slots);
    vs_free(g->t_slots);
    vs_free(g->name);
}

/* Grows a realloc'ed array to hold at least n+1 elements. */
static bool grow(void **arr, int64_t *cap, int64_t n, size_t elem) {
    if (n < *cap) return true;
    int64_t nc = *cap ? *cap * 2 : 16;
    void *p = vs_realloc(*arr, (size_t)nc * elem);
    if (!p) return false;
    *arr = p;
    *cap = nc;
    return true;
}

static bool check_bools(reader *r, const uint8_t *p, uint64_t n, int64_t kv_index) {
    for (uint64_t j = 0; j < n; j++)
        if (p[j] > 1) {
            vs_error_set(r->err, VS_ERR_FORMAT, "%s: metadata entry %" PRId64 ": bool value %u is not 0 or 1",
                         r->name, kv_index, p[j]);
            return false;
        }
    return true;
}

/* Parses one metadata value of type kv->type at the cursor. */
static bool parse_value(reader *r, gguf_kv *kv, int64_t idx) {
    size_t start = r->pos;
    kv->raw = r->b + start;
    if (kv->type == VS_GGUF_STRING) {
        vs_gguf_str s;
        if (!rd_str(r, &s, "string value of metadata entry", idx)) return false;
        kv->data = (const uint8_t *)s.ptr;
        kv->n = s.len;
    } else if (kv->type == VS_GGUF_ARRAY) {
        int32_t at;
        uint64_t count;
        if (!rd_i32(r, &at, "array element type of metadata entry", idx)) return false;
        if (at == VS_GGUF_ARRAY) {
            vs_error_set(r->err, VS_ERR_FORMAT, "%s: metadata entry %" PRId64 " ('%.*s'): nested arrays are not "
                         "supported", r->name, idx, (int)VS_MIN(kv->key.len, 200), kv->key.ptr);
            return false;
        }
        if (at != VS_GGUF_STRING && scalar_size(at) == 0) {
            vs_error_set(r->err, VS_ERR_FORMAT, "%s: metadata entry %" PRId64 " ('%.*s'): invalid array element "
                         "type %d", r->name, idx, (int)VS_MIN(kv->key.len, 200), kv->key.ptr, at);
            return false;
        }
        if (!rd_u64(r, &count, "array length of metadata entry", idx)) return false;
        kv->arr_type = (vs_gguf_type)at;
        kv->n = count;
        kv->data = r->b + r->pos;
        if (at == VS_GGUF_STRING) {
            /* each element needs at least its 8-byte length: bound the count before allocating */
            if (count > rd_left(r) / 8) {
                vs_error_set(r->err, VS_ERR_FORMAT, "%s: metadata entry %" PRId64 " ('%.*s'): string array of %"
                             PRIu64 " elements cannot fit in the %zu bytes left", r->name, idx,
                             (int)VS_MIN(kv->key.len, 200), kv->key.ptr, count, rd_left(r));
                return false;
            }
            kv->str_off = vs_malloc((size_t)(count ? count : 1) * sizeof(uint64_t));
            if (!kv->str_off) {
                vs_error_set(r->err, VS_ERR_NOMEM, "%s: out of memory indexing a string array", r->name);
                return false;
            }
            for (uint64_t j = 0; j < count; j++) {
                vs_gguf_str s;
                kv->str_off[j] = r->pos - (size_t)(kv->data - r->b);
                if (!rd_str(r, &s, "string array element of metadata entry", idx)) return false;
            }
        } else {
            size_t es = scalar_size(at);
            if (count > rd_left(r) / es) {
                vs_error_set(r->err, VS_ERR_FORMAT, "%s: metadata entry %" PRId64 " ('%.*s'): array of %" PRIu64
                             " %s elements cannot fit in the %zu bytes left", r->name, idx,
                             (int)VS_MIN(kv->key.len, 200), kv->key.ptr, count, vs_gguf_kv_type_name(at),
                             rd_left(r));
                return false;
            }
            if (at == VS_GGUF_BOOL && !check_bools(r, kv->data, count, idx)) return false;
            r->pos += (size_t)(count * es);
        }
    } else {
        size_t es = scalar_size(kv->type);
        if (es == 0) {
            vs_error_set(r->err, VS_ERR_FORMAT, "%s: metadata entry %" PRId64 " ('%.*s'): invalid value type %d",
                         r->name, idx, (int)VS_MIN(kv->key.len, 200), kv->key.ptr, (int)kv->type);
            return false;
        }
        if (!rd_need(r, es, "value of metadata entry", idx)) return false;
        kv->data = r->b + r->pos;
        kv->n = 1;
        if (kv->type == VS_GGUF_BOOL && !check_bools(r, kv->data, 1, idx)) return false;
        r->pos += es;
    }
    kv->raw_size = r->pos - start;
    return true;
}

/* Builds an open-addressing index; returns the index of the first duplicate, -1 if none, -2 on OOM. */
static int64_t build_index(int64_t n, const void *items, size_t stride, size_t name_off, bool c_string,
                           int64_t **slots_out, uint64_t *cap_out) {
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2) cap *= 2;
    int64_t *slots = vs_malloc(cap * sizeof(int64_t));
    if (!slots) return -2;
    for (uint64_t i = 0; i < cap; i++) slots[i] = -1;
    *slots_out = slots;
    *cap_out = cap;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *it = (const uint8_t *)items + (size_t)i * stride + name_off;
        const char *p;
        size_t len;
        if (c_string) {
            p = (const char *)it;
            len = strlen(p);
        } else {
            const vs_gguf_str *s = (const vs_gguf_str *)it;
            p = s->ptr;
            len = (size_t)s->len;
        }
        uint64_t h = hash_bytes(p, len) & (cap - 1);
        for (;; h = (h + 1) & (cap - 1)) {
            int64_t j = slots[h];
            if (j < 0) {
                slots[h] = i;
                break;
            }
            const uint8_t *jt = (const uint8_t *)items + (size_t)j * stride + name_off;
            const char *q;
            size_t qlen;
            if (c_string) {
                q = (const char *)jt;
                qlen = strlen(q);
            } else {
                q = ((const vs_gguf_str *)jt)->ptr;
                qlen = (size_t)((const vs_gguf_str *)jt)->len;
            }
            if (qlen == len && !memcmp(p, q, len)) return i;
        }
    }
    return -1;
}

static int cmp_by_offset(const void *a, const void *b) {
    const vs_gguf_tensor *x = *(const vs_gguf_tensor *const *)a, *y = *(const vs_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset ? 1 : 0;
}

static bool parse_tensor_info(reader *r, vs_gguf_tensor *t, int64_t i) {
    vs_gguf_str name;
    if (!rd_str(r, &name, "name of tensor", i)) return false;
    if (name.len == 0 || name.len >= GGUF_NAME_MAX) {
        vs_error_set(r->err, VS_ERR_FORMAT, "%s: tensor %" PRId64 ": name length %" PRIu64 " (must be 1..%d bytes)",
                     r->name, i, name.len, GGUF_NAME_MAX - 1);
        return false;
    }
    if (memchr(name.ptr, 0, (size_t)name.len)) {
        vs_error_set(r->err, VS_ERR_FORMAT, "%s: tensor %" PRId64 ": name contains a NUL byte", r->name, i);
        return false;
    }
    memcpy(t->name, name.ptr, (size_t)name.len);
    t->name[name.len] = 0;
    uint32_t n_dims;
    if (!rd_u32(r, &n_dims, "n_dims of tensor", i)) return false;
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) {
        vs_error_set(r->err, VS_ERR_FORMAT, "%s: tensor '%s': n_dims %u (must be 1..%d)", r->name, t->name, n_dims,
                     GGUF_MAX_DIMS);
        return false;
    }
    t->n_dims = (int)n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (!rd_i64(r, &t->ne[d], "dimensions of tensor", i)) return false;
        if (t->ne[d] < 0) {
            vs_error_set(r->err, VS_ERR_FORMAT, "%s: tensor '%s': dimension %u is negative (%" PRId64 ")", r->name,
                         t->name, d, t->ne[d]);
            return false;
        }
    }
    int32_t type;
    if (!rd_i32(r, &type, "type of tensor", i)) return false;
    t->type = type;
    if (!rd_u64(r, &t->offset, "offset of tensor", i)) return false;
    return true;
}

/* Checks a parsed tensor against the type table and the data section; sets nbytes and data. */
static bool check_tensor(vs_gguf *g, vs_gguf_tensor *t, vs_error *err) {
    const ggml_type_info *ti = ggml_type_get(t->type);
    if (!ti) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: tensor '%s': unknown ggml type id %d", g->name, t->name, t->type);
        return false;
    }
    if (t->ne[0] % ti->blck) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: tensor '%s': ne[0] = %" PRId64 " is not a multiple of the %s block"
                     " size %" PRId64, g->name, t->name, t->ne[0], ti->name, ti->blck);
        return false;
    }
    if (!tensor_nbytes(ti, t->n_dims, t->ne, &t->nbytes)) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: tensor '%s': shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                     "] overflows", g->name, t->name, t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
        return false;
    }
    if (t->offset % g->alignment) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: tensor '%s': offset %" PRIu64 " is not a multiple of the alignment %u",
                     g->name, t->name, t->offset, g->alignment);
        return false;
    }
    uint64_t avail = g->data_offset <= g->size ? g->size - g->data_offset : 0;
    if (t->offset > avail || t->nbytes > avail - t->offset) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: tensor '%s': data [%" PRIu64 ", +%" PRIu64 ") lies past the end of the"
                     " file (data section holds %" PRIu64 " bytes)", g->name, t->name, t->offset, t->nbytes, avail);
        return false;
    }
    t->data = g->data_offset + t->offset <= g->size ? g->base + g->data_offset + t->offset : NULL;
    return true;
}

static vs_gguf *gguf_parse(const uint8_t *data, size_t size, const char *name, vs_error *err) {
    vs_gguf *g = vs_calloc(1, sizeof(vs_gguf));
    char *nm = vs_strdup(name ? name : "(memory)");
    if (!g || !nm) {
        vs_free(g);
        vs_free(nm);
        vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", name ? name : "(memory)");
        return NULL;
    }
    g->name = nm;
    g->base = data;
    g->size = size;
    reader r = {data, size, 0, g->name, err};

    uint32_t magic;
    if (size < 4 || (memcpy(&magic, data, 4), magic != GGUF_MAGIC_LE)) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: not a GGUF file (bad magic%s)", g->name,
                     size < 4 ? ": file shorter than 4 bytes" : "");
        goto fail;
    }
    r.pos = 4;
    if (!rd_u32(&r, &g->version, "version", -1)) goto fail;
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffff) == 0 && g->version)
            vs_error_set(err, VS_ERR_UNSUPPORTED, "%s: GGUF version field 0x%08x looks big-endian; only "
                         "little-endian files are supported", g->name, g->version);
        else
            vs_error_set(err, VS_ERR_UNSUPPORTED, "%s: GGUF version %u is not supported (only 2 and 3)", g->name,
                         g->version);
        goto fail;
    }
    int64_t n_tensors, n_kv;
    if (!rd_i64(&r, &n_tensors, "tensor count", -1) || !rd_i64(&r, &n_kv, "metadata count", -1)) goto fail;
    if (n_tensors < 0 || (uint64_t)n_tensors > rd_left(&r) / GGUF_MIN_TENSOR_BYTES) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: tensor count %" PRId64 " is impossible for a file of %zu bytes",
                     g->name, n_tensors, size);
        goto fail;
    }
    if (n_kv < 0 || (uint64_t)n_kv > rd_left(&r) / GGUF_MIN_KV_BYTES) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: metadata count %" PRId64 " is impossible for a file of %zu bytes",
                     g->name, n_kv, size);
        goto fail;
    }

    /* metadata: arrays grow as entries parse, so memory follows the bytes actually present */
    int64_t cap = 0;
    for (int64_t i = 0; i < n_kv; i++) {
        if (!grow((void **)&g->kv, &cap, g->n_kv, sizeof(gguf_kv))) {
            vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory reading metadata", g->name);
            goto fail;
        }
        gguf_kv *kv = &g->kv[g->n_kv];
        memset(kv, 0, sizeof(*kv));
        g->n_kv++;
        int32_t type;
        if (!rd_str(&r, &kv->key, "key of metadata entry", i)) goto fail;
        if (kv->key.len == 0) {
            vs_error_set(err, VS_ERR_FORMAT, "%s: metadata entry %" PRId64 " has an empty key", g->name, i);
            goto fail;
        }
        if (!rd_i32(&r, &type, "value type of metadata entry", i)) goto fail;
        kv->type = (vs_gguf_type)type;
        if (type < 0 || type > VS_GGUF_F64) {
            vs_error_set(err, VS_ERR_FORMAT, "%s: metadata entry %" PRId64 " ('%.*s'): invalid value type %d",
                         g->name, i, (int)VS_MIN(kv->key.len, 200), kv->key.ptr, type);
            goto fail;
        }
        if (!parse_value(&r, kv, i)) goto fail;
    }
    int64_t dup = build_index(g->n_kv, g->kv, sizeof(gguf_kv), offsetof(gguf_kv, key), false, &g->kv_slots,
                              &g->kv_cap);
    if (dup == -2) {
        vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", g->name);
        goto fail;
    }
    if (dup >= 0) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: duplicate metadata key '%.*s'", g->name,
                     (int)VS_MIN(g->kv[dup].key.len, 200), g->kv[dup].key.ptr);
        goto fail;
    }

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = vs_gguf_find_key(g, "general.alignment");
    if (ai >= 0) {
        if (g->kv[ai].type != VS_GGUF_U32) {
            vs_error_set(err, VS_ERR_FORMAT, "%s: general.alignment has type %s (must be u32)", g->name,
                         vs_gguf_kv_type_name(g->kv[ai].type));
            goto fail;
        }
        uint32_t a;
        memcpy(&a, g->kv[ai].data, 4);
        if (a == 0 || (a & (a - 1))) {
            vs_error_set(err, VS_ERR_FORMAT, "%s: general.alignment = %u is not a power of two", g->name, a);
            goto fail;
        }
        g->alignment = a;
    }

    /* tensor infos: again bounded by the bytes left now that the metadata is behind us */
    if ((uint64_t)n_tensors > rd_left(&r) / GGUF_MIN_TENSOR_BYTES) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: tensor count %" PRId64 " cannot fit in the %zu bytes after the "
                     "metadata", g->name, n_tensors, rd_left(&r));
        goto fail;
    }
    cap = 0;
    for (int64_t i = 0; i < n_tensors; i++) {
        if (!grow((void **)&g->tensors, &cap, g->n_tensors, sizeof(vs_gguf_tensor))) {
            vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory reading tensor infos", g->name);
            goto fail;
        }
        vs_gguf_tensor *t = &g->tensors[g->n_tensors];
        memset(t, 0, sizeof(*t));
        if (!parse_tensor_info(&r, t, i)) goto fail;
        g->n_tensors++;
    }
    dup = build_index(g->n_tensors, g->tensors, sizeof(vs_gguf_tensor), offsetof(vs_gguf_tensor, name), true,
                      &g->t_slots, &g->t_cap);
    if (dup == -2) {
        vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", g->name);
        goto fail;
    }
    if (dup >= 0) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: duplicate tensor name '%s'", g->name, g->tensors[dup].name);
        goto fail;
    }

    /* r.pos <= size < 2^63 and alignment <= 2^31, so this cannot wrap */
    g->data_offset = align_up(r.pos, g->alignment);
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (!check_tensor(g, &g->tensors[i], err)) goto fail;
    if (g->n_tensors > 1) {
        vs_gguf_tensor **order = vs_malloc((size_t)g->n_tensors * sizeof(*order));
        if (!order) {
            vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", g->name);
            goto fail;
        }
        int64_t n = 0; /* empty tensors occupy no bytes and may share an offset with anything */
        for (int64_t i = 0; i < g->n_tensors; i++)
            if (g->tensors[i].nbytes) order[n++] = &g->tensors[i];
        qsort(order, (size_t)n, sizeof(*order), cmp_by_offset);
        for (int64_t i = 1; i < n; i++) {
            const vs_gguf_tensor *a = order[i - 1], *b = order[i];
            if (a->offset + a->nbytes > b->offset) {
                vs_error_set(err, VS_ERR_FORMAT, "%s: data of tensors '%s' and '%s' overlap", g->name, a->name,
                             b->name);
                vs_free(order);
                goto fail;
            }
        }
        vs_free(order);
    }
    return g;

fail:
    gguf_free_parts(g);
    vs_free(g);
    return NULL;
}

vs_gguf *vs_gguf_open_memory(const void *data, size_t size, const char *name, vs_error *err) {
    if (!data && size) {
        vs_error_set(err, VS_ERR_INVALID, "%s: NULL buffer", name ? name : "(memory)");
        return NULL;
    }
    static const uint8_t empty[1];
    return gguf_parse(data ? data : empty, size, name, err);
}

vs_gguf *vs_gguf_open(const char *path, vs_error *err) {
    /* O_NONBLOCK: a FIFO is refused below instead of blocking the open (no effect on a regular file) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        vs_error_set(err, VS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        vs_error_set(err, VS_ERR_IO, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    void *map = NULL;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            vs_error_set(err, VS_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
            close(fd);
            return NULL;
        }
    }
    close(fd);
    static const uint8_t empty[1];
    vs_gguf *g = gguf_parse(map ? map : empty, size, path, err);
    if (!g) {
        if (map) munmap(map, size);
        return NULL;
    }
    g->map = map;
    return g;
}

void vs_gguf_close(vs_gguf *g) {
    if (!g) return;
    if (g->map) munmap(g->map, g->size);
    gguf_free_parts(g);
    vs_free(g);
}

const char *vs_gguf_name(const vs_gguf *g) { return g->name; }
uint32_t vs_gguf_version(const vs_gguf *g) { return g->version; }
uint32_t vs_gguf_alignment(const vs_gguf *g) { return g->alignment; }
uint64_t vs_gguf_data_offset(const vs_gguf *g) { return g->data_offset; }
size_t vs_gguf_size(const vs_gguf *g) { return g->size; }

void vs_gguf_release(const vs_gguf *g, const void *p, size_t n) {
    const uint8_t *b = p, *map = g->map;
    if (!map || b < map || n > g->size || (size_t)(b - map) > g->size - n) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)b + page - 1) / page * page, hi = ((uintptr_t)b + n) / page * page;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* --- metadata --- */

int64_t vs_gguf_n_kv(const vs_gguf *g) { return g->n_kv; }

int64_t vs_gguf_find_key(const vs_gguf *g, const char *key) {
    if (!g->kv_slots) return -1;
    size_t len = strlen(key);
    for (uint64_t h = hash_bytes(key, len) & (g->kv_cap - 1);; h = (h + 1) & (g->kv_cap - 1)) {
        int64_t j = g->kv_slots[h];
        if (j < 0) return -1;
        if (g->kv[j].key.len == len && !memcmp(g->kv[j].key.ptr, key, len)) return j;
    }
}

static const gguf_kv *kv_at(const vs_gguf *g, int64_t i) { return i >= 0 && i < g->n_kv ? &g->kv[i] : NULL; }

vs_gguf_str vs_gguf_key_at(const vs_gguf *g, int64_t i) {
    const gguf_kv *kv = kv_at(g, i);
    return kv ? kv->key : (vs_gguf_str){NULL, 0};
}

vs_gguf_type vs_gguf_kv_type(const vs_gguf *g, int64_t i) {
    const gguf_kv *kv = kv_at(g, i);
    return kv ? kv->type : (vs_gguf_type)-1;
}

vs_gguf_type vs_gguf_arr_type(const vs_gguf *g, int64_t i) {
    const gguf_kv *kv = kv_at(g, i);
    return kv && kv->type == VS_GGUF_ARRAY ? kv->arr_type : (vs_gguf_type)-1;
}

uint64_t vs_gguf_arr_len(const vs_gguf *g, int64_t i) {
    const gguf_kv *kv = kv_at(g, i);
    return kv && kv->type == VS_GGUF_ARRAY ? kv->n : 0;
}

const void *vs_gguf_arr_data(const vs_gguf *g, int64_t i) {
    const gguf_kv *kv = kv_at(g, i);
    return kv && kv->type == VS_GGUF_ARRAY && kv->arr_type != VS_GGUF_STRING ? kv->data : NULL;
}

vs_gguf_str vs_gguf_arr_str(const vs_gguf *g, int64_t i, uint64_t j) {
    const gguf_kv *kv = kv_at(g, i);
    vs_gguf_str s = {NULL, 0};
    if (!kv || kv->type != VS_GGUF_ARRAY || kv->arr_type != VS_GGUF_STRING || j >= kv->n) return s;
    const uint8_t *p = kv->data + kv->str_off[j];
    memcpy(&s.len, p, 8);
    s.ptr = (const char *)p + 8;
    return s;
}

const void *vs_gguf_kv_data(const vs_gguf *g, int64_t i) {
    const gguf_kv *kv = kv_at(g, i);
    return kv && scalar_size(kv->type) ? kv->data : NULL;
}

vs_gguf_str vs_gguf_kv_str(const vs_gguf *g, int64_t i) {
    const gguf_kv *kv = kv_at(g, i);
    vs_gguf_str s = {NULL, 0};
    if (kv && kv->type == VS_GGUF_STRING) {
        s.ptr = (const char *)kv->data;
        s.len = kv->n;
    }
    return s;
}

/* Reads element j of a numeric value at p (type t) as int64 (ok=false if out of range) or double. */
static bool num_as_int(int t, const uint8_t *p, int64_t *out) {
    switch (t) {
    case VS_GGUF_U8: *out = p[0]; return true;
    case VS_GGUF_I8: *out = (int8_t)p[0]; return true;
    case VS_GGUF_U16: { uint16_t v; memcpy(&v, p, 2); *out = v; return true; }
    case VS_GGUF_I16: { int16_t v; memcpy(&v, p, 2); *out = v; return true; }
    case VS_GGUF_U32: { uint32_t v; memcpy(&v, p, 4); *out = v; return true; }
    case VS_GGUF_I32: { int32_t v; memcpy(&v, p, 4); *out = v; return true; }
    case VS_GGUF_I64: { int64_t v; memcpy(&v, p, 8); *out = v; return true; }
    case VS_GGUF_U64: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (v > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)v;
        return true;
    }
    default: return false;
    }
}

static bool num_as_double(int t, const uint8_t *p, double *out) {
    if (t == VS_GGUF_F32) {
        float v;
        memcpy(&v, p, 4);
        *out = v;
        return true;
    }
    if (t == VS_GGUF_F64) {
        memcpy(out, p, 8);
        return true;
    }
    int64_t iv;
    if (t == VS_GGUF_U64) {
        uint64_t v;
        memcpy(&v, p, 8);
        *out = (double)v;
        return true;
    }
    if (num_as_int(t, p, &iv)) {
        *out = (double)iv;
        return true;
    }
    return false;
}

int vs_gguf_get_int(const vs_gguf *g, const char *key, int64_t *out) {
    int64_t i = vs_gguf_find_key(g, key);
    if (i < 0) return 0;
    int64_t v;
    if (!num_as_int(g->kv[i].type, g->kv[i].data, &v)) return -1;
    *out = v;
    return 1;
}

int vs_gguf_get_float(const vs_gguf *g, const char *key, double *out) {
    int64_t i = vs_gguf_find_key(g, key);
    if (i < 0) return 0;
    double v;
    if (!num_as_double(g->kv[i].type, g->kv[i].data, &v)) return -1;
    *out = v;
    return 1;
}

int vs_gguf_get_bool(const vs_gguf *g, const char *key, bool *out) {
    int64_t i = vs_gguf_find_key(g, key);
    if (i < 0) return 0;
    if (g->kv[i].type != VS_GGUF_BOOL) return -1;
    *out = g->kv[i].data[0] != 0;
    return 1;
}

int vs_gguf_get_str(const vs_gguf *g, const char *key, vs_gguf_str *out) {
    int64_t i = vs_gguf_find_key(g, key);
    if (i < 0) return 0;
    if (g->kv[i].type != VS_GGUF_STRING) return -1;
    *out = vs_gguf_kv_str(g, i);
    return 1;
}

int64_t vs_gguf_get_f32_array(const vs_gguf *g, const char *key, float *out, int64_t max) {
    int64_t i = vs_gguf_find_key(g, key);
    if (i < 0) return -1;
    const gguf_kv *kv = &g->kv[i];
    if (kv->type != VS_GGUF_ARRAY || kv->arr_type == VS_GGUF_STRING || kv->arr_type == VS_GGUF_BOOL) return -1;
    if (kv->n > (uint64_t)INT64_MAX) return -1;
    size_t es = scalar_size(kv->arr_type);
    for (uint64_t j = 0; j < kv->n && (int64_t)j < max; j++) {
        double v;
        num_as_double(kv->arr_type, kv->data + j * es, &v);
        out[j] = (float)v;
    }
    return (int64_t)kv->n;
}

static vs_status require_fail(const vs_gguf *g, const char *key, int rc, const char *want, vs_error *err) {
    if (rc == 0) return vs_error_set(err, VS_ERR_FORMAT, "%s: required key '%s' is missing", g->name, key);
    int64_t i = vs_gguf_find_key(g, key);
    return vs_error_set(err, VS_ERR_FORMAT, "%s: key '%s' has type %s, expected %s", g->name, key,
                        vs_gguf_kv_type_name(g->kv[i].type), want);
}

vs_status vs_gguf_require_int(const vs_gguf *g, const char *key, int64_t *out, vs_error *err) {
    int rc = vs_gguf_get_int(g, key, out);
    return rc == 1 ? VS_OK : require_fail(g, key, rc, "an integer (within int64)", err);
}

vs_status vs_gguf_require_float(const vs_gguf *g, const char *key, double *out, vs_error *err) {
    int rc = vs_gguf_get_float(g, key, out);
    return rc == 1 ? VS_OK : require_fail(g, key, rc, "a number", err);
}

vs_status vs_gguf_require_str(const vs_gguf *g, const char *key, vs_gguf_str *out, vs_error *err) {
    int rc = vs_gguf_get_str(g, key, out);
    return rc == 1 ? VS_OK : require_fail(g, key, rc, "a string", err);
}

bool vs_gguf_str_eq(vs_gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || !memcmp(s.ptr, c, n));
}

/* --- tensors --- */

int64_t vs_gguf_n_tensors(const vs_gguf *g) { return g->n_tensors; }

const vs_gguf_tensor *vs_gguf_tensor_at(const vs_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const vs_gguf_tensor *vs_gguf_find_tensor(const vs_gguf *g, const char *name) {
    if (!g->t_slots) return NULL;
    size_t len = strlen(name);
    if (len >= GGUF_NAME_MAX) return NULL;
    for (uint64_t h = hash_bytes(name, len) & (g->t_cap - 1);; h = (h + 1) & (g->t_cap - 1)) {
        int64_t j = g->t_slots[h];
        if (j < 0) return NULL;
        if (!strcmp(g->tensors[j].name, name)) return &g->tensors[j];
    }
}

static void shape_str(char *buf, size_t n, int n_dims, const int64_t *ne) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int d = 0; d < n_dims && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, d ? ", " : "", ne[d]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

vs_status vs_gguf_require_tensor(const vs_gguf *g, const char *name, int n_dims, const int64_t *ne,
                                 const vs_gguf_tensor **out, vs_error *err) {
    const vs_gguf_tensor *t = vs_gguf_find_tensor(g, name);
    if (!t) return vs_error_set(err, VS_ERR_FORMAT, "%s: required tensor '%s' is missing", g->name, name);
    if (!computable_type(t->type))
        return vs_error_set(err, VS_ERR_UNSUPPORTED, "unsupported tensor type %s (%d) for tensor %s in %s",
                            vs_gguf_ggml_type_name(t->type), t->type, name, g->name);
    if (n_dims > 0) {
        bool ok = n_dims <= GGUF_MAX_DIMS;
        for (int d = 0; ok && d < GGUF_MAX_DIMS; d++) ok = t->ne[d] == (d < n_dims ? ne[d] : 1);
        if (!ok) {
            char want[128], have[128];
            shape_str(want, sizeof(want), n_dims, ne);
            shape_str(have, sizeof(have), t->n_dims, t->ne);
            return vs_error_set(err, VS_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s", g->name, name,
                                have, want);
        }
    }
    if (out) *out = t;
    return VS_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* writer                                                                                          */

typedef struct wkv {
    char *key;
    vs_gguf_type type;
    uint8_t *val; /* serialised value: the bytes after the type field */
    size_t val_size;
} wkv;

typedef struct wtensor {
    char name[GGUF_NAME_MAX];
    int type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes;
    const uint8_t *data; /* owned copy, or the caller's buffer for add_tensor_ref */
    bool owned;
} wtensor;

struct vs_gguf_writer {
    wkv *kv;
    int64_t n_kv, cap_kv;
    wtensor *t;
    int64_t n_t, cap_t;
    vs_error pending; /* first error of a void setter, reported by write */
};

vs_gguf_writer *vs_gguf_writer_new(void) { return vs_calloc(1, sizeof(vs_gguf_writer)); }

void vs_gguf_writer_free(vs_gguf_writer *w) {
    if (!w) return;
    for (int64_t i = 0; i < w->n_kv; i++) {
        vs_free(w->kv[i].key);
        vs_free(w->kv[i].val);
    }
    for (int64_t i = 0; i < w->n_t; i++)
        if (w->t[i].owned) vs_free((void *)w->t[i].data);
    vs_free(w->kv);
    vs_free(w->t);
    vs_free(w);
}

static void pend(vs_gguf_writer *w, vs_status code, const char *what, const char *key) {
    if (w->pending.code == VS_OK) vs_error_set(&w->pending, code, "gguf writer: %s '%s'", what, key);
}

/* Takes ownership of val (a vs_malloc buffer) in every case. */
static void set_kv_owned(vs_gguf_writer *w, const char *key, vs_gguf_type type, uint8_t *val, size_t size) {
    if (!val) {
        pend(w, VS_ERR_NOMEM, "out of memory setting key", key);
        return;
    }
    if (!key[0]) {
        pend(w, VS_ERR_INVALID, "empty metadata key", key);
        vs_free(val);
        return;
    }
    for (int64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, key)) {
            vs_free(w->kv[i].val);
            w->kv[i].type = type;
            w->kv[i].val = val;
            w->kv[i].val_size = size;
            return;
        }
    char *k = vs_strdup(key);
    if (!k || !grow((void **)&w->kv, &w->cap_kv, w->n_kv, sizeof(wkv))) {
        vs_free(k);
        vs_free(val);
        pend(w, VS_ERR_NOMEM, "out of memory setting key", key);
        return;
    }
    w->kv[w->n_kv++] = (wkv){k, type, val, size};
}

static void set_kv(vs_gguf_writer *w, const char *key, vs_gguf_type type, const void *bytes, size_t size) {
    uint8_t *v = vs_malloc(size);
    if (v && size) memcpy(v, bytes, size);
    set_kv_owned(w, key, type, v, size);
}

void vs_gguf_set_u8(vs_gguf_writer *w, const char *key, uint8_t v) { set_kv(w, key, VS_GGUF_U8, &v, 1); }
void vs_gguf_set_i8(vs_gguf_writer *w, const char *key, int8_t v) { set_kv(w, key, VS_GGUF_I8, &v, 1); }
void vs_gguf_set_u16(vs_gguf_writer *w, const char *key, uint16_t v) { set_kv(w, key, VS_GGUF_U16, &v, 2); }
void vs_gguf_set_i16(vs_gguf_writer *w, const char *key, int16_t v) { set_kv(w, key, VS_GGUF_I16, &v, 2); }
void vs_gguf_set_u32(vs_gguf_writer *w, const char *key, uint32_t v) { set_kv(w, key, VS_GGUF_U32, &v, 4); }
void vs_gguf_set_i32(vs_gguf_writer *w, const char *key, int32_t v) { set_kv(w, key, VS_GGUF_I32, &v, 4); }
void vs_gguf_set_u64(vs_gguf_writer *w, const char *key, uint64_t v) { set_kv(w, key, VS_GGUF_U64, &v, 8); }
void vs_gguf_set_i64(vs_gguf_writer *w, const char *key, int64_t v) { set_kv(w, key, VS_GGUF_I64, &v, 8); }
void vs_gguf_set_f32(vs_gguf_writer *w, const char *key, float v) { set_kv(w, key, VS_GGUF_F32, &v, 4); }
void vs_gguf_set_f64(vs_gguf_writer *w, const char *key, double v) { set_kv(w, key, VS_GGUF_F64, &v, 8); }

void vs_gguf_set_bool(vs_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    set_kv(w, key, VS_GGUF_BOOL, &b, 1);
}

void vs_gguf_set_str_n(vs_gguf_writer *w, const char *key, const char *v, uint64_t len) {
    if (len > SIZE_MAX - 8) {
        pend(w, VS_ERR_NOMEM, "string too long for key", key);
        return;
    }
    uint8_t *b = vs_malloc((size_t)len + 8);
    if (b) {
        memcpy(b, &len, 8);
        if (len) memcpy(b + 8, v, (size_t)len);
    }
    set_kv_owned(w, key, VS_GGUF_STRING, b, (size_t)len + 8);
}

void vs_gguf_set_str(vs_gguf_writer *w, const char *key, const char *v) { vs_gguf_set_str_n(w, key, v, strlen(v)); }

void vs_gguf_set_arr(vs_gguf_writer *w, const char *key, vs_gguf_type elem_type, const void *data, uint64_t n) {
    size_t es = scalar_size(elem_type);
    if (!es) {
        pend(w, VS_ERR_INVALID, "vs_gguf_set_arr needs a numeric element type, key", key);
        return;
    }
    if (n > (SIZE_MAX - 12) / es) {
        pend(w, VS_ERR_NOMEM, "array too long for key", key);
        return;
    }
    uint8_t *b = vs_malloc(12 + (size_t)n * es);
    if (b) {
        int32_t t = elem_type;
        memcpy(b, &t, 4);
        memcpy(b + 4, &n, 8);
        if (n) memcpy(b + 12, data, (size_t)n * es);
    }
    set_kv_owned(w, key, VS_GGUF_ARRAY, b, 12 + (size_t)n * es);
}

void vs_gguf_set_arr_str(vs_gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    size_t total = 12;
    for (uint64_t j = 0; j < n; j++) total += 8 + strlen(strs[j]);
    uint8_t *b = vs_malloc(total);
    if (b) {
        int32_t t = VS_GGUF_STRING;
        memcpy(b, &t, 4);
        memcpy(b + 4, &n, 8);
        size_t o = 12;
        for (uint64_t j = 0; j < n; j++) {
            uint64_t len = strlen(strs[j]);
            memcpy(b + o, &len, 8);
            memcpy(b + o + 8, strs[j], (size_t)len);
            o += 8 + (size_t)len;
        }
    }
    set_kv_owned(w, key, VS_GGUF_ARRAY, b, total);
}

vs_status vs_gguf_copy_kv(vs_gguf_writer *w, const vs_gguf *src, const char *prefix, vs_error *err) {
    size_t plen = strlen(prefix);
    for (int64_t i = 0; i < src->n_kv; i++) {
        const gguf_kv *kv = &src->kv[i];
        if (kv->key.len < plen || memcmp(kv->key.ptr, prefix, plen)) continue;
        char *key = vs_strndup(kv->key.ptr, (size_t)kv->key.len);
        if (!key) return vs_error_set(err, VS_ERR_NOMEM, "copying metadata from %s: out of memory", src->name);
        set_kv(w, key, kv->type, kv->raw, (size_t)kv->raw_size);
        vs_free(key);
        if (w->pending.code != VS_OK) {
            if (err) *err = w->pending;
            return vs_error_wrap(err, "copying metadata from %s", src->name);
        }
    }
    return VS_OK;
}

static vs_status add_tensor(vs_gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                            const void *data, bool copy, vs_error *err) {
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len >= GGUF_NAME_MAX)
        return vs_error_set(err, VS_ERR_INVALID, "gguf writer: tensor name '%s' must be 1..%d bytes",
                            name ? name : "(null)", GGUF_NAME_MAX - 1);
    for (int64_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return vs_error_set(err, VS_ERR_INVALID, "gguf writer: duplicate tensor name '%s'", name);
    const ggml_type_info *ti = ggml_type_get(type);
    if (!ti) return vs_error_set(err, VS_ERR_INVALID, "gguf writer: tensor '%s': unknown ggml type %d", name, type);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return vs_error_set(err, VS_ERR_INVALID, "gguf writer: tensor '%s': n_dims %d (must be 1..4)", name, n_dims);
    wtensor t = {.type = type, .n_dims = n_dims, .owned = copy};
    memcpy(t.name, name, len + 1);
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t.ne[d] = d < n_dims ? ne[d] : 1;
    if (!tensor_nbytes(ti, n_dims, t.ne, &t.nbytes) || t.nbytes > SIZE_MAX / 2)
        return vs_error_set(err, VS_ERR_INVALID, "gguf writer: tensor '%s': invalid shape for type %s (negative, "
                            "overflowing, or ne[0] not a multiple of %" PRId64 ")", name, ti->name, ti->blck);
    if (t.nbytes && !data) return vs_error_set(err, VS_ERR_INVALID, "gguf writer: tensor '%s': NULL data", name);
    if (copy) {
        uint8_t *c = vs_malloc((size_t)t.nbytes);
        if (!c) return vs_error_set(err, VS_ERR_NOMEM, "gguf writer: out of memory copying tensor '%s'", name);
        if (t.nbytes) memcpy(c, data, (size_t)t.nbytes);
        t.data = c;
    } else {
        t.data = data;
    }
    if (!grow((void **)&w->t, &w->cap_t, w->n_t, sizeof(wtensor))) {
        if (copy) vs_free((void *)t.data);
        return vs_error_set(err, VS_ERR_NOMEM, "gguf writer: out of memory adding tensor '%s'", name);
    }
    w->t[w->n_t++] = t;
    return VS_OK;
}

vs_status vs_gguf_add_tensor(vs_gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                             const void *data, vs_error *err) {
    return add_tensor(w, name, type, n_dims, ne, data, true, err);
}

vs_status vs_gguf_add_tensor_ref(vs_gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                                 const void *data, vs_error *err) {
    return add_tensor(w, name, type, n_dims, ne, data, false, err);
}

/* Whether any of the 16-bit lanes of the n 64-bit words at d has all the bits of m set (m: an exponent
 * mask without the sign bit). Four lanes per word: v = (x & M) ^ M is zero in a lane exactly when that
 * lane's exponent is all ones, and a zero lane is found with the usual (v - 1) & ~v & 0x8000 test, exact
 * here because no lane of v has its top bit set. Branch-free, so it runs at memory bandwidth. */
static bool any_exp_ones16(const uint8_t *d, int64_t n, uint16_t m) {
    const uint64_t M = 0x0001000100010001ull * m, lo = 0x0001000100010001ull, hi = 0x8000800080008000ull;
    uint64_t acc = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t x;
        memcpy(&x, d + 8 * i, 8);
        const uint64_t v = (x & M) ^ M;
        acc |= (v - lo) & ~v & hi;
    }
    return acc != 0;
}

/* The first non-finite value among n elements of a supported type (for Q8_0/Q4_0 and the K-quants the
 * block scales, Q4_K/Q5_K's d and dmin both; the index is then the block's first element), or -1.
 * Chunks are screened with any_exp_ones16 (F32 values as their upper halves) and only a chunk that
 * fails is searched element by element. */
static int64_t first_nonfinite(int type, const uint8_t *d, int64_t n) {
    enum { CHUNK = 4096 };
    if (type == VS_TYPE_F32 || type == VS_TYPE_F16 || type == VS_TYPE_BF16) {
        const int esz = type == VS_TYPE_F32 ? 4 : 2;
        /* F32's exponent sits in its upper 16 bits under the same mask as BF16's; the lower halves
         * may then match too, which only sends the chunk to the exact search below */
        const uint16_t m = type == VS_TYPE_F16 ? 0x7c00 : 0x7f80;
        for (int64_t c0 = 0; c0 < n; c0 += CHUNK) {
            const int64_t c1 = VS_MIN(n, c0 + CHUNK), bytes = (c1 - c0) * esz;
            if (!any_exp_ones16(d + c0 * esz, bytes / 8, m)) {
                bool tail = false; /* the bytes past the last whole word */
                for (int64_t b = bytes / 8 * 8; b < bytes; b += 2) {
                    uint16_t h;
                    memcpy(&h, d + c0 * esz + b, 2);
                    tail |= (h & m) == m;
                }
                if (!tail) continue;
            }
            for (int64_t i = c0; i < c1; i++) {
                if (type == VS_TYPE_F32) {
                    uint32_t u;
                    memcpy(&u, d + 4 * i, 4);
                    if ((u & 0x7f800000u) == 0x7f800000u) return i;
                } else {
                    uint16_t h;
                    memcpy(&h, d + 2 * i, 2);
                    if ((h & m) == m) return i;
                }
            }
        }
        return -1;
    }
    if (type == VS_TYPE_Q8_0 || type == VS_TYPE_Q4_0) {
        const size_t bs = vs_type_block_bytes((vs_type)type);
        const int64_t nb = n / 32;
        for (int64_t b = 0; b < nb; b++) {
            uint16_t h;
            memcpy(&h, d + (size_t)b * bs, 2);
            if ((h & 0x7c00) == 0x7c00) return b * 32;
        }
    }
    if (vs_type_is_kquant(type)) { /* Q4_K / Q5_K: d and dmin lead the block; Q6_K: d ends it */
        const size_t bs = vs_type_block_bytes((vs_type)type);
        const size_t at = type == VS_TYPE_Q6_K ? offsetof(vs_block_q6_k, d) : 0;
        const int n_scales = type == VS_TYPE_Q6_K ? 1 : 2;
        for (int64_t b = 0; b < n / VS_QK_K; b++)
            for (int k = 0; k < n_scales; k++) {
                uint16_t h;
                memcpy(&h, d + (size_t)b * bs + at + 2 * (size_t)k, 2);
                if ((h & 0x7c00) == 0x7c00) return b * VS_QK_K;
            }
    }
    return -1;
}

vs_status vs_gguf_check_finite(const vs_gguf *g, vs_error *err) {
    for (int64_t t = 0; t < vs_gguf_n_tensors(g); t++) {
        const vs_gguf_tensor *ti = vs_gguf_tensor_at(g, t);
        const int64_t n = ti->ne[0] * ti->ne[1] * ti->ne[2] * ti->ne[3];
        const int64_t at = first_nonfinite(ti->type, ti->data, n);
        if (at >= 0)
            return vs_error_set(err, VS_ERR_FORMAT, "%s: tensor %s holds a non-finite value (NaN or infinity) at "
                                "element %lld%s", vs_gguf_name(g), ti->name, (long long)at,
                                ti->type == VS_TYPE_Q8_0 || ti->type == VS_TYPE_Q4_0 || vs_type_is_kquant(ti->type)
                                    ? " (a block scale)" : "");
    }
    return VS_OK;
}

/* Output sink: a growing memory buffer or a FILE. */
typedef struct sink {
    FILE *f;
    uint8_t *buf;
    size_t len, cap;
    bool failed;
    int err_no; /* errno of the failed write */
} sink;

static void put(sink *s, const void *p, size_t n) {
    if (s->failed || n == 0) return;
    if (s->f) {
        if (fwrite(p, 1, n, s->f) != n) {
            s->failed = true;
            s->err_no = errno;
        }
        return;
    }
    if (s->len + n > s->cap) {
        size_t nc = s->cap ? s->cap : 4096;
        while (nc < s->len + n) nc *= 2;
        uint8_t *b = vs_realloc(s->buf, nc);
        if (!b) {
            s->failed = true;
            return;
        }
        s->buf = b;
        s->cap = nc;
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
}

static void put_zeros(sink *s, size_t n) {
    static const uint8_t z[64];
    while (n) {
        size_t k = VS_MIN(n, sizeof(z));
        put(s, z, k);
        n -= k;
    }
}

static void put_str(sink *s, const char *p, uint64_t len) {
    put(s, &len, 8);
    put(s, p, (size_t)len);
}

static vs_status writer_alignment(const vs_gguf_writer *w, uint32_t *out, vs_error *err) {
    *out = GGUF_DEFAULT_ALIGNMENT;
    for (int64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, "general.alignment")) {
            if (w->kv[i].type != VS_GGUF_U32)
                return vs_error_set(err, VS_ERR_INVALID, "gguf writer: general.alignment must be a u32");
            uint32_t a;
            memcpy(&a, w->kv[i].val, 4);
            if (a == 0 || (a & (a - 1)))
                return vs_error_set(err, VS_ERR_INVALID, "gguf writer: general.alignment = %u is not a power of two",
                                    a);
            *out = a;
        }
    return VS_OK;
}

static vs_status serialise(vs_gguf_writer *w, sink *s, vs_error *err) {
    if (w->pending.code != VS_OK) {
        if (err) *err = w->pending;
        return w->pending.code;
    }
    uint32_t align;
    vs_status st = writer_alignment(w, &align, err);
    if (st != VS_OK) return st;
    uint32_t magic = GGUF_MAGIC_LE, version = 3;
    int64_t n_t = w->n_t, n_kv = w->n_kv;
    put(s, &magic, 4);
    put(s, &version, 4);
    put(s, &n_t, 8);
    put(s, &n_kv, 8);
    uint64_t pos = GGUF_HEADER_BYTES;
    for (int64_t i = 0; i < w->n_kv; i++) {
        int32_t t = w->kv[i].type;
        uint64_t klen = strlen(w->kv[i].key);
        put_str(s, w->kv[i].key, klen);
        put(s, &t, 4);
        put(s, w->kv[i].val, w->kv[i].val_size);
        pos += 8 + klen + 4 + w->kv[i].val_size;
    }
    uint64_t off = 0;
    for (int64_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        uint32_t nd = (uint32_t)t->n_dims;
        int32_t type = t->type;
        uint64_t nlen = strlen(t->name);
        put_str(s, t->name, nlen);
        put(s, &nd, 4);
        put(s, t->ne, 8 * (size_t)nd);
        put(s, &type, 4);
        put(s, &off, 8);
        pos += 8 + nlen + 4 + 8 * nd + 4 + 8;
        off = align_up(off + t->nbytes, align);
    }
    put_zeros(s, (size_t)(align_up(pos, align) - pos));
    for (int64_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put(s, t->data, (size_t)t->nbytes);
        put_zeros(s, (size_t)(align_up(t->nbytes, align) - t->nbytes));
    }
    return VS_OK;
}

vs_status vs_gguf_write_memory(vs_gguf_writer *w, uint8_t **data, size_t *size, vs_error *err) {
    sink s = {0};
    vs_status st = serialise(w, &s, err);
    if (st == VS_OK && s.failed) st = vs_error_set(err, VS_ERR_NOMEM, "gguf writer: out of memory serialising");
    if (st != VS_OK) {
        vs_free(s.buf);
        return st;
    }
    if (!s.buf) s.buf = vs_malloc(1);
    if (!s.buf) return vs_error_set(err, VS_ERR_NOMEM, "gguf writer: out of memory");
    *data = s.buf;
    *size = s.len;
    return VS_OK;
}

vs_status vs_gguf_write(vs_gguf_writer *w, const char *path, vs_error *err) {
    /* through outfile: a temporary beside the target and a rename, so a reader never sees a half-written
     * file and a device node is never replaced */
    vs_outfile o;
    vs_status st = vs_outfile_open(&o, path, err);
    if (st != VS_OK) return st;
    sink s = {.f = o.f};
    st = serialise(w, &s, err);
    if (st == VS_OK && s.failed) {
        st = vs_error_set(err, VS_ERR_IO, "%s: write failed: %s", path, s.err_no ? strerror(s.err_no) : "I/O error");
    }
    if (st != VS_OK) {
        vs_outfile_abort(&o);
        if (err && !strstr(err->msg, path)) vs_error_wrap(err, "writing %s", path);
        return st;
    }
    return vs_outfile_commit(&o, err);
}
