/* kernels_avx2: AVX2 + FMA + F16C versions of the kernels (see kernels_arch.h for the contract).
 * Quantised weights: maddubs needs an unsigned operand, so each weight block is made signed (Q4_0:
 * nibble - 8), its absolute value is the unsigned operand and the activation takes the weight's sign
 * (|w| * sign(x, w) = w * x; |w| <= 128 and |x| <= 127 keep the int16 pair sums below 32768).
 * K-quants: the codes are unsigned already (0..63), so they are maddubs' unsigned operand as they are
 * (pair sums <= 2 * 63 * 127); the sub-block scales multiply the int16 pair sums in madd (int32 sums far
 * below 2^31), the mins and Q6_K's offset of 32 come from the activations' block sums. */
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

VS_INLINE int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
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

/* ---- K-quant activations (the xk layout of kernels_arch.h) ---- */

void vs_xk_quantize_row_avx2(const float *x, int64_t n_in, uint8_t *row) {
    float *d = (float *)(row + vs_xk_d_offset(n_in));
    int16_t *bs = (int16_t *)(row + vs_xk_bsum_offset(n_in));
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < n_in / 256; b++) {
        const float *xb = x + b * 256;
        int8_t *q = (int8_t *)row + b * 256;
        __m256 m = _mm256_setzero_ps();
        for (int i = 0; i < 256; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(xb + i), absmask));
        float amax = hmax8(m);
        float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        d[b] = amax > 0.0f ? 1.0f / id : 0.0f; /* as the scalar twin */
        __m256 vid = _mm256_set1_ps(id);
        for (int k = 0; k < 8; k++) {
            const float *xc = xb + 32 * k;
            /* cvtps rounds with the current mode (nearest even), like rintf in the scalar twin */
            __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xc), vid));
            __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xc + 8), vid));
            __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xc + 16), vid));
            __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xc + 24), vid));
            __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
            _mm256_storeu_si256((__m256i *)(q + 32 * k), _mm256_permutevar8x32_epi32(p, perm));
            /* the two sums of 16: int32 lanes of (i0 + i1) and of (i2 + i3) */
            bs[b * 16 + 2 * k] = (int16_t)hsum_epi32(_mm256_add_epi32(i0, i1));
            bs[b * 16 + 2 * k + 1] = (int16_t)hsum_epi32(_mm256_add_epi32(i2, i3));
        }
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

/* K-quant weights: a tile of O outputs x R activation rows (O * R <= 8) per call. Per super-block the
 * O * R integer lane vectors sumi (vs_kq_acc_block's lanes: maddubs and madd keep each 4-byte group of a
 * chunk in its int32 lane) are accumulated, then each goes into its pair's 8-lane float accumulator by
 * one FMA; the mins m of all pairs are reduced into one vector (lane k: output k / R, row k % R) and
 * accumulated lane-wise. Exact integers and the float steps of vs_kq_acc_block / vs_kq_acc_result, so
 * every tile shape gives the scalar twin's result bitwise (batch invariance whatever the tiling). The
 * codes of a 32-value chunk are unpacked once per output and used for all R rows. */

/* Per output and super-block: the float scales and the int16 sub-block scales in vectors. */
typedef struct kq_head {
    __m256i sc0, sc1; /* Q4_K / Q5_K: the 8 scales (int16) in both halves of sc0; Q6_K: scales 0..7 in both
                       * halves of sc0, 8..15 in both halves of sc1 */
    __m256i mins;     /* Q4_K / Q5_K: the 8 mins at int16 lanes 2j and 2j + 1; Q6_K: the 16 scales */
    float d, dmin;
} kq_head;

VS_INLINE void kq_head_load(vs_type t, const uint8_t *blk, kq_head *h) {
    if (t == VS_TYPE_Q6_K) {
        const vs_block_q6_k *b = (const vs_block_q6_k *)blk;
        h->d = _cvtsh_ss(b->d);
        h->dmin = 0.0f;
        __m256i s = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        h->sc0 = _mm256_permute2x128_si256(s, s, 0x00);
        h->sc1 = _mm256_permute2x128_si256(s, s, 0x11);
        h->mins = s;
        return;
    }
    const vs_block_q4_k *k4 = (const vs_block_q4_k *)blk; /* d, dmin, scales: the same in Q5_K */
    h->d = _cvtsh_ss(k4->d);
    h->dmin = _cvtsh_ss(k4->dmin);
    /* vs_kq_scale_min for all 8 sub-blocks at once, on 32-bit words: scales 0..3 and mins 0..3 are the
     * low 6 bits of bytes 0..3 and 4..7; scales 4..7 and mins 4..7 take their low 4 bits from the nibbles
     * of bytes 8..11 and their top 2 bits from the top bits of bytes 0..3 and 4..7. */
    uint32_t u[3];
    memcpy(u, k4->scales, 12);
    const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
    const uint64_t sc = (uint64_t)(u[0] & lo6) | (uint64_t)((u[2] & lo4) | (((u[0] >> 6) & lo2) << 4)) << 32;
    const uint64_t mn = (uint64_t)(u[1] & lo6) | (uint64_t)(((u[2] >> 4) & lo4) | (((u[1] >> 6) & lo2) << 4)) << 32;
    __m128i sc16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc));
    __m128i mn16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn));
    h->sc0 = _mm256_broadcastsi128_si256(sc16);
    h->sc1 = h->sc0;
    h->mins = _mm256_set_m128i(_mm_unpackhi_epi16(mn16, mn16), _mm_unpacklo_epi16(mn16, mn16));
}

/* The unsigned codes of values 32 c .. 32 c + 31 of a super-block (c a constant after unrolling). */
VS_INLINE __m256i kq_chunk(vs_type t, const uint8_t *blk, int c) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    if (t == VS_TYPE_Q6_K) {
        const vs_block_q6_k *b = (const vs_block_q6_k *)blk;
        const int h = c / 4, k = c % 4;
        __m256i l = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32 * (k & 1)));
        __m256i hb = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        if (k >= 2) l = _mm256_srli_epi16(l, 4);
        /* bits 2k..2k+1 of each qh byte to bits 4..5 (16-bit shifts: what crosses a byte is masked off) */
        __m256i hi = k == 0 ? _mm256_slli_epi16(hb, 4) : k == 1 ? _mm256_slli_epi16(hb, 2) : k == 2 ? hb
                                                                                        : _mm256_srli_epi16(hb, 2);
        return _mm256_or_si256(_mm256_and_si256(l, m4), _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));
    }
    const uint8_t *qs = t == VS_TYPE_Q4_K ? ((const vs_block_q4_k *)blk)->qs : ((const vs_block_q5_k *)blk)->qs;
    __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * (c / 2)));
    __m256i w = _mm256_and_si256(c & 1 ? _mm256_srli_epi16(raw, 4) : raw, m4);
    if (t == VS_TYPE_Q5_K) {
        const __m256i hb = _mm256_loadu_si256((const __m256i *)((const vs_block_q5_k *)blk)->qh);
        const __m256i bit = _mm256_set1_epi8((char)(1 << c));
        __m256i on = _mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit);
        w = _mm256_or_si256(w, _mm256_and_si256(on, _mm256_set1_epi8(16)));
    }
    return w;
}

/* The int16 scale of each of the 16 pair sums of chunk c (c a constant after unrolling). */
VS_INLINE __m256i kq_chunk_scale(vs_type t, const kq_head *h, int c) {
    if (t == VS_TYPE_Q6_K) { /* scale 2c on the low half, 2c + 1 on the high half */
        const char j0 = (char)(4 * (c % 4)), j1 = (char)(4 * (c % 4) + 2);
        const __m256i pat = _mm256_setr_epi8(j0, j0 + 1, j0, j0 + 1, j0, j0 + 1, j0, j0 + 1, j0, j0 + 1, j0, j0 + 1, j0,
                                             j0 + 1, j0, j0 + 1, j1, j1 + 1, j1, j1 + 1, j1, j1 + 1, j1, j1 + 1, j1,
                                             j1 + 1, j1, j1 + 1, j1, j1 + 1, j1, j1 + 1);
        return _mm256_shuffle_epi8(c < 4 ? h->sc0 : h->sc1, pat);
    }
    const char j = (char)(2 * c);
    return _mm256_shuffle_epi8(h->sc0, _mm256_setr_epi8(j, j + 1, j, j + 1, j, j + 1, j, j + 1, j, j + 1, j, j + 1, j,
                                                        j + 1, j, j + 1, j, j + 1, j, j + 1, j, j + 1, j, j + 1, j,
                                                        j + 1, j, j + 1, j, j + 1, j, j + 1));
}

/* Lane k of the result: the sum of the 8 int32 lanes of v[k]. */
VS_INLINE __m256i hsum8x8_epi32(const __m256i v[8]) {
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

VS_INLINE void kq_tile(const vs_mm_job *jb, const vs_type t, int64_t o, int64_t r0, const int O, const int R) {
    const int64_t nb = jb->n_in / 256;
    const size_t bb = vs_type_block_bytes(t), doff = vs_xk_d_offset(jb->n_in), soff = vs_xk_bsum_offset(jb->n_in);
    const uint8_t *wr[8], *xr[8];
    for (int i = 0; i < O; i++) wr[i] = jb->w + (o + i) * jb->w_row_bytes;
    for (int r = 0; r < R; r++) xr[r] = jb->xq + (r0 + r) * jb->xq_row_bytes;
    /* The tile reads O contiguous rows block by block, a stride the prefetchers do not follow from DRAM
     * (one row: 2 of 14 GB/s): each block prefetches its share of the O rows that follow. */
    const size_t pf_step = (size_t)O * bb;
    /* an integer, not a pointer: it may point past the matrix (a prefetch never faults) */
    const uintptr_t pf = (uintptr_t)wr[0] + (uintptr_t)O * jb->w_row_bytes;
    /* the pairs' float lanes live in memory: 8 of the 16 registers would otherwise hold them through the
     * integer loop, which then spills its accumulators */
    float facc[8][8] = {{0}};
    __m256 mins = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        for (size_t k = 0; k < pf_step; k += 64) _mm_prefetch((const char *)(pf + b * pf_step + k), _MM_HINT_T0);
        kq_head h[8];
        __m256i acc[8], mv[8];
        float dm[8] = {0};
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) acc[i] = mv[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int i = 0; i < O; i++) kq_head_load(t, wr[i] + b * bb, &h[i]);
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
#pragma GCC unroll 8
            for (int i = 0; i < O; i++) {
                const __m256i w = kq_chunk(t, wr[i] + b * bb, c), sc = kq_chunk_scale(t, &h[i], c);
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    __m256i qv = _mm256_loadu_si256((const __m256i *)(xr[r] + b * 256 + 32 * c));
                    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(w, qv), sc);
                    acc[i * R + r] = _mm256_add_epi32(acc[i * R + r], p);
                    /* keeps GCC from reassociating the unrolled sums into a tree of spilled products */
                    __asm__("" : "+x"(acc[i * R + r]));
                }
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < O; i++)
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const int k = i * R + r;
                const float dxr = ((const float *)(xr[r] + doff))[b];
                __m256i bs = _mm256_loadu_si256((const __m256i *)((const int16_t *)(xr[r] + soff) + b * 16));
                __m256i p = _mm256_madd_epi16(h[i].mins, bs);
                if (t == VS_TYPE_Q6_K) acc[k] = _mm256_sub_epi32(acc[k], _mm256_slli_epi32(p, 5)); /* codes = q + 32 */
                else mv[k] = p;
                /* vs_kq_acc_block: lane = fma(dx * d, sumi, lane) */
                _mm256_storeu_ps(facc[k], _mm256_fmadd_ps(_mm256_set1_ps(dxr * h[i].d), _mm256_cvtepi32_ps(acc[k]),
                                                          _mm256_loadu_ps(facc[k])));
                dm[k] = -dxr * h[i].dmin;
            }
        if (t != VS_TYPE_Q6_K) /* mins = mins + (-dx * dmin) * m, not fused; lane k for pair k */
            mins = _mm256_add_ps(mins, _mm256_mul_ps(_mm256_loadu_ps(dm), _mm256_cvtepi32_ps(hsum8x8_epi32(mv))));
    }
    float mn[8];
    _mm256_storeu_ps(mn, mins);
    for (int i = 0; i < O; i++)
        for (int r = 0; r < R; r++) {
            const int k = i * R + r;
            const float s = hsum8(_mm256_loadu_ps(facc[k])); /* ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) */
            jb->y[(r0 + r) * jb->n_out + o + i] = t == VS_TYPE_Q6_K ? s : s + mn[k];
        }
}

#define VS_KQ_TILES(T, tn)                                                                                     \
    static void kq_##tn##_8x1(const vs_mm_job *jb, int64_t o, int64_t r0) { kq_tile(jb, T, o, r0, 8, 1); }     \
    static void kq_##tn##_4x2(const vs_mm_job *jb, int64_t o, int64_t r0) { kq_tile(jb, T, o, r0, 4, 2); }     \
    static void kq_##tn##_2x3(const vs_mm_job *jb, int64_t o, int64_t r0) { kq_tile(jb, T, o, r0, 2, 3); }     \
    static void kq_##tn##_2x4(const vs_mm_job *jb, int64_t o, int64_t r0) { kq_tile(jb, T, o, r0, 2, 4); }     \
    static void kq_##tn##_1x1(const vs_mm_job *jb, int64_t o, int64_t r0) { kq_tile(jb, T, o, r0, 1, 1); }     \
    static void kq_##tn##_1x2(const vs_mm_job *jb, int64_t o, int64_t r0) { kq_tile(jb, T, o, r0, 1, 2); }     \
    static void kq_##tn##_1x3(const vs_mm_job *jb, int64_t o, int64_t r0) { kq_tile(jb, T, o, r0, 1, 3); }     \
    static void kq_##tn##_1x4(const vs_mm_job *jb, int64_t o, int64_t r0) { kq_tile(jb, T, o, r0, 1, 4); }     \
    static const kq_tile_fn kq_##tn##_wide[5] = {NULL, kq_##tn##_8x1, kq_##tn##_4x2, kq_##tn##_2x3, kq_##tn##_2x4}; \
    static const kq_tile_fn kq_##tn##_one[5] = {NULL, kq_##tn##_1x1, kq_##tn##_1x2, kq_##tn##_1x3, kq_##tn##_1x4};

typedef void (*kq_tile_fn)(const vs_mm_job *jb, int64_t o, int64_t r0);
VS_KQ_TILES(VS_TYPE_Q4_K, q4k)
VS_KQ_TILES(VS_TYPE_Q5_K, q5k)
VS_KQ_TILES(VS_TYPE_Q6_K, q6k)

/* Outputs in groups of 8 (their weights stay in L1 while every row group passes over them); rows in groups
 * of up to 4, each group covering the 8 outputs with tiles of 8 / R outputs (single outputs at the edge). */
static void mm_kquant(const vs_mm_job *jb, int64_t o0, int64_t o1) {
    const vs_type t = jb->wtype;
    const kq_tile_fn *wide = t == VS_TYPE_Q4_K ? kq_q4k_wide : t == VS_TYPE_Q5_K ? kq_q5k_wide : kq_q6k_wide;
    const kq_tile_fn *one = t == VS_TYPE_Q4_K ? kq_q4k_one : t == VS_TYPE_Q5_K ? kq_q5k_one : kq_q6k_one;
    for (int64_t og = o0; og < o1; og += 8) {
        const int64_t oe = VS_MIN(o1, og + 8);
        for (int64_t r0 = 0; r0 < jb->n_rows; r0 += 4) {
            const int R = (int)VS_MIN(4, jb->n_rows - r0), O = R == 1 ? 8 : R == 2 ? 4 : 2;
            int64_t o = og;
            for (; o + O <= oe; o += O) wide[R](jb, o, r0);
            for (; o < oe; o++) one[R](jb, o, r0);
        }
    }
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

/* O outputs x R rows of F32 / F16 / BF16 weights: each weight vector is loaded (and converted) once for
 * the R rows and each activation vector once for the O outputs, with O x R independent accumulators (the
 * single-row chain of one output is bound by the FMA latency; 4 x 1 hides it, 4 x 2 .. 2 x 4 reach the
 * FMA units). Every (output, row) is the same FMA chain over i as alone, then hsum8 and the scalar tail:
 * bitwise the same whatever O, R or the batch. */
/* Complete unrolling of the tiles' small constant loops: -O2 leaves nested ones rolled, and the
 * accumulator arrays then live on the stack instead of in registers. */
#define VS_UNROLL4 _Pragma("GCC unroll 4")

/* pf_o >= 0: also prefetches weight rows pf_o .. pf_o + O - 1, one cache line of each per 64 bytes of
 * the tile's own rows (mm_float says why). Prefetches never change a result. */
VS_INLINE void mm_float_block_pf(const vs_mm_job *jb, int64_t o, int64_t r0, const int O, const int R,
                                  int64_t pf_o) {
    const int64_t n = jb->n_in;
    const size_t esz = jb->wtype == VS_TYPE_F32 ? 4 : 2;
    const uint8_t *pf[4] = {0};
    if (pf_o >= 0)
        VS_UNROLL4 for (int k = 0; k < O; k++) pf[k] = jb->w + (pf_o + k) * jb->w_row_bytes;
    const uint8_t *wr[4];
    const float *x[4];
    __m256 acc[4][4];
    VS_UNROLL4 for (int k = 0; k < O; k++) wr[k] = jb->w + (o + k) * jb->w_row_bytes;
    VS_UNROLL4 for (int r = 0; r < R; r++) x[r] = jb->x + (r0 + r) * n;
    VS_UNROLL4 for (int k = 0; k < O; k++)
        VS_UNROLL4 for (int r = 0; r < R; r++) acc[k][r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xv[4];
        if (pf_o >= 0 && (i * esz) % 64 == 0)
            VS_UNROLL4 for (int k = 0; k < O; k++) _mm_prefetch((const char *)(pf[k] + i * esz), _MM_HINT_T0);
        VS_UNROLL4 for (int r = 0; r < R; r++) xv[r] = _mm256_loadu_ps(x[r] + i);
        VS_UNROLL4 for (int k = 0; k < O; k++) {
            const __m256 wv = load_w8(jb->wtype, wr[k], i);
            VS_UNROLL4 for (int r = 0; r < R; r++) acc[k][r] = _mm256_fmadd_ps(wv, xv[r], acc[k][r]);
        }
    }
    VS_UNROLL4 for (int k = 0; k < O; k++)
        VS_UNROLL4 for (int r = 0; r < R; r++) {
            float s = hsum8(acc[k][r]);
            for (int64_t t = i; t < n; t++) s += w_scalar(jb->wtype, wr[k], t) * x[r][t];
            jb->y[(r0 + r) * jb->n_out + o + k] = s;
        }
}

VS_INLINE void mm_float_block(const vs_mm_job *jb, int64_t o, int64_t r0, const int O, const int R) {
    mm_float_block_pf(jb, o, r0, O, R, -1);
}

/* Outputs in groups of 4 (their weights stay in L1 while the row groups pass over them), rows in groups
 * of up to 4; tiles 4 x 1, 4 x 2, 4 x 3, 2 x 4 (at most 13 of the 16 vector registers live), and single
 * outputs at the edge. With several rows the first row group's pass also prefetches the next output
 * group's weight rows (mm_float_block_pf): the tiles' arithmetic then
 * overlaps the next weights' trip from memory (vlmspec kbench, F16, AMD Zen 3 AVX2, 6 alternating
 * rounds: 6 rows 0.70-0.75x the time for 512-wide inputs, 0.90x for 1408; 16 rows 0.86-1.00x). One row
 * prefetches the group after next. */
static void mm_float(const vs_mm_job *jb, int64_t o0, int64_t o1) {
    for (int64_t og = o0; og < o1; og += 4) {
        const int64_t oe = VS_MIN(o1, og + 4);
        const int64_t next = og + 8 <= o1 ? og + 4 : -1; /* a whole next group in this share */
        for (int64_t r0 = 0; r0 < jb->n_rows; r0 += 4) {
            const int R = (int)VS_MIN(4, jb->n_rows - r0);
            const int64_t pf = r0 == 0 ? next : -1;
            int64_t o = og;
            if (oe - og == 4) {
                switch (R) {
                case 1: /* one row: 4 x 1 prefetching the group two ahead (decoding the shipped target on
                         * Zen 5 capped at AVX2: 529-543 t/s one output at a time, 1068-1341 so) */
                    mm_float_block_pf(jb, o, r0, 4, 1, og + 12 <= o1 ? og + 8 : -1);
                    break;
                case 2: mm_float_block_pf(jb, o, r0, 4, 2, pf); break;
                case 3: mm_float_block_pf(jb, o, r0, 4, 3, pf); break;
                default:
                    mm_float_block_pf(jb, o, r0, 2, 4, pf);
                    mm_float_block_pf(jb, o + 2, r0, 2, 4, pf < 0 ? -1 : pf + 2);
                    break;
                }
                continue;
            }
            for (; o < oe; o++) {
                switch (R) {
                case 1: mm_float_block(jb, o, r0, 1, 1); break;
                case 2: mm_float_block(jb, o, r0, 1, 2); break;
                case 3: mm_float_block(jb, o, r0, 1, 3); break;
                default: mm_float_block(jb, o, r0, 1, 4); break;
                }
            }
        }
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
    if (vs_type_is_kquant(jb->wtype)) {
        mm_kquant(jb, o0, o1);
        return;
    }
    if (jb->wtype != VS_TYPE_Q8_0 && jb->wtype != VS_TYPE_Q4_0) {
        mm_float(jb, o0, o1);
        return;
    }
    for (int64_t o = o0; o < o1; o++) {
        for (int64_t r0 = 0; r0 < jb->n_rows; r0 += 4) {
            int R = (int)VS_MIN(4, jb->n_rows - r0);
            VS_TILE_SWITCH(mm_quant_tile, R, jb, o, r0);
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
    /* the statistics as the scalar twin (and ggml): f32 squares summed in double */
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_loadu_ps(x + j), sq = _mm256_mul_ps(v, v);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
    }
    double ss4[4];
    _mm256_storeu_pd(ss4, _mm256_add_pd(s0, s1));
    double ss = (ss4[0] + ss4[1]) + (ss4[2] + ss4[3]);
    for (; j < n; j++) ss += (double)(x[j] * x[j]);
    const float mean = (float)(ss / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
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
