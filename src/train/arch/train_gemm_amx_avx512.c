/* train_gemm_amx_avx512: F32 training products on AMX-BF16 tiles with a three-term bf16 split
 * ("bf16x3"). Why: OpenBLAS's F32 sgemm peaks near 250 GFLOP/s on this 2-core machine and is ~3/4 of a
 * training step; a TDPBF16PS does 16 x 16 x 32 multiply-adds per instruction.
 *
 * Arithmetic: every input x is split into hi = bf16_rne(x) and lo = bf16_rne(x - hi); x - hi - lo is
 * within 2^-16 |x|. A product a * b is taken as hi_a hi_b + hi_a lo_b + lo_a hi_b (lo_a lo_b, below
 * 2^-16 |a b|, is dropped); bf16 products are exact in f32 and the tiles accumulate in f32. So each
 * term of a sum carries a relative error of about 2^-15, against 2^-24 for F32 FMA: fine for training
 * (the loss curve matches the F32 one to about 1e-4, see docs/training.md), not bitwise equal to
 * OpenBLAS. Denormals: the tiles read bf16 denormals as zero (|x| < 1.2e-38, irrelevant here).
 *
 * Blocking (GotoBLAS): for each NC-column panel and KC-deep slice, the threads pack op(B) together into
 * B tiles (16 K pairs x 16 columns, VNNI pairs), then each takes its rows of C in 32-row blocks and packs
 * MC-row blocks of alpha * op(A) into A tiles (16 rows x 32 K); a 32 x 32 block of C lives in tmm0-3
 * for the whole slice (loaded from C, stored back), tmm4/5 hold A, tmm6/7 B. Transposed operands are packed
 * through 16 x 16 float transposes in registers. */
#include <immintrin.h>
#include <string.h>

#include "arch/amx_tiles.h" /* src/engine/arch */
#include "train.h"
#include "train_gemm_pack_avx512.h"

/* Multiples of 32. The result does not depend on them, nor on the thread count: every element of C
 * sums its k steps in increasing order, three products per step in a fixed order (hi.hi, lo.hi,
 * hi.lo), and C goes through memory in f32 between slices (exact). Keep it so: the shipped target's
 * training depends on these bits. */
enum { KC = 256, NC = 1024, MC = 64 };

/* C block (32 x 32 at c, stride ldc floats) += A rows (2 tile pairs per k step, a0 / a1) x B columns
 * (b0 / b1), ks k steps; tiles of one k step are 2 KB apart in each packed stream. zero: C starts at 0
 * instead of its contents (the first depth slice of a beta = 0 product; the same bits as zeroing C
 * first, without reading it). */
static void micro(int ks, const uint8_t *a0, const uint8_t *a1, const uint8_t *b0, const uint8_t *b1, float *c,
                  size_t ldc, bool zero) {
    const int64_t cs = (int64_t)(ldc * sizeof(float));
    if (zero) {
        TILE_ZERO(0);
        TILE_ZERO(1);
        TILE_ZERO(2);
        TILE_ZERO(3);
    } else {
        TILE_LOAD(0, c, cs);
        TILE_LOAD(1, c + 16, cs);
        TILE_LOAD(2, c + 16 * ldc, cs);
        TILE_LOAD(3, c + 16 * ldc + 16, cs);
    }
    for (int s = 0; s < ks; s++) {
        const size_t o = (size_t)s * 2 * TILE_BYTES;
        TILE_LOAD(4, a0 + o, 64); /* hi x hi */
        TILE_LOAD(5, a1 + o, 64);
        TILE_LOAD(6, b0 + o, 64);
        TILE_LOAD(7, b1 + o, 64);
        TDP_BF16(0, 4, 6);
        TDP_BF16(1, 4, 7);
        TDP_BF16(2, 5, 6);
        TDP_BF16(3, 5, 7);
        TILE_LOAD(4, a0 + o + TILE_BYTES, 64); /* lo x hi */
        TILE_LOAD(5, a1 + o + TILE_BYTES, 64);
        TDP_BF16(0, 4, 6);
        TDP_BF16(1, 4, 7);
        TDP_BF16(2, 5, 6);
        TDP_BF16(3, 5, 7);
        TILE_LOAD(4, a0 + o, 64); /* hi x lo */
        TILE_LOAD(5, a1 + o, 64);
        TILE_LOAD(6, b0 + o + TILE_BYTES, 64);
        TILE_LOAD(7, b1 + o + TILE_BYTES, 64);
        TDP_BF16(0, 4, 6);
        TDP_BF16(1, 4, 7);
        TDP_BF16(2, 5, 6);
        TDP_BF16(3, 5, 7);
    }
    TILE_STORE(0, c, cs);
    TILE_STORE(1, c + 16, cs);
    TILE_STORE(2, c + 16 * ldc, cs);
    TILE_STORE(3, c + 16 * ldc + 16, cs);
}

static void pack_b_task(void *ctx, int ith, int nth) { pack_b_units(ctx, ith, nth, true); }

/* Rows of C in 32-row blocks split across the threads; each packs its own A blocks. */
static void panel_task(void *ctx, int ith, int nth) {
    const vs_gemm_panel *P = ctx;
    const vs_gemm_job *g = P->g;
    int64_t lo64, hi64;
    vs_split_range(g->m, ith, nth, 32, &lo64, &hi64);
    const int lo = (int)lo64, hi = (int)hi64, ks = P->ks;
    if (lo >= hi) return;
    _Alignas(64) float edge[32 * 32];
    uint8_t *ap = vs_malloc((size_t)(MC / 16) * (KC / 32) * 2 * TILE_BYTES);
    if (!ap) { /* out of memory for the A buffer: the reference gives this slice */
        panel_rows_ref(P, lo, hi);
        return;
    }
    vs_amx_config_full();
    for (int ic = lo; ic < hi; ic += MC) {
        const int mc = VS_MIN(MC, hi - ic), mcg = (mc + 31) / 32 * 2;
        for (int ig = 0; ig < mcg; ig++)
            for (int s = 0; s < ks; s++)
                pack_a_tile(g, ic + 16 * ig, P->pc + 32 * s, ap + ((size_t)ig * ks + s) * 2 * TILE_BYTES, true);
        for (int j0 = 0; j0 < P->nc; j0 += 32) {
            const uint8_t *b0 = P->bp + (size_t)(j0 / 16) * ks * 2 * TILE_BYTES, *b1 = b0 + (size_t)ks * 2 * TILE_BYTES;
            for (int i0 = 0; i0 < mc; i0 += 32) {
                const uint8_t *a0 = ap + (size_t)(i0 / 16) * ks * 2 * TILE_BYTES, *a1 = a0 + (size_t)ks * 2 * TILE_BYTES;
                const int rows = VS_MIN(32, hi - (ic + i0)), cols = VS_MIN(32, P->nc - j0);
                float *c = g->C + (size_t)(ic + i0) * g->ldc + P->jc + j0;
                if (rows == 32 && cols == 32) {
                    micro(ks, a0, a1, b0, b1, c, (size_t)g->ldc, P->zero);
                } else { /* an edge block through a zero-padded copy (f32 copies: exact) */
                    memset(edge, 0, sizeof(edge));
                    if (!P->zero)
                        for (int r = 0; r < rows; r++)
                            memcpy(edge + 32 * r, c + (size_t)r * g->ldc, (size_t)cols * sizeof(float));
                    micro(ks, a0, a1, b0, b1, edge, 32, false);
                    for (int r = 0; r < rows; r++) memcpy(c + (size_t)r * g->ldc, edge + 32 * r, (size_t)cols * sizeof(float));
                }
            }
        }
    }
    TILE_RELEASE();
    vs_free(ap);
}

void vs_train_sgemm_amx(vs_threadpool *tp, bool ta, bool tb, int m, int n, int k, float alpha, const float *A,
                        int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    const vs_gemm_job g = {ta, tb, m, n, k, alpha, beta, A, B, lda, ldb, ldc, C};
    gemm_drive(tp, &g, NC, KC, 2 * TILE_BYTES, pack_b_task, panel_task);
}
