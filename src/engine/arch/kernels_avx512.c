/* kernels_avx512: AVX-512 (F/BW/VL/DQ) versions of the float kernels (contract: kernels_arch.h): F32 / F16 /
 * BF16 weights times activation rows by register-blocked FMA, conversions, the vector ops and the
 * bandwidth probe. Quantised Q8_0 / Q4_0 weights run the 16-output-lane VNNI kernels of
 * kernels_quant_avx512.c (vs_mm_lanes_vnni), which need no AMX. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels_arch.h"

#define VS_INLINE static inline __attribute__((always_inline))
#define VS_UNROLL _Pragma("GCC unroll 16")

VS_INLINE __m512 load_w16(vs_type t, const uint8_t *wr, int64_t i, __mmask16 m) {
    if (t == VS_TYPE_F32) return _mm512_maskz_loadu_ps(m, (const float *)wr + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)wr + i);
    if (t == VS_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Rows per float tile: 4 x 6 accumulators, 4 weight and 1-2 activation registers of the 32. */
#define VS_FLOAT_RT 6

/* O outputs (o .. o + O - 1) times R rows of f32 activations, O x R accumulators: each 16-value step
 * loads O weight vectors and R activation vectors for O * R FMAs (register blocking, so neither the
 * activations nor the weights limit the FMA rate), and four outputs give four independent FMA chains
 * even for one row. Each (output, row) is one FMA chain over the inputs whatever O and R (batch
 * invariance). */
VS_INLINE void mm_float_tile(const vs_mm_job *jb, int64_t o, int64_t r0, const uint8_t *pf, const int O,
                             const int R) {
    const int64_t n = jb->n_in;
    const uint8_t *wr[4];
    const float *x[VS_FLOAT_RT];
    __m512 acc[4][VS_FLOAT_RT];
    VS_UNROLL
    for (int k = 0; k < O; k++) wr[k] = jb->w + (o + k) * jb->w_row_bytes;
    VS_UNROLL
    for (int r = 0; r < R; r++) x[r] = jb->x + (r0 + r) * n;
    VS_UNROLL
    for (int k = 0; k < O; k++) {
        VS_UNROLL
        for (int r = 0; r < R; r++) acc[k][r] = _mm512_setzero_ps();
    }
    const size_t step_bytes = (size_t)O * 16 * (jb->wtype == VS_TYPE_F32 ? 4 : 2);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        if (pf) /* the weights PF_GROUPS tiles ahead, a step's share per step */
            for (size_t k = 0; k < step_bytes; k += 64)
                _mm_prefetch((const char *)pf + (size_t)(i / 16) * step_bytes + k, _MM_HINT_T0);
        __m512 xv[VS_FLOAT_RT];
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
    case 4: mm_float_tile(__VA_ARGS__, O, 4); break;                                              \
    case 5: mm_float_tile(__VA_ARGS__, O, 5); break;                                              \
    default: mm_float_tile(__VA_ARGS__, O, 6); break;                                             \
    }

static void mm_float_block(const vs_mm_job *jb, int64_t o, int64_t r0, const uint8_t *pf, int O, int R) {
    switch (O) {
    case 1: VS_FLOAT_R(1, R, jb, o, r0, pf); break;
    case 2: VS_FLOAT_R(2, R, jb, o, r0, pf); break;
    case 3: VS_FLOAT_R(3, R, jb, o, r0, pf); break;
    default: VS_FLOAT_R(4, R, jb, o, r0, pf); break;
    }
}

/* The float tiles of the first row group prefetch the weights PF_GROUPS output groups ahead, a step's
 * share per step: 4 outputs' rows (4 KB for 512 F16 inputs) are too short a stream for the hardware
 * prefetchers from DRAM. Shipped 25M F16 target decoding, Zen 5, 2 threads: 256 -> 1321 t/s (1 group
 * ahead 1255-1288, 4 groups 1232, 8 groups 810-845); kbench F16 1408 x 512 one row from DRAM 123 -> 32 us.
 * A prefetch changes no result. */
#define PF_GROUPS 2
void vs_mm_avx512(const vs_mm_job *jb, int64_t o0, int64_t o1) {
    /* Many rows: blocks of rows whose activations stay in L2 while every output streams past them;
     * 4 outputs at a time, their weight rows staying in L1 across the row tiles. */
    const size_t xrow = (size_t)jb->n_in * sizeof(float);
    const int64_t RT = VS_FLOAT_RT;
    const int64_t rb = VS_MAX(RT, (int64_t)((512 << 10) / VS_MAX(xrow, (size_t)1)) / RT * RT);
    for (int64_t rb0 = 0; rb0 < jb->n_rows; rb0 += rb) {
        const int64_t rb1 = VS_MIN(jb->n_rows, rb0 + rb);
        /* the block's rows in ng = ceil(rows / RT) groups of nearly equal size: the first rows % ng groups
         * one row more (16 rows: 6, 5, 5; 31: 6, 5, 5, 5, 5, 5) */
        const int64_t nr = rb1 - rb0, ng = (nr + RT - 1) / RT, base = nr / ng, extra = nr % ng;
        for (int64_t o = o0; o < o1; o += 4)
            for (int64_t g = 0, r0 = rb0; g < ng; g++) {
                const int R = (int)(base + (g < extra ? 1 : 0));
                const bool pf = g == 0 && o + 4 * (PF_GROUPS + 1) <= o1;
                mm_float_block(jb, o, r0, pf ? jb->w + (o + 4 * PF_GROUPS) * jb->w_row_bytes : NULL,
                               (int)VS_MIN(4, o1 - o), R);
                r0 += R;
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
