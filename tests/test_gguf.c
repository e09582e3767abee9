/* test_gguf: GGUF reader and writer.
 * - round trip of every metadata type (scalars, arrays of each type, string arrays) and of tensors of
 *   several ggml types, through memory and through a file; copy_kv; writer misuse;
 * - the real llama.cpp files in ../shared/testdata (parity models, vocab files), skipped when absent:
 *   open, check, and re-write them key by key and tensor by tensor to an identical parse;
 * - hostile files built byte by byte: every truncation of a small valid file, bad magic and versions,
 *   absurd counts, lengths past the end, overflowing arrays and shapes, bad dims, offsets, alignments,
 *   duplicates. Each must fail with a message naming the file, never crash.
 * `test_gguf --write-seeds DIR` writes the fuzz seed corpus (fuzz/corpus/fuzz_gguf/). */
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "gguf.h"
#include "quant.h"
#include "testutil.h"

/* ---------------------------------------------------------------------------------------------- */
/* byte builder for hand-made files */

typedef struct bb {
    uint8_t *p;
    size_t n, cap;
} bb;

static void bb_put(bb *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        VT_REQUIRE(b->p, "realloc");
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void bb_u32(bb *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_i32(bb *b, int32_t v) { bb_put(b, &v, 4); }
static void bb_u64(bb *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_i64(bb *b, int64_t v) { bb_put(b, &v, 8); }
static void bb_u8(bb *b, uint8_t v) { bb_put(b, &v, 1); }
static void bb_str(bb *b, const char *s) {
    bb_u64(b, strlen(s));
    bb_put(b, s, strlen(s));
}
static void bb_pad(bb *b, size_t a) {
    while (b->n % a) bb_u8(b, 0);
}
static void bb_hdr(bb *b, uint32_t version, int64_t n_tensors, int64_t n_kv) {
    bb_put(b, "GGUF", 4);
    bb_u32(b, version);
    bb_i64(b, n_tensors);
    bb_i64(b, n_kv);
}
static void bb_kv_u32(bb *b, const char *key, uint32_t v) {
    bb_str(b, key);
    bb_i32(b, VS_GGUF_U32);
    bb_u32(b, v);
}
static void bb_tensor(bb *b, const char *name, uint32_t n_dims, const int64_t *ne, int32_t type, uint64_t off) {
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) bb_i64(b, ne[d]);
    bb_i32(b, type);
    bb_u64(b, off);
}
static void bb_zeros(bb *b, size_t n) {
    for (size_t i = 0; i < n; i++) bb_u8(b, 0);
}

/* ---------------------------------------------------------------------------------------------- */

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

typedef struct tspec {
    const char *name;
    int type;
    int n_dims;
    int64_t ne[4];
    size_t nbytes;
} tspec;

static const tspec round_trip_tensors[] = {
    {"f32.w", VS_TYPE_F32, 2, {7, 3}, 7 * 3 * 4},
    {"empty.w", VS_TYPE_F32, 2, {0, 4}, 0}, /* shares its offset with the next tensor */
    {"f16.w", VS_TYPE_F16, 1, {65}, 65 * 2},
    {"q8.w", VS_TYPE_Q8_0, 2, {64, 2}, 2 * 2 * 34},
    {"q4.w", VS_TYPE_Q4_0, 3, {32, 3, 2}, 6 * 18},
    {"q4k.w", 12 /* Q4_K */, 2, {256, 2}, 2 * 144},
    {"q6k.w", 14 /* Q6_K */, 1, {512}, 2 * 210},
    {"bf16.w", VS_TYPE_BF16, 4, {5, 1, 1, 2}, 10 * 2},
    {"empty2.w", VS_TYPE_Q8_0, 3, {0, 5, 0}, 0},
};

static uint8_t *tensor_bytes(size_t n, uint64_t seed) {
    uint8_t *d = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) d[i] = (uint8_t)lcg(&seed);
    return d;
}

/* Fills a writer with one key of every scalar type, arrays of every type and the tensors above. */
static void fill_writer(vs_gguf_writer *w) {
    vs_gguf_set_str(w, "general.architecture", "test");
    vs_gguf_set_u8(w, "s.u8", 200);
    vs_gguf_set_i8(w, "s.i8", -5);
    vs_gguf_set_u16(w, "s.u16", 60000);
    vs_gguf_set_i16(w, "s.i16", -300);
    vs_gguf_set_u32(w, "s.u32", 4000000000u);
    vs_gguf_set_i32(w, "s.i32", -2000000000);
    vs_gguf_set_f32(w, "s.f32", 1.5f);
    vs_gguf_set_bool(w, "s.bool", true);
    vs_gguf_set_str(w, "s.str", "h\xc3\xa9llo");
    vs_gguf_set_u64(w, "s.u64", (1ULL << 63) + 5);
    vs_gguf_set_i64(w, "s.i64", -(1LL << 40));
    vs_gguf_set_f64(w, "s.f64", 3.141592653589793);
    vs_gguf_set_str_n(w, "s.bin", "a\0b", 3);
    vs_gguf_set_str(w, "s.empty", "");

    uint8_t au8[] = {0, 1, 255};
    int8_t ai8[] = {-128, 0, 127};
    uint16_t au16[] = {0, 65535};
    int16_t ai16[] = {-32768, 32767, 1};
    uint32_t au32[] = {1, 2, 3, 4000000000u};
    int32_t ai32[] = {-1, 7};
    float af32[] = {0.5f, -2.25f, 1e-30f};
    uint8_t abool[] = {1, 0, 1, 1};
    uint64_t au64[] = {UINT64_MAX, 0};
    int64_t ai64[] = {INT64_MIN, 42};
    double af64[] = {-1e300, 2.5};
    vs_gguf_set_arr(w, "a.u8", VS_GGUF_U8, au8, 3);
    vs_gguf_set_arr(w, "a.i8", VS_GGUF_I8, ai8, 3);
    vs_gguf_set_arr(w, "a.u16", VS_GGUF_U16, au16, 2);
    vs_gguf_set_arr(w, "a.i16", VS_GGUF_I16, ai16, 3);
    vs_gguf_set_arr(w, "a.u32", VS_GGUF_U32, au32, 4);
    vs_gguf_set_arr(w, "a.i32", VS_GGUF_I32, ai32, 2);
    vs_gguf_set_arr(w, "a.f32", VS_GGUF_F32, af32, 3);
    vs_gguf_set_arr(w, "a.bool", VS_GGUF_BOOL, abool, 4);
    vs_gguf_set_arr(w, "a.u64", VS_GGUF_U64, au64, 2);
    vs_gguf_set_arr(w, "a.i64", VS_GGUF_I64, ai64, 2);
    vs_gguf_set_arr(w, "a.f64", VS_GGUF_F64, af64, 2);
    vs_gguf_set_arr(w, "a.empty", VS_GGUF_U32, NULL, 0);
    const char *strs[] = {"<unk>", "", "\xe2\x96\x81the", "a much longer string with spaces and punctuation!"};
    vs_gguf_set_arr_str(w, "a.str", strs, 4);
    vs_gguf_set_arr_str(w, "a.str_empty", NULL, 0);
    /* replacing a key keeps its position and count */
    vs_gguf_set_u32(w, "s.replace", 1);
    vs_gguf_set_i32(w, "s.replace", -77);

    vs_error err = {0};
    for (size_t i = 0; i < VS_ARRAY_LEN(round_trip_tensors); i++) {
        const tspec *t = &round_trip_tensors[i];
        uint8_t *d = tensor_bytes(t->nbytes, 1000 + i);
        vs_status st = vs_gguf_add_tensor(w, t->name, t->type, t->n_dims, t->ne, d, &err);
        VT_CHECK(st == VS_OK, "add_tensor %s: %s", t->name, err.msg);
        free(d);
    }
}

static void check_read(const vs_gguf *g, uint32_t align) {
    const char *nm = vs_gguf_name(g);
    VT_CHECK(vs_gguf_version(g) == 3, "%s version %u", nm, vs_gguf_version(g));
    VT_CHECK(vs_gguf_alignment(g) == align, "alignment %u", vs_gguf_alignment(g));
    VT_CHECK(vs_gguf_data_offset(g) % align == 0, "data offset %llu", (unsigned long long)vs_gguf_data_offset(g));
    VT_CHECK(vs_gguf_n_kv(g) == 30 + (align != 32), "n_kv %lld", (long long)vs_gguf_n_kv(g));
    VT_CHECK(vs_gguf_str_eq(vs_gguf_key_at(g, 0), "general.architecture"), "first key");
    VT_CHECK(vs_gguf_find_key(g, "nope") == -1, "absent key");

    int64_t iv;
    double dv;
    bool bv;
    vs_gguf_str sv;
    VT_CHECK(vs_gguf_get_int(g, "s.u8", &iv) == 1 && iv == 200, "u8 %lld", (long long)iv);
    VT_CHECK(vs_gguf_get_int(g, "s.i8", &iv) == 1 && iv == -5, "i8");
    VT_CHECK(vs_gguf_get_int(g, "s.u16", &iv) == 1 && iv == 60000, "u16");
    VT_CHECK(vs_gguf_get_int(g, "s.i16", &iv) == 1 && iv == -300, "i16");
    VT_CHECK(vs_gguf_get_int(g, "s.u32", &iv) == 1 && iv == 4000000000LL, "u32");
    VT_CHECK(vs_gguf_get_int(g, "s.i32", &iv) == 1 && iv == -2000000000LL, "i32");
    VT_CHECK(vs_gguf_get_int(g, "s.i64", &iv) == 1 && iv == -(1LL << 40), "i64");
    VT_CHECK(vs_gguf_get_int(g, "s.u64", &iv) == -1, "u64 above INT64_MAX must not convert to int64");
    VT_CHECK(vs_gguf_get_int(g, "s.f32", &iv) == -1, "float is not an int");
    VT_CHECK(vs_gguf_get_int(g, "absent", &iv) == 0, "absent");
    VT_CHECK(vs_gguf_get_int(g, "s.replace", &iv) == 1 && iv == -77, "replaced key");
    VT_CHECK(vs_gguf_kv_type(g, vs_gguf_find_key(g, "s.replace")) == VS_GGUF_I32, "replaced type");
    VT_CHECK(vs_gguf_get_float(g, "s.f32", &dv) == 1 && dv == 1.5, "f32");
    VT_CHECK(vs_gguf_get_float(g, "s.f64", &dv) == 1 && dv == 3.141592653589793, "f64");
    VT_CHECK(vs_gguf_get_float(g, "s.i32", &dv) == 1 && dv == -2000000000.0, "int as float");
    VT_CHECK(vs_gguf_get_float(g, "s.str", &dv) == -1, "str as float");
    VT_CHECK(vs_gguf_get_bool(g, "s.bool", &bv) == 1 && bv, "bool");
    VT_CHECK(vs_gguf_get_bool(g, "s.u8", &bv) == -1, "u8 as bool");
    VT_CHECK(vs_gguf_get_str(g, "s.str", &sv) == 1 && vs_gguf_str_eq(sv, "h\xc3\xa9llo"), "str");
    VT_CHECK(vs_gguf_get_str(g, "s.empty", &sv) == 1 && sv.len == 0 && vs_gguf_str_eq(sv, ""), "empty str");
    VT_CHECK(vs_gguf_get_str(g, "s.bin", &sv) == 1 && sv.len == 3 && !memcmp(sv.ptr, "a\0b", 3), "binary str");
    VT_CHECK(vs_gguf_get_str(g, "s.u8", &sv) == -1, "u8 as str");
    int64_t i = vs_gguf_find_key(g, "s.u64");
    uint64_t u64;
    memcpy(&u64, vs_gguf_kv_data(g, i), 8);
    VT_CHECK(vs_gguf_kv_type(g, i) == VS_GGUF_U64 && u64 == (1ULL << 63) + 5, "u64 raw");

    struct {
        const char *key;
        vs_gguf_type t;
        uint64_t n;
        size_t es;
    } arrs[] = {{"a.u8", VS_GGUF_U8, 3, 1},   {"a.i8", VS_GGUF_I8, 3, 1},     {"a.u16", VS_GGUF_U16, 2, 2},
                {"a.i16", VS_GGUF_I16, 3, 2}, {"a.u32", VS_GGUF_U32, 4, 4},   {"a.i32", VS_GGUF_I32, 2, 4},
                {"a.f32", VS_GGUF_F32, 3, 4}, {"a.bool", VS_GGUF_BOOL, 4, 1}, {"a.u64", VS_GGUF_U64, 2, 8},
                {"a.i64", VS_GGUF_I64, 2, 8}, {"a.f64", VS_GGUF_F64, 2, 8},   {"a.empty", VS_GGUF_U32, 0, 4}};
    for (size_t k = 0; k < VS_ARRAY_LEN(arrs); k++) {
        i = vs_gguf_find_key(g, arrs[k].key);
        VT_CHECK(i >= 0 && vs_gguf_kv_type(g, i) == VS_GGUF_ARRAY, "%s is an array", arrs[k].key);
        VT_CHECK(vs_gguf_arr_type(g, i) == arrs[k].t, "%s elem type", arrs[k].key);
        VT_CHECK(vs_gguf_arr_len(g, i) == arrs[k].n, "%s len", arrs[k].key);
        VT_CHECK(vs_gguf_arr_data(g, i) != NULL, "%s data", arrs[k].key);
    }
    int16_t i16[3];
    memcpy(i16, vs_gguf_arr_data(g, vs_gguf_find_key(g, "a.i16")), sizeof(i16));
    VT_CHECK(i16[0] == -32768 && i16[1] == 32767 && i16[2] == 1, "i16 array values");
    int64_t i64[2];
    memcpy(i64, vs_gguf_arr_data(g, vs_gguf_find_key(g, "a.i64")), sizeof(i64));
    VT_CHECK(i64[0] == INT64_MIN && i64[1] == 42, "i64 array values");
    double f64[2];
    memcpy(f64, vs_gguf_arr_data(g, vs_gguf_find_key(g, "a.f64")), sizeof(f64));
    VT_CHECK(f64[0] == -1e300 && f64[1] == 2.5, "f64 array values");
    uint8_t bools[4];
    memcpy(bools, vs_gguf_arr_data(g, vs_gguf_find_key(g, "a.bool")), 4);
    VT_CHECK(bools[0] == 1 && bools[1] == 0 && bools[2] == 1 && bools[3] == 1, "bool array values");
    float f[4] = {0};
    VT_CHECK(vs_gguf_get_f32_array(g, "a.f32", f, 4) == 3 && f[0] == 0.5f && f[1] == -2.25f && f[2] == 1e-30f,
             "f32 array");
    VT_CHECK(vs_gguf_get_f32_array(g, "a.f32", f, 2) == 3, "f32 array count beyond max");
    VT_CHECK(vs_gguf_get_f32_array(g, "a.u32", f, 4) == 4 && f[3] == 4e9f, "u32 array as f32");
    VT_CHECK(vs_gguf_get_f32_array(g, "a.str", f, 4) == -1, "string array as f32");
    VT_CHECK(vs_gguf_get_f32_array(g, "s.f32", f, 4) == -1, "scalar as f32 array");
    VT_CHECK(vs_gguf_get_f32_array(g, "absent", f, 4) == -1, "absent f32 array");

    i = vs_gguf_find_key(g, "a.str");
    VT_CHECK(vs_gguf_arr_type(g, i) == VS_GGUF_STRING && vs_gguf_arr_len(g, i) == 4, "string array");
    VT_CHECK(vs_gguf_arr_data(g, i) == NULL, "no raw pointer for string arrays");
    VT_CHECK(vs_gguf_str_eq(vs_gguf_arr_str(g, i, 0), "<unk>"), "str 0");
    VT_CHECK(vs_gguf_str_eq(vs_gguf_arr_str(g, i, 1), ""), "str 1");
    VT_CHECK(vs_gguf_str_eq(vs_gguf_arr_str(g, i, 2), "\xe2\x96\x81the"), "str 2");
    VT_CHECK(vs_gguf_str_eq(vs_gguf_arr_str(g, i, 3), "a much longer string with spaces and punctuation!"), "3");
    VT_CHECK(vs_gguf_arr_str(g, i, 4).ptr == NULL, "str out of range");
    i = vs_gguf_find_key(g, "a.str_empty");
    VT_CHECK(vs_gguf_arr_type(g, i) == VS_GGUF_STRING && vs_gguf_arr_len(g, i) == 0, "empty string array");

    /* required helpers name the file and the key */
    vs_error err = {0};
    VT_CHECK(vs_gguf_require_int(g, "s.u32", &iv, &err) == VS_OK && iv == 4000000000LL, "require_int");
    VT_CHECK(vs_gguf_require_int(g, "llama.block_count", &iv, &err) == VS_ERR_FORMAT, "require missing");
    VT_CHECK(strstr(err.msg, nm) && strstr(err.msg, "llama.block_count") && strstr(err.msg, "missing"), "%s",
             err.msg);
    VT_CHECK(vs_gguf_require_str(g, "s.u8", &sv, &err) == VS_ERR_FORMAT, "require mistyped");
    VT_CHECK(strstr(err.msg, nm) && strstr(err.msg, "s.u8") && strstr(err.msg, "u8"), "%s", err.msg);
    VT_CHECK(vs_gguf_require_float(g, "s.f64", &dv, &err) == VS_OK && dv == 3.141592653589793, "require_float");

    /* tensors */
    VT_CHECK(vs_gguf_n_tensors(g) == (int64_t)VS_ARRAY_LEN(round_trip_tensors), "n_tensors");
    uint64_t prev_end = 0;
    for (size_t k = 0; k < VS_ARRAY_LEN(round_trip_tensors); k++) {
        const tspec *ts = &round_trip_tensors[k];
        const vs_gguf_tensor *t = vs_gguf_tensor_at(g, (int64_t)k);
        VT_REQUIRE(t, "tensor %zu", k);
        VT_CHECK(!strcmp(t->name, ts->name), "order: %s vs %s", t->name, ts->name);
        VT_CHECK(vs_gguf_find_tensor(g, ts->name) == t, "find %s", ts->name);
        VT_CHECK(t->type == ts->type && t->n_dims == ts->n_dims, "%s type/dims", ts->name);
        for (int d = 0; d < 4; d++)
            VT_CHECK(t->ne[d] == (d < ts->n_dims ? ts->ne[d] : 1), "%s ne[%d] = %lld", ts->name, d,
                     (long long)t->ne[d]);
        VT_CHECK(t->nbytes == ts->nbytes, "%s nbytes %llu", ts->name, (unsigned long long)t->nbytes);
        VT_CHECK(t->offset % align == 0, "%s offset %llu aligned", ts->name, (unsigned long long)t->offset);
        VT_CHECK(t->offset >= prev_end, "%s offset after previous", ts->name);
        prev_end = t->offset + t->nbytes;
        uint8_t *want = tensor_bytes(ts->nbytes, 1000 + k);
        VT_CHECK(ts->nbytes == 0 || (t->data && !memcmp(t->data, want, ts->nbytes)), "%s data", ts->name);
        free(want);
    }
    VT_CHECK(vs_gguf_find_tensor(g, "nope") == NULL, "absent tensor");
    VT_CHECK(vs_gguf_tensor_at(g, -1) == NULL && vs_gguf_tensor_at(g, 99) == NULL, "tensor_at range");

    const vs_gguf_tensor *t = NULL;
    int64_t ne2[2] = {7, 3}, bad[2] = {3, 7}, ne1[1] = {65};
    VT_CHECK(vs_gguf_require_tensor(g, "f32.w", 2, ne2, &t, &err) == VS_OK && t && t->type == VS_TYPE_F32,
             "require f32: %s", err.msg);
    VT_CHECK(vs_gguf_require_tensor(g, "f16.w", 1, ne1, &t, &err) == VS_OK, "require f16: %s", err.msg);
    VT_CHECK(vs_gguf_require_tensor(g, "f32.w", 0, NULL, &t, &err) == VS_OK, "require without shape");
    VT_CHECK(vs_gguf_require_tensor(g, "f32.w", 2, bad, &t, &err) == VS_ERR_FORMAT, "wrong shape");
    VT_CHECK(strstr(err.msg, nm) && strstr(err.msg, "[7, 3]") && strstr(err.msg, "[3, 7]"), "%s", err.msg);
    VT_CHECK(vs_gguf_require_tensor(g, "missing.w", 0, NULL, &t, &err) == VS_ERR_FORMAT, "missing tensor");
    VT_CHECK(strstr(err.msg, nm) && strstr(err.msg, "missing.w"), "%s", err.msg);
    /* Q4_K is computed with since the K-quants (an unsupported type: test_kquant_files, Q3_K) */
    VT_CHECK(vs_gguf_require_tensor(g, "q4k.w", 0, NULL, &t, &err) == VS_OK && t->type == VS_TYPE_Q4_K,
             "Q4_K required: %s", err.msg);
}

static void test_round_trip(void) {
    vs_gguf_writer *w = vs_gguf_writer_new();
    VT_REQUIRE(w, "writer");
    fill_writer(w);
    vs_error err = {0};
    uint8_t *mem = NULL;
    size_t size = 0;
    VT_REQUIRE(vs_gguf_write_memory(w, &mem, &size, &err) == VS_OK, "write_memory: %s", err.msg);
    vs_gguf *g = vs_gguf_open_memory(mem, size, "roundtrip.mem", &err);
    VT_REQUIRE(g, "open_memory: %s", err.msg);
    VT_CHECK(!strcmp(vs_gguf_name(g), "roundtrip.mem"), "name");
    VT_CHECK(vs_gguf_size(g) == size, "size");
    check_read(g, 32);
    vs_gguf_close(g);

    /* through a file, and a second write of the same writer gives the same bytes */
    char path[512];
    snprintf(path, sizeof(path), "%s/rt.gguf", vt_tmpdir());
    VT_REQUIRE(vs_gguf_write(w, path, &err) == VS_OK, "write: %s", err.msg);
    g = vs_gguf_open(path, &err);
    VT_REQUIRE(g, "open: %s", err.msg);
    VT_CHECK(!strcmp(vs_gguf_name(g), path), "file name");
    check_read(g, 32);
    VT_CHECK(vs_gguf_size(g) == size, "file size %zu vs memory %zu", vs_gguf_size(g), size);
    vs_gguf_close(g);
    uint8_t *fd = NULL;
    size_t fsize = 0;
    VT_REQUIRE(vs_read_file(path, &fd, &fsize, &err) == VS_OK, "read back");
    VT_CHECK(fsize == size && !memcmp(fd, mem, size), "file bytes == memory bytes");
    vs_free(fd);

    /* copy_kv: only the prefix, exact types, string arrays included */
    g = vs_gguf_open_memory(mem, size, "src.mem", &err);
    VT_REQUIRE(g, "reopen");
    vs_gguf_writer *w2 = vs_gguf_writer_new();
    VT_CHECK(vs_gguf_copy_kv(w2, g, "a.", &err) == VS_OK, "copy_kv: %s", err.msg);
    uint8_t *mem2;
    size_t size2;
    VT_REQUIRE(vs_gguf_write_memory(w2, &mem2, &size2, &err) == VS_OK, "write copy: %s", err.msg);
    vs_gguf *g2 = vs_gguf_open_memory(mem2, size2, "copy.mem", &err);
    VT_REQUIRE(g2, "open copy: %s", err.msg);
    VT_CHECK(vs_gguf_n_kv(g2) == 14, "copied keys: %lld", (long long)vs_gguf_n_kv(g2));
    VT_CHECK(vs_gguf_find_key(g2, "s.u8") < 0, "prefix respected");
    for (int64_t i = 0; i < vs_gguf_n_kv(g2); i++) {
        vs_gguf_str k = vs_gguf_key_at(g2, i);
        char key[64];
        snprintf(key, sizeof(key), "%.*s", (int)k.len, k.ptr);
        int64_t j = vs_gguf_find_key(g, key);
        VT_CHECK(j >= 0 && vs_gguf_kv_type(g, j) == vs_gguf_kv_type(g2, i), "%s type", key);
        VT_CHECK(vs_gguf_arr_type(g, j) == vs_gguf_arr_type(g2, i) && vs_gguf_arr_len(g, j) == vs_gguf_arr_len(g2, i),
                 "%s array", key);
        if (vs_gguf_arr_type(g, j) == VS_GGUF_STRING) {
            for (uint64_t e = 0; e < vs_gguf_arr_len(g, j); e++) {
                vs_gguf_str a = vs_gguf_arr_str(g, j, e), b = vs_gguf_arr_str(g2, i, e);
                VT_CHECK(a.len == b.len && !memcmp(a.ptr, b.ptr, a.len), "%s[%llu]", key, (unsigned long long)e);
            }
        }
    }
    vs_gguf_close(g2);
    vs_free(mem2);
    vs_gguf_writer_free(w2);
    vs_gguf_close(g);
    vs_free(mem);

    /* general.alignment 64 */
    vs_gguf_set_u32(w, "general.alignment", 64);
    VT_REQUIRE(vs_gguf_write_memory(w, &mem, &size, &err) == VS_OK, "write a64: %s", err.msg);
    g = vs_gguf_open_memory(mem, size, "align64.mem", &err);
    VT_REQUIRE(g, "open a64: %s", err.msg);
    check_read(g, 64);
    vs_gguf_close(g);
    vs_free(mem);
    vs_gguf_writer_free(w);
}

static void test_writer_errors(void) {
    vs_error err = {0};
    vs_gguf_writer *w = vs_gguf_writer_new();
    float d[64] = {0};
    int64_t ne[5] = {32, 1, 1, 1, 1};
    VT_CHECK(vs_gguf_add_tensor(w, "t", VS_TYPE_F32, 1, ne, d, &err) == VS_OK, "add");
    VT_CHECK(vs_gguf_add_tensor(w, "t", VS_TYPE_F32, 1, ne, d, &err) == VS_ERR_INVALID, "duplicate name");
    VT_CHECK(strstr(err.msg, "duplicate"), "%s", err.msg);
    char longname[80];
    memset(longname, 'x', 64);
    longname[64] = 0;
    VT_CHECK(vs_gguf_add_tensor(w, longname, VS_TYPE_F32, 1, ne, d, &err) == VS_ERR_INVALID, "name of 64 bytes");
    longname[63] = 0;
    VT_CHECK(vs_gguf_add_tensor(w, longname, VS_TYPE_F32, 1, ne, d, &err) == VS_OK, "name of 63 bytes");
    VT_CHECK(vs_gguf_add_tensor(w, "", VS_TYPE_F32, 1, ne, d, &err) == VS_ERR_INVALID, "empty name");
    VT_CHECK(vs_gguf_add_tensor(w, "t5", VS_TYPE_F32, 5, ne, d, &err) == VS_ERR_INVALID, "n_dims 5");
    int64_t ne16[1] = {16};
    VT_CHECK(vs_gguf_add_tensor(w, "q", VS_TYPE_Q8_0, 1, ne16, d, &err) == VS_ERR_INVALID, "ne0 not multiple");
    VT_CHECK(vs_gguf_add_tensor(w, "u", 99, 1, ne, d, &err) == VS_ERR_INVALID, "unknown type");
    int64_t neg[1] = {-1};
    VT_CHECK(vs_gguf_add_tensor(w, "n", VS_TYPE_F32, 1, neg, d, &err) == VS_ERR_INVALID, "negative ne");
    uint8_t *mem;
    size_t size;
    VT_CHECK(vs_gguf_write_memory(w, &mem, &size, &err) == VS_OK, "still writable: %s", err.msg);
    vs_free(mem);
    vs_gguf_set_u32(w, "general.alignment", 3);
    VT_CHECK(vs_gguf_write_memory(w, &mem, &size, &err) == VS_ERR_INVALID, "alignment 3");
    VT_CHECK(strstr(err.msg, "alignment"), "%s", err.msg);
    vs_gguf_set_i32(w, "general.alignment", 32);
    VT_CHECK(vs_gguf_write_memory(w, &mem, &size, &err) == VS_ERR_INVALID, "alignment as i32");
    vs_gguf_writer_free(w);

    w = vs_gguf_writer_new();
    vs_gguf_set_arr(w, "bad", VS_GGUF_STRING, d, 1);
    VT_CHECK(vs_gguf_write_memory(w, &mem, &size, &err) == VS_ERR_INVALID, "set_arr with strings is a misuse");
    VT_CHECK(strstr(err.msg, "bad"), "%s", err.msg);
    vs_gguf_writer_free(w);

    char path[512];
    snprintf(path, sizeof(path), "%s/no/such/dir/x.gguf", vt_tmpdir());
    w = vs_gguf_writer_new();
    VT_CHECK(vs_gguf_write(w, path, &err) == VS_ERR_IO, "unwritable path");
    VT_CHECK(strstr(err.msg, "x.gguf"), "%s", err.msg);
    vs_gguf_writer_free(w);
}

/* ---------------------------------------------------------------------------------------------- */
/* real files */

static int n_real_checked;

static void check_real_file(const char *path, bool parity) {
    vs_error err = {0};
    n_real_checked++;
    vs_gguf *g = vs_gguf_open(path, &err);
    VT_CHECK(g, "open %s: %s", path, err.msg);
    if (!g) return;
    VT_CHECK(vs_gguf_version(g) == 2 || vs_gguf_version(g) == 3, "%s version", path);
    vs_gguf_str arch;
    VT_CHECK(vs_gguf_get_str(g, "general.architecture", &arch) == 1, "%s architecture", path);
    int64_t ti = vs_gguf_find_key(g, "tokenizer.ggml.tokens");
    VT_CHECK(ti >= 0 && vs_gguf_arr_type(g, ti) == VS_GGUF_STRING && vs_gguf_arr_len(g, ti) > 1000,
             "%s tokens", path);
    if (parity) {
        VT_CHECK(vs_gguf_str_eq(arch, "llama"), "%s arch", path);
        VT_CHECK(vs_gguf_arr_len(g, ti) == 32000, "%s vocab", path);
        VT_CHECK(vs_gguf_str_eq(vs_gguf_arr_str(g, ti, 1), "<s>"), "%s token 1", path);
        int64_t n_layer, dim;
        VT_CHECK(vs_gguf_require_int(g, "llama.block_count", &n_layer, &err) == VS_OK && n_layer == 2, "%s", err.msg);
        VT_CHECK(vs_gguf_require_int(g, "llama.embedding_length", &dim, &err) == VS_OK, "%s", err.msg);
        const vs_gguf_tensor *t;
        int64_t ne[2] = {dim, 32000};
        VT_CHECK(vs_gguf_require_tensor(g, "token_embd.weight", 2, ne, &t, &err) == VS_OK, "%s", err.msg);
        VT_CHECK(vs_gguf_n_tensors(g) == 2 * 9 + 2 + (strstr(path, "tied") ? 0 : 1), "%s n_tensors %lld", path,
                 (long long)vs_gguf_n_tensors(g));
    }
    /* rewrite everything and compare the parse */
    vs_gguf_writer *w = vs_gguf_writer_new();
    VT_CHECK(vs_gguf_copy_kv(w, g, "", &err) == VS_OK, "copy_kv %s: %s", path, err.msg);
    for (int64_t i = 0; i < vs_gguf_n_tensors(g); i++) {
        const vs_gguf_tensor *t = vs_gguf_tensor_at(g, i);
        VT_CHECK(vs_gguf_add_tensor_ref(w, t->name, t->type, t->n_dims, t->ne, t->data, &err) == VS_OK, "%s",
                 err.msg);
    }
    uint8_t *mem;
    size_t size;
    VT_REQUIRE(vs_gguf_write_memory(w, &mem, &size, &err) == VS_OK, "rewrite %s: %s", path, err.msg);
    vs_gguf *g2 = vs_gguf_open_memory(mem, size, "rewrite", &err);
    VT_CHECK(g2, "reopen rewrite of %s: %s", path, err.msg);
    if (g2) {
        VT_CHECK(vs_gguf_n_kv(g2) == vs_gguf_n_kv(g) && vs_gguf_n_tensors(g2) == vs_gguf_n_tensors(g), "counts");
        int bad = 0;
        for (int64_t i = 0; i < vs_gguf_n_kv(g); i++) {
            vs_gguf_str a = vs_gguf_key_at(g, i), b = vs_gguf_key_at(g2, i);
            if (a.len != b.len || memcmp(a.ptr, b.ptr, a.len) || vs_gguf_kv_type(g, i) != vs_gguf_kv_type(g2, i) ||
                vs_gguf_arr_len(g, i) != vs_gguf_arr_len(g2, i))
                bad++;
            if (vs_gguf_arr_type(g, i) == VS_GGUF_STRING)
                for (uint64_t e = 0; e < vs_gguf_arr_len(g, i); e++) {
                    vs_gguf_str x = vs_gguf_arr_str(g, i, e), y = vs_gguf_arr_str(g2, i, e);
                    if (x.len != y.len || memcmp(x.ptr, y.ptr, x.len)) bad++;
                }
        }
        for (int64_t i = 0; i < vs_gguf_n_tensors(g); i++) {
            const vs_gguf_tensor *a = vs_gguf_tensor_at(g, i), *b = vs_gguf_tensor_at(g2, i);
            if (strcmp(a->name, b->name) || a->nbytes != b->nbytes || memcmp(a->data, b->data, a->nbytes)) bad++;
        }
        VT_CHECK(bad == 0, "%s: %d differences after rewrite", path, bad);
        vs_gguf_close(g2);
    }
    vs_free(mem);
    vs_gguf_writer_free(w);
    vs_gguf_close(g);
}

static void test_real_files(void) {
    const char *dir = vt_shared_dir();
    if (!dir) {
        printf("SKIP (part): real GGUF files need ../shared/testdata\n");
        return;
    }
    const char *parity[] = {"llama-d64-l2-gqa-tied-f32", "llama-d128-l2-f16", "llama-d128-l2-q8_0",
                            "llama-d128-l2-q4_0"};
    const char *vocab[] = {"ggml-vocab-llama-spm", "ggml-vocab-phi-3", "ggml-vocab-gpt-2", "ggml-vocab-starcoder"};
    char path[1024];
    for (size_t i = 0; i < VS_ARRAY_LEN(parity); i++) {
        snprintf(path, sizeof(path), "%s/parity/%s.gguf", dir, parity[i]);
        check_real_file(path, true);
    }
    for (size_t i = 0; i < VS_ARRAY_LEN(vocab); i++) {
        snprintf(path, sizeof(path), "%s/vocab/%s.gguf", dir, vocab[i]);
        check_real_file(path, false);
    }
    printf("checked %d real GGUF files from %s\n", n_real_checked, dir);
}

/* ---------------------------------------------------------------------------------------------- */
/* hostile files */

static void expect_fail(const bb *b, const char *label, const char *needle) {
    char name[128];
    snprintf(name, sizeof(name), "hostile-%s.gguf", label);
    vs_error err = {0};
    vs_gguf *g = vs_gguf_open_memory(b->p, b->n, name, &err);
    VT_CHECK(g == NULL, "%s: opened but should fail", label);
    if (g) {
        vs_gguf_close(g);
        return;
    }
    VT_CHECK(err.code != VS_OK, "%s: error code", label);
    VT_CHECK(strstr(err.msg, name) != NULL, "%s: message does not name the file: %s", label, err.msg);
    if (needle) VT_CHECK(strstr(err.msg, needle) != NULL, "%s: message lacks '%s': %s", label, needle, err.msg);
}

/* The baseline every hostile case departs from: 1 key (alignment), 2 tensors; must open. */
typedef struct base_opts {
    uint32_t version;
    int64_t n_tensors, n_kv;
    uint32_t alignment;
    uint32_t n_dims0;
    int64_t ne0[5];
    int32_t type0;
    uint64_t off1;
    const char *name1;
    int64_t ne1;
} base_opts;

static base_opts base_defaults(void) {
    return (base_opts){3, 2, 1, 32, 2, {32, 2, 1, 1, 1}, VS_TYPE_Q8_0, 96, "b", 8};
}

static void build_base(bb *b, const base_opts *o) {
    b->n = 0;
    bb_hdr(b, o->version, o->n_tensors, o->n_kv);
    bb_kv_u32(b, "general.alignment", o->alignment);
    bb_tensor(b, "a", o->n_dims0, o->ne0, o->type0, 0); /* Q8_0 [32, 2] = 68 bytes */
    int64_t ne1[1] = {o->ne1};
    bb_tensor(b, o->name1, 1, ne1, VS_TYPE_F32, o->off1); /* F32 [8] = 32 bytes at 96 */
    bb_pad(b, 32);
    bb_zeros(b, 128);
}

static void test_hostile(void) {
    bb b = {0};
    vs_error err = {0};
    base_opts o = base_defaults();
    build_base(&b, &o);
    vs_gguf *g = vs_gguf_open_memory(b.p, b.n, "base.gguf", &err);
    VT_REQUIRE(g, "baseline must open: %s", err.msg);
    VT_CHECK(vs_gguf_n_tensors(g) == 2 && vs_gguf_tensor_at(g, 1)->offset == 96, "baseline");
    vs_gguf_close(g);

    /* every truncation of the baseline fails cleanly */
    size_t full = b.n;
    int opened = 0, unnamed = 0;
    for (size_t n = 0; n < full; n++) {
        g = vs_gguf_open_memory(b.p, n, "trunc.gguf", &err);
        if (g) {
            opened++;
            vs_gguf_close(g);
        } else if (!strstr(err.msg, "trunc.gguf")) {
            unnamed++;
        }
    }
    VT_CHECK(opened == 0, "%d truncations opened", opened);
    VT_CHECK(unnamed == 0, "%d truncation errors do not name the file", unnamed);

    b.n = 0;
    bb_put(&b, "GGUX", 4);
    bb_zeros(&b, 60);
    expect_fail(&b, "magic", "not a GGUF");
    b.n = 0;
    expect_fail(&b, "empty", "not a GGUF");

    o = base_defaults(), o.version = 1, build_base(&b, &o), expect_fail(&b, "version1", "version 1");
    o = base_defaults(), o.version = 4, build_base(&b, &o), expect_fail(&b, "version4", "version 4");
    o = base_defaults(), o.version = 0x03000000, build_base(&b, &o), expect_fail(&b, "bigendian", "big-endian");
    o = base_defaults(), o.version = 2, build_base(&b, &o);
    g = vs_gguf_open_memory(b.p, b.n, "v2.gguf", &err);
    VT_CHECK(g && vs_gguf_version(g) == 2, "version 2 opens: %s", err.msg);
    vs_gguf_close(g);

    o = base_defaults(), o.n_tensors = 1LL << 62, build_base(&b, &o), expect_fail(&b, "tensors2^62", "tensor count");
    o = base_defaults(), o.n_tensors = -1, build_base(&b, &o), expect_fail(&b, "tensors-1", "tensor count");
    o = base_defaults(), o.n_kv = 1LL << 62, build_base(&b, &o), expect_fail(&b, "kv2^62", "metadata count");
    o = base_defaults(), o.n_kv = INT64_MIN, build_base(&b, &o), expect_fail(&b, "kvmin", "metadata count");
    o = base_defaults(), o.n_tensors = 3, build_base(&b, &o), expect_fail(&b, "tensors3", NULL);
    o = base_defaults(), o.n_kv = 2, build_base(&b, &o), expect_fail(&b, "kv2", NULL);

    o = base_defaults(), o.alignment = 0, build_base(&b, &o), expect_fail(&b, "align0", "power of two");
    o = base_defaults(), o.alignment = 3, build_base(&b, &o), expect_fail(&b, "align3", "power of two");
    o = base_defaults(), o.n_dims0 = 5, build_base(&b, &o), expect_fail(&b, "ndims5", "n_dims 5");
    o = base_defaults(), o.n_dims0 = 0, build_base(&b, &o), expect_fail(&b, "ndims0", "n_dims 0");
    o = base_defaults(), o.ne0[1] = -2, build_base(&b, &o), expect_fail(&b, "neneg", "negative");
    o = base_defaults(), o.ne0[0] = 1LL << 40, o.ne0[1] = 1LL << 40, build_base(&b, &o);
    expect_fail(&b, "neoverflow", "overflows");
    o = base_defaults(), o.ne0[0] = 1LL << 35, o.ne0[1] = 1LL << 20, build_base(&b, &o);
    expect_fail(&b, "nebig", "past the end");
    o = base_defaults(), o.ne0[0] = 16, build_base(&b, &o), expect_fail(&b, "neblock", "multiple of the Q8_0");
    o = base_defaults(), o.type0 = 99, build_base(&b, &o), expect_fail(&b, "type99", "unknown ggml type id 99");
    o = base_defaults(), o.type0 = -1, build_base(&b, &o), expect_fail(&b, "typeneg", "unknown ggml type");
    o = base_defaults(), o.off1 = 1ULL << 40, build_base(&b, &o), expect_fail(&b, "offpast", "past the end");
    o = base_defaults(), o.off1 = UINT64_MAX - 31, build_base(&b, &o), expect_fail(&b, "offwrap", "past the end");
    o = base_defaults(), o.off1 = 100, build_base(&b, &o), expect_fail(&b, "offalign", "not a multiple");
    o = base_defaults(), o.off1 = 64, build_base(&b, &o), expect_fail(&b, "overlap", "overlap");
    o = base_defaults(), o.name1 = "a", build_base(&b, &o), expect_fail(&b, "dupname", "duplicate tensor name 'a'");
    o = base_defaults(), o.name1 = "", build_base(&b, &o), expect_fail(&b, "emptyname", "name length 0");
    char longname[70];
    memset(longname, 'n', 64);
    longname[64] = 0;
    o = base_defaults(), o.name1 = longname, build_base(&b, &o), expect_fail(&b, "longname", "name length 64");
    longname[63] = 0;
    o = base_defaults(), o.name1 = longname, build_base(&b, &o);
    g = vs_gguf_open_memory(b.p, b.n, "name63.gguf", &err);
    VT_CHECK(g && vs_gguf_find_tensor(g, longname), "63-byte name opens: %s", err.msg);
    vs_gguf_close(g);

    /* an empty tensor may share its offset with a non-empty one listed before it */
    o = base_defaults(), o.ne1 = 0, o.off1 = 0, build_base(&b, &o);
    g = vs_gguf_open_memory(b.p, b.n, "emptyshare.gguf", &err);
    VT_CHECK(g && vs_gguf_tensor_at(g, 1)->nbytes == 0, "empty tensor at a shared offset: %s", err.msg);
    vs_gguf_close(g);

    /* metadata-level cases, built by hand */
    b.n = 0, bb_hdr(&b, 3, 0, 1), bb_u64(&b, 1ULL << 50), bb_put(&b, "key", 3), bb_zeros(&b, 16);
    expect_fail(&b, "keylen", "truncated");
    b.n = 0, bb_hdr(&b, 3, 0, 1), bb_str(&b, "k"), bb_i32(&b, VS_GGUF_STRING), bb_u64(&b, 1000), bb_put(&b, "xy", 2);
    expect_fail(&b, "strlen", "truncated");
    b.n = 0, bb_hdr(&b, 3, 0, 1), bb_str(&b, "k"), bb_i32(&b, VS_GGUF_STRING), bb_u64(&b, UINT64_MAX);
    bb_zeros(&b, 8);
    expect_fail(&b, "strlenmax", "truncated");
    b.n = 0, bb_hdr(&b, 3, 0, 1), bb_str(&b, "k"), bb_i32(&b, VS_GGUF_ARRAY), bb_i32(&b, VS_GGUF_U32);
    bb_u64(&b, (1ULL << 62) + 1), bb_zeros(&b, 64);
    expect_fail(&b, "arroverflow", "cannot fit");
    b.n = 0, bb_hdr(&b, 3, 0, 1), bb_str(&b, "k"), bb_i32(&b, VS_GGUF_ARRAY), bb_i32(&b, VS_GGUF_U64);
    bb_u64(&b, UINT64_MAX / 8 + 2), bb_zeros(&b, 64);
    expect_fail(&b, "arroverflow64", "cannot fit");
    b.n = 0, bb_hdr(&b, 3, 0, 1), bb_str(&b, "k"), bb_i32(&b, VS_GGUF_ARRAY), bb_i32(&b, VS_GGUF_STRING);
    bb_u64(&b, 1ULL << 61), bb_zeros(&b, 64);
    expect_fail(&b, "strarrcount", "cannot fit");
    b.n = 0, bb_hdr(&b, 3, 0, 1), bb_str(&b, "k"), bb_i32(&b, VS_GGUF_ARRAY), bb_i32(&b, VS_GGUF_STRING);
    bb_u64(&b, 2), bb_str(&b, "ok"), bb_u64(&b, 5000), bb_zeros(&b, 16);
    expect_fail(&b, "strarrelem", "truncated");
    b.n = 0, bb_hdr(&b, 3, 0, 1), bb_str(&b, "k"), bb_i32(&b, VS_GGUF_ARRAY), bb_i32(&b, VS_GGUF_ARRAY);
    bb_u64(&b, 1), bb_zeros(&b, 32);
    expect_fail(&b, "nested", "nested");
    b.n = 0, bb_hdr(&b, 3, 0, 1), bb_str(&b, "k"), bb_i32(&b, VS_GGUF_ARRAY), bb_i32(&b, 13);
    bb_u64(&b, 1), bb_zeros(&b, 32);
    expect_fail(&b, "arrtype13", "element type 13");
    b.n = 0, bb_hdr(&b, 3, 0, 1), bb_str(&b, "k"), bb_i32(&b, 13), bb_zeros(&b, 32);
    expect_fail(&b, "kvtype13", "invalid value type 13");
    b.n = 0, bb_hdr(&b, 3, 0, 1), bb_str(&b, "k"), bb_i32(&b, -7), bb_zeros(&b, 32);
    expect_fail(&b, "kvtypeneg", "invalid value type -7");
    b.n = 0, bb_hdr(&b, 3, 0, 1), bb_str(&b, "k"), bb_i32(&b, VS_GGUF_BOOL), bb_u8(&b, 2), bb_zeros(&b, 8);
    expect_fail(&b, "bool2", "bool");
    b.n = 0, bb_hdr(&b, 3, 0, 1), bb_str(&b, ""), bb_i32(&b, VS_GGUF_U8), bb_u8(&b, 2), bb_zeros(&b, 8);
    expect_fail(&b, "emptykey", "empty key");
    b.n = 0, bb_hdr(&b, 3, 0, 2), bb_kv_u32(&b, "dup.key", 1), bb_kv_u32(&b, "dup.key", 2), bb_zeros(&b, 8);
    expect_fail(&b, "dupkey", "duplicate metadata key 'dup.key'");
    b.n = 0, bb_hdr(&b, 3, 0, 1), bb_str(&b, "general.alignment"), bb_i32(&b, VS_GGUF_I32), bb_i32(&b, 32);
    expect_fail(&b, "aligntype", "u32");
    /* a file with metadata only and no tensor data section is valid */
    b.n = 0, bb_hdr(&b, 3, 0, 1), bb_kv_u32(&b, "x", 1);
    g = vs_gguf_open_memory(b.p, b.n, "kvonly.gguf", &err);
    VT_CHECK(g != NULL, "metadata-only file: %s", err.msg);
    vs_gguf_close(g);

    /* files on disk: missing, directory, empty */
    g = vs_gguf_open("/nonexistent/dir/model.gguf", &err);
    VT_CHECK(!g && err.code == VS_ERR_IO && strstr(err.msg, "/nonexistent/dir/model.gguf"), "%s", err.msg);
    g = vs_gguf_open(vt_tmpdir(), &err);
    VT_CHECK(!g && strstr(err.msg, vt_tmpdir()), "directory: %s", err.msg);
    char path[512];
    snprintf(path, sizeof(path), "%s/empty.gguf", vt_tmpdir());
    FILE *f = fopen(path, "wb");
    VT_REQUIRE(f, "create");
    fclose(f);
    g = vs_gguf_open(path, &err);
    VT_CHECK(!g && strstr(err.msg, path), "empty file: %s", err.msg);
    free(b.p);
}

/* ---------------------------------------------------------------------------------------------- */
/* fuzz seeds (fuzz/corpus/fuzz_gguf/), each < 4 KB */

static void write_seed(vs_gguf_writer *w, const char *dir, const char *name, int patch_version) {
    vs_error err = {0};
    uint8_t *mem;
    size_t size;
    VT_REQUIRE(vs_gguf_write_memory(w, &mem, &size, &err) == VS_OK, "%s", err.msg);
    if (patch_version) memcpy(mem + 4, &patch_version, 4);
    VT_REQUIRE(size < 4096, "seed %s is %zu bytes", name, size);
    vs_gguf *g = vs_gguf_open_memory(mem, size, name, &err);
    VT_REQUIRE(g, "seed %s must parse: %s", name, err.msg);
    vs_gguf_close(g);
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    VT_REQUIRE(f && fwrite(mem, 1, size, f) == size, "write %s", path);
    fclose(f);
    printf("wrote %s (%zu bytes)\n", path, size);
    vs_free(mem);
    vs_gguf_writer_free(w);
}

static int write_seeds(const char *dir) {
    mkdir(dir, 0755);
    vs_error err = {0};
    /* 1: scalars of every type, no tensors */
    vs_gguf_writer *w = vs_gguf_writer_new();
    vs_gguf_set_str(w, "general.architecture", "llama");
    vs_gguf_set_u8(w, "u8", 1), vs_gguf_set_i8(w, "i8", -1), vs_gguf_set_u16(w, "u16", 2);
    vs_gguf_set_i16(w, "i16", -2), vs_gguf_set_u32(w, "u32", 3), vs_gguf_set_i32(w, "i32", -3);
    vs_gguf_set_f32(w, "f32", 0.5f), vs_gguf_set_bool(w, "bool", true), vs_gguf_set_u64(w, "u64", 4);
    vs_gguf_set_i64(w, "i64", -4), vs_gguf_set_f64(w, "f64", 0.25);
    write_seed(w, dir, "scalars.gguf", 0);
    /* 2: arrays, string arrays, one tensor */
    w = vs_gguf_writer_new();
    /* "\xe2\x96\x81" "a": split so the 'a' does not join the hex escape */
    const char *toks[] = {"<unk>", "<s>", "</s>", ("\xe2\x96\x81" "a"), "b", ""};
    float scores[6] = {0, 0, 0, -1, -2, -3};
    int32_t types[6] = {2, 3, 3, 1, 1, 1};
    vs_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    vs_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 6);
    vs_gguf_set_arr(w, "tokenizer.ggml.scores", VS_GGUF_F32, scores, 6);
    vs_gguf_set_arr(w, "tokenizer.ggml.token_type", VS_GGUF_I32, types, 6);
    float emb[4 * 6] = {0};
    int64_t ne[2] = {4, 6};
    vs_gguf_add_tensor(w, "token_embd.weight", VS_TYPE_F32, 2, ne, emb, &err);
    write_seed(w, dir, "arrays.gguf", 0);
    /* 3: tensors of several types */
    w = vs_gguf_writer_new();
    vs_gguf_set_str(w, "general.architecture", "llama");
    vs_gguf_set_u32(w, "llama.block_count", 1);
    uint8_t blob[1024] = {0};
    int64_t n32[2] = {32, 2}, n8[1] = {8}, n256[1] = {256};
    vs_gguf_add_tensor(w, "q8", VS_TYPE_Q8_0, 2, n32, blob, &err);
    vs_gguf_add_tensor(w, "q4", VS_TYPE_Q4_0, 2, n32, blob, &err);
    vs_gguf_add_tensor(w, "f16", VS_TYPE_F16, 1, n8, blob, &err);
    vs_gguf_add_tensor(w, "bf16", VS_TYPE_BF16, 1, n8, blob, &err);
    vs_gguf_add_tensor(w, "q4k", 12, 1, n256, blob, &err);
    write_seed(w, dir, "tensors.gguf", 0);
    /* 4: version 2, alignment 64 */
    w = vs_gguf_writer_new();
    vs_gguf_set_u32(w, "general.alignment", 64);
    vs_gguf_add_tensor(w, "a", VS_TYPE_F32, 1, n8, blob, &err);
    vs_gguf_add_tensor(w, "b", VS_TYPE_F32, 1, n8, blob, &err);
    write_seed(w, dir, "v2_align64.gguf", 2);
    return vt_finish("gguf seeds");
}

/* `vlmspec gguf` on a good file (exit 0, shows keys and tensors) and on bad ones (exit 1, names the file). */
static void test_cli(void) {
    const char *env = getenv("VLMSPEC_BIN");
    struct stat st;
    if (stat(vt_cli(), &st) != 0) {
        VT_CHECK(!(env && *env), "VLMSPEC_BIN=%s does not exist", env);
        printf("SKIP (part): CLI binary %s not built\n", vt_cli());
        return;
    }
    vs_gguf_writer *w = vs_gguf_writer_new();
    fill_writer(w);
    char path[512], out[600], bad[512];
    snprintf(path, sizeof(path), "%s/cli.gguf", vt_tmpdir());
    snprintf(out, sizeof(out), "%s/cli.txt", vt_tmpdir());
    vs_error err = {0};
    VT_REQUIRE(vs_gguf_write(w, path, &err) == VS_OK, "%s", err.msg);
    vs_gguf_writer_free(w);
    VT_CHECK(vt_run("%s gguf %s > %s 2>&1", vt_cli(), path, out) == 0, "vlmspec gguf on a good file");
    uint8_t *txt = NULL;
    size_t n = 0;
    VT_REQUIRE(vs_read_file(out, &txt, &n, &err) == VS_OK, "%s", err.msg);
    const char *want[] = {"version: 3", "a.str", "string[4]", "\"<unk>\"", "q4k.w", "Q4_K", "[256, 2]", "s.u64",
                          "9223372036854775813", "tensors: 9"};
    for (size_t i = 0; i < VS_ARRAY_LEN(want); i++)
        VT_CHECK(strstr((char *)txt, want[i]), "CLI output lacks '%s':\n%s", want[i], (char *)txt);
    vs_free(txt);
    snprintf(bad, sizeof(bad), "%s/bad.gguf", vt_tmpdir());
    FILE *f = fopen(bad, "wb");
    VT_REQUIRE(f, "create");
    fwrite("GGUF\x03\0\0\0\xff\xff", 1, 10, f);
    fclose(f);
    VT_CHECK(vt_run("%s gguf %s > %s 2>&1", vt_cli(), bad, out) == 1, "vlmspec gguf on a truncated file exits 1");
    VT_REQUIRE(vs_read_file(out, &txt, &n, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(strstr((char *)txt, "bad.gguf") && strstr((char *)txt, "truncated"), "CLI error: %s", (char *)txt);
    vs_free(txt);
    VT_CHECK(vt_run("%s gguf > /dev/null 2>&1", vt_cli()) == 2, "no FILE is a usage error");
    VT_CHECK(vt_run("%s gguf --help > /dev/null 2>&1", vt_cli()) == 0, "--help");
}

/* NaN and infinity in weights are found at load, with the file, tensor and element named. */
static void test_nonfinite(void) {
    const vs_type types[] = {VS_TYPE_F32, VS_TYPE_F16, VS_TYPE_BF16, VS_TYPE_Q8_0, VS_TYPE_Q4_0};
    const int64_t ne[2] = {64, 3};
    float w[192];
    for (int i = 0; i < 192; i++) w[i] = 0.01f * (float)(i % 17) - 0.05f;
    for (size_t t = 0; t < VS_ARRAY_LEN(types); t++) {
        for (int kind = 0; kind < 3; kind++) { /* clean, NaN, +infinity */
            const size_t bytes = vs_type_row_bytes(types[t], 64) * 3;
            uint8_t *q = vs_malloc(bytes);
            VT_REQUIRE(q, "alloc");
            vs_quantize_row(types[t], w, q, 192);
            const int64_t at = types[t] == VS_TYPE_Q8_0 || types[t] == VS_TYPE_Q4_0 ? 160 : 133;
            if (kind) {
                const bool nan = kind == 1;
                switch (types[t]) {
                case VS_TYPE_F32: {
                    const float v = nan ? NAN : INFINITY;
                    memcpy(q + 4 * at, &v, 4);
                    break;
                }
                case VS_TYPE_F16: { const uint16_t h = nan ? 0x7e00 : 0x7c00; memcpy(q + 2 * at, &h, 2); break; }
                case VS_TYPE_BF16: { const uint16_t h = nan ? 0x7fc0 : 0x7f80; memcpy(q + 2 * at, &h, 2); break; }
                default: { /* the scale of the block holding element `at` */
                    const uint16_t h = nan ? 0x7e00 : 0x7c00;
                    memcpy(q + vs_type_block_bytes(types[t]) * (size_t)(at / 32), &h, 2);
                    break;
                }
                }
            }
            vs_gguf_writer *wr = vs_gguf_writer_new();
            vs_error err = {0};
            VT_REQUIRE(vs_gguf_add_tensor(wr, "clean.weight", VS_TYPE_F32, 2, ne, w, &err) == VS_OK, "%s", err.msg);
            VT_REQUIRE(vs_gguf_add_tensor(wr, "blk.1.ffn_up.weight", types[t], 2, ne, q, &err) == VS_OK, "%s",
                       err.msg);
            uint8_t *file = NULL;
            size_t size = 0;
            VT_REQUIRE(vs_gguf_write_memory(wr, &file, &size, &err) == VS_OK, "%s", err.msg);
            vs_gguf_writer_free(wr);
            vs_gguf *g = vs_gguf_open_memory(file, size, "bad.gguf", &err);
            VT_REQUIRE(g, "%s", err.msg);
            vs_status st = vs_gguf_check_finite(g, &err);
            if (!kind) {
                VT_CHECK(st == VS_OK, "%s clean: %s", vs_type_name(types[t]), err.msg);
            } else {
                char want[64];
                snprintf(want, sizeof(want), "element %lld", (long long)at);
                VT_CHECK(st == VS_ERR_FORMAT && strstr(err.msg, "bad.gguf") && strstr(err.msg, "blk.1.ffn_up.weight") &&
                             strstr(err.msg, want),
                         "%s kind %d: %s", vs_type_name(types[t]), kind, err.msg);
            }
            vs_gguf_close(g);
            vs_free(file);
            vs_free(q);
        }
    }
    /* through the CLI: a shipped model with one NaN weight fails at load, naming the tensor */
    const char *cli = vt_cli();
    if (!cli || access("models/target.gguf", R_OK) != 0) return;
    vs_error err = {0};
    vs_gguf *g = vs_gguf_open("models/target.gguf", &err);
    VT_REQUIRE(g, "%s", err.msg);
    const vs_gguf_tensor *ti = vs_gguf_find_tensor(g, "blk.0.attn_q.weight");
    VT_REQUIRE(ti && ti->type == VS_TYPE_F16, "target's blk.0.attn_q.weight is F16");
    const size_t off = (size_t)(vs_gguf_data_offset(g) + ti->offset) + 2 * 5;
    vs_gguf_close(g);
    uint8_t *d = NULL;
    size_t n = 0;
    VT_REQUIRE(vs_read_file("models/target.gguf", &d, &n, &err) == VS_OK, "%s", err.msg);
    d[off] = 0x00, d[off + 1] = 0x7e; /* F16 NaN, little-endian */
    char bad[4200], log[4300];
    snprintf(bad, sizeof(bad), "%s/nan.gguf", vt_tmpdir());
    snprintf(log, sizeof(log), "%s/nan.err", vt_tmpdir());
    FILE *f = fopen(bad, "wb");
    VT_REQUIRE(f && fwrite(d, 1, n, f) == n && fclose(f) == 0, "write %s", bad);
    vs_free(d);
    int rc = vt_run("%s generate --raw -m '%s' -p hi -n 2 > /dev/null 2> '%s'", cli, bad, log);
    VT_CHECK(rc == 1 && vt_file_has(log, "nan.gguf: tensor blk.0.attn_q.weight holds a non-finite value") &&
                 vt_file_has(log, "element 5"),
             "generate with a NaN weight: rc %d", rc);
}

/* K-quant tensors in a file: a NaN / infinite d or dmin is refused naming the block; rows that are not
 * whole super-blocks, truncated data and a type vlmspec cannot compute with give errors naming the file,
 * the tensor and the type. The file is patched after writing: name, n_dims (u32), ne[] (u64), type (u32). */
static uint8_t *kq_file(vs_type t, const uint8_t *q, size_t *size) {
    const int64_t ne[2] = {512, 2};
    vs_gguf_writer *wr = vs_gguf_writer_new();
    vs_error err = {0};
    VT_REQUIRE(vs_gguf_add_tensor(wr, "blk.0.ffn_gate.weight", t, 2, ne, q, &err) == VS_OK, "%s", err.msg);
    uint8_t *file = NULL;
    VT_REQUIRE(vs_gguf_write_memory(wr, &file, size, &err) == VS_OK, "%s", err.msg);
    vs_gguf_writer_free(wr);
    return file;
}

static size_t kq_info_at(const uint8_t *file, size_t size) { /* the byte after the tensor's name */
    static const char name[] = "blk.0.ffn_gate.weight";
    for (size_t i = 0; i + sizeof(name) - 1 <= size; i++)
        if (!memcmp(file + i, name, sizeof(name) - 1)) return i + sizeof(name) - 1;
    VT_REQUIRE(0, "tensor name not found in the written file");
    return 0;
}

static void test_kquant_files(void) {
    static const vs_type kt[] = {VS_TYPE_Q4_K, VS_TYPE_Q5_K, VS_TYPE_Q6_K};
    float w[1024];
    for (int i = 0; i < 1024; i++) w[i] = 0.01f * (float)(i % 23) - 0.1f;
    uint8_t q[4 * 210];
    for (size_t t = 0; t < VS_ARRAY_LEN(kt); t++) {
        vs_quantize_row(kt[t], w, q, 1024);
        const size_t bb = vs_type_block_bytes(kt[t]);
        /* the scale fields: Q4_K/Q5_K d at 0 and dmin at 2; Q6_K d at 208; block 3 (element 768) */
        for (int k = 0; k < (kt[t] == VS_TYPE_Q6_K ? 1 : 2); k++) {
            uint8_t bad[4 * 210];
            memcpy(bad, q, sizeof(bad));
            const uint16_t h = k ? 0x7c00 : 0x7e00;
            memcpy(bad + 3 * bb + (kt[t] == VS_TYPE_Q6_K ? 208 : 2 * (size_t)k), &h, 2);
            size_t size;
            uint8_t *file = kq_file(kt[t], bad, &size);
            vs_error err = {0};
            vs_gguf *g = vs_gguf_open_memory(file, size, "kq.gguf", &err);
            VT_REQUIRE(g, "%s", err.msg);
            VT_CHECK(vs_gguf_check_finite(g, &err) == VS_ERR_FORMAT && strstr(err.msg, "kq.gguf") &&
                         strstr(err.msg, "blk.0.ffn_gate.weight") && strstr(err.msg, "element 768"),
                     "%s scale %d: %s", vs_type_name(kt[t]), k, err.msg);
            vs_gguf_close(g);
            vs_free(file);
        }
        size_t size;
        uint8_t *file = kq_file(kt[t], q, &size);
        vs_error err = {0};
        vs_gguf *g = vs_gguf_open_memory(file, size, "kq.gguf", &err);
        VT_REQUIRE(g, "%s", err.msg);
        VT_CHECK(vs_gguf_check_finite(g, &err) == VS_OK, "%s clean: %s", vs_type_name(kt[t]), err.msg);
        const int64_t ne[2] = {512, 2};
        VT_CHECK(vs_gguf_require_tensor(g, "blk.0.ffn_gate.weight", 2, ne, NULL, &err) == VS_OK, "%s: %s",
                 vs_type_name(kt[t]), err.msg);
        vs_gguf_close(g);
        const size_t at = kq_info_at(file, size);
        /* rows of 384 x 2 (the same bytes would hold 3 x 256): not whole super-blocks */
        uint8_t *patched = vs_malloc(size);
        VT_REQUIRE(patched, "alloc");
        memcpy(patched, file, size);
        const uint64_t ne0 = 384, ne1 = 2;
        memcpy(patched + at + 4, &ne0, 8);
        memcpy(patched + at + 12, &ne1, 8);
        g = vs_gguf_open_memory(patched, size, "kq.gguf", &err);
        VT_CHECK(!g && strstr(err.msg, "kq.gguf") && strstr(err.msg, "blk.0.ffn_gate.weight") &&
                     strstr(err.msg, vs_type_name(kt[t])) && strstr(err.msg, "384"),
                 "%s rows of 384: %s", vs_type_name(kt[t]), g ? "accepted" : err.msg);
        vs_gguf_close(g);
        /* truncated: the last super-block cut short */
        g = vs_gguf_open_memory(file, size - 100, "kq.gguf", &err);
        VT_CHECK(!g && strstr(err.msg, "kq.gguf") && strstr(err.msg, "blk.0.ffn_gate.weight"),
                 "%s truncated: %s", vs_type_name(kt[t]), g ? "accepted" : err.msg);
        vs_gguf_close(g);
        /* a K-quant vlmspec does not compute with (Q3_K, 110 bytes per 256: the data still fits) */
        memcpy(patched, file, size);
        const uint32_t q3k = 11;
        memcpy(patched + at + 4 + 16, &q3k, 4);
        g = vs_gguf_open_memory(patched, size, "kq.gguf", &err);
        VT_REQUIRE(g, "Q3_K file: %s", err.msg);
        VT_CHECK(vs_gguf_require_tensor(g, "blk.0.ffn_gate.weight", 2, ne, NULL, &err) == VS_ERR_UNSUPPORTED &&
                     strstr(err.msg, "kq.gguf") && strstr(err.msg, "blk.0.ffn_gate.weight") && strstr(err.msg, "Q3_K"),
                 "Q3_K required: %s", err.msg);
        vs_gguf_close(g);
        vs_free(patched);
        vs_free(file);
    }
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write-seeds")) return write_seeds(argv[2]);
    test_round_trip();
    test_writer_errors();
    test_hostile();
    test_real_files();
    test_cli();
    test_nonfinite();
    test_kquant_files();
    return vt_finish("gguf");
}
