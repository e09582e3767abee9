/* train_gemm_pack_avx512: packing of F32 operands into bf16 tiles, shared by the training products on
 * AMX-BF16 tiles (train_gemm_amx_avx512.c, hi and lo halves) and on AVX512-BF16 (train_gemm_bf16_avx512.c,
 * hi only). Include only from files compiled with the AVX-512 flags (-mavx512bf16).
 *
 * Layouts (one tile = 16 rows x 64 bytes = TILE_BYTES):
 * - A tile: 16 rows of op(A), 32 consecutive k each as bf16 (row r = 16 k pairs, a pair per dword), times
 *   alpha;
 * - B tile: 16 k pairs x 16 columns of op(B): row q = (B(p0 + 2q, j), B(p0 + 2q + 1, j)) for j = j0 .. j0 + 15,
 *   the VNNI pair layout that TDPBF16PS and VDPBF16PS read.
 * hi = bf16_rne(x) (VCVTNE2PS2BF16), lo = bf16_rne(x - hi); out-of-range rows, columns and k are zero. */
#ifndef VS_TRAIN_GEMM_PACK_AVX512_H
#define VS_TRAIN_GEMM_PACK_AVX512_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "threadpool.h"
#include "train.h"

#define VS_INLINE static inline __attribute__((always_inline))

enum { TILE_BYTES = 1024 }; /* one packed tile: 16 rows x 64 bytes */

/* 16 x 16 floats: rows r of in (stride ld_in) -> columns of out (16 vectors). */
VS_INLINE void transpose16(const float *in, size_t ld_in, __m512 out[16]) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(in + (size_t)i * ld_in);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    /* r[4q + s] holds, in each 128-bit lane L, elements (rows 4L'.., col) ... combine lanes */
    for (int i = 0; i < 8; i++) {
        int a = (i / 4) * 8 + (i % 4); /* pair (a, a + 4) */
        t[2 * i] = _mm512_shuffle_f32x4(r[a], r[a + 4], _MM_SHUFFLE(2, 0, 2, 0));
        t[2 * i + 1] = _mm512_shuffle_f32x4(r[a], r[a + 4], _MM_SHUFFLE(3, 1, 3, 1));
    }
    for (int i = 0; i < 4; i++) {
        /* t[2i], t[2i+8] (even lanes) and t[2i+1], t[2i+9] (odd lanes) */
        out[i] = _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 8], _MM_SHUFFLE(2, 0, 2, 0));
        out[i + 8] = _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 8], _MM_SHUFFLE(3, 1, 3, 1));
        out[i + 4] = _mm512_shuffle_f32x4(t[2 * i + 1], t[2 * i + 9], _MM_SHUFFLE(2, 0, 2, 0));
        out[i + 12] = _mm512_shuffle_f32x4(t[2 * i + 1], t[2 * i + 9], _MM_SHUFFLE(3, 1, 3, 1));
    }
}

/* hi / lo bf16 halves of 32 floats (a: elements 0-15, b: 16-31); lo NULL: hi only. */
VS_INLINE void split32(__m512 a, __m512 b, __m512i *hi, __m512i *lo) {
    __m512bh h = _mm512_cvtne2ps_pbh(b, a);
    __m512i hv = (__m512i)h;
    *hi = hv;
    if (!lo) return;
    __m512 ha = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(hv)), 16));
    __m512 hb = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(hv, 1)), 16));
    *lo = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(b, hb), _mm512_sub_ps(a, ha));
}

/* op(A) rows i0..i0+15, k p0..p0+31, times alpha, into an A tile (hi at dst; with_lo: lo at dst + 1 KB):
 * row r = 32 bf16 of K. Out-of-range rows and k are zero. */
VS_INLINE void pack_a_tile(const vs_gemm_job *g, int i0, int p0, uint8_t *dst, bool with_lo) {
    _Alignas(64) float st[16][32];
    const bool full = i0 + 16 <= g->m && p0 + 32 <= g->k;
    if (full && !g->ta) {
        for (int r = 0; r < 16; r++) memcpy(st[r], g->A + (size_t)(i0 + r) * g->lda + p0, 32 * sizeof(float));
    } else if (full) { /* op(A)(i, p) = A[p * lda + i]: transpose two 16 x 16 blocks */
        for (int h = 0; h < 2; h++) {
            __m512 cols[16];
            transpose16(g->A + (size_t)(p0 + 16 * h) * g->lda + i0, (size_t)g->lda, cols);
            for (int r = 0; r < 16; r++) _mm512_store_ps(&st[r][16 * h], cols[r]);
        }
    } else {
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 32; c++) {
                int i = i0 + r, p = p0 + c;
                st[r][c] = i < g->m && p < g->k ? (g->ta ? g->A[(size_t)p * g->lda + i] : g->A[(size_t)i * g->lda + p])
                                                : 0.0f;
            }
    }
    const __m512 al = _mm512_set1_ps(g->alpha);
    for (int r = 0; r < 16; r++) {
        __m512i hi, lo;
        split32(_mm512_mul_ps(_mm512_load_ps(st[r]), al), _mm512_mul_ps(_mm512_load_ps(st[r] + 16), al), &hi,
                with_lo ? &lo : NULL);
        _mm512_store_si512(dst + 64 * r, hi);
        if (with_lo) _mm512_store_si512(dst + TILE_BYTES + 64 * r, lo);
    }
}

/* op(B) k p0..p0+31, columns j0..j0+15 into a B tile (hi at dst; with_lo: lo at dst + 1 KB): row q =
 * (B(p0+2q, j), B(p0+2q+1, j)) for j. */
VS_INLINE void pack_b_tile(const vs_gemm_job *g, int p0, int j0, uint8_t *dst, bool with_lo) {
    _Alignas(64) float st[32][16]; /* [k][j] */
    const bool full = p0 + 32 <= g->k && j0 + 16 <= g->n;
    if (full && !g->tb) {
        for (int p = 0; p < 32; p++) memcpy(st[p], g->B + (size_t)(p0 + p) * g->ldb + j0, 16 * sizeof(float));
    } else if (full) { /* op(B)(p, j) = B[j * ldb + p] */
        for (int h = 0; h < 2; h++) {
            __m512 rows[16];
            transpose16(g->B + (size_t)j0 * g->ldb + p0 + 16 * h, (size_t)g->ldb, rows);
            for (int p = 0; p < 16; p++) _mm512_store_ps(st[16 * h + p], rows[p]);
        }
    } else {
        for (int p = 0; p < 32; p++)
            for (int j = 0; j < 16; j++) {
                int pp = p0 + p, jj = j0 + j;
                st[p][j] = pp < g->k && jj < g->n
                               ? (g->tb ? g->B[(size_t)jj * g->ldb + pp] : g->B[(size_t)pp * g->ldb + jj])
                               : 0.0f;
            }
    }
    /* interleave rows 2q and 2q+1: 16-bit elements (a0, b0, a1, b1, ...) */
    _Alignas(64) uint16_t idx[32];
    for (int e = 0; e < 32; e++) idx[e] = (uint16_t)(e % 2 ? 16 + e / 2 : e / 2);
    const __m512i perm = _mm512_load_si512(idx);
    for (int q = 0; q < 16; q++) {
        __m512i hi, lo;
        split32(_mm512_load_ps(st[2 * q]), _mm512_load_ps(st[2 * q + 1]), &hi, with_lo ? &lo : NULL);
        _mm512_store_si512(dst + 64 * q, _mm512_permutexvar_epi16(perm, hi));
        if (with_lo) _mm512_store_si512(dst + TILE_BYTES + 64 * q, _mm512_permutexvar_epi16(perm, lo));
    }
}

/* C = beta * C over the rows of C split across the threads (beta 0: zeros, C not read). */
static inline void beta_task(void *ctx, int ith, int nth) {
    const vs_gemm_job *g = ctx;
    int64_t lo, hi;
    vs_split_range(g->m, ith, nth, 1, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        float *c = g->C + (size_t)i * g->ldc;
        if (g->beta == 0.0f) memset(c, 0, (size_t)g->n * sizeof(float));
        else if (g->beta != 1.0f)
            for (int j = 0; j < g->n; j++) c[j] *= g->beta;
    }
}

/* One (column panel, depth slice) of a product: the packed B panel is shared by the threads. */
typedef struct vs_gemm_panel {
    const vs_gemm_job *g;
    int jc, nc, pc, ks;
    bool zero;   /* C starts at 0: the first slice of a beta = 0 product (C was not cleared) */
    uint8_t *bp; /* [column group of 16][k step] B tiles (with lo: a hi, lo pair per unit) */
} vs_gemm_panel;

/* The panel's B tiles, units (column group, k step) split across the threads. */
VS_INLINE void pack_b_units(const vs_gemm_panel *P, int ith, int nth, bool with_lo) {
    const int ngroups = (P->nc + 31) / 32 * 2, units = ngroups * P->ks;
    int64_t lo, hi;
    vs_split_range(units, ith, nth, 1, &lo, &hi);
    for (int64_t u = lo; u < hi; u++) {
        int jg = (int)(u / P->ks), s = (int)(u % P->ks);
        pack_b_tile(P->g, P->pc + 32 * s, P->jc + 16 * jg, P->bp + (size_t)u * (with_lo ? 2 : 1) * TILE_BYTES, with_lo);
    }
}

/* Rows [lo, hi) of the panel by the reference (a thread without memory for its A blocks). */
static inline void panel_rows_ref(const vs_gemm_panel *P, int lo, int hi) {
    const vs_gemm_job *g = P->g;
    vs_train_sgemm_ref(g->ta, g->tb, hi - lo, P->nc, VS_MIN(P->ks * 32, g->k - P->pc),
                       g->alpha, g->ta ? g->A + (size_t)P->pc * g->lda + lo : g->A + (size_t)lo * g->lda + P->pc,
                       g->lda, g->tb ? g->B + (size_t)P->jc * g->ldb + P->pc : g->B + (size_t)P->pc * g->ldb + P->jc,
                       g->ldb, P->zero ? 0.0f : 1.0f, g->C + (size_t)lo * g->ldc + P->jc, g->ldc);
}

/* The drivers' loop (GotoBLAS): C = beta C first unless the first depth slice of a beta = 0 product
 * writes it; then per NC-column panel and KC-deep slice the threads pack op(B) together (pack_b) and
 * each computes its rows (panel); unit_bytes per packed B unit. The reference when the B buffer cannot be
 * had. */
static inline void gemm_drive(vs_threadpool *tp, const vs_gemm_job *g, int NC, int KC, size_t unit_bytes,
                              vs_task_fn pack_b, vs_task_fn panel) {
    if (g->m <= 0 || g->n <= 0) return;
    /* beta = 0 with products to add: the first depth slice writes every element of C, starting from 0 */
    const bool zero_first = g->beta == 0.0f && g->k > 0 && g->alpha != 0.0f;
    if (!zero_first) vs_threadpool_run(tp, beta_task, (void *)g);
    if (g->k <= 0 || g->alpha == 0.0f) return;
    uint8_t *bp = vs_malloc((size_t)(NC / 16) * (KC / 32) * unit_bytes);
    if (!bp) { /* out of memory for the B panel: the reference */
        vs_train_sgemm_ref(g->ta, g->tb, g->m, g->n, g->k, g->alpha, g->A, g->lda, g->B, g->ldb,
                           zero_first ? 0.0f : 1.0f, g->C, g->ldc);
        return;
    }
    for (int jc = 0; jc < g->n; jc += NC)
        for (int pc = 0; pc < g->k; pc += KC) {
            vs_gemm_panel P = {g, jc, VS_MIN(NC, g->n - jc), pc, (VS_MIN(KC, g->k - pc) + 31) / 32, zero_first && pc == 0, bp};
            vs_threadpool_run(tp, pack_b, &P);
            vs_threadpool_run(tp, panel, &P);
        }
    vs_free(bp);
}

#endif
