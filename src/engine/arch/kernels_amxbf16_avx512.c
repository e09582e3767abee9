/* kernels_amxbf16_avx512: F16 / BF16 weights times activation rows with AMX-BF16 tiles (TDPBF16PS).
 * Why: the AVX-512 FMA path does one multiply-add per weight and row, so beyond a few rows it is bound
 * by FMA throughput (T(16)/T(1) ~2.8 on the 25M F16 target); a tile product does 16 outputs x 16 rows x
 * 32 inputs per instruction and accumulates in f32 tile registers across the whole row, leaving the
 * vector units only the weight conversion, which is paid once per weight whatever the row count.
 *
 * Exact splits keep F32-FMA-like accuracy with bf16 products (products of two bf16 are exact in f32):
 *  - F16 weight w = wh + wl EXACTLY: wh = w truncated to 8 significant bits, wl = w - wh (at most the 3
 *    remaining significant bits). Both are computed in fp16 arithmetic (AVX512-FP16) on ws = w * 2^10,
 *    which is exact and NORMAL for every |w| < 64 (so are its parts), and turned into bf16 by a shift:
 *    the fp16 bits s|e5|m10 >> 3 are the bf16 bits of the value * 2^-112 (exponent field e5 >= 1), so
 *    the A tile holds wh * 2^-102 and wl * 2^-102 (tests/test_kernels.c checks all finite fp16 values).
 *    Rare |w| >= 64 take an f32 route giving the same bits. BF16 weights: wh = w, no wl, no scaling.
 *  - activation x ~ xh + xl: xh = bf16_rne(x), xl = bf16_rne(x - xh); |x - xh - xl| <= 2^-16 |x|; for
 *    F16 weights stored times 2^62 (exact), so the products are w x 2^-40 (no overflow for |x| < 2^66,
 *    flushed to 0 only below 2^-86) and the result is scaled back by 2^40.
 *  - TDPBF16PS multiplies bf16 PAIRS of consecutive inputs: A holds the weights' hi parts (and, for F16,
 *    a second A tile the lo parts), 32 inputs per 64-byte row; each activation row owns two B columns,
 *    (xh, xh') and (xl, xl'), so C[o][2c] = sum w xh, C[o][2c + 1] = sum w xl over both A tiles and
 *    y = C[o][2c] + C[o][2c + 1]: all four products w{h,l} x{h,l}. One 16-column tile holds 8 rows, so
 *    one row costs two tile products per 32 F16 inputs (one for BF16), the same as a full group of 8.
 *
 * Tiles: A = 16 outputs (F16 blocks converted into an L1 buffer; BF16 full blocks loaded straight from
 * the weight rows with their stride), B = activations (kernels_arch.h, "xb" layout), C = 16 outputs x 8
 * rows x (hi, lo) in f32. The tile shapes are the same for every row count (one row is a group of 8 with
 * 7 zero rows), so every (output, row) element sees the same instruction sequence whatever n_rows is
 * (batch invariance, kernels.h).
 * Tile instructions are inline asm like kernels_quant_avx512.c (no -mamx flags needed); the fp16 arithmetic
 * needs AVX512-FP16, enabled for this file alone by src/CMakeLists.txt (-mavx512fp16; every CPU with
 * AMX-BF16 has it, and vs_cpu_amx_bf16 checks it). */
#include <assert.h>
#include <immintrin.h>
#include <string.h>

#include "amx_tiles.h"
#include "kernels_arch.h"

#define VS_INLINE static inline __attribute__((always_inline))
#define VS_UNROLL _Pragma("GCC unroll 16")

/* vpermt2w indices picking word 2 j + 1 of (a, b) into word j: the high halves (bf16 parts) of 32 f32. */
VS_INLINE __m512i odd_words(void) {
    const __m512i j = _mm512_set_epi64(0x001f001e001d001cLL, 0x001b001a00190018LL, 0x0017001600150014LL,
                                       0x0013001200110010LL, 0x000f000e000d000cLL, 0x000b000a00090008LL,
                                       0x0007000600050004LL, 0x0003000200010000LL);
    return _mm512_add_epi16(_mm512_slli_epi16(j, 1), _mm512_set1_epi16(1));
}

/* ---- activations into the xb layout ---- */

/* 32 floats (kk valid, the rest 0) -> xh and xl as f32 values (exact bf16 values), 2 x 16 each. */
VS_INLINE void split_x32(const float *x, int kk, __m512 *h, __m512 *l) {
    __mmask16 m0 = kk >= 16 ? 0xffff : (__mmask16)((1u << kk) - 1);
    __mmask16 m1 = kk >= 32 ? 0xffff : kk <= 16 ? 0 : (__mmask16)((1u << (kk - 16)) - 1);
    __m512 v[2] = {_mm512_maskz_loadu_ps(m0, x), _mm512_maskz_loadu_ps(m1, x + 16)};
    __m512i hb = (__m512i)_mm512_cvtne2ps_pbh(v[1], v[0]); /* [v0 (16 bf16), v1] in input order */
    h[0] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(hb)), 16));
    h[1] =
        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(hb, 1)), 16));
    __m512i lb = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(v[1], h[1]), _mm512_sub_ps(v[0], h[0]));
    l[0] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(lb)), 16));
    l[1] =
        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(lb, 1)), 16));
}

/* r[j] <- column j of the 16 x 16 matrix of 32-bit lanes whose row i is r[i] (unpacks, then two rounds of
 * 128-bit lane shuffles). */
VS_INLINE void transpose16x16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    /* u[4 i + k], 128-bit lane L: rows 4 i .. 4 i + 3 of column 4 L + k */
    for (int i = 0; i < 4; i++) {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int k = 0; k < 4; k++) {
        __m512i x0 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x88), y0 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xdd);
        __m512i x1 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x88);
        __m512i y1 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xdd);
        r[k] = _mm512_shuffle_i32x4(x0, x1, 0x88);
        r[8 + k] = _mm512_shuffle_i32x4(x0, x1, 0xdd);
        r[4 + k] = _mm512_shuffle_i32x4(y0, y1, 0x88);
        r[12 + k] = _mm512_shuffle_i32x4(y0, y1, 0xdd);
    }
}

/* Group g (rows 8 g .. 8 g + 7 of x, those past n_rows zero) of the xb layout, every step: each row's
 * (xh, xl) pairs as two vectors of 16 lanes (lane kp = inputs 2 kp, 2 kp + 1), the group's 16 of them
 * transposed into the tile's 16 rows of 64 bytes and stored whole. The cost does not depend on how many of
 * the 8 rows are real; the per-row converter it replaces scattered 32 values per row and step, padding rows
 * included. */
void vs_xb_convert_group_avx512(const float *x, int64_t n_in, vs_type wtype, int64_t n_rows, int64_t g,
                                uint8_t *xb) {
    const int64_t G = vs_xb_G(n_rows), ns = vs_xb_steps(n_in), nr = VS_MIN((int64_t)8, n_rows - 8 * g);
    const size_t chunk = vs_xb_chunk(wtype);
    const __m512i odd = odd_words();
    for (int64_t s = 0; s < ns; s++) {
        __m512i r[16];
        for (int c = 0; c < 8; c++) {
            if (c >= nr) {
                r[2 * c] = r[2 * c + 1] = _mm512_setzero_si512();
                continue;
            }
            __m512 h[2], l[2];
            split_x32(x + (8 * g + c) * n_in + 32 * s, (int)VS_MIN(32, n_in - 32 * s), h, l);
            if (wtype == VS_TYPE_F16) { /* times 2^62 (exact): see the top of the file */
                const __m512 k62 = _mm512_set1_ps(0x1p62f);
                h[0] = _mm512_mul_ps(h[0], k62), h[1] = _mm512_mul_ps(h[1], k62);
                l[0] = _mm512_mul_ps(l[0], k62), l[1] = _mm512_mul_ps(l[1], k62);
            }
            /* pairs of consecutive inputs: the high halves of inputs 2 kp, 2 kp + 1 */
            r[2 * c] = _mm512_permutex2var_epi16(_mm512_castps_si512(h[0]), odd, _mm512_castps_si512(h[1]));
            r[2 * c + 1] = _mm512_permutex2var_epi16(_mm512_castps_si512(l[0]), odd, _mm512_castps_si512(l[1]));
        }
        transpose16x16(r);
        uint8_t *base = xb + (size_t)(s * G + g) * chunk;
        for (int kp = 0; kp < 16; kp++) _mm512_store_si512(base + 64 * kp, r[kp]);
    }
}

/* ---- weights: exact hi / lo split of fp16 ---- */

/* 32 fp16 -> bf16 hi and lo parts times 2^-102 (see the top of the file); returns the lanes with |w| >= 64
 * (or Inf / NaN), whose results are not valid here. */
VS_INLINE __mmask32 split_w32(__m512i h, __m512i *hi, __m512i *lo) {
    const __m512i m_fff8 = _mm512_set1_epi16((short)0xfff8), m_8fff = _mm512_set1_epi16((short)0x8fff);
    __m512h ws = _mm512_mul_ph(_mm512_castsi512_ph(h), _mm512_set1_ph((_Float16)1024.0f)); /* exact, normal */
    __m512i his = _mm512_and_si512(_mm512_castph_si512(ws), m_fff8);                /* 8 significant bits */
    __m512i los = _mm512_castph_si512(_mm512_sub_ph(ws, _mm512_castsi512_ph(his))); /* exact, normal or 0 */
    *hi = _mm512_and_si512(_mm512_srai_epi16(his, 3), m_8fff);
    *lo = _mm512_and_si512(_mm512_srai_epi16(los, 3), m_8fff);
    return _mm512_fpclass_ph_mask(ws, 0x99); /* +-Inf, NaN: |w| >= 64 overflowed */
}

/* The same bits by f32 arithmetic, for any finite w (the route for |w| >= 64). */
VS_INLINE void split_w32_f32(__m512i h, __m512i *hi, __m512i *lo) {
    const __m512i tmask = _mm512_set1_epi32((int)0xffff0000u);
    const __m512 k = _mm512_set1_ps(0x1p-102f);
    const __m512i odd = odd_words();
    __m512i hv[2], lv[2];
    for (int t = 0; t < 2; t++) {
        __m512 f = _mm512_cvtph_ps(t ? _mm512_extracti64x4_epi64(h, 1) : _mm512_castsi512_si256(h));
        __m512 fh = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(f), tmask));
        hv[t] = _mm512_castps_si512(_mm512_mul_ps(fh, k)); /* exact: >= 2^-24 * 2^-102 */
        lv[t] = _mm512_castps_si512(_mm512_mul_ps(_mm512_sub_ps(f, fh), k));
    }
    *hi = _mm512_permutex2var_epi16(hv[0], odd, hv[1]);
    *lo = _mm512_permutex2var_epi16(lv[0], odd, lv[1]);
}

void vs_f16_split_bf16_avx512(const uint16_t *w, int64_t n, uint16_t *hi, uint16_t *lo) {
    for (int64_t i = 0; i < n; i += 32) {
        int kk = (int)VS_MIN(32, n - i);
        __mmask32 mk = kk >= 32 ? 0xffffffffu : (__mmask32)((1ull << kk) - 1);
        __m512i h = _mm512_maskz_loadu_epi16(mk, w + i), a, b;
        if (split_w32(h, &a, &b)) split_w32_f32(h, &a, &b);
        _mm512_mask_storeu_epi16(hi + i, mk, a);
        _mm512_mask_storeu_epi16(lo + i, mk, b);
    }
}

/* ---- tiles ---- */

/* tmm0..3: C (16 outputs x 16 columns f32) of up to 4 row groups; tmm4/5: A (hi parts; F16: lo parts);
 * tmm6: the group's B tile. Every tile is 16 x 64 bytes. */
#define TDP(C, A, B) TDP_BF16(C, A, B)

#define VS_STEP_BYTES 2048 /* converted weights of one step: two 16 x 64-byte A tiles */
#define VS_PF_STEPS 8      /* prefetch distance in input steps (64 bytes of every weight row per step) */
#define VS_CONV_AHEAD 2    /* F16 conversion runs this many steps ahead of the tile products */
#define VS_TRANSPOSE_ROWS 4 /* row groups of this many rows or more: csum_transposed, fewer: gathers */
#define VS_RING 4          /* converted steps on the stack (> VS_CONV_AHEAD) */

/* A tiles of input step s (kk valid inputs) for rows 0 .. valid - 1 of the output tile into dst (rows
 * past `valid` are left as they are: zero): [hi, lo][m][32 bf16] (BF16: hi only, the weights). */
VS_INLINE void convert_step(const uint8_t *wt, size_t rb, bool f16, int valid, int64_t s, int kk,
                            uint8_t *dst) {
    const __mmask32 mk = kk >= 32 ? 0xffffffffu : (__mmask32)((1ull << kk) - 1);
    __mmask32 big = 0;
    for (int m = 0; m < valid; m++) {
        const uint16_t *src = (const uint16_t *)(wt + m * rb) + 32 * s;
        __m512i v = kk >= 32 ? _mm512_loadu_si512(src) : _mm512_maskz_loadu_epi16(mk, src);
        if (f16) {
            __m512i a, b;
            big |= split_w32(v, &a, &b);
            _mm512_store_si512(dst + 64 * m, a);
            _mm512_store_si512(dst + 1024 + 64 * m, b);
        } else {
            _mm512_store_si512(dst + 64 * m, v);
        }
    }
    if (big) { /* some |w| >= 64 (rare): this step again by the f32 route */
        for (int m = 0; m < valid; m++) {
            const uint16_t *src = (const uint16_t *)(wt + m * rb) + 32 * s;
            __m512i a, b;
            split_w32_f32(_mm512_maskz_loadu_epi16(mk, src), &a, &b);
            _mm512_store_si512(dst + 64 * m, a);
            _mm512_store_si512(dst + 1024 + 64 * m, b);
        }
    }
}

/* The sums C[o][2c] + C[o][2c + 1] of a stored C tile for the group's rows c = 0..7, as 8 vectors over the
 * outputs o (out[c] lane o): pairs of C rows are added lane-wise into (c, o & 1) pairs, then an 8 x 8
 * transpose of those 64-bit pairs: 40 permutes and 8 adds for all 8 rows, against 2 gathers per row. The
 * adds are the gathers' (even column + odd column), so the bits are the same (test_kernels' invariance
 * suite compares every row count with one row). kbench, one thread, 1408 x 512 from L2, medians, old and
 * new alternating over 5 runs: F16 16 rows 110-114 -> 102-104 us, 8 rows 82-83 -> 78-81; BF16 16 rows
 * 62-68 -> 60-64 (within the noise); 1-3 rows keep the gathers. */
VS_INLINE void csum_transposed(const float *cbuf, __m512 out[8]) {
    const __m512i ie = _mm512_setr_epi32(0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
    const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
    __m512d s[8], t[8];
    for (int p = 0; p < 8; p++) { /* s[p] qword c = (sum for o = 2p, sum for o = 2p + 1) */
        __m512 a = _mm512_load_ps(cbuf + 32 * p), b = _mm512_load_ps(cbuf + 32 * p + 16);
        s[p] = _mm512_castps_pd(
            _mm512_add_ps(_mm512_permutex2var_ps(a, ie, b), _mm512_permutex2var_ps(a, io, b)));
    }
    for (int i = 0; i < 8; i += 2) /* t[i]: qwords c = 0, 2, 4, 6 of s[i], s[i+1] interleaved; t[i+1]: odd c */
        t[i] = _mm512_unpacklo_pd(s[i], s[i + 1]), t[i + 1] = _mm512_unpackhi_pd(s[i], s[i + 1]);
    const __m512i k0 = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), k1 = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    for (int h = 0; h < 2; h++) {    /* h: even or odd c */
        for (int q = 0; q < 2; q++) { /* q: p = 0..3 or 4..7 */
            __m512d a = t[4 * q + h], b = t[4 * q + 2 + h];
            s[4 * q + h] = _mm512_permutex2var_pd(a, k0, b);     /* c = h, h + 4 for p = 4q .. 4q + 3 */
            s[4 * q + 2 + h] = _mm512_permutex2var_pd(a, k1, b); /* c = h + 2, h + 6 */
        }
    }
    for (int j = 0; j < 4; j++) { /* s[j]: c = cj, cj + 4 for p = 0..3; s[4 + j]: the same c for p = 4..7 */
        const int c = (j & 1) + 2 * (j >> 1);
        out[c] = _mm512_castpd_ps(_mm512_shuffle_f64x2(s[j], s[4 + j], 0x44));
        out[c + 4] = _mm512_castpd_ps(_mm512_shuffle_f64x2(s[j], s[4 + j], 0xee));
    }
}

/* y[(8 g + c) * n_out + o_t + o] = C[o][2c] + C[o][2c + 1] for the rows c of group g, from the C tile
 * stored in cbuf (16 x 16 f32); vm: the tile's valid outputs. */
VS_INLINE void c_to_y(const vs_mm_job *jb, const float *cbuf, int64_t g, int64_t o_t, __mmask16 vm, bool f16) {
    const int64_t rows = VS_MIN((int64_t)8, jb->n_rows - 8 * g);
    __m512 tr[8];
    if (rows >= VS_TRANSPOSE_ROWS) csum_transposed(cbuf, tr);
    /* fewer rows: the columns by gathers with stride 16 floats */
    const __m512i cidx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(16));
    for (int64_t c = 0; c < rows; c++) {
        __m512 v = rows >= VS_TRANSPOSE_ROWS ? tr[c]
                                             : _mm512_add_ps(_mm512_i32gather_ps(cidx, cbuf + 2 * c, 4),
                                                             _mm512_i32gather_ps(cidx, cbuf + 2 * c + 1, 4));
        if (f16) v = _mm512_mul_ps(v, _mm512_set1_ps(0x1p40f)); /* the scales 2^-102 * 2^62 undone */
        _mm512_mask_storeu_ps(jb->y + (8 * g + c) * jb->n_out + o_t, vm, v);
    }
}

/* One 16-output tile (rows o_t .. o_t + valid - 1) times row groups g0 .. g0 + ng - 1 (ng <= 4). Every
 * C element accumulates, step after step, the tile products in the same order (F16: half 0, half 1)
 * whatever ng and g0 are (F16: hi tile, then lo tile). With `panel` (more than 4 groups) the converted
 * weights of all steps are kept there by the first pass (`first`) and reused by later ones; otherwise a ring
 * of VS_RING steps on the stack. */
static void tile_groups(const vs_mm_job *jb, int64_t o_t, int valid, int64_t g0, int ng, uint8_t *panel,
                        bool first, size_t next_bytes) {
    const bool f16 = jb->wtype == VS_TYPE_F16;
    const int64_t n_in = jb->n_in, ns = vs_xb_steps(n_in), G = vs_xb_G(jb->n_rows);
    const size_t rb = jb->w_row_bytes, chunk = vs_xb_chunk(jb->wtype);
    const uint8_t *wt = jb->w + o_t * rb;
    _Alignas(64) uint8_t ring[VS_RING][VS_STEP_BYTES];
    _Alignas(64) float cbuf[16 * 16];
    if (valid < 16 && (!panel || first)) {
        if (panel)
            memset(panel, 0, VS_STEP_BYTES * (size_t)ns);
        else
            memset(ring, 0, sizeof(ring));
    }
    TILE_ZERO(0);
    if (ng > 1) TILE_ZERO(1);
    if (ng > 2) TILE_ZERO(2);
    if (ng > 3) TILE_ZERO(3);
    /* The tile reads its 16 weight rows as 16 interleaved streams (64 bytes each per step), which the
     * hardware prefetchers follow poorly: each row is prefetched VS_PF_STEPS steps ahead, running on into
     * the next tile's rows at the end (kbench-like test, 5632 x 2048 from DRAM, one thread: 2.7 ms with
     * the next tile prefetched linearly into L1, 2.4 without prefetching, 2.2 with this). */
    const uint8_t *next = wt + 16 * rb;
    const int64_t pfd = VS_PF_STEPS;
    /* F16 conversion is software-pipelined VS_CONV_AHEAD steps ahead: the tile loads of a step read stores
     * that have long retired (a tile load waits for stores to reach L1, and they retire behind the long
     * tile products), so the vector units convert while the tile unit multiplies (one step ahead: one
     * row of 1408 x 512 from L2 took 80 us, the two halves of the work 40 us each) */
    for (int64_t s = 0; f16 && (!panel || first) && s < VS_MIN(ns, VS_CONV_AHEAD); s++)
        convert_step(wt, rb, f16, valid, s, (int)VS_MIN(32, n_in - 32 * s),
                     panel ? panel + (size_t)s * VS_STEP_BYTES : ring[s % VS_RING]);
    for (int64_t s = 0; s < ns; s++) {
        if (s + pfd < ns) {
            for (int m = 0; m < valid; m++)
                _mm_prefetch((const char *)(wt + m * rb) + 64 * (s + pfd), _MM_HINT_T0);
        } else if (next_bytes) {
            for (size_t m = 0; m * rb < next_bytes; m++)
                _mm_prefetch((const char *)(next + m * rb) + 64 * (s + pfd - ns), _MM_HINT_T0);
        }
        const int kk = (int)VS_MIN(32, n_in - 32 * s);
        uint8_t *a = panel ? panel + (size_t)s * VS_STEP_BYTES : ring[s % VS_RING];
        if (!f16 && kk == 32 && valid == 16) {
            TILE_LOAD(4, wt + 64 * s, rb); /* bf16 weights are A as stored */
        } else {
            if (!f16 && (!panel || first)) convert_step(wt, rb, f16, valid, s, kk, a);
            TILE_LOAD(4, a, 64);
            if (f16) TILE_LOAD(5, a + 1024, 64);
        }
        const uint8_t *ch = jb->xb + (size_t)(s * G + g0) * chunk;
#define VS_GROUP_TDPS(Ct, k)              \
    do {                                  \
        TILE_LOAD(6, ch + (k)*chunk, 64); \
        TDP(Ct, 4, 6);                    \
        if (f16) TDP(Ct, 5, 6);           \
    } while (0)
        VS_GROUP_TDPS(0, 0);
        if (ng > 1) VS_GROUP_TDPS(1, 1);
        if (ng > 2) VS_GROUP_TDPS(2, 2);
        if (ng > 3) VS_GROUP_TDPS(3, 3);
#undef VS_GROUP_TDPS
        const int64_t sc = s + VS_CONV_AHEAD;
        if (f16 && sc < ns && (!panel || first))
            convert_step(wt, rb, f16, valid, sc, (int)VS_MIN(32, n_in - 32 * sc),
                         panel ? panel + (size_t)sc * VS_STEP_BYTES : ring[sc % VS_RING]);
    }
    const __mmask16 vm = valid >= 16 ? 0xffff : (__mmask16)((1u << valid) - 1);
    for (int k = 0; k < ng; k++) {
        switch (k) {
        case 0:
            TILE_STORE(0, cbuf, 64);
            break;
        case 1:
            TILE_STORE(1, cbuf, 64);
            break;
        case 2:
            TILE_STORE(2, cbuf, 64);
            break;
        default:
            TILE_STORE(3, cbuf, 64);
            break;
        }
        c_to_y(jb, cbuf, g0 + k, o_t, vm, f16);
    }
}

size_t vs_mm_amx_bf16_panel_bytes(int64_t n_in, int64_t n_rows) {
    return vs_xb_G(n_rows) > 4 ? (size_t)vs_xb_steps(n_in) * VS_STEP_BYTES : 0;
}

/* Many rows (prefill): blocks of row groups whose activations (about 256 KB) stay in L2 while every
 * output tile streams past them; the weights are read and converted once per block. */
#define VS_XB_BLOCK_BYTES (256 << 10)

void vs_mm_amx_bf16(const vs_mm_job *jb, int64_t o0, int64_t o1, void *panel) {
    const int64_t G = vs_xb_G(jb->n_rows);
    const size_t per_group = (size_t)vs_xb_steps(jb->n_in) * vs_xb_chunk(jb->wtype);
    const int64_t GB = VS_MAX((int64_t)4, (int64_t)(VS_XB_BLOCK_BYTES / per_group) / 4 * 4);
    assert(G <= 4 || panel);
    vs_amx_config_full();
    for (int64_t gb = 0; gb < G; gb += GB) {
        const int64_t ge = VS_MIN(G, gb + GB);
        for (int64_t o = o0; o < o1; o += 16) {
            int valid = (int)VS_MIN(16, o1 - o);
            size_t nx = o + 16 < o1 ? (size_t)VS_MIN(16, o1 - o - 16) * jb->w_row_bytes : 0;
            for (int64_t g = gb; g < ge; g += 4)
                tile_groups(jb, o, valid, g, (int)VS_MIN(4, ge - g), G > 4 ? panel : NULL, g == gb,
                            g == gb ? nx : 0);
        }
    }
    TILE_RELEASE();
}
