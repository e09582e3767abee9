/* quant: type traits, scalar fp16/bf16 conversions and reference row (de)quantisation.
 * The block layouts and rounding rules follow ggml's reference quantisers (facts taken from the
 * GGUF/ggml format, code written here): Q8_0 d = amax / 127, q = round(x / d) (ties away from zero);
 * Q4_0 d = m / -8 where m is the signed value of largest magnitude, q = min(15, trunc(x / d + 8.5)),
 * low nibbles hold values 0..15 of the block and high nibbles values 16..31. */
#include "quant.h"

#include <math.h>
#include <string.h>

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

bool vs_type_supported(int type) {
    return type == VS_TYPE_F32 || type == VS_TYPE_F16 || type == VS_TYPE_BF16 || type == VS_TYPE_Q8_0 ||
           type == VS_TYPE_Q4_0;
}

const char *vs_type_name(int type) {
    switch (type) {
    case VS_TYPE_F32: return "F32";
    case VS_TYPE_F16: return "F16";
    case VS_TYPE_BF16: return "BF16";
    case VS_TYPE_Q8_0: return "Q8_0";
    case VS_TYPE_Q4_0: return "Q4_0";
    default: return "?";
    }
}

static int ascii_lower(int c) { return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c; }

int vs_type_from_name(const char *name) {
    static const int types[] = {VS_TYPE_F32, VS_TYPE_F16, VS_TYPE_BF16, VS_TYPE_Q8_0, VS_TYPE_Q4_0};
    if (!name) return -1;
    for (size_t i = 0; i < VS_ARRAY_LEN(types); i++) {
        const char *a = vs_type_name(types[i]), *b = name;
        while (*a && *b && ascii_lower((unsigned char)*a) == ascii_lower((unsigned char)*b)) a++, b++;
        if (!*a && !*b) return types[i];
    }
    return -1;
}

int64_t vs_type_block_size(vs_type t) {
    switch (t) {
    case VS_TYPE_Q8_0: return VS_QK8_0;
    case VS_TYPE_Q4_0: return VS_QK4_0;
    case VS_TYPE_F32:
    case VS_TYPE_F16:
    case VS_TYPE_BF16: return 1;
    }
    return 0;
}

size_t vs_type_block_bytes(vs_type t) {
    switch (t) {
    case VS_TYPE_F32: return 4;
    case VS_TYPE_F16: return 2;
    case VS_TYPE_BF16: return 2;
    case VS_TYPE_Q8_0: return sizeof(vs_block_q8_0);
    case VS_TYPE_Q4_0: return sizeof(vs_block_q4_0);
    }
    return 0;
}

size_t vs_type_row_bytes(vs_type t, int64_t n) {
    int64_t bs = vs_type_block_size(t);
    if (bs <= 0 || n < 0 || n % bs) return 0;
    return (size_t)(n / bs) * vs_type_block_bytes(t);
}

/* ---- scalar conversions ---- */

float vs_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* Inf / NaN (payload kept) */
    if (exp == 0) {
        if (man == 0) return bits_f32(sign);
        /* subnormal: man * 2^-24, exact in f32 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t vs_fp32_to_fp16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) return sign | 0x7e00 | (uint16_t)((x >> 13) & 0x1ff); /* NaN stays (quiet) NaN */
    if (x >= 0x477ff000u) return sign | 0x7c00; /* >= 65520 rounds to Inf (and Inf itself) */
    if (x < 0x38800000u) {                      /* below the smallest normal half, 2^-14 */
        if (x <= 0x33000000u) return sign;      /* <= 2^-25: rounds to zero (2^-25 is a tie to even 0) */
        uint32_t e = x >> 23;
        uint32_t m = (x & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* value = m * 2^(e-150); in units of 2^-24: m >> (126 - e) */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return sign | (uint16_t)r; /* r == 0x400 is the smallest normal: still correct */
    }
    uint32_t r = x - 0x38000000u; /* rebias the exponent from 127 to 15 */
    r += 0xfffu + ((r >> 13) & 1);
    return sign | (uint16_t)(r >> 13);
}

float vs_bf16_to_fp32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t vs_fp32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* ---- rows ---- */

static void quantize_q8_0(const float *x, vs_block_q8_0 *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += VS_QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < VS_QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = vs_fp32_to_fp16(d);
        for (int j = 0; j < VS_QK8_0; j++) y[b].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

static void quantize_q4_0(const float *x, vs_block_q4_0 *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += VS_QK4_0) {
        float amax = 0.0f, m = 0.0f;
        for (int j = 0; j < VS_QK4_0; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                m = x[j];
            }
        }
        float d = m / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = vs_fp32_to_fp16(d);
        for (int j = 0; j < VS_QK4_0 / 2; j++) {
            /* x * id + 8.5 lies in [0.5, 16.5]: the truncating cast is well defined. */
            int lo = (int)(int8_t)(x[j] * id + 8.5f);
            int hi = (int)(int8_t)(x[j + VS_QK4_0 / 2] * id + 8.5f);
            lo = lo > 15 ? 15 : lo;
            hi = hi > 15 ? 15 : hi;
            y[b].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

void vs_dequantize_row(vs_type t, const void *src, float *dst, int64_t n) {
    switch (t) {
    case VS_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case VS_TYPE_F16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = vs_fp16_to_fp32(s[i]);
        return;
    }
    case VS_TYPE_BF16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = vs_bf16_to_fp32(s[i]);
        return;
    }
    case VS_TYPE_Q8_0: {
        const vs_block_q8_0 *b = src;
        for (int64_t i = 0; i < n / VS_QK8_0; i++) {
            float d = vs_fp16_to_fp32(b[i].d);
            for (int j = 0; j < VS_QK8_0; j++) dst[i * VS_QK8_0 + j] = (float)b[i].qs[j] * d;
        }
        return;
    }
    case VS_TYPE_Q4_0: {
        const vs_block_q4_0 *b = src;
        for (int64_t i = 0; i < n / VS_QK4_0; i++) {
            float d = vs_fp16_to_fp32(b[i].d);
            float *o = dst + i * VS_QK4_0;
            for (int j = 0; j < VS_QK4_0 / 2; j++) {
                o[j] = (float)((b[i].qs[j] & 0x0f) - 8) * d;
                o[j + VS_QK4_0 / 2] = (float)((b[i].qs[j] >> 4) - 8) * d;
            }
        }
        return;
    }
    }
}

void vs_quantize_row(vs_type t, const float *src, void *dst, int64_t n) {
    switch (t) {
    case VS_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case VS_TYPE_F16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = vs_fp32_to_fp16(src[i]);
        return;
    }
    case VS_TYPE_BF16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = vs_fp32_to_bf16(src[i]);
        return;
    }
    case VS_TYPE_Q8_0: quantize_q8_0(src, dst, n / VS_QK8_0); return;
    case VS_TYPE_Q4_0: quantize_q4_0(src, dst, n / VS_QK4_0); return;
    }
}
