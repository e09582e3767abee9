/* attn_avx512: AVX-512 (F/BW/VL) + F16C inner loops of the decoder's attention (and the per-row RoPE and
 * BF16 cache stores around it); see attn_arch.h for the shapes and the batch-invariance rule. Scalar twins
 * in lm.c (vs_attn_*_ref), compared by test_lm.
 * Only called after vs_isa_detect() reported AVX-512. */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "attn_arch.h"
#include "kernels_arch.h"

#define VS_ATTN_MIN(a, b) ((a) < (b) ? (a) : (b))

#define AI static inline __attribute__((always_inline))

/* 16 lanes of row base[i ..) (F32 or F16) where m has a bit set; the others zero. */
AI __m512 load16(const void *base, const int f16, int64_t i, __mmask16 m) {
    if (f16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)base + i));
    return _mm512_maskz_loadu_ps(m, (const float *)base + i);
}

AI __mmask16 lanes(int n) {
    return (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1);
}
/* lanes(n), and none for n <= 0 */
AI __mmask16 lanes0(int n) { return n <= 0 ? 0 : lanes(n); }

/* r[j] = sum of the 16 lanes of v[j], j < 16, by a fixed tree per lane. */
AI __m512 reduce16(const __m512 *v) {
    __m512 u[8], w[4];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        u[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        w[i] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(w[2], w[3], _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm512_shuffle_f32x4(w[2], w[3], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* Scores of one query against the 16 keys k[t0 .. t0 + 16) (keys >= t0 + nk are not read: their lanes
 * repeat the last key and are not stored). */
AI void qk16(float *s, const float *q, const void *k, const int f16, int64_t t0, const int nk, int hd,
             float scale) {
    __m512 acc[16];
    int64_t off[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) {
        acc[j] = _mm512_setzero_ps();
        off[j] = (t0 + (j < nk ? j : nk - 1)) * hd;
    }
    for (int d = 0; d < hd; d += 16) {
        __mmask16 m = lanes(hd - d);
        __m512 qv = _mm512_maskz_loadu_ps(m, q + d);
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) acc[j] = _mm512_fmadd_ps(qv, load16(k, f16, off[j] + d, m), acc[j]);
    }
    __m512 r = _mm512_mul_ps(reduce16(acc), _mm512_set1_ps(scale));
    _mm512_mask_storeu_ps(s + t0, lanes(nk), r);
}

/* Keys k[t0 .. t0 + 16) as F32 in tile [nc][16 keys][16 lanes] (lanes >= hd zero; keys >= t0 + nk repeat
 * the last one): converted once, then read by every query of the task with fixed offsets. */
AI void key_tile(float *tile, const void *k, const int f16, int64_t t0, int nk, int hd) {
    const int nc = (hd + 15) / 16;
    const __mmask16 mlast = lanes(hd - 16 * (nc - 1));
    const int64_t rowb = (int64_t)hd * (f16 ? 2 : 4);
    const char *row = (const char *)k + t0 * rowb;
    for (int j = 0; j < 16; j++) {
        float *dst = tile + 16 * j;
        int c = 0;
        for (; c < nc - 1; c++) _mm512_store_ps(dst + 256 * c, load16(row, f16, 16 * c, 0xffff));
        _mm512_store_ps(dst + 256 * c, load16(row, f16, 16 * c, mlast));
        if (j + 1 < nk) row += rowb;
    }
}

AI void qk16_tile(float *s, const float *q, const float *tile, int64_t t0, int nk, int hd, float scale) {
    const int nc = (hd + 15) / 16;
    __m512 acc[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
    for (int c = 0; c < nc; c++, tile += 256) {
        __m512 qv =
            c < nc - 1 ? _mm512_loadu_ps(q + 16 * c) : _mm512_maskz_loadu_ps(lanes(hd - 16 * c), q + 16 * c);
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) acc[j] = _mm512_fmadd_ps(qv, _mm512_load_ps(tile + 16 * j), acc[j]);
    }
    _mm512_mask_storeu_ps(s + t0, lanes(nk), _mm512_mul_ps(reduce16(acc), _mm512_set1_ps(scale)));
}

/* The same scores as key_tile + qk16_tile (the same operations on the same values, so bitwise equal) for
 * a full block of 16 keys, reading the keys directly: with hd a compile-time constant every load has a
 * fixed offset from the block's first key. Used when the tile would not be shared (a single query: GQA groups
 * of 1, one row). */
AI void qk16_direct(float *s, const float *q, const void *k, const int f16, int64_t t0, const int hd,
                    float scale) {
    const int nc = (hd + 15) / 16;
    const char *base = (const char *)k + t0 * hd * (f16 ? 2 : 4);
    __m512 acc[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) {
        const __mmask16 m = lanes(hd - 16 * c);
        __m512 qv = _mm512_maskz_loadu_ps(m, q + 16 * c);
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++)
            acc[j] = _mm512_fmadd_ps(qv, load16(base, f16, j * hd + 16 * c, m), acc[j]);
    }
    _mm512_storeu_ps(s + t0, _mm512_mul_ps(reduce16(acc), _mm512_set1_ps(scale)));
}

/* Full blocks of 16 keys for queries [0, nq) with T[i] >= t0 + 16, hd a compile-time constant. */
AI void direct_block(float *s, int ld, const float *const *q, const int *T, int nq, const void *k,
                     const int f16, int64_t t0, const int hd, float scale) {
    for (int i = 0; i < nq; i++)
        if (T[i] >= t0 + 16) qk16_direct(s + (size_t)i * ld, q[i], k, f16, t0, hd, scale);
}

#define DIRECT_HDS(X) X(32) X(40) X(48) X(64) X(80) X(96) X(128)
#define DIRECT_CASE(HD)                                                                                      \
    case HD:                                                                                                 \
        direct_block(s, ld, q, T, nq, k, f16, t0, HD, scale);                                                \
        return true;

/* Whether the direct path handled the full-block queries of block t0 (hd is one of DIRECT_HDS). */
AI bool try_direct(float *s, int ld, const float *const *q, const int *T, int nq, const void *k,
                   const int f16, int64_t t0, int hd, float scale) {
    switch (hd) { DIRECT_HDS(DIRECT_CASE) default : return false; }
}

#define TILE_MAX_HD 256

AI void scores_impl(float *s, int ld, const float *const *q, const int *T, int nq, const void *k,
                    const int f16, int hd, float scale, const void *vpf) {
    int tmax = 0;
    for (int i = 0; i < nq; i++) tmax = T[i] > tmax ? T[i] : tmax;
    /* key blocks outer, queries inner: a block of 16 keys is read from memory once for all queries */
    const int64_t rowb = (int64_t)hd * (f16 ? 2 : 4);
    const char *kc = (const char *)k;
    _Alignas(64) float tile[16 * TILE_MAX_HD];
    for (int t0 = 0; t0 < tmax; t0 += 16) {
        /* the block after next: the cache is usually beyond L2 (several sequences, layers) */
        int64_t pf0 = (int64_t)(t0 + 64) * rowb, pf1 = (int64_t)VS_ATTN_MIN(t0 + 80, tmax) * rowb;
        for (int64_t b = pf0; b < pf1; b += 64) _mm_prefetch(kc + b, _MM_HINT_T0);
        if (vpf) /* the values of this block, for the pass after the softmax */
            for (int64_t b = (int64_t)t0 * rowb, e = (int64_t)VS_ATTN_MIN(t0 + 16, tmax) * rowb; b < e;
                 b += 64)
                _mm_prefetch((const char *)vpf + b, _MM_HINT_T1);
        if (nq == 1 && try_direct(s, ld, q, T, nq, k, f16, t0, hd, scale)) {
            /* full blocks done; a query whose keys end inside this block takes the tile below */
            bool tail = false;
            for (int i = 0; i < nq; i++) tail |= T[i] > t0 && T[i] < t0 + 16;
            if (!tail) continue;
            key_tile(tile, k, f16, t0, VS_ATTN_MIN(16, tmax - t0), hd);
            for (int i = 0; i < nq; i++)
                if (T[i] > t0 && T[i] < t0 + 16)
                    qk16_tile(s + (size_t)i * ld, q[i], tile, t0, T[i] - t0, hd, scale);
            continue;
        }
        if (hd <= TILE_MAX_HD) {
            key_tile(tile, k, f16, t0, VS_ATTN_MIN(16, tmax - t0), hd);
            for (int i = 0; i < nq; i++)
                if (T[i] > t0)
                    qk16_tile(s + (size_t)i * ld, q[i], tile, t0, VS_ATTN_MIN(16, T[i] - t0), hd, scale);
            continue;
        }
        for (int i = 0; i < nq; i++) {
            if (T[i] >= t0 + 16)
                qk16(s + (size_t)i * ld, q[i], k, f16, t0, 16, hd, scale);
            else if (T[i] > t0)
                qk16(s + (size_t)i * ld, q[i], k, f16, t0, T[i] - t0, hd, scale);
        }
    }
}

void vs_attn_scores_avx512(float *s, int ld, const float *const *q, const int *T, int nq, const void *k,
                           int f16, int hd, float scale, const void *vpf) {
    if (f16)
        scores_impl(s, ld, q, T, nq, k, 1, hd, scale, vpf);
    else
        scores_impl(s, ld, q, T, nq, k, 0, hd, scale, vpf);
}

static inline __m512 exp16(__m512 x) {
    __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(VS_ATTN_EXP_LO), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(VS_ATTN_EXP_LO));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(VS_ATTN_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(VS_ATTN_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(VS_ATTN_LN2_LO), r);
    __m512 p = _mm512_set1_ps(VS_ATTN_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(VS_ATTN_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(VS_ATTN_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(VS_ATTN_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(VS_ATTN_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(VS_ATTN_P5));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    /* y 2^n with one rounding, in one instruction: for n >= -126 the same bits as building 2^n from its
     * exponent field and multiplying (every negative float input was checked), as the AVX2 twin does */
    return _mm512_maskz_scalef_ps(live, y, n);
}

void vs_attn_exp_avx512(float *y, const float *x, int n) {
    for (int i = 0; i < n; i += 16) {
        int m = n - i < 16 ? n - i : 16;
        __mmask16 k = (__mmask16)(m >= 16 ? 0xffff : (1u << m) - 1);
        _mm512_mask_storeu_ps(y + i, k, exp16(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

void vs_attn_swiglu_avx512(float *g, const float *u, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes(n - i < 16 ? (int)(n - i) : 16);
        __m512 x = _mm512_maskz_loadu_ps(k, g + i);
        __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)));
        __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
        __m512 sig = _mm512_div_ps(_mm512_mask_blend_ps(pos, e, one), _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(g + i, k,
                              _mm512_mul_ps(_mm512_mul_ps(x, sig), _mm512_maskz_loadu_ps(k, u + i)));
    }
}

void vs_attn_softmax_avx512(float *s, int T) {
    /* full blocks unmasked, the tail masked; one sum vector in block order (the lanes' sums are those of
     * a plain loop over the blocks) */
    const int tf = T & ~15, m = T - tf;
    const __mmask16 k = (__mmask16)((1u << m) - 1);
    __m512 mv = _mm512_set1_ps(vs_max_f32_avx512(s, T));
    __m512 sum = _mm512_setzero_ps();
    int t;
    for (t = 0; t < tf; t += 16) {
        /* masked (-inf) entries: exp16 of -inf - max is exactly 0 */
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + t), mv));
        sum = _mm512_add_ps(sum, e);
        _mm512_storeu_ps(s + t, e);
    }
    if (m) {
        __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + tf), mv)));
        sum = _mm512_add_ps(sum, e);
        _mm512_mask_storeu_ps(s + tf, k, e);
    }
    __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (t = 0; t < tf; t += 16) _mm512_storeu_ps(s + t, _mm512_mul_ps(_mm512_loadu_ps(s + t), inv));
    if (m) _mm512_mask_storeu_ps(s + tf, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + tf), inv));
}

/* nt queries (<= 4) x nc vectors (<= 4) of output columns [d0, d0 + 16 nc), the last one nl lanes wide. */
AI void pv_tile(float *const *o, const float *p, int ld, const int nt, const int nc, int nl, int T,
                const void *v, const int f16, int hd, int d0) {
    __m512 acc[4][4];
    __mmask16 m[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) m[c] = c == nc - 1 ? lanes(nl) : 0xffff;
#pragma GCC unroll 4
    for (int i = 0; i < nt; i++)
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) acc[i][c] = _mm512_setzero_ps();
    const int64_t rowb = (int64_t)hd * (f16 ? 2 : 4);
    for (int t = 0; t < T; t++) {
        __m512 vv[4];
        if (d0 == 0 && t + 16 < T) { /* the row 16 ahead: its first and last line */
            const char *ahead = (const char *)v + (int64_t)(t + 16) * rowb;
            _mm_prefetch(ahead, _MM_HINT_T0);
            _mm_prefetch(ahead + rowb - 1, _MM_HINT_T0);
        }
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) vv[c] = load16(v, f16, (int64_t)t * hd + d0 + 16 * c, m[c]);
#pragma GCC unroll 4
        for (int i = 0; i < nt; i++) {
            __m512 pt = _mm512_set1_ps(p[(size_t)i * ld + t]);
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++) acc[i][c] = _mm512_fmadd_ps(pt, vv[c], acc[i][c]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nt; i++)
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) _mm512_mask_storeu_ps(o[i] + d0 + 16 * c, m[c], acc[i][c]);
}

#define PV_CASE(NT, NC)                                                                                      \
    case (NT)*8 + (NC):                                                                                      \
        pv_tile(oo, pp, ld, NT, NC, nl, T, v, F16, hd, d0);                                                  \
        break;

AI void pv_impl(float *const *o, const float *p, int ld, int nq, int T, const void *v, const int F16,
                int hd) {
    for (int i0 = 0; i0 < nq; i0 += 4) {
        int nt = nq - i0 < 4 ? nq - i0 : 4;
        for (int d0 = 0; d0 < hd; d0 += 64) {
            int w = hd - d0 < 64 ? hd - d0 : 64, nc = (w + 15) / 16, nl = w - 16 * (nc - 1);
            const float *pp = p + (size_t)i0 * ld;
            float *const *oo = o + i0;
            switch (nt * 8 + nc) {
                PV_CASE(1, 1)
                PV_CASE(1, 2) PV_CASE(1, 3) PV_CASE(1, 4) PV_CASE(2, 1) PV_CASE(2, 2) PV_CASE(2, 3)
                    PV_CASE(2, 4) PV_CASE(3, 1) PV_CASE(3, 2) PV_CASE(3, 3) PV_CASE(3, 4) PV_CASE(4, 1)
                        PV_CASE(4, 2) PV_CASE(4, 3) PV_CASE(4, 4)
            }
        }
    }
}

void vs_attn_pv_avx512(float *const *o, const float *p, int ld, int nq, int T, const void *v, int f16,
                       int hd) {
    if (f16)
        pv_impl(o, p, ld, nq, T, v, 1, hd);
    else
        pv_impl(o, p, ld, nq, T, v, 0, hd);
}

/* ---- BF16 caches (kv.h's interleaved layout; attn_arch.h: bitwise equal to the scalar twins) ---- */

/* bf16 pairs (lo, hi halves of each 32-bit lane) as two f32 vectors: exact, no rounding. */
AI __m512 bf16_lo(__m512i w) { return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)); }
AI __m512 bf16_hi(__m512i w) {
    return _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xffff0000u)));
}

/* Scores of NQ (1 to 4) queries against the NB 16-key blocks b, b + 1, ...: one f32 chain per key over
 * the dimensions in order, NB x NQ independent chains to cover the FMA latency; each block's pairs are
 * loaded and widened once for all NQ queries. */
AI void qk_bf16_blocks(float *const *srow, const float *const *q, const int NQ, const uint16_t *k, int hd,
                       int64_t b, const int NB, float scale, const int *T) {
    const int np = hd / 2;
    const int32_t *kb = (const int32_t *)k + b * np * 16;
    __m512 acc[4][8];
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 8
        for (int n = 0; n < NB; n++) acc[i][n] = _mm512_setzero_ps();
    for (int j = 0; j < np; j++) {
        __m512 qe[4], qo[4];
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++)
            qe[i] = _mm512_set1_ps(q[i][2 * j]), qo[i] = _mm512_set1_ps(q[i][2 * j + 1]);
#pragma GCC unroll 8
        for (int n = 0; n < NB; n++) {
            __m512i w = _mm512_loadu_si512(kb + ((int64_t)n * np + j) * 16);
            __m512 ke = bf16_lo(w), ko = bf16_hi(w);
#pragma GCC unroll 4
            for (int i = 0; i < NQ; i++) {
                acc[i][n] = _mm512_fmadd_ps(qe[i], ke, acc[i][n]);
                acc[i][n] = _mm512_fmadd_ps(qo[i], ko, acc[i][n]);
            }
        }
    }
    const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 8
        for (int n = 0; n < NB; n++) {
            int64_t t0 = (b + n) * 16;
            if (T[i] > t0)
                _mm512_mask_storeu_ps(srow[i] + t0, lanes((int)(T[i] - t0)), _mm512_mul_ps(acc[i][n], sc));
        }
}

/* NQ queries over the blocks the longest of them needs: 8 blocks a pass for 1-2 queries, 4 for 3-4 (the
 * accumulators and broadcasts fit the 32 registers). */
AI void scores_bf16_q(float *const *srow, const float *const *q, const int NQ, const uint16_t *k, int hd,
                      float scale, const int *T) {
    int tq = T[0];
    for (int i = 1; i < NQ; i++) tq = T[i] > tq ? T[i] : tq;
    const int64_t nblk = (tq + 15) / 16;
    int64_t b = 0;
    if (NQ <= 2)
        for (; b + 8 <= nblk; b += 8) qk_bf16_blocks(srow, q, NQ, k, hd, b, 8, scale, T);
    else
        for (; b + 4 <= nblk; b += 4) qk_bf16_blocks(srow, q, NQ, k, hd, b, 4, scale, T);
    for (; b < nblk; b++) qk_bf16_blocks(srow, q, NQ, k, hd, b, 1, scale, T);
}

void vs_attn_scores_bf16_avx512(float *s, int ld, const float *const *q, const int *T, int nq,
                                const uint16_t *k, int hd, float scale) {
    for (int i = 0; i < nq; i += 4) {
        float *srow[4];
        for (int j = 0; j < 4; j++) srow[j] = s + (size_t)(i + j < nq ? i + j : i) * ld;
        switch (nq - i < 4 ? nq - i : 4) {
        case 1: scores_bf16_q(srow, q + i, 1, k, hd, scale, T + i); break;
        case 2: scores_bf16_q(srow, q + i, 2, k, hd, scale, T + i); break;
        case 3: scores_bf16_q(srow, q + i, 3, k, hd, scale, T + i); break;
        default: scores_bf16_q(srow, q + i, 4, k, hd, scale, T + i); break;
        }
    }
}

/* Outputs of NQ (1 to 4) queries for the dimensions [d0, d0 + 16 NC), the last vector nl lanes: one chain
 * per output in position order, NQ x NC chains side by side. */
AI void pv_bf16_tile(float *const *o, const float *const *p, const int NQ, const int NC, int nl, int T,
                     const uint16_t *v, int hd, int d0) {
    __m512 acc[4][4];
    __mmask16 m[4];
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) m[c] = c == NC - 1 ? lanes(nl) : 0xffff;
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) acc[i][c] = _mm512_setzero_ps();
    const int32_t *vp = (const int32_t *)v + d0;
    int t = 0;
    for (; t + 2 <= T; t += 2, vp += hd) {
        __m512 pe[4], po[4];
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) pe[i] = _mm512_set1_ps(p[i][t]), po[i] = _mm512_set1_ps(p[i][t + 1]);
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            __m512i w = _mm512_maskz_loadu_epi32(m[c], vp + 16 * c);
            __m512 ve = bf16_lo(w), vo = bf16_hi(w);
#pragma GCC unroll 4
            for (int i = 0; i < NQ; i++) {
                acc[i][c] = _mm512_fmadd_ps(pe[i], ve, acc[i][c]);
                acc[i][c] = _mm512_fmadd_ps(po[i], vo, acc[i][c]);
            }
        }
    }
    if (t < T) /* an odd T: the last even position alone */
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            __m512 ve = bf16_lo(_mm512_maskz_loadu_epi32(m[c], vp + 16 * c));
#pragma GCC unroll 4
            for (int i = 0; i < NQ; i++) acc[i][c] = _mm512_fmadd_ps(_mm512_set1_ps(p[i][t]), ve, acc[i][c]);
        }
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) _mm512_mask_storeu_ps(o[i] + d0 + 16 * c, m[c], acc[i][c]);
}

#define PVB_CASE(NQ, NC)                                                                                     \
    case (NQ)*8 + (NC):                                                                                      \
        pv_bf16_tile(oo, pp, NQ, NC, nl, T, v, hd, d0);                                                      \
        break;

/* Up to 4 queries a pass (3 x 2 = 6 chains for a head group of 3 at head dim 32), 64 dimensions a tile. */
void vs_attn_pv_bf16_avx512(float *const *o, const float *p, int ld, int nq, int T, const uint16_t *v,
                            int hd) {
    for (int i0 = 0; i0 < nq; i0 += 4) {
        const int nt = nq - i0 < 4 ? nq - i0 : 4;
        const float *pp[4];
        for (int j = 0; j < 4; j++) pp[j] = p + (size_t)(i0 + (j < nt ? j : 0)) * ld;
        float *const *oo = o + i0;
        for (int d0 = 0; d0 < hd; d0 += 64) {
            int w = hd - d0 < 64 ? hd - d0 : 64, nc = (w + 15) / 16, nl = w - 16 * (nc - 1);
            switch (nt * 8 + nc) {
                PVB_CASE(1, 1) PVB_CASE(1, 2) PVB_CASE(1, 3) PVB_CASE(1, 4)
                PVB_CASE(2, 1) PVB_CASE(2, 2) PVB_CASE(2, 3) PVB_CASE(2, 4)
                PVB_CASE(3, 1) PVB_CASE(3, 2) PVB_CASE(3, 3) PVB_CASE(3, 4)
                PVB_CASE(4, 1) PVB_CASE(4, 2) PVB_CASE(4, 3) PVB_CASE(4, 4)
            }
        }
    }
}

/* ---- RoPE and the BF16 cache stores (attn_arch.h: bitwise twins of lm.c's) ---- */

void vs_attn_rope_avx512(float *x, int n_heads, int hd, int rope_dim, const float *cs) {
    for (int h = 0; h < n_heads; h++) {
        float *xh = x + (size_t)h * hd;
        for (int i = 0; i < rope_dim; i += 16) {
            const __mmask16 m = lanes(rope_dim - i);
            const __m512 c2 = _mm512_maskz_loadu_ps(m, cs + i), xv = _mm512_maskz_loadu_ps(m, xh + i);
            /* t1 = (a c, b c), t2 = (b s, a s) for each pair (a, b): even lanes t1 - t2, odd lanes t1 + t2 */
            const __m512 t1 = _mm512_mul_ps(xv, _mm512_moveldup_ps(c2));
            const __m512 t2 = _mm512_mul_ps(_mm512_permute_ps(xv, 0xB1), _mm512_movehdup_ps(c2));
            _mm512_mask_storeu_ps(xh + i, m, _mm512_mask_add_ps(_mm512_sub_ps(t1, t2), (__mmask16)0xAAAA, t1, t2));
        }
    }
}

/* vs_fp32_to_bf16 of 16 lanes (round to nearest even; NaN: its top half with the quiet bit), in the low
 * halves of the 32-bit lanes. */
AI __m512i bf16_rne16(__m512 x) {
    const __m512i b = _mm512_castps_si512(x);
    const __mmask16 nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(b, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
    return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(0x40)));
}

void vs_attn_store_bf16_avx512(uint16_t *kd, uint16_t *vd, const float *k, const float *v, int hd, int t_odd) {
    /* word 2 j of each 32-bit lane pair: the low halves of 32 lanes in order */
    const __m512i even_words = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30,
                                                28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    /* pair j of the key dimensions: 32-bit lane 16 j of the block */
    const __m512i pair_at = _mm512_slli_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 4);
    for (int d = 0; d < hd; d += 32) {
        const int n = hd - d < 32 ? hd - d : 32; /* even */
        const __m512i lo = bf16_rne16(_mm512_maskz_loadu_ps(lanes(n), k + d));
        const __m512i hi = bf16_rne16(_mm512_maskz_loadu_ps(lanes0(n - 16), k + d + 16));
        /* 32-bit lane j = (bf16 k[d + 2 j], bf16 k[d + 2 j + 1]): the layout's pair of dimensions */
        const __m512i pairs = _mm512_permutex2var_epi16(lo, even_words, hi);
        _mm512_mask_i32scatter_epi32(kd + 16 * d, lanes(n / 2), pair_at, pairs, 4);
    }
    const __mmask32 par = t_odd ? 0xaaaaaaaau : 0x55555555u;
    uint16_t *vb = vd - t_odd; /* 32-bit aligned: lane pair (even slot, odd slot) of each dimension */
    for (int d = 0; d < hd; d += 16) {
        const int n = hd - d < 16 ? hd - d : 16;
        __m512i w = bf16_rne16(_mm512_maskz_loadu_ps(lanes(n), v + d));
        if (t_odd) w = _mm512_slli_epi32(w, 16);
        const __mmask32 m = n >= 16 ? 0xffffffffu : (__mmask32)((1ull << (2 * n)) - 1);
        _mm512_mask_storeu_epi16(vb + 2 * d, par & m, w);
    }
}
