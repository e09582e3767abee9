/* kernels_quant_avxvnni: Q8_0 / Q4_0 weights on CPUs with AVX2 and AVX-VNNI but no AVX-512 (Intel client
 * parts from Alder Lake on; `VLMSPEC_ISA=avx2` on CPUs that have both), all row counts. The 16-output-lane
 * kernel of kernels_quant_avx512.c (vs_mm_lanes_vnni) on 8-output halves of each tile, over the same AMX
 * activation layout (kernels_arch.h; quantised by vs_xq_quantize_row_amx_avx2 below) and the same weights:
 * the x16 copy (kernels.h), or the GGUF rows transposed per block (8 rows x 4 dwords: 8 unpacks). Per
 * block and row: 8 VEX `vpdpbusd` with broadcast activation dwords started from -K * sum(q), then
 * acc = fma((float)isum_b, d_w * d_x, acc). The same exact integers and float operations as the AVX-512
 * kernel, so the two are bitwise equal, and the copy gives the rows' results bitwise. With 16 vector
 * registers the rows go in groups of up to 4 (the AMX groups split), each group reading the tile half
 * again from L1. Call only when vs_cpu_avxvnni(). */
#include <immintrin.h>
#include <string.h>

#include "kernels_arch.h"

#define VS_INLINE static inline __attribute__((always_inline))
#define VS_UNROLL _Pragma("GCC unroll 16")
#define VL_G 4 /* rows per group */

/* ---- activation quantisation into the AMX layout ---- */

void vs_xq_quantize_row_amx_avx2(const float *x, int64_t n_in, vs_type wtype, int64_t n_rows, int64_t r,
                                 uint8_t *xq) {
    const int N = vs_xq_amx_N(n_rows);
    const int64_t G = vs_xq_amx_G(n_rows), nb = n_in / 32, g = r / N;
    const int c = (int)(r % N);
    const size_t chunk = vs_xq_amx_chunk(N);
    _Alignas(64) uint8_t blk[68]; /* one block in the AVX2 row layout: q[32], d at byte 64 */
    for (int64_t b = 0; b < nb; b++) {
        _Alignas(32) uint32_t q[8] = {0};
        float d = 0.0f;
        int32_t corr = 0;
        if (x) {
            vs_xq_quantize_row_avx2(x + b * 32, 32, blk); /* the AVX2 quantiser: the same q and d on every ISA */
            memcpy(q, blk, 32);
            memcpy(&d, blk + 64, 4);
            /* sum of the 32 q: |q| <= 127, so the int16 pair sums of maddubs(1, q) are exact */
            const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), _mm256_load_si256((const __m256i *)q));
            const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
            const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
            const __m128i s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
            const int32_t sum = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0xb1)));
            corr = (wtype == VS_TYPE_Q4_0 ? -8 : -128) * sum;
        }
        vs_xq_amx_put(xq + (size_t)(b * G + g) * chunk, N, c, wtype, q, d, corr);
    }
}

/* ---- the lane kernel ---- */

/* Half h (outputs 8 h .. 8 h + 7, `valid` of them real) of the 16-output tile at o: its 8 GGUF rows at their
 * quants (rows past `valid` repeat the last real one), or (pn != NULL) the tile in the x16 copy. */
typedef struct vl_src {
    const uint8_t *wrow[8];
    const uint8_t *pn, *ps; /* the tile's quants and scales in the copy */
    size_t bbytes;          /* GGUF block bytes: 34 or 18 */
    int h;
} vl_src;

VS_INLINE void vl_src_init(vl_src *s, const vs_mm_job *jb, int64_t o, int h, int valid) {
    const size_t rb = jb->w_row_bytes;
    s->bbytes = jb->wtype == VS_TYPE_Q8_0 ? 34 : 18;
    s->h = h;
    for (int k = 0; k < 8; k++) s->wrow[k] = jb->w + (o + 8 * h + VS_MIN(k, valid - 1)) * (int64_t)rb;
    s->pn = s->ps = NULL;
    if (jb->wp) {
        const int64_t nb = jb->n_in / 32;
        s->pn = jb->wp + (size_t)(o / 16 * nb) * vs_x16_block_bytes(jb->wtype);
        s->ps = s->pn + (size_t)nb * (vs_x16_block_bytes(jb->wtype) - 32);
    }
}

/* The 8 rows' 16 quant bytes at byte offset off of their blocks as 4 vectors: P[i] lane k = dword i of row k. */
VS_INLINE void lanes4x8(const vl_src *s, size_t off, __m256i P[4]) {
    __m256i a[4]; /* a[k]: row k's dwords 0..3 in lanes 0..3, row k + 4's in lanes 4..7 */
    VS_UNROLL
    for (int k = 0; k < 4; k++)
        a[k] = _mm256_loadu2_m128i((const __m128i *)(s->wrow[k + 4] + 2 + off), (const __m128i *)(s->wrow[k] + 2 + off));
    const __m256i t0 = _mm256_unpacklo_epi32(a[0], a[1]), t1 = _mm256_unpackhi_epi32(a[0], a[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(a[2], a[3]), t3 = _mm256_unpackhi_epi32(a[2], a[3]);
    P[0] = _mm256_unpacklo_epi64(t0, t2);
    P[1] = _mm256_unpackhi_epi64(t0, t2);
    P[2] = _mm256_unpacklo_epi64(t1, t3);
    P[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* Block b as 8 vectors W[j], lane k = output k's 4 weights that meet activation dword j (Q8_0: values
 * 4j..4j+3 as w + 128; Q4_0: nibbles q + 8, values 4j..4j+3 for j < 4, 16 + 4(j-4).. for j >= 4). */
VS_INLINE void vl_block(const vl_src *s, int64_t b, __m256i W[8], const bool P, const bool Q8) {
    if (Q8) {
        if (P) {
            VS_UNROLL
            for (int j = 0; j < 8; j++) W[j] = _mm256_loadu_si256((const __m256i *)(s->pn + 512 * b + 64 * j + 32 * s->h));
        } else {
            lanes4x8(s, (size_t)b * 34, W);
            lanes4x8(s, (size_t)b * 34 + 16, W + 4);
        }
        VS_UNROLL
        for (int j = 0; j < 8; j++) W[j] = _mm256_xor_si256(W[j], _mm256_set1_epi8((char)0x80));
        return;
    }
    __m256i p[4];
    if (P) {
        VS_UNROLL
        for (int i = 0; i < 4; i++) p[i] = _mm256_loadu_si256((const __m256i *)(s->pn + 256 * b + 64 * i + 32 * s->h));
    } else {
        lanes4x8(s, (size_t)b * 18, p);
    }
    const __m256i m = _mm256_set1_epi8(0x0f);
    VS_UNROLL
    for (int i = 0; i < 4; i++) {
        W[i] = _mm256_and_si256(p[i], m);
        W[4 + i] = _mm256_and_si256(_mm256_srli_epi16(p[i], 4), m);
    }
}

/* Block b's 8 weight scales as f32 (lanes past `valid` repeat a real row's, or hold the copy's zeros:
 * they are never stored). */
VS_INLINE __m256 vl_scales(const vl_src *s, int64_t b, const bool P) {
    if (P) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s->ps + 32 * b + 16 * s->h)));
    _Alignas(16) uint16_t d[8];
    VS_UNROLL
    for (int k = 0; k < 8; k++) memcpy(&d[k], s->wrow[k] + (size_t)b * s->bbytes, 2);
    return _mm256_cvtph_ps(_mm_load_si128((const __m128i *)d));
}

/* Halves s[0 .. H) of the tile at o (valid[h] real outputs each) times rows c0 .. c0 + R - 1 of activation
 * group g. H = 2 (one or two rows) reads each cache line of the tile once, in order: a line holds both
 * halves' dwords. */
VS_INLINE void vl_group(const vs_mm_job *jb, const vl_src *s, const int H, const int *valid, int64_t o, int64_t g,
                        int c0, const int R, const bool P, const bool Q8, const uint8_t *next, size_t next_bytes) {
    const int N = vs_xq_amx_N(jb->n_rows);
    const int64_t nb = jb->n_in / 32, G = vs_xq_amx_G(jb->n_rows);
    const size_t chunk = vs_xq_amx_chunk(N);
    __m256 acc[2][VL_G];
    VS_UNROLL
    for (int h = 0; h < H; h++)
        VS_UNROLL
        for (int c = 0; c < R; c++) acc[h][c] = _mm256_setzero_ps();
    size_t pf = 0;
    for (int64_t b = 0; b < nb; b++) {
        for (size_t pe = next_bytes * (size_t)(b + 1) / (size_t)nb; pf < pe; pf += 64)
            _mm_prefetch((const char *)next + pf, _MM_HINT_T0);
        const uint8_t *ch = jb->xq + (size_t)(b * G + g) * chunk;
        const int32_t *xd = (const int32_t *)ch, *corr = (const int32_t *)(ch + 32 * N + 64);
        const float *dx = (const float *)(ch + 32 * N);
        VS_UNROLL
        for (int h = 0; h < H; h++) {
            __m256i W[8];
            vl_block(&s[h], b, W, P, Q8);
            const __m256 dwv = vl_scales(&s[h], b, P);
            VS_UNROLL
            for (int c = 0; c < R; c++) {
                const int cc = c0 + c;
                /* row cc's dword j: Q8_0 a B tile's order ([j][N]), Q4_0 an A tile's ([N][8]); few rows: two
                 * chains (integer sums, exact in any order) to hide the dot products' latency */
                __m256i v = _mm256_set1_epi32(corr[cc]), v2 = _mm256_setzero_si256();
                VS_UNROLL
                for (int j = 0; j < 8; j++) {
                    const __m256i xj = _mm256_set1_epi32(xd[Q8 ? j * N + cc : 8 * cc + j]);
                    if (R <= 2 && (j & 1)) v2 = _mm256_dpbusd_avx_epi32(v2, W[j], xj);
                    else v = _mm256_dpbusd_avx_epi32(v, W[j], xj);
                }
                if (R <= 2) v = _mm256_add_epi32(v, v2);
                acc[h][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(dwv, _mm256_set1_ps(dx[cc])), acc[h][c]);
            }
        }
    }
    VS_UNROLL
    for (int h = 0; h < H; h++)
        VS_UNROLL
        for (int c = 0; c < R; c++) {
            _Alignas(32) float y[8];
            _mm256_store_ps(y, acc[h][c]);
            memcpy(jb->y + (g * N + c0 + c) * jb->n_out + o + 8 * s[h].h, y, sizeof(float) * (size_t)valid[h]);
        }
}

VS_INLINE void vl_driver(const vs_mm_job *jb, int64_t o0, int64_t o1, const bool P, const bool Q8) {
    const int N = vs_xq_amx_N(jb->n_rows);
    const int64_t G = vs_xq_amx_G(jb->n_rows), nb = jb->n_in / 32;
    const size_t tile_bytes = (size_t)nb * vs_x16_block_bytes(jb->wtype);
    for (int64_t o = o0; o < o1; o += 16) {
        /* the next tile, prefetched by the tile's first row group (none after the last) */
        const size_t nx = o + 16 >= o1 ? 0 : P ? tile_bytes : (size_t)VS_MIN(16, o1 - o - 16) * jb->w_row_bytes;
        const uint8_t *next = !nx ? NULL
                              : P ? jb->wp + (size_t)(o / 16 + 1) * tile_bytes
                                  : jb->w + (o + 16) * (int64_t)jb->w_row_bytes;
        vl_src s[2];
        int valid[2];
        const int H = o + 8 < o1 ? 2 : 1;
        for (int h = 0; h < 2; h++) { /* a missing second half: a copy of the first, never used */
            valid[h] = (int)VS_MAX(1, VS_MIN(8, o1 - o - 8 * h));
            vl_src_init(&s[h], jb, o, h < H ? h : 0, valid[h]);
        }
        if (jb->n_rows <= 2) { /* decoding: both halves in one pass */
            if (H == 2) (jb->n_rows == 1 ? vl_group(jb, s, 2, valid, o, 0, 0, 1, P, Q8, next, nx)
                                         : vl_group(jb, s, 2, valid, o, 0, 0, 2, P, Q8, next, nx));
            else (jb->n_rows == 1 ? vl_group(jb, s, 1, valid, o, 0, 0, 1, P, Q8, next, nx)
                                  : vl_group(jb, s, 1, valid, o, 0, 0, 2, P, Q8, next, nx));
            continue;
        }
        for (int h = 0; h < H; h++)
            for (int64_t g = 0; g < G; g++) {
                const int rows = (int)VS_MIN((int64_t)N, jb->n_rows - g * N);
                for (int c0 = 0; c0 < rows; c0 += VL_G) {
                    const size_t pfb = h == 0 && g == 0 && c0 == 0 ? nx : 0;
                    switch (VS_MIN(VL_G, rows - c0)) {
                    case 1: vl_group(jb, &s[h], 1, &valid[h], o, g, c0, 1, P, Q8, next, pfb); break;
                    case 2: vl_group(jb, &s[h], 1, &valid[h], o, g, c0, 2, P, Q8, next, pfb); break;
                    case 3: vl_group(jb, &s[h], 1, &valid[h], o, g, c0, 3, P, Q8, next, pfb); break;
                    default: vl_group(jb, &s[h], 1, &valid[h], o, g, c0, 4, P, Q8, next, pfb); break;
                    }
                }
            }
    }
}
_Static_assert(VL_G == 4, "vl_driver's switch has cases 1..4");

void vs_mm_lanes_avxvnni(const vs_mm_job *jb, int64_t o0, int64_t o1) {
    const bool q8 = jb->wtype == VS_TYPE_Q8_0;
    if (jb->wp) q8 ? vl_driver(jb, o0, o1, true, true) : vl_driver(jb, o0, o1, true, false);
    else q8 ? vl_driver(jb, o0, o1, false, true) : vl_driver(jb, o0, o1, false, false);
}
