/* attn_avx2: AVX2 + F16C + FMA inner loops of the decoder's attention over an F32 or F16 KV cache; see
 * attn_arch.h for the shapes and the batch-invariance rule. Scalar twins in lm.c (vs_attn_*_ref),
 * compared by test_lm. Only called after vs_isa_detect() reported at least AVX2. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attn_arch.h"

/* 8 lanes of row base[i .. i + 8) (F32 or F16), lanes >= n (n <= 8) zero. */
static inline __attribute__((always_inline)) __m256 load8(const void *base, const int f16, int64_t i, int n) {
    if (n >= 8) {
        if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + i)));
        return _mm256_loadu_ps((const float *)base + i);
    }
    if (f16) {
        uint16_t tmp[8] = {0};
        memcpy(tmp, (const uint16_t *)base + i, (size_t)n * 2);
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)tmp));
    }
    float tmp[8] = {0};
    memcpy(tmp, (const float *)base + i, (size_t)n * 4);
    return _mm256_loadu_ps(tmp);
}

static inline void store8(float *dst, __m256 v, int n) {
    if (n >= 8) {
        _mm256_storeu_ps(dst, v);
        return;
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, v);
    memcpy(dst, tmp, (size_t)n * 4);
}

/* r[j] = sum of the 8 lanes of v[j], j < 8, by a fixed tree per lane. */
static inline __attribute__((always_inline)) __m256 reduce8(const __m256 *v) {
    __m256 u[4], w[2];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        u[i] = _mm256_add_ps(_mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]));
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++)
        w[i] = _mm256_add_ps(_mm256_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm256_add_ps(_mm256_permute2f128_ps(w[0], w[1], 0x20), _mm256_permute2f128_ps(w[0], w[1], 0x31));
}

/* Scores of one query against keys k[t0 .. t0 + nk), nk <= 8 (lanes beyond repeat the last key). */
static inline __attribute__((always_inline)) void qk8(float *s, const float *q, const void *k, const int f16,
                                                      int64_t t0, int nk, int hd, float scale) {
    __m256 acc[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) acc[j] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 8) {
        int nd = hd - d < 8 ? hd - d : 8;
        __m256 qv = load8(q, 0, d, nd);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            int64_t t = t0 + (j < nk ? j : nk - 1);
            acc[j] = _mm256_fmadd_ps(qv, load8(k, f16, t * hd + d, nd), acc[j]);
        }
    }
    store8(s + t0, _mm256_mul_ps(reduce8(acc), _mm256_set1_ps(scale)), nk);
}

static inline __attribute__((always_inline)) void scores_impl(float *s, int ld, const float *const *q,
                                                              const int *T, int nq, const void *k,
                                                              const int f16, int hd, float scale) {
    int tmax = 0;
    for (int i = 0; i < nq; i++) tmax = T[i] > tmax ? T[i] : tmax;
    for (int t0 = 0; t0 < tmax; t0 += 8)
        for (int i = 0; i < nq; i++) {
            if (T[i] >= t0 + 8)
                qk8(s + (size_t)i * ld, q[i], k, f16, t0, 8, hd, scale);
            else if (T[i] > t0)
                qk8(s + (size_t)i * ld, q[i], k, f16, t0, T[i] - t0, hd, scale);
        }
}

void vs_attn_scores_avx2(float *s, int ld, const float *const *q, const int *T, int nq, const void *k,
                         int f16, int hd, float scale, const void *vpf) {
    (void)vpf;
    if (f16)
        scores_impl(s, ld, q, T, nq, k, 1, hd, scale);
    else
        scores_impl(s, ld, q, T, nq, k, 0, hd, scale);
}

/* e^x for x <= 0 (lanes below VS_ATTN_EXP_LO, -inf included, give 0). */
static inline __m256 exp8(__m256 x) {
    __m256 live = _mm256_cmp_ps(x, _mm256_set1_ps(VS_ATTN_EXP_LO), _CMP_GE_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(VS_ATTN_EXP_LO));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(VS_ATTN_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(VS_ATTN_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(VS_ATTN_LN2_LO), r);
    __m256 p = _mm256_set1_ps(VS_ATTN_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(VS_ATTN_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(VS_ATTN_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(VS_ATTN_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(VS_ATTN_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(VS_ATTN_P5));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), live);
}

void vs_attn_exp_avx2(float *y, const float *x, int n) {
    for (int i = 0; i < n; i += 8) {
        int m = n - i < 8 ? n - i : 8;
        store8(y + i, exp8(load8(x, 0, i, m)), m);
    }
}

void vs_attn_swiglu_avx2(float *g, const float *u, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t i = 0; i < n; i += 8) {
        int w = n - i < 8 ? (int)(n - i) : 8;
        __m256 x = load8(g, 0, i, w);
        __m256 e = exp8(_mm256_sub_ps(zero, _mm256_and_ps(x, absmask)));
        __m256 pos = _mm256_cmp_ps(x, zero, _CMP_GE_OQ);
        __m256 sig = _mm256_div_ps(_mm256_blendv_ps(e, one, pos), _mm256_add_ps(one, e));
        store8(g + i, _mm256_mul_ps(_mm256_mul_ps(x, sig), load8(u, 0, i, w)), w);
    }
}

void vs_attn_softmax_avx2(float *s, int T) {
    __m256 mx = _mm256_set1_ps(-INFINITY);
    int t = 0;
    for (; t + 8 <= T; t += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + t));
    float m = -INFINITY, lanes[8];
    _mm256_storeu_ps(lanes, mx);
    for (int j = 0; j < 8; j++) m = lanes[j] > m ? lanes[j] : m;
    for (int u = t; u < T; u++) m = s[u] > m ? s[u] : m;
    __m256 mv = _mm256_set1_ps(m), sum = _mm256_setzero_ps();
    for (t = 0; t < T; t += 8) {
        int w = T - t < 8 ? T - t : 8;
        __m256 e = exp8(_mm256_sub_ps(load8(s, 0, t, w), mv));
        if (w < 8)
            e = _mm256_and_ps(e, _mm256_cmp_ps(_mm256_set_ps(7, 6, 5, 4, 3, 2, 1, 0),
                                               _mm256_set1_ps((float)w), _CMP_LT_OQ));
        sum = _mm256_add_ps(sum, e);
        store8(s + t, e, w);
    }
    _mm256_storeu_ps(lanes, sum);
    float tot =
        ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
    __m256 inv = _mm256_set1_ps(1.0f / tot);
    for (t = 0; t < T; t += 8) {
        int w = T - t < 8 ? T - t : 8;
        store8(s + t, _mm256_mul_ps(load8(s, 0, t, w), inv), w);
    }
}

/* nt queries (<= 4) x nc vectors (<= 2) of output columns [d0, d0 + 8 nc), the last one nl lanes wide. */
static inline __attribute__((always_inline)) void pv_tile(float *const *o, const float *p, int ld,
                                                          const int nt, const int nc, int nl, int T,
                                                          const void *v, const int f16, int hd, int d0) {
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < nt; i++)
#pragma GCC unroll 2
        for (int c = 0; c < nc; c++) acc[i][c] = _mm256_setzero_ps();
    if (nl == 8) { /* full vectors: the common case (hd a multiple of 8) */
        for (int t = 0; t < T; t++) {
            __m256 vv[2];
#pragma GCC unroll 2
            for (int c = 0; c < nc; c++) vv[c] = load8(v, f16, (int64_t)t * hd + d0 + 8 * c, 8);
#pragma GCC unroll 4
            for (int i = 0; i < nt; i++) {
                __m256 pt = _mm256_broadcast_ss(p + (size_t)i * ld + t);
#pragma GCC unroll 2
                for (int c = 0; c < nc; c++) acc[i][c] = _mm256_fmadd_ps(pt, vv[c], acc[i][c]);
            }
        }
    } else {
        for (int t = 0; t < T; t++) {
            __m256 vv[2];
#pragma GCC unroll 2
            for (int c = 0; c < nc; c++)
                vv[c] = load8(v, f16, (int64_t)t * hd + d0 + 8 * c, c == nc - 1 ? nl : 8);
#pragma GCC unroll 4
            for (int i = 0; i < nt; i++) {
                __m256 pt = _mm256_broadcast_ss(p + (size_t)i * ld + t);
#pragma GCC unroll 2
                for (int c = 0; c < nc; c++) acc[i][c] = _mm256_fmadd_ps(pt, vv[c], acc[i][c]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nt; i++)
#pragma GCC unroll 2
        for (int c = 0; c < nc; c++) store8(o[i] + d0 + 8 * c, acc[i][c], c == nc - 1 ? nl : 8);
}

#define PV_CASE(NT, NC)                                                                                      \
    case (NT)*8 + (NC):                                                                                      \
        pv_tile(oo, pp, ld, NT, NC, nl, T, v, F16, hd, d0);                                                  \
        break;

static inline __attribute__((always_inline)) void pv_impl(float *const *o, const float *p, int ld, int nq,
                                                          int T, const void *v, const int F16, int hd) {
    for (int i0 = 0; i0 < nq; i0 += 4) {
        int nt = nq - i0 < 4 ? nq - i0 : 4;
        const float *pp = p + (size_t)i0 * ld;
        float *const *oo = o + i0;
        for (int d0 = 0; d0 < hd; d0 += 16) {
            int w = hd - d0 < 16 ? hd - d0 : 16, nc = (w + 7) / 8, nl = w - 8 * (nc - 1);
            switch (nt * 8 + nc) {
                PV_CASE(1, 1)
                PV_CASE(1, 2) PV_CASE(2, 1) PV_CASE(2, 2) PV_CASE(3, 1) PV_CASE(3, 2) PV_CASE(4, 1)
                    PV_CASE(4, 2)
            }
        }
    }
}

void vs_attn_pv_avx2(float *const *o, const float *p, int ld, int nq, int T, const void *v, int f16, int hd) {
    if (f16)
        pv_impl(o, p, ld, nq, T, v, 1, hd);
    else
        pv_impl(o, p, ld, nq, T, v, 0, hd);
}

/* dst[i] = src[i] as F32 or F16 (round to nearest even), n values. */
void vs_attn_store_avx2(void *dst, const float *src, int f16, int n) {
    if (!f16) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *d = dst;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) {
        __m128i h = _mm_cvtps_ph(_mm_set_ss(src[i]), _MM_FROUND_TO_NEAREST_INT);
        d[i] = (uint16_t)_mm_extract_epi16(h, 0);
    }
}

/* ---- BF16 caches (kv.h's interleaved layout; attn_arch.h: bitwise equal to the scalar twins) ---- */

#define BF_AI static inline __attribute__((always_inline))

BF_AI __m256 bf16_lo8(__m256i w) { return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)); }
BF_AI __m256 bf16_hi8(__m256i w) {
    return _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xffff0000u)));
}

/* One query against the NB 16-key blocks b, b + 1, ... (two 8-key halves each): 2 NB chains. */
BF_AI void qk_bf16_blocks8(float *srow, const float *q, const uint16_t *k, int hd, int64_t b, const int NB,
                           float scale, int T) {
    const int np = hd / 2;
    const int32_t *kb = (const int32_t *)k + b * np * 16;
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int n = 0; n < NB; n++) acc[n][0] = acc[n][1] = _mm256_setzero_ps();
    for (int j = 0; j < np; j++) {
        __m256 qe = _mm256_set1_ps(q[2 * j]), qo = _mm256_set1_ps(q[2 * j + 1]);
#pragma GCC unroll 4
        for (int n = 0; n < NB; n++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m256i w = _mm256_loadu_si256((const __m256i *)(kb + ((int64_t)n * np + j) * 16 + 8 * h));
                acc[n][h] = _mm256_fmadd_ps(qe, bf16_lo8(w), acc[n][h]);
                acc[n][h] = _mm256_fmadd_ps(qo, bf16_hi8(w), acc[n][h]);
            }
    }
    const __m256 sc = _mm256_set1_ps(scale);
#pragma GCC unroll 4
    for (int n = 0; n < NB; n++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            int64_t t0 = (b + n) * 16 + 8 * h;
            if (T > t0) store8(srow + t0, _mm256_mul_ps(acc[n][h], sc), T - t0 >= 8 ? 8 : (int)(T - t0));
        }
}

void vs_attn_scores_bf16_avx2(float *s, int ld, const float *const *q, const int *T, int nq,
                              const uint16_t *k, int hd, float scale) {
    for (int i = 0; i < nq; i++) {
        const int64_t nblk = (T[i] + 15) / 16;
        int64_t b = 0;
        for (; b + 4 <= nblk; b += 4) qk_bf16_blocks8(s + (size_t)i * ld, q[i], k, hd, b, 4, scale, T[i]);
        for (; b < nblk; b++) qk_bf16_blocks8(s + (size_t)i * ld, q[i], k, hd, b, 1, scale, T[i]);
    }
}

/* One query's outputs for the dimensions [d0, d0 + 8 NC), the last vector nl lanes: one chain per output
 * in position order. */
BF_AI void pv_bf16_tile8(float *o, const float *p, const int NC, int nl, int T, const uint16_t *v, int hd,
                         int d0) {
    __m256 acc[4];
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) acc[c] = _mm256_setzero_ps();
    const int32_t *vp = (const int32_t *)v + d0;
    for (int t = 0; t < T; t += 2, vp += hd)
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            __m256i w;
            if (c < NC - 1 || nl == 8) {
                w = _mm256_loadu_si256((const __m256i *)(vp + 8 * c));
            } else {
                int32_t tmp[8] = {0};
                memcpy(tmp, vp + 8 * c, (size_t)nl * 4);
                w = _mm256_loadu_si256((const __m256i *)tmp);
            }
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(p[t]), bf16_lo8(w), acc[c]);
            if (t + 1 < T) acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(p[t + 1]), bf16_hi8(w), acc[c]);
        }
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) store8(o + d0 + 8 * c, acc[c], c == NC - 1 ? nl : 8);
}

void vs_attn_pv_bf16_avx2(float *const *o, const float *p, int ld, int nq, int T, const uint16_t *v, int hd) {
    for (int i = 0; i < nq; i++)
        for (int d0 = 0; d0 < hd; d0 += 32) {
            int w = hd - d0 < 32 ? hd - d0 : 32, nc = (w + 7) / 8, nl = w - 8 * (nc - 1);
            const float *pi = p + (size_t)i * ld;
            switch (nc) {
            case 1: pv_bf16_tile8(o[i], pi, 1, nl, T, v, hd, d0); break;
            case 2: pv_bf16_tile8(o[i], pi, 2, nl, T, v, hd, d0); break;
            case 3: pv_bf16_tile8(o[i], pi, 3, nl, T, v, hd, d0); break;
            default: pv_bf16_tile8(o[i], pi, 4, nl, T, v, hd, d0); break;
            }
        }
}
