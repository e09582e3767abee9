/* train_gemm_bf16_avx512: F32 training products with one bf16 product per term on AVX512-BF16
 * (VDPBF16PS), for CPUs with AVX-512 and no AMX (AMD Zen 4 / Zen 5). Why: OpenBLAS's F32 sgemm is about
 * 60% of a training step there and runs 16 multiply-adds per FMA instruction; a VDPBF16PS runs 32, and
 * the product runs on the trainer's own thread pool (OpenBLAS's threads spin in sched_yield between calls,
 * about a tenth of a step measured with perf beside our pool).
 *
 * Arithmetic: both operands rounded to bf16 (round to nearest even, 8 significant bits), alpha folded into
 * op(A) before rounding; each VDPBF16PS adds two bf16 products to an f32 accumulator. So each term carries
 * a relative error of about 2^-8 (F32: 2^-24; amx-bf16x3: 2^-15): the mixed precision of GPU training
 * (bf16 matrix products, f32 master weights, optimiser state and every other op), not bitwise equal to
 * the other products. A depth slice (KC) of each element is summed from zero in increasing k, then added
 * to C in f32; threads split the rows of C, so the bits do not depend on the thread count.
 *
 * Blocking: amx-bf16x3's (train_gemm_amx_avx512.c), on the same packed tiles (hi halves only,
 * train_gemm_pack_avx512.h): per NC-column panel and KC-deep slice the threads pack op(B) together, then
 * each packs MC-row blocks of its rows of op(A); the register block is 8 rows x 32 columns (16 zmm
 * accumulators, two B rows and a broadcast A pair per k pair). */
#include <immintrin.h>
#include <string.h>

#include "train.h"
#include "train_gemm_pack_avx512.h"

enum { KC = 256, NC = 1024, MC = 64 }; /* KC, NC multiples of 32; MC of 16 */

/* C rows (rows <= 8, at c, stride ldc) x columns (cols <= 32) (+)= 8 rows r0.. of an A tile stream (1 KB per
 * k step) x two B tile streams (b0: columns 0-15, b1: 16-31), ks k steps. zero: C = the product (C not
 * read), else C += the product. */
static void micro(int ks, const uint8_t *a, int r0, const uint8_t *b0, const uint8_t *b1, float *c, size_t ldc,
                  int rows, int cols, bool zero) {
    __m512 acc[8][2];
    for (int r = 0; r < 8; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int s = 0; s < ks; s++) {
        const uint32_t *at = (const uint32_t *)(a + (size_t)s * TILE_BYTES) + 16 * r0;
        const uint8_t *bt0 = b0 + (size_t)s * TILE_BYTES, *bt1 = b1 + (size_t)s * TILE_BYTES;
        for (int q = 0; q < 16; q++) {
            const __m512bh x0 = (__m512bh)_mm512_load_si512(bt0 + 64 * q);
            const __m512bh x1 = (__m512bh)_mm512_load_si512(bt1 + 64 * q);
#define ROW(r)                                                                                                  \
    do {                                                                                                        \
        const __m512bh w = (__m512bh)_mm512_set1_epi32((int)at[16 * (r) + q]);                                 \
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], w, x0);                                                         \
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], w, x1);                                                         \
    } while (0)
            ROW(0);
            ROW(1);
            ROW(2);
            ROW(3);
            ROW(4);
            ROW(5);
            ROW(6);
            ROW(7);
#undef ROW
        }
    }
    const __mmask16 m0 = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1);
    const __mmask16 m1 = cols >= 32 ? 0xffff : cols > 16 ? (__mmask16)((1u << (cols - 16)) - 1) : 0;
    for (int r = 0; r < rows; r++) {
        float *cr = c + (size_t)r * ldc;
        __m512 v0 = acc[r][0], v1 = acc[r][1];
        if (!zero) {
            v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, cr), v0);
            v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, cr + 16), v1);
        }
        _mm512_mask_storeu_ps(cr, m0, v0);
        _mm512_mask_storeu_ps(cr + 16, m1, v1);
    }
}

static void pack_b_task(void *ctx, int ith, int nth) { pack_b_units(ctx, ith, nth, false); }

/* Rows of C in 16-row groups split across the threads; each packs its own A blocks. */
static void panel_task(void *ctx, int ith, int nth) {
    const vs_gemm_panel *P = ctx;
    const vs_gemm_job *g = P->g;
    int64_t lo64, hi64;
    vs_split_range(g->m, ith, nth, 16, &lo64, &hi64);
    const int lo = (int)lo64, hi = (int)hi64, ks = P->ks;
    if (lo >= hi) return;
    uint8_t *ap = vs_malloc((size_t)(MC / 16) * (KC / 32) * TILE_BYTES); /* 64-byte aligned */
    if (!ap) { /* out of memory for the A buffer: the reference gives this slice */
        panel_rows_ref(P, lo, hi);
        return;
    }
    for (int ic = lo; ic < hi; ic += MC) {
        const int mc = VS_MIN(MC, hi - ic), mcg = (mc + 15) / 16;
        for (int ig = 0; ig < mcg; ig++)
            for (int s = 0; s < ks; s++)
                pack_a_tile(g, ic + 16 * ig, P->pc + 32 * s, ap + ((size_t)ig * ks + s) * TILE_BYTES, false);
        for (int j0 = 0; j0 < P->nc; j0 += 32) {
            const uint8_t *b0 = P->bp + (size_t)(j0 / 16) * ks * TILE_BYTES, *b1 = b0 + (size_t)ks * TILE_BYTES;
            const int cols = VS_MIN(32, P->nc - j0);
            for (int i0 = 0; i0 < mc; i0 += 8) {
                const uint8_t *a = ap + (size_t)(i0 / 16) * ks * TILE_BYTES;
                float *c = g->C + (size_t)(ic + i0) * g->ldc + P->jc + j0;
                micro(ks, a, i0 % 16, b0, b1, c, (size_t)g->ldc, VS_MIN(8, mc - i0), cols, P->zero);
            }
        }
    }
    vs_free(ap);
}

void vs_train_sgemm_bf16(vs_threadpool *tp, bool ta, bool tb, int m, int n, int k, float alpha, const float *A,
                         int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    const vs_gemm_job g = {ta, tb, m, n, k, alpha, beta, A, B, lda, ldb, ldc, C};
    gemm_drive(tp, &g, NC, KC, TILE_BYTES, pack_b_task, panel_task);
}
