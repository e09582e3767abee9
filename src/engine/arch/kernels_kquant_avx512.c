/* kernels_kquant_avx512: Q4_K / Q5_K / Q6_K weights times activation rows on CPUs with AVX-512 VNNI, read
 * from the load-time x16 copy (kernels.h) with the xk activation layout (kernels_arch.h).
 *
 * Lanes = the 16 outputs of a tile. Per super-block and 32-value chunk c the tile's codes are 8 vectors
 * W[k] (lane o: output o's codes at positions 4k..4k+3 of the chunk, unpacked from the copy's nibbles
 * and high bits), and per row 8 `vpdpbusd` with broadcast activation dwords give the chunk's dot in two
 * halves (k < 4, k >= 4); those are multiplied by the lanes' sub-block scales (Q6_K: one per half) and
 * added to the row's super-block sum S. After the 8 chunks S gets Q6_K's -32 * sum(scale * bsum) and the
 * mins' m = sum(min_j * bsum pair j) is formed, both as `vpdpwssd` over the activations' int16 block sums;
 * then the float steps of vs_kq_x16_block (kernels_arch.h): one FMA per row and super-block. Integer sums
 * are exact in any order, so every row count and tiling gives the scalar twin's bits (vs_matmul_x16_ref).
 * Rows go in groups of up to KQ_G over a tile (the tile's weights, nb super-blocks, stay in L2 between
 * groups).
 * Measured (Zen 5, one thread, kbench 5632 x 2048 from DRAM): Q4_K 1/6/16/32 rows 213/258/654/1261 us;
 * with the chunk loop fully unrolled GCC spilled codes and sums: 199/372/927/1622. */
#include <immintrin.h>
#include <string.h>

#include "kernels_arch.h"

#define VS_INLINE static inline __attribute__((always_inline))
/* Rows per group (4, 8 and 16 measured within noise of each other: the per-row work dominates). */
#define KQ_G 8
_Static_assert(KQ_G == 8, "kq_driver's switch has cases 1..8");
#define VS_UNROLL _Pragma("GCC unroll 16")

/* dst = a | (b & mask) */
VS_INLINE __m512i or_masked(__m512i a, __m512i b, __m512i mask) { return _mm512_ternarylogic_epi32(a, b, mask, 0xf8); }

/* Chunk c = 2 cp + e's codes of the tile's super-block blk (x16 layout) as W[8]; cp a run-time value,
 * e a compile-time one. */
VS_INLINE void kq_codes(const uint8_t *blk, const vs_type T, const int cp, const int e, __m512i W[8]) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const int c = 2 * cp + e;
    if (T == VS_TYPE_Q6_K) {
        const int h = cp / 2, kk = 2 * (cp % 2) + e;
        const __m128i lsh = _mm_cvtsi32_si128(4 * (cp % 2)), hsh = _mm_cvtsi32_si128(2 * kk);
        VS_UNROLL
        for (int k = 0; k < 8; k++) {
            __m512i l = _mm512_srl_epi16(_mm512_loadu_si512(blk + 1024 * h + 512 * e + 64 * k), lsh);
            /* bits 2kk..2kk+1 of each byte to bits 0..1 (16-bit shifts: what crosses a byte lands above
             * bit 1 and is masked off), then to bits 4..5 */
            __m512i hb = _mm512_srl_epi16(_mm512_loadu_si512(blk + 2048 + 512 * h + 64 * k), hsh);
            hb = _mm512_slli_epi16(_mm512_and_si512(hb, _mm512_set1_epi8(0x03)), 4);
            W[k] = or_masked(hb, l, m4);
        }
        return;
    }
    const __m128i qsh = _mm_cvtsi32_si128(c);
    VS_UNROLL
    for (int k = 0; k < 8; k++) {
        __m512i raw = _mm512_loadu_si512(blk + 512 * cp + 64 * k);
        W[k] = _mm512_and_si512(e ? _mm512_srli_epi16(raw, 4) : raw, m4);
        if (T == VS_TYPE_Q5_K) { /* bit c of each qh byte to bit 0 (as above), then to bit 4 */
            __m512i hb = _mm512_srl_epi16(_mm512_loadu_si512(blk + 2048 + 64 * k), qsh);
            W[k] = or_masked(W[k], _mm512_slli_epi16(hb, 4), _mm512_set1_epi8(0x10));
        }
    }
}

/* Byte offsets in a tile's super-block of the x16 copy (kernels.h). */
#define KQ_SC(T) ((T) == VS_TYPE_Q5_K ? 2560 : 2048) /* Q4_K / Q5_K: scales [8][16], mins [8][16], d, dmin */
#define KQ6_SC 3072                                 /* Q6_K: scale pairs [8][16][2], then d */

/* One tile (outputs o .. o + 15, `valid` of them real) times rows r0 .. r0 + R - 1. */
VS_INLINE void kq_group(const vs_mm_job *jb, int64_t o, int valid, int64_t r0, const int R, const vs_type T,
                        const uint8_t *next, size_t next_bytes) {
    const int64_t nb = jb->n_in / 256;
    const size_t B = vs_x16_block_bytes(T), doff = vs_xk_d_offset(jb->n_in), soff = vs_xk_bsum_offset(jb->n_in);
    const uint8_t *tile = jb->wp + (size_t)(o / 16 * nb) * B;
    const uint8_t *xr[KQ_G];
    VS_UNROLL
    for (int r = 0; r < R; r++) xr[r] = jb->xq + (size_t)(r0 + r) * jb->xq_row_bytes;
    __m512 acc[KQ_G], macc[KQ_G];
    VS_UNROLL
    for (int r = 0; r < R; r++) acc[r] = macc[r] = _mm512_setzero_ps();
    size_t pf = 0;
    for (int64_t b = 0; b < nb; b++) {
        for (size_t pe = next_bytes * (size_t)(b + 1) / (size_t)nb; pf < pe; pf += 64)
            _mm_prefetch((const char *)next + pf, _MM_HINT_T0);
        const uint8_t *blk = tile + (size_t)b * B;
        __m512i S[KQ_G];
        VS_UNROLL
        for (int r = 0; r < R; r++) S[r] = _mm512_setzero_si512();
#pragma GCC unroll 1
        for (int cp = 0; cp < 4; cp++) /* not unrolled: GCC then spilled the codes and the sums */
            VS_UNROLL
            for (int e = 0; e < 2; e++) {
                const int c = 2 * cp + e;
                __m512i W[8];
                kq_codes(blk, T, cp, e, W);
                __m512i s0, s1;
                if (T == VS_TYPE_Q6_K) { /* scale pair (2c, 2c + 1) per lane as int16: low, high halves of the chunk */
                    const __m512i p = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(blk + KQ6_SC + 32 * c)));
                    s0 = _mm512_srai_epi32(_mm512_slli_epi32(p, 16), 16);
                    s1 = _mm512_srai_epi32(p, 16);
                } else {
                    s0 = s1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + KQ_SC(T) + 16 * c)));
                }
                VS_UNROLL
                for (int r = 0; r < R; r++) {
                    const int32_t *xd = (const int32_t *)(xr[r] + b * 256 + 32 * c);
                    __m512i t0 = _mm512_setzero_si512(), t1 = _mm512_setzero_si512();
                    if (T != VS_TYPE_Q6_K && R >= 4) { /* one chain: the rows' chains hide the latency */
                        VS_UNROLL
                        for (int k = 0; k < 8; k++) t0 = _mm512_dpbusd_epi32(t0, W[k], _mm512_set1_epi32(xd[k]));
                        S[r] = _mm512_add_epi32(S[r], _mm512_mullo_epi32(t0, s0));
                        continue;
                    }
                    VS_UNROLL
                    for (int k = 0; k < 4; k++) {
                        t0 = _mm512_dpbusd_epi32(t0, W[k], _mm512_set1_epi32(xd[k]));
                        t1 = _mm512_dpbusd_epi32(t1, W[4 + k], _mm512_set1_epi32(xd[4 + k]));
                    }
                    if (T == VS_TYPE_Q6_K)
                        S[r] = _mm512_add_epi32(S[r], _mm512_add_epi32(_mm512_mullo_epi32(t0, s0), _mm512_mullo_epi32(t1, s1)));
                    else S[r] = _mm512_add_epi32(S[r], _mm512_mullo_epi32(_mm512_add_epi32(t0, t1), s0));
                }
            }
        __m512 d, ndmin = _mm512_setzero_ps();
        if (T == VS_TYPE_Q6_K) {
            d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + KQ6_SC + 256)));
            /* S -= 32 * sum_j scale_j * bsum_j: pairs (-32 scale_2i, -32 scale_2i+1) times bsum dword i */
            __m512i P[8];
            VS_UNROLL
            for (int i = 0; i < 8; i++)
                P[i] = _mm512_sub_epi16(_mm512_setzero_si512(),
                                        _mm512_slli_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256(
                                                              (const __m256i *)(blk + KQ6_SC + 32 * i))), 5));
            VS_UNROLL
            for (int r = 0; r < R; r++) {
                const int32_t *bs = (const int32_t *)(xr[r] + soff) + b * 8;
                VS_UNROLL
                for (int i = 0; i < 8; i++) S[r] = _mm512_dpwssd_epi32(S[r], P[i], _mm512_set1_epi32(bs[i]));
            }
        } else {
            const uint8_t *hd = blk + KQ_SC(T) + 256;
            d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)hd));
            /* -dmin by its sign bit, so dx * ndmin has the bits of the twin's -dx * dmin */
            ndmin = _mm512_xor_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(hd + 32))), _mm512_set1_ps(-0.0f));
        }
        __m512i MP[8]; /* Q4_K / Q5_K: (min_j, min_j) per lane as int16 */
        if (T != VS_TYPE_Q6_K) {
            VS_UNROLL
            for (int j = 0; j < 8; j++) {
                __m512i mj = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + KQ_SC(T) + 128 + 16 * j)));
                MP[j] = _mm512_or_si512(mj, _mm512_slli_epi32(mj, 16));
            }
        }
        VS_UNROLL
        for (int r = 0; r < R; r++) {
            const __m512 dx = _mm512_set1_ps(((const float *)(xr[r] + doff))[b]);
            /* vs_kq_x16_block: acc = fma(dx * d, (float)S, acc); macc = macc + (-dx * dmin) * (float)m */
            acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dx, d), _mm512_cvtepi32_ps(S[r]), acc[r]);
            if (T != VS_TYPE_Q6_K) {
                const int32_t *bs = (const int32_t *)(xr[r] + soff) + b * 8;
                __m512i m = _mm512_setzero_si512();
                VS_UNROLL
                for (int j = 0; j < 8; j++) m = _mm512_dpwssd_epi32(m, MP[j], _mm512_set1_epi32(bs[j]));
                const __m512 tm = _mm512_mul_ps(_mm512_mul_ps(dx, ndmin), _mm512_cvtepi32_ps(m));
                macc[r] = _mm512_add_ps(macc[r], tm);
            }
        }
    }
    const __mmask16 m = valid >= 16 ? 0xffff : (__mmask16)((1u << valid) - 1);
    VS_UNROLL
    for (int r = 0; r < R; r++) {
        const __m512 y = T == VS_TYPE_Q6_K ? acc[r] : _mm512_add_ps(acc[r], macc[r]);
        _mm512_mask_storeu_ps(jb->y + (r0 + r) * jb->n_out + o, m, y);
    }
}

VS_INLINE void kq_driver(const vs_mm_job *jb, int64_t o0, int64_t o1, const vs_type T) {
    const size_t tile_bytes = (size_t)(jb->n_in / 256) * vs_x16_block_bytes(T);
    for (int64_t o = o0; o < o1; o += 16) {
        const int valid = (int)VS_MIN(16, o1 - o);
        const uint8_t *next = jb->wp + (size_t)(o / 16 + 1) * tile_bytes;
        const size_t nx = o + 16 >= o1 ? 0 : tile_bytes; /* the next tile, prefetched by the first row group */
        for (int64_t r0 = 0; r0 < jb->n_rows; r0 += KQ_G) {
            const size_t pfb = r0 == 0 ? nx : 0;
            switch ((int)VS_MIN(KQ_G, jb->n_rows - r0)) {
#define VS_KQ_CASE(n)                                          \
    case n: kq_group(jb, o, valid, r0, n, T, next, pfb); break;
                VS_KQ_CASE(1) VS_KQ_CASE(2) VS_KQ_CASE(3) VS_KQ_CASE(4)
                VS_KQ_CASE(5) VS_KQ_CASE(6) VS_KQ_CASE(7) VS_KQ_CASE(8)
#undef VS_KQ_CASE
            default: break;
            }
        }
    }
}

void vs_mm_kq_lanes(const vs_mm_job *jb, int64_t o0, int64_t o1) {
    switch (jb->wtype) {
    case VS_TYPE_Q4_K: kq_driver(jb, o0, o1, VS_TYPE_Q4_K); break;
    case VS_TYPE_Q5_K: kq_driver(jb, o0, o1, VS_TYPE_Q5_K); break;
    default: kq_driver(jb, o0, o1, VS_TYPE_Q6_K); break;
    }
}
