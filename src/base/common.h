/* common: what every module shares and nothing else.
 * Owns: the error type (vs_status + message) that library functions report bad input with,
 * the one allocator path (vs_malloc & co, 64-byte aligned), a monotonic clock, a seedable RNG,
 * progress/log output to stderr, whole-file reads and the UTF-8 sequence check. No mutable globals:
 * everything here is per call or per object. */
#ifndef VS_COMMON_H
#define VS_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum vs_status {
    VS_OK = 0,
    VS_ERR_INVALID,     /* bad argument or malformed input */
    VS_ERR_IO,          /* file could not be opened / read / written */
    VS_ERR_FORMAT,      /* file content violates its format */
    VS_ERR_NOMEM,       /* allocation failed or a size is absurd */
    VS_ERR_RANGE,       /* a value is outside what this build supports (context, dims ...) */
    VS_ERR_UNSUPPORTED, /* valid input we do not implement (e.g. a tensor type) */
} vs_status;

/* An error report. Library functions take `vs_error *err` last (may be NULL) and return a
 * vs_status (or NULL for constructors); on failure err->msg names the file/object and the problem. */
typedef struct vs_error {
    vs_status code;
    char msg[512];
} vs_error;

/* Sets err (if non-NULL) and returns code, so callers can `return vs_error_set(err, ...)`. */
vs_status vs_error_set(vs_error *err, vs_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefixes an existing message with context ("loading x.gguf: " + old message). */
vs_status vs_error_wrap(vs_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void vs_error_clear(vs_error *err);
const char *vs_status_name(vs_status s);

/* Allocation: all library memory goes through these. vs_malloc is 64-byte aligned (SIMD, no false
 * sharing). They return NULL on failure (and for absurd sizes) and never abort. */
void *vs_malloc(size_t size);
void *vs_calloc(size_t n, size_t size); /* checks n * size for overflow */
void *vs_realloc(void *p, size_t size); /* NOT aligned beyond malloc's guarantee */
/* Grows the array *p of *cap elements of elem bytes to hold at least need (doubling from 16; contents
 * kept); VS_ERR_NOMEM leaves *p and *cap as they were. */
vs_status vs_grow(void **p, int32_t *cap, int32_t need, size_t elem);
void vs_free(void *p);                  /* frees vs_malloc/vs_calloc memory */
char *vs_strdup(const char *s);
char *vs_strndup(const char *s, size_t n);

/* Monotonic time in seconds. */
double vs_time_now(void);
/* Mean L2 norm of `rows` rows of `width` floats (row-major), accumulated in double; 0 for no rows. */
double vs_mean_row_norm(const float *x, int64_t rows, int64_t width);

/* Seedable RNG (xoshiro256**, seeded by splitmix64). Deterministic for a seed on every platform. */
typedef struct vs_rng {
    uint64_t s[4];
} vs_rng;
void vs_rng_seed(vs_rng *r, uint64_t seed);
/* One splitmix64 step as a hash of x (a well-mixed 64-bit value; the seeding of vs_rng_seed). */
uint64_t vs_mix64(uint64_t x);
uint64_t vs_rng_u64(vs_rng *r);
double vs_rng_uniform(vs_rng *r);         /* [0, 1) with 53 random bits */
float vs_rng_normal(vs_rng *r);           /* standard normal (Box-Muller) */
uint32_t vs_rng_below(vs_rng *r, uint32_t n); /* uniform in [0, n), unbiased; n > 0 */

/* Logging to stderr. vs_log_level: 0 quiet, 1 info (default), 2 debug. Passed explicitly where it
 * matters; the env var VLMSPEC_LOG sets the default the CLI uses. */
void vs_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Progress line for long work: "label  step/total  extra  ETA mm:ss", redrawn in place on a TTY,
 * printed every `every_s` seconds otherwise. The ETA extrapolates the rate since (rate_t0, rate_done0),
 * by default the start; a resumed job sets them to where this run began, so work done earlier (perhaps
 * at another speed) does not skew it. */
typedef struct vs_progress {
    const char *label;
    int64_t total;
    double t_start, t_last;
    double every_s;
    bool tty;
    double rate_t0;
    int64_t rate_done0;
} vs_progress;
void vs_progress_begin(vs_progress *p, const char *label, int64_t total);
void vs_progress_update(vs_progress *p, int64_t done, const char *extra_fmt, ...)
    __attribute__((format(printf, 3, 4)));
void vs_progress_end(vs_progress *p, int64_t done);

/* Whole-file read into a vs_malloc buffer (+1 NUL byte not counted in *size). A directory is an error;
 * a file that is not regular (a pipe, /dev/stdin, a procfs file) is read to its end, up to
 * VS_READ_STREAM_MAX bytes (more is an error, so /dev/zero fails instead of filling memory). */
#define VS_READ_STREAM_MAX (256ll << 20)
vs_status vs_read_file(const char *path, uint8_t **data, size_t *size, vs_error *err);

/* Length of the UTF-8 sequence starting at s[0] (n > 0 bytes available): 1..4 for a valid sequence,
 * 0 when s[0] does not start one (overlong forms, surrogates and code points above U+10FFFF are invalid;
 * a sequence cut short by n is invalid). */
int vs_utf8_valid_len(const uint8_t *s, size_t n);

#define VS_MIN(a, b) ((a) < (b) ? (a) : (b))
#define VS_MAX(a, b) ((a) > (b) ? (a) : (b))
#define VS_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
