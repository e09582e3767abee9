/* kernels_avx512: AVX-512 (F/BW/VL/DQ + VNNI) versions of the kernels (contract: kernels_arch.h).
 * Quantised weights use vpdpbusd with the activation as the unsigned operand: activations are stored
 * biased by +128, and 128 * sum(w) (one vpdpbusd per pair of weight blocks, shared by every row of the
 * tile) is subtracted by starting each row's accumulation from its negation, so the integer dot is
 * exact. Two 32-value blocks fill a zmm; per-lane int32 sums are scaled per lane (d_w * d_x) and
 * accumulated in f32 lanes, reduced once per output. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels_arch.h"

#define VS_INLINE static inline __attribute__((always_inline))

/* ---- activation quantisation (AVX-512 layout, see kernels_arch.h) ---- */

size_t vs_xq_row_bytes_avx512(int64_t n_in) { return (size_t)((n_in / 32 + 1) / 2) * 128; }

void vs_xq_quantize_row_avx512(const float *x, int64_t n_in, uint8_t *row) {
    const int64_t nb = n_in / 32, np = (nb + 1) / 2;
    const __m128i bias = _mm_set1_epi8((char)0x80);
    for (int64_t p = 0; p < np; p++) {
        uint8_t *dst = row + p * 128;
        float *dxe = (float *)(dst + 64);
        for (int h = 0; h < 2; h++) {
            int64_t b = 2 * p + h;
            if (b >= nb) {
                memset(dst + 32 * h, 0x80, 32);
                _mm256_store_ps(dxe + 8 * h, _mm256_setzero_ps());
                continue;
            }
            __m512 v0 = _mm512_loadu_ps(x + b * 32), v1 = _mm512_loadu_ps(x + b * 32 + 16);
            float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
            float id = amax > 0.0f ? 127.0f / amax : 0.0f;
            float d = _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
            __m512 vid = _mm512_set1_ps(id);
            /* cvtps rounds to nearest even (the default mode), like rintf in the scalar twin. */
            __m128i q0 = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, vid)));
            __m128i q1 = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, vid)));
            _mm_storeu_si128((__m128i *)(dst + 32 * h), _mm_xor_si128(q0, bias));
            _mm_storeu_si128((__m128i *)(dst + 32 * h + 16), _mm_xor_si128(q1, bias));
            _mm256_store_ps(dxe + 8 * h, _mm256_set1_ps(d));
        }
    }
}

/* ---- matmul ---- */

/* Weight blocks b and b+1 (b+1 only if `two`) as 64 signed bytes, and their scales per lane. */
VS_INLINE __m512i load_wpair(vs_type t, const uint8_t *wr, int64_t b, int two, __m512 *dwv) {
    float da, db = 0.0f;
    __m512i w;
    if (t == VS_TYPE_Q8_0) {
        const vs_block_q8_0 *blk = (const vs_block_q8_0 *)wr + b;
        da = _cvtsh_ss(blk[0].d);
        __m256i lo = _mm256_loadu_si256((const __m256i *)blk[0].qs), hi = _mm256_setzero_si256();
        if (two) {
            db = _cvtsh_ss(blk[1].d);
            hi = _mm256_loadu_si256((const __m256i *)blk[1].qs);
        }
        w = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    } else {
        const vs_block_q4_0 *blk = (const vs_block_q4_0 *)wr + b;
        da = _cvtsh_ss(blk[0].d);
        __m128i a = _mm_loadu_si128((const __m128i *)blk[0].qs), c = _mm_setzero_si128();
        if (two) {
            db = _cvtsh_ss(blk[1].d);
            c = _mm_loadu_si128((const __m128i *)blk[1].qs);
        }
        __m256i t2 = _mm256_set_m128i(c, a);
        __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(t2), _mm256_srli_epi16(t2, 4), 1);
        /* [a, c, a>>4, c>>4] -> [a, a>>4, c, c>>4]: values 0..15 then 16..31 of each block */
        z = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
        w = _mm512_sub_epi8(_mm512_and_si512(z, _mm512_set1_epi8(0x0f)), _mm512_set1_epi8(8));
        if (!two) w = _mm512_maskz_mov_epi64(0x0f, w);
    }
    *dwv = _mm512_insertf32x8(_mm512_set1_ps(da), _mm256_set1_ps(db), 1);
    return w;
}

VS_INLINE void mm_quant_tile(const vs_mm_job *jb, int64_t o, int64_t r0, const int R) {
    const int64_t nb = jb->n_in / 32, np = (nb + 1) / 2;
    const uint8_t *wr = jb->w + o * jb->w_row_bytes;
    const uint8_t *xr[8];
    __m512 acc[8];
    for (int r = 0; r < R; r++) {
        xr[r] = jb->xq + (r0 + r) * jb->xq_row_bytes;
        acc[r] = _mm512_setzero_ps();
    }
    const __m512i k80 = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    for (int64_t p = 0; p < np; p++) {
        __m512 dwv;
        __m512i w = load_wpair(jb->wtype, wr, 2 * p, 2 * p + 1 < nb, &dwv);
        __m512i corr = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, k80, w));
        for (int r = 0; r < R; r++) {
            const uint8_t *xp = xr[r] + p * 128;
            __m512i isum = _mm512_dpbusd_epi32(corr, _mm512_load_si512(xp), w);
            __m512 s = _mm512_mul_ps(dwv, _mm512_load_ps((const float *)(xp + 64)));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), s, acc[r]);
        }
    }
    for (int r = 0; r < R; r++) jb->y[(r0 + r) * jb->n_out + o] = _mm512_reduce_add_ps(acc[r]);
}

VS_INLINE __m512 load_w16(vs_type t, const uint8_t *wr, int64_t i, __mmask16 m) {
    if (t == VS_TYPE_F32) return _mm512_maskz_loadu_ps(m, (const float *)wr + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)wr + i);
    if (t == VS_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

VS_INLINE void mm_float_tile(const vs_mm_job *jb, int64_t o, int64_t r0, const int R) {
    const int64_t n = jb->n_in;
    const uint8_t *wr = jb->w + o * jb->w_row_bytes;
    const float *x[8];
    __m512 acc[8];
    for (int r = 0; r < R; r++) {
        x[r] = jb->x + (r0 + r) * n;
        acc[r] = _mm512_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 wv = load_w16(jb->wtype, wr, i, 0xffff);
        for (int r = 0; r < R; r++) acc[r] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x[r] + i), acc[r]);
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 wv = load_w16(jb->wtype, wr, i, m);
        for (int r = 0; r < R; r++) acc[r] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x[r] + i), acc[r]);
    }
    for (int r = 0; r < R; r++) jb->y[(r0 + r) * jb->n_out + o] = _mm512_reduce_add_ps(acc[r]);
}

#define VS_TILE_SWITCH(fn, R, ...)                                                                  \
    switch (R) {                                                                                  \
    case 1: fn(__VA_ARGS__, 1); break;                                                            \
    case 2: fn(__VA_ARGS__, 2); break;                                                            \
    case 3: fn(__VA_ARGS__, 3); break;                                                            \
    case 4: fn(__VA_ARGS__, 4); break;                                                            \
    case 5: fn(__VA_ARGS__, 5); break;                                                            \
    case 6: fn(__VA_ARGS__, 6); break;                                                            \
    case 7: fn(__VA_ARGS__, 7); break;                                                            \
    default: fn(__VA_ARGS__, 8); break;                                                           \
    }

void vs_mm_avx512(const vs_mm_job *jb, int64_t o0, int64_t o1) {
    bool quant = jb->wtype == VS_TYPE_Q8_0 || jb->wtype == VS_TYPE_Q4_0;
    for (int64_t o = o0; o < o1; o++) {
        for (int64_t r0 = 0; r0 < jb->n_rows; r0 += 8) {
            int R = (int)VS_MIN(8, jb->n_rows - r0);
            if (quant) {
                VS_TILE_SWITCH(mm_quant_tile, R, jb, o, r0);
            } else {
                VS_TILE_SWITCH(mm_float_tile, R, jb, o, r0);
            }
        }
    }
}

/* ---- vector ops (tails by masked loads) ---- */

VS_INLINE __mmask16 tail_mask(int64_t left) { return left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1); }

float vs_dot_f32_avx512(const float *a, const float *b, int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

void vs_axpy_f32_avx512(float *y, float a, const float *x, int64_t n) {
    __m512 va = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 v = _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
        _mm512_mask_storeu_ps(y + i, m, v);
    }
}

void vs_rmsnorm_avx512(float *out, const float *x, const float *weight, int64_t n, float eps) {
    float ss = vs_dot_f32_avx512(x, x, n);
    __m512 vs = _mm512_set1_ps(1.0f / sqrtf(ss / (float)n + eps));
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs);
        if (weight) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, weight + i));
        _mm512_mask_storeu_ps(out + i, m, v);
    }
}

/* e^x, as exp8 in kernels_avx2.c: degree-6 polynomial after range reduction; x < -87 gives 0. */
VS_INLINE __m512 exp16(__m512 x) {
    __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512 v = _mm512_scalef_ps(p, n);
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ), v);
}

void vs_softmax_avx512(float *x, int64_t n) {
    if (n <= 0) return;
    __m512 vm = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n; i += 16) vm = _mm512_max_ps(vm, _mm512_mask_loadu_ps(vm, tail_mask(n - i), x + i));
    __m512 mv = _mm512_set1_ps(_mm512_reduce_max_ps(vm)), sv = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mv)));
        _mm512_mask_storeu_ps(x + i, m, e);
        sv = _mm512_add_ps(sv, e);
    }
    __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sv));
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
    }
}
