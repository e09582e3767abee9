/* train_gemm: F32 matrix products for training (see train.h). OpenBLAS when the build has it; a
 * cache-blocked plain-C product otherwise (GotoBLAS structure: pack a KC x NC panel of op(B) and an
 * MC x KC block of op(A), then MR x NR register tiles); a naive double-accumulating reference. */
#include "train.h"

#include <stdatomic.h>
#include <string.h>

#include "arch/kernels_arch.h"

#ifdef VS_HAVE_OPENBLAS
#include <cblas.h>
#endif

/* op(A)(i, p) and op(B)(p, j) for row-major storage. */
#define OPA(i, p) (ta ? A[(size_t)(p) * lda + (i)] : A[(size_t)(i) * lda + (p)])
#define OPB(p, j) (tb ? B[(size_t)(j) * ldb + (p)] : B[(size_t)(p) * ldb + (j)])

void vs_train_sgemm_ref(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc) {
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++) s += (double)OPA(i, p) * (double)OPB(p, j);
            float *c = &C[(size_t)i * ldc + j];
            *c = (float)(alpha * s) + (beta == 0.0f ? 0.0f : beta * *c);
        }
    }
}

/* Blocking parameters: a KC x NC panel of B (256 KiB) stays in L2, an MC x KC block of A (64 KiB)
 * and the MR x NR accumulator tile stay close to the core. */
enum { MR = 4, NR = 8, KC = 256, NC = 256, MC = 64 };


/* acc(MR, NR) = sum_p ap[p](MR) x bp[p](NR). With GCC/Clang the NR-wide rows are vector-extension
 * values (SSE/AVX registers of whatever ISA the file is built for); otherwise plain loops. */
#if defined(__GNUC__)
typedef float vnr __attribute__((vector_size(NR * sizeof(float))));
static void micro_kernel(int kc, const float *restrict ap, const float *restrict bp, float *restrict c,
                         int ldc, int mr, int nr) {
    _Static_assert(MR == 4, "the vector micro-kernel keeps MR = 4 named accumulators");
    vnr c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0}; /* named, so they live in registers */
    for (int p = 0; p < kc; p++) {
        vnr b;
        memcpy(&b, bp + (size_t)p * NR, sizeof(b));
        const float *a = ap + (size_t)p * MR;
        c0 += a[0] * b, c1 += a[1] * b, c2 += a[2] * b, c3 += a[3] * b;
    }
    vnr acc[MR] = {c0, c1, c2, c3};
    for (int r = 0; r < mr; r++)
        for (int q = 0; q < nr; q++) c[(size_t)r * ldc + q] += acc[r][q];
}
#else
static void micro_kernel(int kc, const float *restrict ap, const float *restrict bp, float *restrict c,
                         int ldc, int mr, int nr) {
    float acc[MR][NR];
    memset(acc, 0, sizeof(acc));
    for (int p = 0; p < kc; p++) {
        const float *a = ap + (size_t)p * MR, *b = bp + (size_t)p * NR;
        for (int r = 0; r < MR; r++)
            for (int q = 0; q < NR; q++) acc[r][q] += a[r] * b[q];
    }
    for (int r = 0; r < mr; r++)
        for (int q = 0; q < nr; q++) c[(size_t)r * ldc + q] += acc[r][q];
}
#endif

/* Packs op(B)(pc.., jc..) (kc x nc) as NR-column panels, zero-padded: bp[panel][p][NR]. */
static void pack_b(const vs_gemm_job *g, float *bp, int pc, int jc, int kc, int nc) {
    const float *B = g->B;
    int ldb = g->ldb;
    bool tb = g->tb;
    for (int j0 = 0; j0 < nc; j0 += NR) {
        int nr = VS_MIN(NR, nc - j0);
        for (int p = 0; p < kc; p++) {
            for (int q = 0; q < NR; q++) bp[q] = q < nr ? OPB(pc + p, jc + j0 + q) : 0.0f;
            bp += NR;
        }
    }
}

/* Packs alpha * op(A)(ic.., pc..) (mc x kc) as MR-row panels, zero-padded: ap[panel][p][MR]. */
static void pack_a(const vs_gemm_job *g, float *ap, int ic, int pc, int mc, int kc) {
    const float *A = g->A;
    int lda = g->lda;
    bool ta = g->ta;
    for (int i0 = 0; i0 < mc; i0 += MR) {
        int mr = VS_MIN(MR, mc - i0);
        for (int p = 0; p < kc; p++) {
            for (int r = 0; r < MR; r++) ap[r] = r < mr ? g->alpha * OPA(ic + i0 + r, pc + p) : 0.0f;
            ap += MR;
        }
    }
}

/* Rows [lo, hi) of C. Each thread packs its own B panels (cheap next to the product). */
static void gemm_rows(const vs_gemm_job *g, int lo, int hi, float *ap, float *bp) {
    for (int i = lo; i < hi; i++) {
        float *c = g->C + (size_t)i * g->ldc;
        if (g->beta == 0.0f) memset(c, 0, (size_t)g->n * sizeof(float));
        else if (g->beta != 1.0f)
            for (int j = 0; j < g->n; j++) c[j] *= g->beta;
    }
    if (lo >= hi) return;
    for (int jc = 0; jc < g->n; jc += NC) {
        int nc = VS_MIN(NC, g->n - jc);
        for (int pc = 0; pc < g->k; pc += KC) {
            int kc = VS_MIN(KC, g->k - pc);
            pack_b(g, bp, pc, jc, kc, nc);
            for (int ic = lo; ic < hi; ic += MC) {
                int mc = VS_MIN(MC, hi - ic);
                pack_a(g, ap, ic, pc, mc, kc);
                for (int j0 = 0; j0 < nc; j0 += NR) {
                    const float *bpan = bp + (size_t)(j0 / NR) * kc * NR;
                    for (int i0 = 0; i0 < mc; i0 += MR) {
                        const float *apan = ap + (size_t)(i0 / MR) * kc * MR;
                        float *c = g->C + (size_t)(ic + i0) * g->ldc + jc + j0;
                        micro_kernel(kc, apan, bpan, c, g->ldc, VS_MIN(MR, mc - i0), VS_MIN(NR, nc - j0));
                    }
                }
            }
        }
    }
}

static void gemm_task(void *ctx, int ith, int nth) {
    const vs_gemm_job *g = ctx;
    int64_t lo, hi;
    vs_split_range(g->m, ith, nth, MR, &lo, &hi);
    if (lo >= hi) return;
    float *ap = vs_malloc(sizeof(float) * MC * KC);
    float *bp = vs_malloc(sizeof(float) * KC * (NC + NR));
    if (ap && bp) {
        gemm_rows(g, (int)lo, (int)hi, ap, bp);
    } else { /* out of memory for the packing buffers: the unblocked reference still gives C */
        for (int64_t i = lo; i < hi; i++)
            vs_train_sgemm_ref(g->ta, g->tb, 1, g->n, g->k, g->alpha,
                               g->ta ? g->A + i : g->A + (size_t)i * g->lda, g->lda, g->B, g->ldb,
                               g->beta, g->C + (size_t)i * g->ldc, g->ldc);
    }
    vs_free(ap);
    vs_free(bp);
}

void vs_train_sgemm_blocked(vs_threadpool *tp, bool ta, bool tb, int m, int n, int k, float alpha,
                            const float *A, int lda, const float *B, int ldb, float beta, float *C,
                            int ldc) {
    if (m <= 0 || n <= 0) return;
    vs_gemm_job g = {ta, tb, m, n, k, alpha, beta, A, B, lda, ldb, ldc, C};
    if (k <= 0) g.alpha = 0.0f; /* C = beta * C */
    vs_threadpool_run(tp, gemm_task, &g);
}

typedef enum { GEMM_DEFAULT, GEMM_OPENBLAS, GEMM_BLOCKED, GEMM_AMX, GEMM_BF16 } gemm_kind;
static _Atomic int g_gemm = GEMM_DEFAULT;

bool vs_train_amx_available(void) { return vs_isa_active() >= VS_ISA_AMX && vs_cpu_amx_bf16(); }

/* VS_ISA_AVX512 includes AVX512-BF16 (kernels.c's detection requires it) */
bool vs_train_bf16_available(void) { return vs_isa_active() >= VS_ISA_AVX512; }

bool vs_train_set_gemm(const char *name) {
    gemm_kind k;
    if (!strcmp(name, "default")) k = GEMM_DEFAULT;
#ifdef VS_HAVE_OPENBLAS
    else if (!strcmp(name, "openblas")) k = GEMM_OPENBLAS;
#endif
    else if (!strcmp(name, "blocked")) k = GEMM_BLOCKED;
    else if (!strcmp(name, "amx-bf16x3") && vs_train_amx_available()) k = GEMM_AMX;
    else if (!strcmp(name, "avx512-bf16") && vs_train_bf16_available()) k = GEMM_BF16;
    else return false;
    atomic_store(&g_gemm, k);
    return true;
}

void vs_train_sgemm(vs_threadpool *tp, bool ta, bool tb, int m, int n, int k, float alpha,
                    const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    switch (atomic_load(&g_gemm)) {
    case GEMM_AMX: vs_train_sgemm_amx(tp, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc); return;
    case GEMM_BF16: vs_train_sgemm_bf16(tp, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc); return;
    case GEMM_BLOCKED: vs_train_sgemm_blocked(tp, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc); return;
    default: break;
    }
#ifdef VS_HAVE_OPENBLAS
    if (m <= 0 || n <= 0) return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k,
                alpha, A, lda, B, ldb, beta, C, ldc);
#else
    vs_train_sgemm_blocked(tp, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

const char *vs_train_sgemm_backend(void) {
    switch (atomic_load(&g_gemm)) {
    case GEMM_AMX: return "amx-bf16x3";
    case GEMM_BF16: return "avx512-bf16";
    case GEMM_BLOCKED: return "blocked";
    default: break;
    }
#ifdef VS_HAVE_OPENBLAS
    return "openblas";
#else
    return "blocked";
#endif
}

void vs_train_set_blas_threads(int n) {
#ifdef VS_HAVE_OPENBLAS
    if (n >= 1) openblas_set_num_threads(n);
#else
    (void)n;
#endif
}
