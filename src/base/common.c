/* common: errors, allocation, clock, RNG, logging, progress. See common.h. */
#include "common.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

vs_status vs_error_set(vs_error *err, vs_status code, const char *fmt, ...) {
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    return code;
}

vs_status vs_error_wrap(vs_error *err, const char *fmt, ...) {
    if (!err) return VS_ERR_INVALID;
    char old[sizeof(err->msg)];
    memcpy(old, err->msg, sizeof(old));
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    /* Overlong messages are cut at the buffer's end on purpose: the head names the context. */
    if (n >= 0 && (size_t)n < sizeof(err->msg) - 2) {
        size_t used = (size_t)n;
        err->msg[used++] = ':';
        err->msg[used++] = ' ';
        size_t room = sizeof(err->msg) - used - 1, len = strlen(old);
        if (len > room) len = room;
        memcpy(err->msg + used, old, len);
        err->msg[used + len] = 0;
    }
    return err->code;
}

void vs_error_clear(vs_error *err) {
    if (err) {
        err->code = VS_OK;
        err->msg[0] = 0;
    }
}

const char *vs_status_name(vs_status s) {
    switch (s) {
    case VS_OK: return "ok";
    case VS_ERR_INVALID: return "invalid input";
    case VS_ERR_IO: return "I/O error";
    case VS_ERR_FORMAT: return "format error";
    case VS_ERR_NOMEM: return "out of memory";
    case VS_ERR_RANGE: return "out of range";
    case VS_ERR_UNSUPPORTED: return "unsupported";
    }
    return "unknown";
}

/* Sizes above this are treated as corrupt input rather than attempted (64 GiB). */
#define VS_ALLOC_LIMIT ((size_t)1 << 36)

void *vs_malloc(size_t size) {
    if (size > VS_ALLOC_LIMIT) return NULL;
    void *p = NULL;
    if (posix_memalign(&p, 64, size ? size : 1) != 0) return NULL;
    return p;
}

void *vs_calloc(size_t n, size_t size) {
    if (size && n > VS_ALLOC_LIMIT / size) return NULL;
    void *p = vs_malloc(n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

void *vs_realloc(void *p, size_t size) {
    if (size > VS_ALLOC_LIMIT) return NULL;
    return realloc(p, size ? size : 1);
}

void vs_free(void *p) { free(p); }

vs_status vs_grow(void **p, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return VS_OK;
    int64_t c = *cap > 0 ? *cap : 16;
    while (c < need) c *= 2;
    if (c > INT32_MAX) return VS_ERR_NOMEM;
    void *n = vs_realloc(*p, elem * (size_t)c);
    if (!n) return VS_ERR_NOMEM;
    *p = n, *cap = (int32_t)c;
    return VS_OK;
}

char *vs_strdup(const char *s) { return vs_strndup(s, strlen(s)); }

char *vs_strndup(const char *s, size_t n) {
    char *d = vs_malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

double vs_time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t vs_mix64(uint64_t x) {
    uint64_t z = x + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t splitmix64(uint64_t *x) {
    const uint64_t z = vs_mix64(*x);
    *x += 0x9e3779b97f4a7c15ULL;
    return z;
}

void vs_rng_seed(vs_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t vs_rng_u64(vs_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double vs_rng_uniform(vs_rng *r) { return (double)(vs_rng_u64(r) >> 11) * 0x1.0p-53; }

float vs_rng_normal(vs_rng *r) {
    double u1 = vs_rng_uniform(r), u2 = vs_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint32_t vs_rng_below(vs_rng *r, uint32_t n) {
    /* Lemire's multiply-shift with rejection: unbiased. */
    uint64_t m = (uint64_t)(uint32_t)(vs_rng_u64(r) >> 32) * n;
    uint32_t l = (uint32_t)m;
    if (l < n) {
        uint32_t t = (uint32_t)(-n) % n;
        while (l < t) {
            m = (uint64_t)(uint32_t)(vs_rng_u64(r) >> 32) * n;
            l = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

void vs_log(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

void vs_progress_begin(vs_progress *p, const char *label, int64_t total) {
    p->label = label;
    p->total = total;
    p->t_start = p->t_last = p->rate_t0 = vs_time_now();
    p->rate_done0 = 0;
    p->tty = isatty(2);
    p->every_s = p->tty ? 0.2 : 10.0;
}

static void progress_print(vs_progress *p, int64_t done, const char *extra, bool final) {
    double el = vs_time_now() - p->t_start;
    double rel = vs_time_now() - p->rate_t0;
    int64_t rd = done - p->rate_done0;
    double eta = (rd > 0 && p->total > done) ? rel * (double)(p->total - done) / (double)rd : 0;
    fprintf(stderr, "%s%s %lld/%lld %s elapsed %02d:%02d ETA %02d:%02d%s", p->tty ? "\r" : "", p->label,
            (long long)done, (long long)p->total, extra ? extra : "", (int)el / 60, (int)el % 60,
            (int)eta / 60, (int)eta % 60, (p->tty && !final) ? "\033[K" : "\n");
    fflush(stderr);
}

void vs_progress_update(vs_progress *p, int64_t done, const char *extra_fmt, ...) {
    double now = vs_time_now();
    if (now - p->t_last < p->every_s) return;
    p->t_last = now;
    char extra[256] = "";
    if (extra_fmt) {
        va_list ap;
        va_start(ap, extra_fmt);
        vsnprintf(extra, sizeof(extra), extra_fmt, ap);
        va_end(ap);
    }
    progress_print(p, done, extra, false);
}

void vs_progress_end(vs_progress *p, int64_t done) { progress_print(p, done, "", true); }

vs_status vs_read_file(const char *path, uint8_t **data, size_t *size, vs_error *err) {
    *data = NULL;
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return vs_error_set(err, VS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        vs_status s = vs_error_set(err, VS_ERR_IO, "%s: cannot inspect: %s", path, strerror(errno));
        fclose(f);
        return s;
    }
    if (S_ISDIR(st.st_mode)) {
        fclose(f);
        return vs_error_set(err, VS_ERR_IO, "%s: is a directory", path);
    }
    /* A regular file is read at its size; anything else (a pipe, /dev/stdin, a procfs file whose size
     * reads 0, /dev/zero) is read to its end in chunks, up to VS_READ_STREAM_MAX bytes. */
    bool regular = S_ISREG(st.st_mode) && st.st_size > 0;
    if (regular && (uint64_t)st.st_size >= (uint64_t)SIZE_MAX) {
        fclose(f);
        return vs_error_set(err, VS_ERR_NOMEM, "%s: too large (%lld bytes)", path, (long long)st.st_size);
    }
    size_t cap = regular ? (size_t)st.st_size + 1 : 65536, n = 0;
    uint8_t *buf = vs_malloc(cap);
    if (!buf) {
        fclose(f);
        return vs_error_set(err, VS_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, cap);
    }
    for (;;) {
        if (n + 1 >= cap) {
            if (regular || cap >= (size_t)VS_READ_STREAM_MAX + 1) {
                if (regular) break; /* grew while being read: take what its size said */
                vs_free(buf);
                fclose(f);
                return vs_error_set(err, VS_ERR_RANGE, "%s: not a regular file and longer than %d MiB", path,
                                    (int)(VS_READ_STREAM_MAX >> 20));
            }
            size_t ncap = VS_MIN(cap * 2, (size_t)VS_READ_STREAM_MAX + 1);
            uint8_t *nb = vs_malloc(ncap);
            if (!nb) {
                vs_free(buf);
                fclose(f);
                return vs_error_set(err, VS_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, ncap);
            }
            memcpy(nb, buf, n);
            vs_free(buf);
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    bool failed = ferror(f);
    int e = errno;
    fclose(f);
    if (failed || (regular && n != (size_t)st.st_size)) {
        vs_free(buf);
        return vs_error_set(err, VS_ERR_IO, "%s: short read: %s", path, failed ? strerror(e) : "file shrank while read");
    }
    buf[n] = 0;
    *data = buf;
    *size = n;
    return VS_OK;
}

double vs_mean_row_norm(const float *x, int64_t rows, int64_t width) {
    double sum = 0;
    for (int64_t i = 0; i < rows; i++) {
        double q = 0;
        for (int64_t c = 0; c < width; c++) q += (double)x[i * width + c] * x[i * width + c];
        sum += sqrt(q);
    }
    return rows > 0 ? sum / (double)rows : 0;
}

int vs_utf8_valid_len(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    int len;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    if ((size_t)len > n) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (int i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}
