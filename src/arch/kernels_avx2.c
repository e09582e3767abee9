/* kernels_avx2: AVX2 + FMA + F16C versions of the kernels (see kernels_arch.h for the contract).
 * Quantised weights: maddubs needs an unsigned operand, so each weight block is made signed (Q4_0:
 * nibble - 8), its absolute value is the unsigned operand and the activation takes the weight's sign
 * (|w| * sign(x, w) = w * x; |w| <= 128 and |x| <= 127 keep the int16 pair sums below 32768). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels_arch.h"

#define VS_INLINE static inline __attribute__((always_inline))

VS_INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

VS_INLINE float hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- activation quantisation (scalar layout: int8 q[n_in], then float d[n_in / 32]) ---- */

void vs_xq_quantize_row_avx2(const float *x, int64_t n_in, uint8_t *row) {
    int8_t *q = (int8_t *)row;
    float *d = (float *)(row + (n_in + 63) / 64 * 64);
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < n_in / 32; b++) {
        const float *xb = x + b * 32;
        __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
        __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v0, absmask), _mm256_and_ps(v1, absmask)),
                                 _mm256_max_ps(_mm256_and_ps(v2, absmask), _mm256_and_ps(v3, absmask)));
        float amax = hmax8(m);
        float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        d[b] = _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
        __m256 vid = _mm256_set1_ps(id);
        /* cvtps rounds with the current mode (nearest even), like rintf in the scalar twin. */
        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, vid));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, vid));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, vid));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, vid));
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        _mm256_storeu_si256((__m256i *)(q + b * 32), _mm256_permutevar8x32_epi32(p, perm));
    }
}

/* ---- matmul ---- */

/* 32 signed weights of block b of a Q8_0 / Q4_0 row, and the block scale. */
VS_INLINE __m256i load_wblock(vs_type t, const uint8_t *wr, int64_t b, float *dw) {
    if (t == VS_TYPE_Q8_0) {
        const vs_block_q8_0 *blk = (const vs_block_q8_0 *)wr + b;
        *dw = _cvtsh_ss(blk->d);
        return _mm256_loadu_si256((const __m256i *)blk->qs);
    }
    const vs_block_q4_0 *blk = (const vs_block_q4_0 *)wr + b;
    *dw = _cvtsh_ss(blk->d);
    __m128i raw = _mm_loadu_si128((const __m128i *)blk->qs);
    __m128i lo = _mm_and_si128(raw, _mm_set1_epi8(0x0f));
    __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0f));
    return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
}

VS_INLINE void mm_quant_tile(const vs_mm_job *jb, int64_t o, int64_t r0, const int R) {
    const int64_t nb = jb->n_in / 32;
    const uint8_t *wr = jb->w + o * jb->w_row_bytes;
    const int8_t *q[8];
    const float *d[8];
    __m256 acc[8];
    const size_t doff = (size_t)(jb->n_in + 63) / 64 * 64;
    for (int r = 0; r < R; r++) {
        const uint8_t *row = jb->xq + (r0 + r) * jb->xq_row_bytes;
        q[r] = (const int8_t *)row;
        d[r] = (const float *)(row + doff);
        acc[r] = _mm256_setzero_ps();
    }
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; b++) {
        float dw;
        __m256i w = load_wblock(jb->wtype, wr, b, &dw);
        __m256i aw = _mm256_abs_epi8(w);
        for (int r = 0; r < R; r++) {
            __m256i xv = _mm256_loadu_si256((const __m256i *)(q[r] + b * 32));
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, w)), ones);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * d[r][b]), acc[r]);
        }
    }
    for (int r = 0; r < R; r++) jb->y[(r0 + r) * jb->n_out + o] = hsum8(acc[r]);
}

VS_INLINE __m256 load_w8(vs_type t, const uint8_t *wr, int64_t i) {
    if (t == VS_TYPE_F32) return _mm256_loadu_ps((const float *)wr + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)wr + i));
    if (t == VS_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

VS_INLINE float w_scalar(vs_type t, const uint8_t *wr, int64_t i) {
    if (t == VS_TYPE_F32) return ((const float *)wr)[i];
    uint16_t h;
    memcpy(&h, wr + 2 * i, 2);
    return t == VS_TYPE_F16 ? _cvtsh_ss(h) : vs_bf16_to_fp32(h);
}

VS_INLINE void mm_float_tile(const vs_mm_job *jb, int64_t o, int64_t r0, const int R) {
    const int64_t n = jb->n_in;
    const uint8_t *wr = jb->w + o * jb->w_row_bytes;
    const float *x[8];
    __m256 acc[8];
    for (int r = 0; r < R; r++) {
        x[r] = jb->x + (r0 + r) * n;
        acc[r] = _mm256_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 wv = load_w8(jb->wtype, wr, i);
        for (int r = 0; r < R; r++) acc[r] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[r] + i), acc[r]);
    }
    for (int r = 0; r < R; r++) {
        float s = hsum8(acc[r]);
        for (int64_t k = i; k < n; k++) s += w_scalar(jb->wtype, wr, k) * x[r][k];
        jb->y[(r0 + r) * jb->n_out + o] = s;
    }
}

#define VS_TILE_SWITCH(fn, R, ...)                                                                  \
    switch (R) {                                                                                  \
    case 1: fn(__VA_ARGS__, 1); break;                                                            \
    case 2: fn(__VA_ARGS__, 2); break;                                                            \
    case 3: fn(__VA_ARGS__, 3); break;                                                            \
    default: fn(__VA_ARGS__, 4); break;                                                           \
    }

void vs_mm_avx2(const vs_mm_job *jb, int64_t o0, int64_t o1) {
    bool quant = jb->wtype == VS_TYPE_Q8_0 || jb->wtype == VS_TYPE_Q4_0;
    for (int64_t o = o0; o < o1; o++) {
        for (int64_t r0 = 0; r0 < jb->n_rows; r0 += 4) {
            int R = (int)VS_MIN(4, jb->n_rows - r0);
            if (quant) {
                VS_TILE_SWITCH(mm_quant_tile, R, jb, o, r0);
            } else {
                VS_TILE_SWITCH(mm_float_tile, R, jb, o, r0);
            }
        }
    }
}

/* ---- bandwidth probe ---- */

uint64_t vs_read_sum_avx2(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 128) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    uint64_t out[4];
    _mm256_storeu_si256((__m256i *)out, a);
    return out[0] ^ out[1] ^ out[2] ^ out[3];
}

/* ---- vector ops ---- */

float vs_dot_f32_avx2(const float *a, const float *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum8(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

void vs_axpy_f32_avx2(float *y, float a, const float *x, int64_t n) {
    __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

void vs_rmsnorm_avx2(float *out, const float *x, const float *weight, int64_t n, float eps) {
    float ss = vs_dot_f32_avx2(x, x, n);
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    __m256 vs = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
        if (weight) v = _mm256_mul_ps(v, _mm256_loadu_ps(weight + i));
        _mm256_storeu_ps(out + i, v);
    }
    for (; i < n; i++) out[i] = x[i] * scale * (weight ? weight[i] : 1.0f);
}

/* e^x for x <= 88 (softmax feeds x - max <= 0): range reduction to r in [-ln2/2, ln2/2], a degree-6
 * Taylor polynomial (relative error ~2e-7), 2^n through the exponent field; x < -87 gives 0. */
VS_INLINE __m256 exp8(__m256 x) {
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145752f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860677e-6f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 v = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_and_ps(v, _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ));
}

void vs_softmax_avx2(float *x, int64_t n) {
    if (n <= 0) return;
    __m256 vm = _mm256_set1_ps(x[0]);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
    float m = hmax8(vm);
    for (; i < n; i++) m = fmaxf(m, x[i]);
    __m256 mv = _mm256_set1_ps(m), sv = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
        _mm256_storeu_ps(x + i, e);
        sv = _mm256_add_ps(sv, e);
    }
    float s = hsum8(sv);
    for (; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    __m256 inv = _mm256_set1_ps(1.0f / s);
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; i++) x[i] *= 1.0f / s;
}
