/* kernels_avx512: AVX-512 (F/BW/VL/DQ + VNNI) versions of the kernels (contract: kernels_arch.h).
 * Quantised weights: vpdpbusd takes the weights as the unsigned operand (Q8_0 as w + 128, Q4_0 nibbles
 * as stored, i.e. q + 8) and starts from the activation's precomputed -K * sum(q) per lane, so each
 * integer dot is exact. Two 32-value blocks fill a zmm; per-lane int32 sums are scaled per lane
 * (d_w * d_x; the 16 weight scales of 8 pairs come from one gather) and accumulated in f32. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels_arch.h"

#define VS_INLINE static inline __attribute__((always_inline))
#define VS_UNROLL _Pragma("GCC unroll 16")

/* ---- activation quantisation (AVX-512 layout, see kernels_arch.h) ---- */

size_t vs_xq_row_bytes_avx512(int64_t n_in) {
    int64_t nb = n_in / 32, np = (nb + 1) / 2, ng = (nb + 15) / 16;
    return (size_t)(np * 128 + ng * 64);
}

/* One block: q (32 int8) and d, by the shared quantiser (kernels_arch.h). */
VS_INLINE __m256i quant_block(const float *x, float *d) {
    __m512i i0, i1;
    vs_xq_block_avx512(x, &i0, &i1, d);
    return _mm256_set_m128i(_mm512_cvtepi32_epi8(i1), _mm512_cvtepi32_epi8(i0));
}

void vs_xq_quantize_row_avx512(const float *x, int64_t n_in, vs_type wtype, uint8_t *row) {
    const int64_t nb = n_in / 32, np = (nb + 1) / 2, ng = (nb + 15) / 16;
    const bool q4 = wtype == VS_TYPE_Q4_0;
    const __m512i kmul = _mm512_set1_epi8(q4 ? 8 : (char)128);
    float *dx = (float *)(row + np * 128);
    for (int64_t p = 0; p < np; p++) {
        float da, dc = 0.0f;
        __m256i qa = quant_block(x + 2 * p * 32, &da), qc = _mm256_setzero_si256();
        if (2 * p + 1 < nb) qc = quant_block(x + (2 * p + 1) * 32, &dc);
        __m512i q;
        if (!q4) {
            q = _mm512_inserti64x4(_mm512_castsi256_si512(qa), qc, 1);
        } else { /* [a lo, c lo, a hi, c hi] with lo = values 0..15, hi = 16..31 */
            __m256i lo = _mm256_permute2x128_si256(qa, qc, 0x20), hi = _mm256_permute2x128_si256(qa, qc, 0x31);
            q = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        }
        /* -K * (sum of each lane's 4 q): the dot starts from it, cancelling the weights' offset */
        __m512i cinit = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), kmul, q));
        _mm512_store_si512(row + p * 128, q);
        _mm512_store_si512(row + p * 128 + 64, cinit);
        dx[2 * p] = da;
        dx[2 * p + 1] = dc;
    }
    for (int64_t b = 2 * np; b < ng * 16; b++) dx[b] = 0.0f;
}

/* Lane patterns picking, from 16 gathered block scales, the scales of pair lp (blocks 2 lp, 2 lp + 1) in
 * the lane order of the activation layout. */
static const int32_t k_pat_q8[8][16] __attribute__((aligned(64))) = {
#define P8(a) {a, a, a, a, a, a, a, a, a + 1, a + 1, a + 1, a + 1, a + 1, a + 1, a + 1, a + 1}
    P8(0), P8(2), P8(4), P8(6), P8(8), P8(10), P8(12), P8(14)
#undef P8
};
static const int32_t k_pat_q4[8][16] __attribute__((aligned(64))) = {
#define P4(a) {a, a, a, a, a + 1, a + 1, a + 1, a + 1, a, a, a, a, a + 1, a + 1, a + 1, a + 1}
    P4(0), P4(2), P4(4), P4(6), P4(8), P4(10), P4(12), P4(14)
#undef P4
};

/* Scales (f32) of blocks b0 .. b0 + 15 of one weight row (0 past nb), by one gather. */
VS_INLINE __m512 gather_row_scales(const uint8_t *wr, int64_t b0, int64_t nb, int bbytes) {
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    int64_t left = nb - b0;
    __mmask16 m = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
    __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, _mm512_mullo_epi32(iota, _mm512_set1_epi32(bbytes)),
                                            wr + b0 * bbytes, 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
}

/* Weight blocks 2p, 2p + 1 as 64 unsigned bytes in the activation layout's order (Q8_0: w + 128;
 * Q4_0: the nibbles). A missing second block reads nothing and contributes 0 (its q are 0). */
VS_INLINE __m512i load_wpair(vs_type t, const uint8_t *wr, int64_t p, int two) {
    if (t == VS_TYPE_Q8_0) {
        const vs_block_q8_0 *blk = (const vs_block_q8_0 *)wr + 2 * p;
        __m256i lo = _mm256_loadu_si256((const __m256i *)blk[0].qs);
        __m512i w = two ? _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256((const __m256i *)blk[1].qs), 1)
                        : _mm512_castsi256_si512(lo);
        return _mm512_xor_si512(w, _mm512_set1_epi8((char)0x80));
    }
    const vs_block_q4_0 *blk = (const vs_block_q4_0 *)wr + 2 * p;
    __m128i a = _mm_loadu_si128((const __m128i *)blk[0].qs);
    __m256i t2 = two ? _mm256_inserti128_si256(_mm256_castsi128_si256(a), _mm_loadu_si128((const __m128i *)blk[1].qs), 1)
                     : _mm256_castsi128_si256(a);
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(t2), _mm256_srli_epi16(t2, 4), 1);
    return _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
}

/* One output o times rows r0 .. r0 + R - 1: each weight pair is loaded once and applied to all R rows.
 * Per 16 blocks and row, s = d_w * d_x for the 16 blocks (one multiply); per pair and row: the exact
 * integer dot (started from the row's offset correction), its conversion, and one FMA with the pair's
 * lanes of s. Two accumulators per row (even / odd pairs) hide the FMA latency. */
VS_INLINE void quant_pair(const uint8_t *const *xr, __m512 *acc, const __m512 *s16, __m512i w, __m512i pat,
                          int64_t p, const int R) {
    VS_UNROLL
    for (int r = 0; r < R; r++) {
        const uint8_t *xp = xr[r] + p * 128;
        __m512i isum = _mm512_dpbusd_epi32(_mm512_load_si512(xp + 64), w, _mm512_load_si512(xp));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_permutexvar_ps(pat, s16[r]), acc[r]);
    }
}

VS_INLINE void mm_quant_tile(const vs_mm_job *jb, int64_t o, int64_t r0, const int R) {
    const vs_type t = jb->wtype;
    const int64_t nb = jb->n_in / 32, np = (nb + 1) / 2;
    const int bbytes = t == VS_TYPE_Q8_0 ? 34 : 18;
    const uint8_t *wr = jb->w + o * jb->w_row_bytes;
    const int32_t(*pat)[16] = t == VS_TYPE_Q8_0 ? k_pat_q8 : k_pat_q4;
    const uint8_t *xr[4];
    const float *dx[4];
    __m512 acc0[4], acc1[4], s16[4];
    VS_UNROLL
    for (int r = 0; r < R; r++) {
        xr[r] = jb->xq + (r0 + r) * jb->xq_row_bytes;
        dx[r] = (const float *)(xr[r] + np * 128);
        acc0[r] = acc1[r] = _mm512_setzero_ps();
    }
    const int64_t npf = nb / 2; /* pairs with both blocks present */
    __m512 dw_next = gather_row_scales(wr, 0, nb, bbytes);
    for (int64_t p0 = 0, g = 0; p0 < np; p0 += 8, g++) {
        /* the gather for the next 16 blocks is issued a group ahead to hide its latency */
        __m512 dw16 = dw_next;
        if (p0 + 8 < np) dw_next = gather_row_scales(wr, 2 * (p0 + 8), nb, bbytes);
        VS_UNROLL
        for (int r = 0; r < R; r++) s16[r] = _mm512_mul_ps(dw16, _mm512_load_ps(dx[r] + 16 * g));
        int64_t pe = VS_MIN(npf, p0 + 8), p = p0;
        for (; p + 2 <= pe; p += 2) {
            __m512i w0 = load_wpair(t, wr, p, 1), w1 = load_wpair(t, wr, p + 1, 1);
            quant_pair(xr, acc0, s16, w0, _mm512_load_si512(pat[p - p0]), p, R);
            quant_pair(xr, acc1, s16, w1, _mm512_load_si512(pat[p + 1 - p0]), p + 1, R);
        }
        for (; p < VS_MIN(np, p0 + 8); p++) /* a leftover full pair, or the last half pair */
            quant_pair(xr, acc0, s16, load_wpair(t, wr, p, 2 * p + 1 < nb), _mm512_load_si512(pat[p - p0]), p, R);
    }
    VS_UNROLL
    for (int r = 0; r < R; r++)
        jb->y[(r0 + r) * jb->n_out + o] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
}

VS_INLINE __m512 load_w16(vs_type t, const uint8_t *wr, int64_t i, __mmask16 m) {
    if (t == VS_TYPE_F32) return _mm512_maskz_loadu_ps(m, (const float *)wr + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)wr + i);
    if (t == VS_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* O outputs (o .. o + O - 1) times R rows of f32 activations, O x R accumulators: each 16-value step
 * loads O weight vectors and R activation vectors for O * R FMAs (register blocking, so neither the
 * activations nor the weights limit the FMA rate), and four outputs give four independent FMA chains
 * even for one row. */
VS_INLINE void mm_float_tile(const vs_mm_job *jb, int64_t o, int64_t r0, const int O, const int R) {
    const int64_t n = jb->n_in;
    const uint8_t *wr[4];
    const float *x[4];
    __m512 acc[4][4];
    VS_UNROLL
    for (int k = 0; k < O; k++) wr[k] = jb->w + (o + k) * jb->w_row_bytes;
    VS_UNROLL
    for (int r = 0; r < R; r++) x[r] = jb->x + (r0 + r) * n;
    VS_UNROLL
    for (int k = 0; k < O; k++) {
        VS_UNROLL
        for (int r = 0; r < R; r++) acc[k][r] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 xv[4];
        VS_UNROLL
        for (int r = 0; r < R; r++) xv[r] = _mm512_maskz_loadu_ps(m, x[r] + i);
        VS_UNROLL
        for (int k = 0; k < O; k++) {
            __m512 wv = load_w16(jb->wtype, wr[k], i, m);
            VS_UNROLL
            for (int r = 0; r < R; r++) acc[k][r] = _mm512_fmadd_ps(wv, xv[r], acc[k][r]);
        }
    }
    VS_UNROLL
    for (int k = 0; k < O; k++) {
        VS_UNROLL
        for (int r = 0; r < R; r++) jb->y[(r0 + r) * jb->n_out + o + k] = _mm512_reduce_add_ps(acc[k][r]);
    }
}

#define VS_FLOAT_R(O, R, ...)                                                                       \
    switch (R) {                                                                                  \
    case 1: mm_float_tile(__VA_ARGS__, O, 1); break;                                              \
    case 2: mm_float_tile(__VA_ARGS__, O, 2); break;                                              \
    case 3: mm_float_tile(__VA_ARGS__, O, 3); break;                                              \
    default: mm_float_tile(__VA_ARGS__, O, 4); break;                                             \
    }

static void mm_float_block(const vs_mm_job *jb, int64_t o, int64_t r0, int O, int R) {
    switch (O) {
    case 1: VS_FLOAT_R(1, R, jb, o, r0); break;
    case 2: VS_FLOAT_R(2, R, jb, o, r0); break;
    case 3: VS_FLOAT_R(3, R, jb, o, r0); break;
    default: VS_FLOAT_R(4, R, jb, o, r0); break;
    }
}

#define VS_TILE_SWITCH4(fn, R, ...)                                                                 \
    switch (R) {                                                                                  \
    case 1: fn(__VA_ARGS__, 1); break;                                                            \
    case 2: fn(__VA_ARGS__, 2); break;                                                            \
    case 3: fn(__VA_ARGS__, 3); break;                                                            \
    default: fn(__VA_ARGS__, 4); break;                                                           \
    }
void vs_mm_avx512(const vs_mm_job *jb, int64_t o0, int64_t o1) {
    bool quant = jb->wtype == VS_TYPE_Q8_0 || jb->wtype == VS_TYPE_Q4_0;
    const int RT = 4;
    /* Many rows: blocks of rows whose activations stay in L2 while every output streams past them. */
    size_t xrow = quant ? jb->xq_row_bytes : (size_t)jb->n_in * sizeof(float);
    int64_t rb = VS_MAX((int64_t)RT, (int64_t)((512 << 10) / VS_MAX(xrow, (size_t)1)) / RT * RT);
    for (int64_t rb0 = 0; rb0 < jb->n_rows; rb0 += rb) {
        int64_t rb1 = VS_MIN(jb->n_rows, rb0 + rb);
        if (!quant) { /* 4 outputs at a time; their weight rows stay in L1 across the row tiles */
            for (int64_t o = o0; o < o1; o += 4)
                for (int64_t r0 = rb0; r0 < rb1; r0 += 4)
                    mm_float_block(jb, o, r0, (int)VS_MIN(4, o1 - o), (int)VS_MIN(4, rb1 - r0));
            continue;
        }
        for (int64_t o = o0; o < o1; o++) {
            for (int64_t r0 = rb0; r0 < rb1; r0 += RT) {
                int R = (int)VS_MIN(RT, rb1 - r0);
                VS_TILE_SWITCH4(mm_quant_tile, R, jb, o, r0);
            }
        }
    }
}

/* ---- conversions ---- */

void vs_half_to_f32_avx512(vs_type t, const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(dst + i, m, load_w16(t, (const uint8_t *)src, i, m));
    }
}

/* ---- bandwidth probe ---- */

uint64_t vs_read_sum_avx512(const uint8_t *p, size_t n) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 256 <= n; i += 256) {
        a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
        a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + i + 64));
        a2 = _mm512_xor_si512(a2, _mm512_load_si512(p + i + 128));
        a3 = _mm512_xor_si512(a3, _mm512_load_si512(p + i + 192));
    }
    for (; i < n; i += 64) a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
    __m512i a = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
    uint64_t out[8];
    _mm512_storeu_si512(out, a);
    return out[0] ^ out[1] ^ out[2] ^ out[3] ^ out[4] ^ out[5] ^ out[6] ^ out[7];
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
    /* the statistics as the scalar twin (and ggml): f32 squares summed in double */
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i), sq = _mm512_mul_ps(v, v);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(sq)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sq), 1))));
    }
    const float mean = (float)(_mm512_reduce_add_pd(_mm512_add_pd(s0, s1)) / (double)n);
    __m512 vs = _mm512_set1_ps(1.0f / sqrtf(mean + eps));
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

float vs_max_f32_avx512(const float *x, int64_t n) {
    const int64_t nf = n & ~(int64_t)15;
    __m512 vm = _mm512_set1_ps(-INFINITY), vm2 = vm;
    int64_t i = 0;
    for (; i + 32 <= nf; i += 32) { /* two chains over the full blocks */
        vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + i));
        vm2 = _mm512_max_ps(vm2, _mm512_loadu_ps(x + i + 16));
    }
    if (i < nf) vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + i));
    if (n > nf) vm = _mm512_max_ps(vm, _mm512_mask_loadu_ps(vm, tail_mask(n - nf), x + nf));
    return _mm512_reduce_max_ps(_mm512_max_ps(vm, vm2));
}

/* The largest non-NaN value (vmaxps returns its second operand when the first is NaN, so NaN entries never
 * enter the running maxima), then the first index holding a value equal to it: the scalar loop's "first of
 * equal maxima" (-0 and +0 compare equal there too). */
int64_t vs_argmax_f32_avx512(const float *x, int64_t n) {
    if (n <= 0) return -1;
    const int64_t nf = n & ~(int64_t)15;
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 vm = ninf, vm2 = ninf;
    int64_t i = 0;
    for (; i + 32 <= nf; i += 32) {
        vm = _mm512_max_ps(_mm512_loadu_ps(x + i), vm);
        vm2 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), vm2);
    }
    if (i < nf) vm = _mm512_max_ps(_mm512_loadu_ps(x + i), vm);
    if (n > nf) vm = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, tail_mask(n - nf), x + nf), vm);
    const __m512 best = _mm512_set1_ps(_mm512_reduce_max_ps(_mm512_max_ps(vm, vm2)));
    for (i = 0; i < nf; i += 16) {
        __mmask16 eq = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), best, _CMP_EQ_OQ);
        if (eq) return i + __builtin_ctz(eq);
    }
    if (n > nf) {
        __mmask16 eq = _mm512_mask_cmp_ps_mask(tail_mask(n - nf), _mm512_maskz_loadu_ps(tail_mask(n - nf), x + nf),
                                               best, _CMP_EQ_OQ);
        if (eq) return nf + __builtin_ctz(eq);
    }
    return -1; /* every entry NaN */
}

void vs_softmax_avx512(float *x, int64_t n) {
    if (n <= 0) return;
    /* full blocks unmasked, the tail masked; one sum vector in block order */
    const int64_t nf = n & ~(int64_t)15;
    const __mmask16 m = tail_mask(n - nf);
    __m512 mv = _mm512_set1_ps(vs_max_f32_avx512(x, n)), sv = _mm512_setzero_ps();
    int64_t i;
    for (i = 0; i < nf; i += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv));
        _mm512_storeu_ps(x + i, e);
        sv = _mm512_add_ps(sv, e);
    }
    if (n > nf) {
        __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + nf), mv)));
        _mm512_mask_storeu_ps(x + nf, m, e);
        sv = _mm512_add_ps(sv, e);
    }
    __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sv));
    for (i = 0; i < nf; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inv));
    if (n > nf) _mm512_mask_storeu_ps(x + nf, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + nf), inv));
}
