/* kernels_kquant_avxvnni: Q4_K / Q5_K from the load-time x16 copy on CPUs with AVX2 and AVX-VNNI but no
 * AVX-512 (Intel client parts from Alder Lake on; `VLMSPEC_ISA=avx2` on CPUs that have both). The AVX-512
 * kernel (kernels_kquant_avx512.c) on 8-output halves of each 16-output tile: per chunk 8 `vpdpbusd` (VEX
 * form) per row with broadcast activation dwords, one `vpmulld` by the lanes' sub-block scale, the mins by
 * `vpdpwssd` over the block sums, then vs_kq_x16_block's float steps. The same integers and float
 * operations as the AVX-512 kernel, so both are bitwise equal to vs_matmul_x16_ref. With 16 vector
 * registers the codes go in two sets of four (k = 0..3, 4..7) and rows in groups of up to 4.
 * Q6_K stays on the AVX2 kernel (no copy): its 6-bit codes cost ~8 vector ops per 8 lanes x 4 codes to
 * unpack, which at one row made this layout 1.1-1.5x slower than the AVX2 kernel (Zen 5 capped to AVX2,
 * kbench 5632 x 2048: 302-357 against 237-272 us), though 1.15-1.2x faster at 16-32 rows.
 * Call only when vs_cpu_avxvnni(). */
#include <assert.h>
#include <immintrin.h>
#include <string.h>

#include "kernels_arch.h"

#define VS_INLINE static inline __attribute__((always_inline))
#define VS_UNROLL _Pragma("GCC unroll 16")
#define KV_G 4 /* rows per group */

/* Byte offsets in a tile's super-block of the x16 copy (kernels.h). */
#define KQ_SC(T) ((T) == VS_TYPE_Q5_K ? 2560 : 2048) /* scales [8][16], mins [8][16], d, dmin */

/* Codes k = 4 kh .. 4 kh + 3 of chunk c = 2 cp + e, lanes = outputs 8 h .. 8 h + 7 of the tile. */
VS_INLINE void codes4(const uint8_t *blk, const vs_type T, const int cp, const int e, const int kh, const int h,
                      __m256i W[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const int c = 2 * cp + e;
    const __m128i qsh = _mm_cvtsi32_si128(c);
    VS_UNROLL
    for (int i = 0; i < 4; i++) {
        const int k = 4 * kh + i;
        __m256i raw = _mm256_loadu_si256((const __m256i *)(blk + 512 * cp + 64 * k + 32 * h));
        W[i] = _mm256_and_si256(e ? _mm256_srli_epi16(raw, 4) : raw, m4);
        if (T == VS_TYPE_Q5_K) { /* bit c of each qh byte to bit 0 (16-bit shift), then to bit 4 */
            __m256i hb = _mm256_srl_epi16(_mm256_loadu_si256((const __m256i *)(blk + 2048 + 64 * k + 32 * h)), qsh);
            W[i] = _mm256_or_si256(W[i], _mm256_and_si256(_mm256_slli_epi16(hb, 4), _mm256_set1_epi8(0x10)));
        }
    }
}

/* Outputs o + 8 h .. o + 8 h + 7 (`valid` of them real) times rows r0 .. r0 + R - 1. */
VS_INLINE void kv_group(const vs_mm_job *jb, int64_t o, int h, int valid, int64_t r0, const int R, const vs_type T,
                        const uint8_t *next, size_t next_bytes) {
    const int64_t nb = jb->n_in / 256;
    const size_t B = vs_x16_block_bytes(T), doff = vs_xk_d_offset(jb->n_in), soff = vs_xk_bsum_offset(jb->n_in);
    const uint8_t *tile = jb->wp + (size_t)(o / 16 * nb) * B;
    const uint8_t *xr[KV_G];
    VS_UNROLL
    for (int r = 0; r < R; r++) xr[r] = jb->xq + (size_t)(r0 + r) * jb->xq_row_bytes;
    __m256 acc[KV_G], macc[KV_G];
    VS_UNROLL
    for (int r = 0; r < R; r++) acc[r] = macc[r] = _mm256_setzero_ps();
    size_t pf = 0;
    for (int64_t b = 0; b < nb; b++) {
        /* the next tile, a share per super-block: the parts' order within a super-block is not one the
         * hardware prefetchers follow (a first version that also did Q6_K ran one row of it at 7 GB/s) */
        for (size_t pe = next_bytes * (size_t)(b + 1) / (size_t)nb; pf < pe; pf += 64)
            _mm_prefetch((const char *)next + pf, _MM_HINT_T0);
        const uint8_t *blk = tile + (size_t)b * B;
        __m256i S[KV_G];
        VS_UNROLL
        for (int r = 0; r < R; r++) S[r] = _mm256_setzero_si256();
#pragma GCC unroll 1
        for (int cp = 0; cp < 4; cp++)
            VS_UNROLL
            for (int e = 0; e < 2; e++) {
                const int c = 2 * cp + e;
                __m256i T4[KV_G];
                VS_UNROLL
                for (int kh = 0; kh < 2; kh++) {
                    __m256i W[4];
                    codes4(blk, T, cp, e, kh, h, W);
                    VS_UNROLL
                    for (int r = 0; r < R; r++) {
                        const int32_t *xd = (const int32_t *)(xr[r] + b * 256 + 32 * c) + 4 * kh;
                        __m256i t = kh == 0 ? _mm256_setzero_si256() : T4[r];
                        VS_UNROLL
                        for (int i = 0; i < 4; i++) t = _mm256_dpbusd_avx_epi32(t, W[i], _mm256_set1_epi32(xd[i]));
                        T4[r] = t;
                    }
                }
                const __m256i s = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + KQ_SC(T) + 16 * c + 8 * h)));
                VS_UNROLL
                for (int r = 0; r < R; r++) S[r] = _mm256_add_epi32(S[r], _mm256_mullo_epi32(T4[r], s));
            }
        const uint8_t *hd = blk + KQ_SC(T) + 256 + 16 * h;
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)hd));
        /* -dmin by its sign bit, so dx * ndmin has the bits of the twin's -dx * dmin */
        const __m256 ndmin = _mm256_xor_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(hd + 32))), _mm256_set1_ps(-0.0f));
        __m256i M[KV_G];
        VS_UNROLL
        for (int r = 0; r < R; r++) M[r] = _mm256_setzero_si256();
        VS_UNROLL
        for (int j = 0; j < 8; j++) { /* m = sum_j min_j * (bsum_2j + bsum_2j+1): (min_j, min_j) x bsum dword j */
            const __m256i mj = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + KQ_SC(T) + 128 + 16 * j + 8 * h)));
            const __m256i MP = _mm256_or_si256(mj, _mm256_slli_epi32(mj, 16));
            VS_UNROLL
            for (int r = 0; r < R; r++)
                M[r] = _mm256_dpwssd_avx_epi32(M[r], MP, _mm256_set1_epi32(((const int32_t *)(xr[r] + soff))[b * 8 + j]));
        }
        VS_UNROLL
        for (int r = 0; r < R; r++) { /* vs_kq_x16_block */
            const __m256 dx = _mm256_set1_ps(((const float *)(xr[r] + doff))[b]);
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dx, d), _mm256_cvtepi32_ps(S[r]), acc[r]);
            const __m256 tm = _mm256_mul_ps(_mm256_mul_ps(dx, ndmin), _mm256_cvtepi32_ps(M[r]));
            macc[r] = _mm256_add_ps(macc[r], tm);
        }
    }
    VS_UNROLL
    for (int r = 0; r < R; r++) {
        _Alignas(32) float y[8];
        _mm256_store_ps(y, _mm256_add_ps(acc[r], macc[r]));
        memcpy(jb->y + (r0 + r) * jb->n_out + o + 8 * h, y, sizeof(float) * (size_t)valid);
    }
}

VS_INLINE void kv_driver(const vs_mm_job *jb, int64_t o0, int64_t o1, const vs_type T) {
    const size_t tile_bytes = (size_t)(jb->n_in / 256) * vs_x16_block_bytes(T);
    for (int64_t o = o0; o < o1; o += 16) {
        const uint8_t *next = jb->wp + (size_t)(o / 16 + 1) * tile_bytes;
        const size_t nx = o + 16 >= o1 ? 0 : tile_bytes; /* prefetched by the first group of the first half */
        for (int h = 0; h < 2 && o + 8 * h < o1; h++) {
            const int valid = (int)VS_MIN(8, o1 - o - 8 * h);
            for (int64_t r0 = 0; r0 < jb->n_rows; r0 += KV_G) {
                const size_t pfb = h == 0 && r0 == 0 ? nx : 0;
                switch ((int)VS_MIN(KV_G, jb->n_rows - r0)) {
                case 1: kv_group(jb, o, h, valid, r0, 1, T, next, pfb); break;
                case 2: kv_group(jb, o, h, valid, r0, 2, T, next, pfb); break;
                case 3: kv_group(jb, o, h, valid, r0, 3, T, next, pfb); break;
                default: kv_group(jb, o, h, valid, r0, 4, T, next, pfb); break;
                }
            }
        }
    }
}
_Static_assert(KV_G == 4, "kv_driver's switch has cases 1..4");

void vs_mm_kq_lanes_avxvnni(const vs_mm_job *jb, int64_t o0, int64_t o1) {
    assert(jb->wtype == VS_TYPE_Q4_K || jb->wtype == VS_TYPE_Q5_K); /* Q6_K has no copy on AVX2 */
    if (jb->wtype == VS_TYPE_Q4_K) kv_driver(jb, o0, o1, VS_TYPE_Q4_K);
    else kv_driver(jb, o0, o1, VS_TYPE_Q5_K);
}
