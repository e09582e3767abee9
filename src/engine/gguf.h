/* gguf: reading and writing llama.cpp's GGUF files (versions 2 and 3; writes 3).
 * Owns: the parsed view of one file (metadata index + tensor index over one read-only mmap) and the
 * writer that builds a file from metadata and tensors. Every count, length and offset read from a
 * file is checked against the file size before use; a malformed file gives a vs_error naming the
 * file and the problem. Strings returned by the reader point into the mapping (NOT NUL-terminated:
 * use the length) and live as long as the vs_gguf. */
#ifndef VS_GGUF_H
#define VS_GGUF_H

#include "common.h"

typedef enum vs_gguf_type {
    VS_GGUF_U8 = 0,
    VS_GGUF_I8 = 1,
    VS_GGUF_U16 = 2,
    VS_GGUF_I16 = 3,
    VS_GGUF_U32 = 4,
    VS_GGUF_I32 = 5,
    VS_GGUF_F32 = 6,
    VS_GGUF_BOOL = 7,
    VS_GGUF_STRING = 8,
    VS_GGUF_ARRAY = 9,
    VS_GGUF_U64 = 10,
    VS_GGUF_I64 = 11,
    VS_GGUF_F64 = 12,
} vs_gguf_type;

typedef struct vs_gguf_str {
    const char *ptr; /* not NUL-terminated */
    uint64_t len;
} vs_gguf_str;

typedef struct vs_gguf_tensor {
    char name[64];     /* NUL-terminated copy */
    int n_dims;        /* 1..4 */
    int64_t ne[4];     /* elements per dim, ne[0] fastest; unused dims are 1 */
    int type;          /* ggml type id (vs_type for the ones we support) */
    uint64_t offset;   /* relative to the data section */
    uint64_t nbytes;   /* bytes of data */
    const void *data;  /* into the mapping */
} vs_gguf_tensor;

typedef struct vs_gguf vs_gguf;

/* Opens and fully validates a file (mmap'ed read-only). NULL + err on failure. */
vs_gguf *vs_gguf_open(const char *path, vs_error *err);
/* Same over a caller-owned buffer (fuzzing, tests); the buffer must outlive the vs_gguf.
 * `name` is used in error messages. */
vs_gguf *vs_gguf_open_memory(const void *data, size_t size, const char *name, vs_error *err);
void vs_gguf_close(vs_gguf *g);

const char *vs_gguf_name(const vs_gguf *g); /* path or name given at open */
uint32_t vs_gguf_version(const vs_gguf *g);
uint32_t vs_gguf_alignment(const vs_gguf *g);
uint64_t vs_gguf_data_offset(const vs_gguf *g); /* file offset of the tensor data section */
size_t vs_gguf_size(const vs_gguf *g);          /* file size in bytes */
/* Tells the OS that the file bytes [p, p + n) are not needed for now (madvise MADV_DONTNEED on the whole
 * pages inside the range) when g maps a file; a later read faults them back in from the file, so the
 * bytes stay valid. Does nothing for vs_gguf_open_memory buffers. For callers that keep a converted copy. */
void vs_gguf_release(const vs_gguf *g, const void *p, size_t n);

/* --- metadata --- */
int64_t vs_gguf_n_kv(const vs_gguf *g);
int64_t vs_gguf_find_key(const vs_gguf *g, const char *key); /* index or -1 */
vs_gguf_str vs_gguf_key_at(const vs_gguf *g, int64_t i);
vs_gguf_type vs_gguf_kv_type(const vs_gguf *g, int64_t i);
/* For arrays: element type and count. */
vs_gguf_type vs_gguf_arr_type(const vs_gguf *g, int64_t i);
uint64_t vs_gguf_arr_len(const vs_gguf *g, int64_t i);
/* Raw pointer to a numeric array's elements (little-endian, unaligned: memcpy from it). */
const void *vs_gguf_arr_data(const vs_gguf *g, int64_t i);
/* Element j of a string array, O(1). */
vs_gguf_str vs_gguf_arr_str(const vs_gguf *g, int64_t i, uint64_t j);
/* Entry i's value by index: a raw pointer to a scalar (unaligned, memcpy from it; NULL for strings
 * and arrays), or a string value ({NULL, 0} if not a string). Out-of-range i gives NULL / {NULL, 0}
 * (and type -1 from vs_gguf_kv_type / vs_gguf_arr_type). */
const void *vs_gguf_kv_data(const vs_gguf *g, int64_t i);
vs_gguf_str vs_gguf_kv_str(const vs_gguf *g, int64_t i);
/* "u8", "string", "array", ... ; "invalid" for other values. */
const char *vs_gguf_kv_type_name(vs_gguf_type t);

/* Typed getters by key. Return 1 if found and convertible, 0 if absent, -1 if present with an
 * incompatible type (any integer type converts to int64 when in range; f32/f64 and integers to
 * double). */
int vs_gguf_get_int(const vs_gguf *g, const char *key, int64_t *out);
int vs_gguf_get_float(const vs_gguf *g, const char *key, double *out);
int vs_gguf_get_bool(const vs_gguf *g, const char *key, bool *out);
int vs_gguf_get_str(const vs_gguf *g, const char *key, vs_gguf_str *out);
/* Numeric array as f32 (e.g. image_mean; f32/f64/integer elements are converted): copies
 * min(count, max) elements and returns the array's full count (which may exceed max: compare it
 * with what you expect), or -1 if the key is absent or not a numeric array. */
int64_t vs_gguf_get_f32_array(const vs_gguf *g, const char *key, float *out, int64_t max);

/* Required-key helpers: VS_ERR_FORMAT naming the file and key when absent or mistyped. */
vs_status vs_gguf_require_int(const vs_gguf *g, const char *key, int64_t *out, vs_error *err);
vs_status vs_gguf_require_float(const vs_gguf *g, const char *key, double *out, vs_error *err);
vs_status vs_gguf_require_str(const vs_gguf *g, const char *key, vs_gguf_str *out, vs_error *err);

/* Compares a vs_gguf_str with a C string. */
bool vs_gguf_str_eq(vs_gguf_str s, const char *c);

/* --- tensors --- */
/* Name of any ggml type id ("Q4_K"), "unknown" for ids outside ggml's table. The reader knows the
 * block size and bytes of every ggml type (K-quants, IQ types ...) so it validates files holding
 * them; a tensor id outside the table is a format error at open. Which types vlmspec can COMPUTE
 * with is quant.h's vs_type (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K); vs_gguf_require_tensor
 * checks that. */
const char *vs_gguf_ggml_type_name(int type);
int64_t vs_gguf_n_tensors(const vs_gguf *g);
const vs_gguf_tensor *vs_gguf_tensor_at(const vs_gguf *g, int64_t i);
const vs_gguf_tensor *vs_gguf_find_tensor(const vs_gguf *g, const char *name); /* NULL if absent */
/* Checks every tensor of a type vlmspec reads (F32, F16, BF16; the scales of Q8_0, Q4_0 and the
 * K-quants) for NaN and infinity. A model that holds one would only fail later, far from its cause
 * ("logit is NaN"), so the loaders call this: the error names the file, the tensor and the first bad
 * element. One pass over the weights at memory bandwidth (the same pages the first forward reads). */
vs_status vs_gguf_check_finite(const vs_gguf *g, vs_error *err);
/* Finds a tensor and checks its type is one of the supported vs_types and its shape equals
 * ne[0..n_dims) (pass n_dims = 0 to skip the shape check). VS_ERR_FORMAT naming file, tensor,
 * expected and actual shapes otherwise. */
vs_status vs_gguf_require_tensor(const vs_gguf *g, const char *name, int n_dims, const int64_t *ne,
                                 const vs_gguf_tensor **out, vs_error *err);

/* --- writer --- */
typedef struct vs_gguf_writer vs_gguf_writer;

vs_gguf_writer *vs_gguf_writer_new(void);
void vs_gguf_writer_free(vs_gguf_writer *w);
/* Setting a key that exists replaces it (keeping its position). Values are copied. The setters
 * return nothing: an allocation failure or a misuse is remembered and reported by vs_gguf_write. */
void vs_gguf_set_u8(vs_gguf_writer *w, const char *key, uint8_t v);
void vs_gguf_set_i8(vs_gguf_writer *w, const char *key, int8_t v);
void vs_gguf_set_u16(vs_gguf_writer *w, const char *key, uint16_t v);
void vs_gguf_set_i16(vs_gguf_writer *w, const char *key, int16_t v);
void vs_gguf_set_i64(vs_gguf_writer *w, const char *key, int64_t v);
void vs_gguf_set_f64(vs_gguf_writer *w, const char *key, double v);
void vs_gguf_set_str_n(vs_gguf_writer *w, const char *key, const char *v, uint64_t len); /* any bytes */
void vs_gguf_set_u32(vs_gguf_writer *w, const char *key, uint32_t v);
void vs_gguf_set_i32(vs_gguf_writer *w, const char *key, int32_t v);
void vs_gguf_set_u64(vs_gguf_writer *w, const char *key, uint64_t v);
void vs_gguf_set_f32(vs_gguf_writer *w, const char *key, float v);
void vs_gguf_set_bool(vs_gguf_writer *w, const char *key, bool v);
void vs_gguf_set_str(vs_gguf_writer *w, const char *key, const char *v);
void vs_gguf_set_arr(vs_gguf_writer *w, const char *key, vs_gguf_type elem_type, const void *data,
                     uint64_t n); /* numeric element types only */
void vs_gguf_set_arr_str(vs_gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
/* Copies every key of src whose name starts with prefix (e.g. "tokenizer."; "" = all), keeping
 * its exact type, arrays and string arrays included. */
vs_status vs_gguf_copy_kv(vs_gguf_writer *w, const vs_gguf *src, const char *prefix, vs_error *err);
/* Adds a tensor; data (nbytes implied by type and shape) is copied. */
vs_status vs_gguf_add_tensor(vs_gguf_writer *w, const char *name, int type, int n_dims,
                             const int64_t *ne, const void *data, vs_error *err);
/* Same without copying: data must stay valid until the last vs_gguf_write* call (large models). */
vs_status vs_gguf_add_tensor_ref(vs_gguf_writer *w, const char *name, int type, int n_dims,
                                 const int64_t *ne, const void *data, vs_error *err);
/* Writes the file (version 3, alignment 32 unless general.alignment (u32) was set; keys and tensors
 * in insertion order, each tensor's data padded to the alignment). Written through outfile.h (a
 * temporary and a rename; a device node is written in place, never replaced), so readers never see a
 * partial file and a failed write leaves none. The writer may be written again afterwards. */
vs_status vs_gguf_write(vs_gguf_writer *w, const char *path, vs_error *err);
/* Same into a new vs_malloc buffer (*data, *size); the caller vs_frees it. */
vs_status vs_gguf_write_memory(vs_gguf_writer *w, uint8_t **data, size_t *size, vs_error *err);

#endif
