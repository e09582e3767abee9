/* quant: type traits, scalar fp16/bf16 conversions and reference row (de)quantisation.
 * The block layouts and rounding rules follow ggml's reference quantisers (facts taken from the
 * GGUF/ggml format, code written here): Q8_0 d = amax / 127, q = round(x / d) (ties away from zero);
 * Q4_0 d = m / -8 where m is the signed value of largest magnitude, q = min(15, trunc(x / d + 8.5)),
 * low nibbles hold values 0..15 of the block and high nibbles values 16..31.
 * K-quants (layouts in quant.h): dequantisation is the format's formula with llama.cpp's float order
 * ((d * sc) * q - dmin * m; Q6_K (d * sc) * (q - 32)). The quantisers are simpler than llama.cpp's
 * (which search weighted-error-optimal scales), not bit-identical to them: see quantize_q45_k / _q6_k. */
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
           type == VS_TYPE_Q4_0 || vs_type_is_kquant(type);
}

const char *vs_type_name(int type) {
    switch (type) {
    case VS_TYPE_F32: return "F32";
    case VS_TYPE_F16: return "F16";
    case VS_TYPE_BF16: return "BF16";
    case VS_TYPE_Q8_0: return "Q8_0";
    case VS_TYPE_Q4_0: return "Q4_0";
    case VS_TYPE_Q4_K: return "Q4_K";
    case VS_TYPE_Q5_K: return "Q5_K";
    case VS_TYPE_Q6_K: return "Q6_K";
    default: return "?";
    }
}

static int ascii_lower(int c) { return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c; }

int vs_type_from_name(const char *name) {
    static const int types[] = {VS_TYPE_F32,  VS_TYPE_F16,  VS_TYPE_BF16, VS_TYPE_Q8_0,
                                VS_TYPE_Q4_0, VS_TYPE_Q4_K, VS_TYPE_Q5_K, VS_TYPE_Q6_K};
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
    case VS_TYPE_Q4_K:
    case VS_TYPE_Q5_K:
    case VS_TYPE_Q6_K: return VS_QK_K;
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
    case VS_TYPE_Q4_K: return sizeof(vs_block_q4_k);
    case VS_TYPE_Q5_K: return sizeof(vs_block_q5_k);
    case VS_TYPE_Q6_K: return sizeof(vs_block_q6_k);
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

/* ---- K-quants ---- */

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Packs sub-block j's 6-bit scale and min into scales[12] (the inverse of vs_kq_scale_min; the
 * array starts zeroed). */
static void kq_pack_scale_min(uint8_t *s, int j, int sc, int m) {
    if (j < 4) {
        s[j] |= (uint8_t)sc;
        s[j + 4] |= (uint8_t)m;
    } else {
        s[j + 4] = (uint8_t)((sc & 15) | ((m & 15) << 4));
        s[j - 4] |= (uint8_t)((sc >> 4) << 6);
        s[j] |= (uint8_t)((m >> 4) << 6);
    }
}

/* Q4_K (nmax 15) / Q5_K (nmax 31), one super-block: each sub-block of 32 maps [min(0, lo), hi] onto
 * 0..nmax (scale (hi - min) / nmax, min stored negated, so >= 0); the 8 scales and 8 mins become 6-bit
 * multiples of d = max scale / 63 and dmin = max min / 63 (fp16, round to nearest); the values are then
 * requantised against the stored (rounded) scale and min: q = clamp(round_even((x + dmin m) / (d sc))).
 * q[256] receives the codes in value order. */
static void quantize_q45_k_block(const float *x, int nmax, uint16_t *d_out, uint16_t *dmin_out,
                                 uint8_t scales[12], uint8_t q[VS_QK_K]) {
    float sc[8], mn[8], max_sc = 0.0f, max_mn = 0.0f;
    for (int j = 0; j < 8; j++) {
        float lo = 0.0f, hi = x[32 * j];
        for (int l = 0; l < 32; l++) {
            lo = fminf(lo, x[32 * j + l]);
            hi = fmaxf(hi, x[32 * j + l]);
        }
        sc[j] = hi > lo ? (hi - lo) / (float)nmax : 0.0f;
        mn[j] = -lo;
        max_sc = fmaxf(max_sc, sc[j]);
        max_mn = fmaxf(max_mn, mn[j]);
    }
    *d_out = vs_fp32_to_fp16(max_sc / 63.0f);
    *dmin_out = vs_fp32_to_fp16(max_mn / 63.0f);
    const float isc = max_sc > 0.0f ? 63.0f / max_sc : 0.0f, imn = max_mn > 0.0f ? 63.0f / max_mn : 0.0f;
    const float d = vs_fp16_to_fp32(*d_out), dmin = vs_fp16_to_fp32(*dmin_out);
    memset(scales, 0, 12);
    for (int j = 0; j < 8; j++) {
        int ls = clampi((int)rintf(sc[j] * isc), 0, 63), lm = clampi((int)rintf(mn[j] * imn), 0, 63);
        kq_pack_scale_min(scales, j, ls, lm);
        const float dd = d * (float)ls, dm = dmin * (float)lm;
        for (int l = 0; l < 32; l++)
            q[32 * j + l] = dd > 0.0f ? (uint8_t)clampi((int)rintf((x[32 * j + l] + dm) / dd), 0, nmax) : 0;
    }
}

static void quantize_q4_k(const float *x, vs_block_q4_k *y, int64_t nb) {
    uint8_t q[VS_QK_K];
    for (int64_t b = 0; b < nb; b++, x += VS_QK_K) {
        quantize_q45_k_block(x, 15, &y[b].d, &y[b].dmin, y[b].scales, q);
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) y[b].qs[32 * g + l] = (uint8_t)(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
    }
}

static void quantize_q5_k(const float *x, vs_block_q5_k *y, int64_t nb) {
    uint8_t q[VS_QK_K];
    for (int64_t b = 0; b < nb; b++, x += VS_QK_K) {
        quantize_q45_k_block(x, 31, &y[b].d, &y[b].dmin, y[b].scales, q);
        memset(y[b].qh, 0, sizeof(y[b].qh));
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) {
                int a = q[64 * g + l], c = q[64 * g + 32 + l];
                y[b].qs[32 * g + l] = (uint8_t)((a & 15) | ((c & 15) << 4));
                y[b].qh[l] |= (uint8_t)(((a >> 4) << (2 * g)) | ((c >> 4) << (2 * g + 1)));
            }
    }
}

/* Q6_K, per super-block: each sub-block of 16 takes the scale m / -32 for its value m of largest
 * magnitude (m lands on code 0, the far end of -32..31, as Q4_0 does); the 16 scales become signed 8-bit
 * multiples of d = s / -128 for the scale s of largest magnitude (fp16); values are then requantised
 * against the stored scales: q = clamp(round_even(x / (d sc)), -32, 31) + 32. */
static void quantize_q6_k(const float *x, vs_block_q6_k *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += VS_QK_K) {
        float sc[16], smax = 0.0f;
        for (int j = 0; j < 16; j++) {
            float amax = 0.0f, m = 0.0f;
            for (int l = 0; l < 16; l++)
                if (fabsf(x[16 * j + l]) > amax) amax = fabsf(x[16 * j + l]), m = x[16 * j + l];
            sc[j] = m / -32.0f;
            if (fabsf(sc[j]) > fabsf(smax)) smax = sc[j];
        }
        y[b].d = vs_fp32_to_fp16(smax / -128.0f);
        const float is = smax != 0.0f ? -128.0f / smax : 0.0f, d = vs_fp16_to_fp32(y[b].d);
        uint8_t q[VS_QK_K];
        for (int j = 0; j < 16; j++) {
            int ls = clampi((int)rintf(sc[j] * is), -128, 127);
            y[b].scales[j] = (int8_t)ls;
            const float dd = d * (float)ls;
            for (int l = 0; l < 16; l++)
                q[16 * j + l] = (uint8_t)(dd != 0.0f ? clampi((int)rintf(x[16 * j + l] / dd), -32, 31) + 32 : 32);
        }
        memset(y[b].qh, 0, sizeof(y[b].qh));
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++)
                for (int l = 0; l < 32; l++) {
                    int v = q[128 * h + 32 * k + l];
                    uint8_t *lo = &y[b].ql[64 * h + l + 32 * (k & 1)];
                    *lo = k < 2 ? (uint8_t)(v & 15) : (uint8_t)(*lo | ((v & 15) << 4));
                    y[b].qh[32 * h + l] |= (uint8_t)((v >> 4) << (2 * k));
                }
    }
}

static void dequantize_q45_k(vs_type t, const void *src, float *dst, int64_t nb) {
    const size_t bs = vs_type_block_bytes(t);
    for (int64_t b = 0; b < nb; b++, dst += VS_QK_K) {
        const uint8_t *blk = (const uint8_t *)src + (size_t)b * bs;
        const vs_block_q4_k *k4 = (const vs_block_q4_k *)blk; /* d, dmin, scales: the same in Q5_K */
        const uint8_t *qs = t == VS_TYPE_Q4_K ? k4->qs : ((const vs_block_q5_k *)blk)->qs;
        const uint8_t *qh = t == VS_TYPE_Q5_K ? ((const vs_block_q5_k *)blk)->qh : NULL;
        const float d = vs_fp16_to_fp32(k4->d), dmin = vs_fp16_to_fp32(k4->dmin);
        for (int j = 0; j < 8; j++) {
            int sc, m;
            vs_kq_scale_min(j, k4->scales, &sc, &m);
            const float dd = d * (float)sc, dm = dmin * (float)m;
            const int g = j / 2, hi = j % 2;
            for (int l = 0; l < 32; l++) {
                int q = hi ? qs[32 * g + l] >> 4 : qs[32 * g + l] & 15;
                if (qh) q |= ((qh[l] >> j) & 1) << 4; /* bit 2 g + hi = j */
                dst[32 * j + l] = dd * (float)q - dm;
            }
        }
    }
}

static void dequantize_q6_k(const vs_block_q6_k *x, float *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, dst += VS_QK_K) {
        const float d = vs_fp16_to_fp32(x[b].d);
        for (int i = 0; i < VS_QK_K; i++) {
            const int h = i / 128, k = (i / 32) % 4, l = i % 32;
            const uint8_t lo = x[b].ql[64 * h + l + 32 * (k & 1)];
            const int q = ((k < 2 ? lo & 15 : lo >> 4) | (((x[b].qh[32 * h + l] >> (2 * k)) & 3) << 4)) - 32;
            dst[i] = d * (float)x[b].scales[i / 16] * (float)q;
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
    case VS_TYPE_Q4_K:
    case VS_TYPE_Q5_K: dequantize_q45_k(t, src, dst, n / VS_QK_K); return;
    case VS_TYPE_Q6_K: dequantize_q6_k(src, dst, n / VS_QK_K); return;
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
    case VS_TYPE_Q4_K: quantize_q4_k(src, dst, n / VS_QK_K); return;
    case VS_TYPE_Q5_K: quantize_q5_k(src, dst, n / VS_QK_K); return;
    case VS_TYPE_Q6_K: quantize_q6_k(src, dst, n / VS_QK_K); return;
    }
}
