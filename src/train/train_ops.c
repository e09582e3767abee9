/* train_ops: forward/backward pairs of the layers vlmspec trains (see train.h for the conventions and
 * the dimension letters). Each pair is written out plainly; only linear and attention are threaded. */
#include "train.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "image.h"
#include "kernels.h"

/* Dot product and axpy with eight fixed lanes, so the compiler vectorises them at -O2 and the
 * summation order is the same on every run. */
static inline float dot8(const float *restrict a, const float *restrict b, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static inline void axpy8(float *restrict y, float a, const float *restrict x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) y[i + l] += a * x[i + l];
    for (; i < n; i++) y[i] += a * x[i];
}

/* ---------------------------------------------------------------------------------------------- */
/* Linear */

void vs_train_linear_forward(vs_threadpool *tp, float *out, const float *inp, const float *w,
                             const float *b, int N, int C, int OC) {
    /* out (N, OC) = inp (N, C) * w^T */
    vs_train_sgemm(tp, false, true, N, OC, C, 1.0f, inp, C, w, C, 0.0f, out, OC);
    if (b)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] += b[o];
}

void vs_train_linear_backward(vs_threadpool *tp, float *dinp, float *dw, float *db, const float *dout,
                              const float *inp, const float *w, int N, int C, int OC) {
    /* dinp (N, C) += dout (N, OC) * w (OC, C) */
    if (dinp) vs_train_sgemm(tp, false, false, N, C, OC, 1.0f, dout, OC, w, C, 1.0f, dinp, C);
    /* dw (OC, C) += dout^T (OC, N) * inp (N, C) */
    if (dw) vs_train_sgemm(tp, true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
    if (db)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) db[o] += dout[(size_t)n * OC + o];
}

/* ---------------------------------------------------------------------------------------------- */
/* Token embedding */

void vs_train_embed_forward(float *out, const int32_t *tok, const float *wte, int N, int C) {
    for (int n = 0; n < N; n++)
        if (tok[n] >= 0) memcpy(out + (size_t)n * C, wte + (size_t)tok[n] * C, sizeof(float) * C);
}

void vs_train_embed_backward(float *dwte, const float *dout, const int32_t *tok, int N, int C) {
    for (int n = 0; n < N; n++)
        if (tok[n] >= 0) axpy8(dwte + (size_t)tok[n] * C, 1.0f, dout + (size_t)n * C, C);
}

/* ---------------------------------------------------------------------------------------------- */
/* RMSNorm */

void vs_train_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                              float eps) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        double ss = 0;
        for (int i = 0; i < C; i++) ss += (double)x[i] * x[i];
        float r = (float)(1.0 / sqrt(ss / C + eps));
        for (int i = 0; i < C; i++) y[i] = x[i] * r * w[i];
        rstd[n] = r;
    }
}

void vs_train_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                               const float *w, const float *rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        float r = rstd[n];
        if (dw)
            for (int i = 0; i < C; i++) dw[i] += dy[i] * x[i] * r;
        if (!dinp) continue;
        /* y_i = x_i r w_i, r = (mean(x^2) + eps)^-1/2: dx_i = r w_i dy_i - r^3 / C x_i sum_j dy_j w_j x_j */
        double s = 0;
        for (int i = 0; i < C; i++) s += (double)dy[i] * w[i] * x[i];
        float k = (float)(s * r * r * r / C);
        float *dx = dinp + (size_t)n * C;
        for (int i = 0; i < C; i++) dx[i] += r * w[i] * dy[i] - k * x[i];
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* LayerNorm */

void vs_train_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                const float *b, int N, int C, float eps) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        double s = 0, ss = 0;
        for (int i = 0; i < C; i++) s += x[i];
        double m = s / C;
        for (int i = 0; i < C; i++) ss += (x[i] - m) * (x[i] - m);
        float r = (float)(1.0 / sqrt(ss / C + eps)), mf = (float)m;
        for (int i = 0; i < C; i++) y[i] = (x[i] - mf) * r * w[i] + b[i];
        mean[n] = mf;
        rstd[n] = r;
    }
}

void vs_train_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                 const float *w, const float *mean, const float *rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        float m = mean[n], r = rstd[n];
        /* xhat = (x - m) r, y = xhat w + b: dx = r (g - mean(g) - xhat mean(g xhat)), g = dy w */
        double sg = 0, sgx = 0;
        for (int i = 0; i < C; i++) {
            float xh = (x[i] - m) * r, g = dy[i] * w[i];
            sg += g;
            sgx += (double)g * xh;
            if (dw) dw[i] += dy[i] * xh;
            if (db) db[i] += dy[i];
        }
        if (!dinp) continue;
        float mg = (float)(sg / C), mgx = (float)(sgx / C);
        float *dx = dinp + (size_t)n * C;
        for (int i = 0; i < C; i++) {
            float xh = (x[i] - m) * r;
            dx[i] += r * (dy[i] * w[i] - mg - xh * mgx);
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Residual add */

void vs_train_add_forward(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void vs_train_add_backward(float *da, float *db, const float *dout, size_t n) {
    if (da)
        for (size_t i = 0; i < n; i++) da[i] += dout[i];
    if (db)
        for (size_t i = 0; i < n; i++) db[i] += dout[i];
}

/* ---------------------------------------------------------------------------------------------- */
/* RoPE (adjacent pairs) */

void vs_train_rope_table(float *cs, int n_pos, int D, float base) {
    for (int p = 0; p < n_pos; p++)
        for (int i = 0; i < D / 2; i++) {
            double theta = p * pow((double)base, -2.0 * i / D);
            cs[((size_t)p * (D / 2) + i) * 2 + 0] = (float)cos(theta);
            cs[((size_t)p * (D / 2) + i) * 2 + 1] = (float)sin(theta);
        }
}

void vs_train_rope_forward(float *out, const float *inp, const float *cs, const int32_t *pos, int N,
                           int H, int D) {
    for (int n = 0; n < N; n++) {
        const float *c = cs + (size_t)pos[n] * D;
        for (int h = 0; h < H; h++) {
            const float *x = inp + ((size_t)n * H + h) * D;
            float *y = out + ((size_t)n * H + h) * D;
            for (int i = 0; i < D / 2; i++) {
                float x0 = x[2 * i], x1 = x[2 * i + 1], co = c[2 * i], si = c[2 * i + 1];
                y[2 * i] = x0 * co - x1 * si;
                y[2 * i + 1] = x0 * si + x1 * co;
            }
        }
    }
}

void vs_train_rope_backward(float *dinp, const float *dout, const float *cs, const int32_t *pos, int N,
                            int H, int D) {
    for (int n = 0; n < N; n++) {
        const float *c = cs + (size_t)pos[n] * D;
        for (int h = 0; h < H; h++) {
            const float *dy = dout + ((size_t)n * H + h) * D;
            float *dx = dinp + ((size_t)n * H + h) * D;
            for (int i = 0; i < D / 2; i++) {
                float d0 = dy[2 * i], d1 = dy[2 * i + 1], co = c[2 * i], si = c[2 * i + 1];
                dx[2 * i] += d0 * co + d1 * si;
                dx[2 * i + 1] += -d0 * si + d1 * co;
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Attention. One core for the three masks; the work unit is (b, kv head) so the key/value gradients
 * of a unit are written by one thread only (GQA heads sharing them run in the same unit).
 * Two "direct" paths with bitwise equal results: the plain one (one query row at a time, dot8/axpy8)
 * and, on CPUs with AVX, one that takes four query rows at a time so that each key/value row and its
 * gradient rows are loaded once per four rows instead of once per row (see att_*_avx below).
 * A third, "gemm" path (vs_train_set_attention) turns each head's work into matrix products on the
 * AMX-BF16 tiles (att_*_gemm): faster by several times on long sequences, at the tiles' precision. */

typedef struct att_job {
    float *out, *att, *dq, *dk, *dv, *datt; /* att: written by the forward */
    const float *att_in, *dout, *q, *k, *v;  /* att_in: read by the backward */
    const int32_t *kv_len; /* NULL: mask by `causal` */
    bool causal;
    bool avx;  /* the four-row AVX path (same bits) */
    bool gemm; /* the matrix-product path (vs_train_sgemm_amx; its own bits) */
    int B, Tq, Tk, H, KVH, D;
} att_job;

static int att_limit(const att_job *j, int b, int t) {
    if (j->kv_len) return VS_MAX(0, VS_MIN(j->kv_len[(size_t)b * j->Tq + t], j->Tk));
    return j->causal ? t + 1 : j->Tk;
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define ATT_HAVE_AVX 1
/* AVX without FMA: every product is rounded before its sum, exactly as in dot8/axpy8. */
#define ATT_AVX __attribute__((target("avx")))

/* ((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7)): dot8's lane combination. */
static inline ATT_AVX float att_hsum(__m256 a) {
    __m128 p = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    float x[4];
    _mm_storeu_ps(x, p);
    return (x[0] + x[1]) + (x[2] + x[3]);
}

/* dot8(x, y, n) */
static inline ATT_AVX float att_dot1(const float *x, const float *y, int n) {
    __m256 a = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8)
        a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    float s = att_hsum(a);
    for (; i < n; i++) s += x[i] * y[i];
    return s;
}

/* d[r] = dot8(x[r], y, n) for r < 4, one load of y for the four rows. */
static inline ATT_AVX void att_dot4(float d[4], const float *const x[4], const float *y, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 yv = _mm256_loadu_ps(y + i);
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(_mm256_loadu_ps(x[0] + i), yv));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(_mm256_loadu_ps(x[1] + i), yv));
        a2 = _mm256_add_ps(a2, _mm256_mul_ps(_mm256_loadu_ps(x[2] + i), yv));
        a3 = _mm256_add_ps(a3, _mm256_mul_ps(_mm256_loadu_ps(x[3] + i), yv));
    }
    /* p_r = (a_r lanes 0-3) + (lanes 4-7); two rounds of horizontal adds give each row's
     * (p0 + p1) + (p2 + p3), att_hsum's order, all four rows in one register. */
    __m128 p0 = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
    __m128 p1 = _mm_add_ps(_mm256_castps256_ps128(a1), _mm256_extractf128_ps(a1, 1));
    __m128 p2 = _mm_add_ps(_mm256_castps256_ps128(a2), _mm256_extractf128_ps(a2, 1));
    __m128 p3 = _mm_add_ps(_mm256_castps256_ps128(a3), _mm256_extractf128_ps(a3, 1));
    __m128 h = _mm_hadd_ps(_mm_hadd_ps(p0, p1), _mm_hadd_ps(p2, p3));
    if (i == n) {
        _mm_storeu_ps(d, h);
        return;
    }
    float sv[4];
    _mm_storeu_ps(sv, h);
    float s0 = sv[0], s1 = sv[1], s2 = sv[2], s3 = sv[3];
    for (; i < n; i++) {
        s0 += x[0][i] * y[i];
        s1 += x[1][i] * y[i];
        s2 += x[2][i] * y[i];
        s3 += x[3][i] * y[i];
    }
    d[0] = s0, d[1] = s1, d[2] = s2, d[3] = s3;
}

/* axpy8(y, a, x, n) */
static inline ATT_AVX void att_axpy1(float *y, float a, const float *x, int n) {
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(av, _mm256_loadu_ps(x + i))));
    for (; i < n; i++) y[i] += a * x[i];
}

/* axpy8(y, a[r], x[r], n) for r = 0, 1, 2, 3 in that order: one load and store of y. */
static inline ATT_AVX void att_axpy_into(float *y, const float a[4], const float *const x[4], int n) {
    __m256 a0 = _mm256_set1_ps(a[0]), a1 = _mm256_set1_ps(a[1]), a2 = _mm256_set1_ps(a[2]),
           a3 = _mm256_set1_ps(a[3]);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 yv = _mm256_loadu_ps(y + i);
        yv = _mm256_add_ps(yv, _mm256_mul_ps(a0, _mm256_loadu_ps(x[0] + i)));
        yv = _mm256_add_ps(yv, _mm256_mul_ps(a1, _mm256_loadu_ps(x[1] + i)));
        yv = _mm256_add_ps(yv, _mm256_mul_ps(a2, _mm256_loadu_ps(x[2] + i)));
        yv = _mm256_add_ps(yv, _mm256_mul_ps(a3, _mm256_loadu_ps(x[3] + i)));
        _mm256_storeu_ps(y + i, yv);
    }
    for (; i < n; i++) {
        float v = y[i];
        v += a[0] * x[0][i];
        v += a[1] * x[1][i];
        v += a[2] * x[2][i];
        v += a[3] * x[3][i];
        y[i] = v;
    }
}

/* axpy8(y[r], a[r], x, n) for r < 4: one load of x. */
static inline ATT_AVX void att_axpy_from(float *const y[4], const float a[4], const float *x, int n) {
    __m256 a0 = _mm256_set1_ps(a[0]), a1 = _mm256_set1_ps(a[1]), a2 = _mm256_set1_ps(a[2]),
           a3 = _mm256_set1_ps(a[3]);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xv = _mm256_loadu_ps(x + i);
        _mm256_storeu_ps(y[0] + i, _mm256_add_ps(_mm256_loadu_ps(y[0] + i), _mm256_mul_ps(a0, xv)));
        _mm256_storeu_ps(y[1] + i, _mm256_add_ps(_mm256_loadu_ps(y[1] + i), _mm256_mul_ps(a1, xv)));
        _mm256_storeu_ps(y[2] + i, _mm256_add_ps(_mm256_loadu_ps(y[2] + i), _mm256_mul_ps(a2, xv)));
        _mm256_storeu_ps(y[3] + i, _mm256_add_ps(_mm256_loadu_ps(y[3] + i), _mm256_mul_ps(a3, xv)));
    }
    for (; i < n; i++) {
        y[0][i] += a[0] * x[i];
        y[1][i] += a[1] * x[i];
        y[2][i] += a[2] * x[i];
        y[3][i] += a[3] * x[i];
    }
}

/* y[r][i] += a[r][s] * x[s * xs + i] for s = s0, s0 + 1, ..., s1 - 1 in that order (axpy8 per s),
 * r < 4: the rows of y stay in registers over the whole s range. */
static inline ATT_AVX void att_accum_rows(float *const y[4], const float *const a[4], const float *x,
                                          size_t xs, int s0, int s1, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 y00 = _mm256_loadu_ps(y[0] + i), y01 = _mm256_loadu_ps(y[0] + i + 8);
        __m256 y10 = _mm256_loadu_ps(y[1] + i), y11 = _mm256_loadu_ps(y[1] + i + 8);
        __m256 y20 = _mm256_loadu_ps(y[2] + i), y21 = _mm256_loadu_ps(y[2] + i + 8);
        __m256 y30 = _mm256_loadu_ps(y[3] + i), y31 = _mm256_loadu_ps(y[3] + i + 8);
        for (int s = s0; s < s1; s++) {
            const float *xr = x + (size_t)s * xs + i;
            __m256 x0 = _mm256_loadu_ps(xr), x1 = _mm256_loadu_ps(xr + 8), b;
            b = _mm256_broadcast_ss(a[0] + s);
            y00 = _mm256_add_ps(y00, _mm256_mul_ps(b, x0)), y01 = _mm256_add_ps(y01, _mm256_mul_ps(b, x1));
            b = _mm256_broadcast_ss(a[1] + s);
            y10 = _mm256_add_ps(y10, _mm256_mul_ps(b, x0)), y11 = _mm256_add_ps(y11, _mm256_mul_ps(b, x1));
            b = _mm256_broadcast_ss(a[2] + s);
            y20 = _mm256_add_ps(y20, _mm256_mul_ps(b, x0)), y21 = _mm256_add_ps(y21, _mm256_mul_ps(b, x1));
            b = _mm256_broadcast_ss(a[3] + s);
            y30 = _mm256_add_ps(y30, _mm256_mul_ps(b, x0)), y31 = _mm256_add_ps(y31, _mm256_mul_ps(b, x1));
        }
        _mm256_storeu_ps(y[0] + i, y00), _mm256_storeu_ps(y[0] + i + 8, y01);
        _mm256_storeu_ps(y[1] + i, y10), _mm256_storeu_ps(y[1] + i + 8, y11);
        _mm256_storeu_ps(y[2] + i, y20), _mm256_storeu_ps(y[2] + i + 8, y21);
        _mm256_storeu_ps(y[3] + i, y30), _mm256_storeu_ps(y[3] + i + 8, y31);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 y0 = _mm256_loadu_ps(y[0] + i), y1 = _mm256_loadu_ps(y[1] + i);
        __m256 y2 = _mm256_loadu_ps(y[2] + i), y3 = _mm256_loadu_ps(y[3] + i);
        for (int s = s0; s < s1; s++) {
            __m256 x0 = _mm256_loadu_ps(x + (size_t)s * xs + i);
            y0 = _mm256_add_ps(y0, _mm256_mul_ps(_mm256_broadcast_ss(a[0] + s), x0));
            y1 = _mm256_add_ps(y1, _mm256_mul_ps(_mm256_broadcast_ss(a[1] + s), x0));
            y2 = _mm256_add_ps(y2, _mm256_mul_ps(_mm256_broadcast_ss(a[2] + s), x0));
            y3 = _mm256_add_ps(y3, _mm256_mul_ps(_mm256_broadcast_ss(a[3] + s), x0));
        }
        _mm256_storeu_ps(y[0] + i, y0), _mm256_storeu_ps(y[1] + i, y1);
        _mm256_storeu_ps(y[2] + i, y2), _mm256_storeu_ps(y[3] + i, y3);
    }
    for (; i < n; i++)
        for (int s = s0; s < s1; s++) {
            float xv = x[(size_t)s * xs + i];
            y[0][i] += a[0][s] * xv;
            y[1][i] += a[1][s] * xv;
            y[2][i] += a[2][s] * xv;
            y[3][i] += a[3][s] * xv;
        }
}

/* For s = s0 .. s1 - 1: y[s * ys + i] += a[r][s] * x[r][i] for r = 0, 1, 2, 3 in that order
 * (att_axpy_into per s): the four rows of x stay in registers over the whole s range. */
static inline ATT_AVX void att_accum_cols(float *y, size_t ys, const float *const a[4],
                                          const float *const x[4], int s0, int s1, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 x00 = _mm256_loadu_ps(x[0] + i), x01 = _mm256_loadu_ps(x[0] + i + 8);
        __m256 x10 = _mm256_loadu_ps(x[1] + i), x11 = _mm256_loadu_ps(x[1] + i + 8);
        __m256 x20 = _mm256_loadu_ps(x[2] + i), x21 = _mm256_loadu_ps(x[2] + i + 8);
        __m256 x30 = _mm256_loadu_ps(x[3] + i), x31 = _mm256_loadu_ps(x[3] + i + 8);
        for (int s = s0; s < s1; s++) {
            float *yr = y + (size_t)s * ys + i;
            __m256 y0 = _mm256_loadu_ps(yr), y1 = _mm256_loadu_ps(yr + 8), b;
            b = _mm256_broadcast_ss(a[0] + s);
            y0 = _mm256_add_ps(y0, _mm256_mul_ps(b, x00)), y1 = _mm256_add_ps(y1, _mm256_mul_ps(b, x01));
            b = _mm256_broadcast_ss(a[1] + s);
            y0 = _mm256_add_ps(y0, _mm256_mul_ps(b, x10)), y1 = _mm256_add_ps(y1, _mm256_mul_ps(b, x11));
            b = _mm256_broadcast_ss(a[2] + s);
            y0 = _mm256_add_ps(y0, _mm256_mul_ps(b, x20)), y1 = _mm256_add_ps(y1, _mm256_mul_ps(b, x21));
            b = _mm256_broadcast_ss(a[3] + s);
            y0 = _mm256_add_ps(y0, _mm256_mul_ps(b, x30)), y1 = _mm256_add_ps(y1, _mm256_mul_ps(b, x31));
            _mm256_storeu_ps(yr, y0), _mm256_storeu_ps(yr + 8, y1);
        }
    }
    for (; i + 8 <= n; i += 8) {
        __m256 x0 = _mm256_loadu_ps(x[0] + i), x1 = _mm256_loadu_ps(x[1] + i);
        __m256 x2 = _mm256_loadu_ps(x[2] + i), x3 = _mm256_loadu_ps(x[3] + i);
        for (int s = s0; s < s1; s++) {
            float *yr = y + (size_t)s * ys + i;
            __m256 yv = _mm256_loadu_ps(yr);
            yv = _mm256_add_ps(yv, _mm256_mul_ps(_mm256_broadcast_ss(a[0] + s), x0));
            yv = _mm256_add_ps(yv, _mm256_mul_ps(_mm256_broadcast_ss(a[1] + s), x1));
            yv = _mm256_add_ps(yv, _mm256_mul_ps(_mm256_broadcast_ss(a[2] + s), x2));
            yv = _mm256_add_ps(yv, _mm256_mul_ps(_mm256_broadcast_ss(a[3] + s), x3));
            _mm256_storeu_ps(yr, yv);
        }
    }
    for (; i < n; i++)
        for (int s = s0; s < s1; s++) {
            float v = y[(size_t)s * ys + i];
            v += a[0][s] * x[0][i];
            v += a[1][s] * x[1][i];
            v += a[2][s] * x[2][i];
            v += a[3][s] * x[3][i];
            y[(size_t)s * ys + i] = v;
        }
}

/* The forward of units [lo, hi) four query rows at a time. Row t's scores, softmax and output are
 * the same operations in the same order as att_forward_task's: keys s < lmin (seen by all four rows)
 * go through the four-row kernels, the rest row by row, both in increasing s. */
static ATT_AVX void att_forward_avx(const att_job *j, int64_t lo, int64_t hi) {
    int H = j->H, KVH = j->KVH, D = j->D, Tq = j->Tq, Tk = j->Tk, G = H / KVH;
    float scale = 1.0f / sqrtf((float)D);
    size_t ks = (size_t)KVH * D; /* key/value row stride */
    for (int64_t u = lo; u < hi; u++) {
        int b = (int)(u / KVH), kh = (int)(u % KVH);
        const float *kb = j->k + (size_t)b * Tk * ks + (size_t)kh * D;
        const float *vb = j->v + (size_t)b * Tk * ks + (size_t)kh * D;
        for (int h = kh * G; h < (kh + 1) * G; h++) {
            for (int t0 = 0; t0 < Tq; t0 += 4) {
                int nb = VS_MIN(4, Tq - t0), lim[4] = {0, 0, 0, 0}, lmin = INT_MAX;
                const float *qr[4];
                float *ar[4], *orow[4];
                for (int r = 0; r < nb; r++) {
                    int t = t0 + r;
                    qr[r] = j->q + ((size_t)b * Tq + t) * H * D + (size_t)h * D;
                    ar[r] = j->att + (((size_t)b * H + h) * Tq + t) * Tk;
                    orow[r] = j->out + ((size_t)b * Tq + t) * H * D + (size_t)h * D;
                    lim[r] = att_limit(j, b, t);
                    lmin = VS_MIN(lmin, lim[r]);
                }
                if (nb < 4) lmin = 0;
                for (int s = 0; s < lmin; s++) {
                    float d[4];
                    att_dot4(d, qr, kb + s * ks, D);
                    for (int r = 0; r < 4; r++) ar[r][s] = d[r] * scale;
                }
                for (int r = 0; r < nb; r++)
                    for (int s = lmin; s < lim[r]; s++) ar[r][s] = att_dot1(qr[r], kb + s * ks, D) * scale;
                /* softmax: each row's maximum and double sum run over s in increasing order as in
                 * the plain path; the four rows' chains are interleaved for s < lmin */
                float mx[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
                double sum[4] = {0, 0, 0, 0};
                if (lmin > 0) {
                    float m0 = mx[0], m1 = mx[1], m2 = mx[2], m3 = mx[3];
                    const float *a0 = ar[0], *a1 = ar[1], *a2 = ar[2], *a3 = ar[3];
                    for (int s = 0; s < lmin; s++) {
                        if (a0[s] > m0) m0 = a0[s];
                        if (a1[s] > m1) m1 = a1[s];
                        if (a2[s] > m2) m2 = a2[s];
                        if (a3[s] > m3) m3 = a3[s];
                    }
                    mx[0] = m0, mx[1] = m1, mx[2] = m2, mx[3] = m3;
                }
                for (int r = 0; r < nb; r++)
                    for (int s = lmin; s < lim[r]; s++)
                        if (ar[r][s] > mx[r]) mx[r] = ar[r][s];
                if (lmin > 0) {
                    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                    float *a0 = ar[0], *a1 = ar[1], *a2 = ar[2], *a3 = ar[3];
                    for (int s = 0; s < lmin; s++) {
                        a0[s] = expf(a0[s] - mx[0]);
                        s0 += a0[s];
                        a1[s] = expf(a1[s] - mx[1]);
                        s1 += a1[s];
                        a2[s] = expf(a2[s] - mx[2]);
                        s2 += a2[s];
                        a3[s] = expf(a3[s] - mx[3]);
                        s3 += a3[s];
                    }
                    sum[0] = s0, sum[1] = s1, sum[2] = s2, sum[3] = s3;
                }
                for (int r = 0; r < nb; r++)
                    for (int s = lmin; s < lim[r]; s++) {
                        ar[r][s] = expf(ar[r][s] - mx[r]);
                        sum[r] += ar[r][s];
                    }
                for (int r = 0; r < nb; r++) {
                    float *a = ar[r];
                    float inv = lim[r] > 0 ? (float)(1.0 / sum[r]) : 0.0f;
                    for (int s = 0; s < lim[r]; s++) a[s] *= inv;
                    for (int s = lim[r]; s < Tk; s++) a[s] = 0.0f;
                    memset(orow[r], 0, sizeof(float) * D);
                }
                if (lmin > 0) {
                    const float *ac[4] = {ar[0], ar[1], ar[2], ar[3]};
                    att_accum_rows(orow, ac, vb, ks, 0, lmin, D);
                }
                for (int r = 0; r < nb; r++)
                    for (int s = lmin; s < lim[r]; s++) att_axpy1(orow[r], ar[r][s], vb + s * ks, D);
            }
        }
    }
}

/* The backward of units [lo, hi) four query rows at a time, in the order of att_backward_task for
 * every accumulated value: dv and dk rows take the query rows in increasing t (four-row kernels for
 * keys every row of the block sees, then row by row for the others), dq and the row sums take the
 * keys in increasing s. */
static ATT_AVX void att_backward_avx(const att_job *j, int64_t lo, int64_t hi) {
    int H = j->H, KVH = j->KVH, D = j->D, Tq = j->Tq, Tk = j->Tk, G = H / KVH;
    float scale = 1.0f / sqrtf((float)D);
    size_t ks = (size_t)KVH * D;
    float *dpb = lo < hi ? vs_malloc(sizeof(float) * 4 * (size_t)VS_MAX(Tk, 1)) : NULL; /* (4, Tk) */
    for (int64_t u = lo; u < hi; u++) {
        int b = (int)(u / KVH), kh = (int)(u % KVH);
        size_t kvb = (size_t)b * Tk * ks + (size_t)kh * D;
        const float *kb = j->k + kvb, *vb = j->v + kvb;
        float *dkb = j->dk ? j->dk + kvb : NULL, *dvb = j->dv ? j->dv + kvb : NULL;
        for (int h = kh * G; h < (kh + 1) * G; h++) {
            for (int t0 = 0; t0 < Tq; t0 += 4) {
                int nb = VS_MIN(4, Tq - t0), lim[4] = {0, 0, 0, 0}, lmin = INT_MAX;
                const float *qr[4], *dor[4], *ar[4];
                float *dar[4], *dqr[4];
                double dot_ad[4] = {0, 0, 0, 0};
                for (int r = 0; r < nb; r++) {
                    int t = t0 + r;
                    size_t qoff = ((size_t)b * Tq + t) * H * D + (size_t)h * D;
                    qr[r] = j->q + qoff;
                    dor[r] = j->dout + qoff;
                    dqr[r] = j->dq ? j->dq + qoff : NULL;
                    ar[r] = j->att_in + (((size_t)b * H + h) * Tq + t) * Tk;
                    dar[r] = j->datt + (((size_t)b * H + h) * Tq + t) * Tk;
                    lim[r] = att_limit(j, b, t);
                    lmin = VS_MIN(lmin, lim[r]);
                }
                if (nb < 4) lmin = 0;
                /* datt_s = dout . v_s; dpre_s = att_s (datt_s - sum_r att_r datt_r) */
                for (int s = 0; s < lmin; s++) {
                    float d[4];
                    att_dot4(d, dor, vb + s * ks, D);
                    for (int r = 0; r < 4; r++) {
                        dar[r][s] = d[r];
                        dot_ad[r] += (double)ar[r][s] * dar[r][s];
                    }
                }
                if (dvb && lmin > 0) att_accum_cols(dvb, ks, ar, dor, 0, lmin, D);
                for (int r = 0; r < nb; r++)
                    for (int s = lmin; s < lim[r]; s++) {
                        dar[r][s] = att_dot1(dor[r], vb + s * ks, D);
                        dot_ad[r] += (double)ar[r][s] * dar[r][s];
                        if (dvb) att_axpy1(dvb + s * ks, ar[r][s], dor[r], D);
                    }
                if (dpb && lmin > 0) {
                    /* dpre of the four rows for keys < lmin, then dq rows and dk rows each in one sweep */
                    const float *dpr[4] = {dpb, dpb + Tk, dpb + 2 * (size_t)Tk, dpb + 3 * (size_t)Tk};
                    for (int r = 0; r < 4; r++)
                        for (int s = 0; s < lmin; s++)
                            dpb[(size_t)r * Tk + s] = ar[r][s] * (dar[r][s] - (float)dot_ad[r]) * scale;
                    if (dqr[0]) att_accum_rows(dqr, dpr, kb, ks, 0, lmin, D);
                    if (dkb) att_accum_cols(dkb, ks, dpr, qr, 0, lmin, D);
                } else {
                    for (int s = 0; s < lmin; s++) {
                        float dp[4];
                        for (int r = 0; r < 4; r++) dp[r] = ar[r][s] * (dar[r][s] - (float)dot_ad[r]) * scale;
                        if (dqr[0]) att_axpy_from(dqr, dp, kb + s * ks, D);
                        if (dkb) att_axpy_into(dkb + s * ks, dp, qr, D);
                    }
                }
                for (int r = 0; r < nb; r++)
                    for (int s = lmin; s < lim[r]; s++) {
                        float dpre = ar[r][s] * (dar[r][s] - (float)dot_ad[r]) * scale;
                        if (dqr[r]) att_axpy1(dqr[r], dpre, kb + s * ks, D);
                        if (dkb) att_axpy1(dkb + s * ks, dpre, qr[r], D);
                    }
            }
        }
    }
    vs_free(dpb);
}
#endif

/* The gemm path. Per query head and block of ATT_GEMM_ROWS query rows [t0, t1), with L the block's
 * largest key limit (t1 for the causal mask): S = scale Q K^T over keys < L, the softmax row by row
 * (vs_softmax_inplace, the inference kernel; masked entries 0), O = P V; backward dP = dO V^T,
 * dV += P^T dO, dS = P (dP - rowsum(P dP)) scale, dQ += dS K, dK += dS^T Q. Each product is one
 * single-threaded vs_train_sgemm_amx call inside the unit's thread, so the bits do not depend on the
 * thread count; blocks bound the causal mask's wasted products to about ATT_GEMM_ROWS / T. */
enum { ATT_GEMM_ROWS = 128 };

static int att_block_limit(const att_job *j, int b, int t0, int t1) {
    int L = 0;
    for (int t = t0; t < t1; t++) L = VS_MAX(L, att_limit(j, b, t));
    return L;
}

/* Forward of the query rows [t0, t0 + nr) of one head: qo is their offset in q / out, ao in att. */
static void att_gemm_fwd_block(const att_job *j, size_t kvo, size_t qo, size_t ao, int b, int t0, int nr,
                               int L) {
    const int D = j->D, Tk = j->Tk, qs = j->H * D, ks = j->KVH * D;
    const float scale = 1.0f / sqrtf((float)D);
    float *ar = j->att + ao;
    vs_train_sgemm_amx(NULL, false, true, nr, L, D, scale, j->q + qo, qs, j->k + kvo, ks, 0.0f, ar, Tk);
    for (int r = 0; r < nr; r++) {
        float *row = ar + (size_t)r * Tk;
        const int lim = att_limit(j, b, t0 + r);
        if (lim > 0) vs_softmax_inplace(row, lim);
        if (lim < Tk) memset(row + lim, 0, sizeof(float) * (size_t)(Tk - lim));
    }
    vs_train_sgemm_amx(NULL, false, false, nr, D, L, 1.0f, ar, Tk, j->v + kvo, ks, 0.0f, j->out + qo, qs);
}

/* Backward of the same block (L > 0): dP into datt, dV, dS in place of dP, dQ, dK. */
static void att_gemm_bwd_block(const att_job *j, size_t kvo, size_t qo, size_t ao, int b, int t0, int nr,
                               int L) {
    const int D = j->D, Tk = j->Tk, qs = j->H * D, ks = j->KVH * D;
    const float scale = 1.0f / sqrtf((float)D);
    const float *ar = j->att_in + ao, *dor = j->dout + qo;
    float *dr = j->datt + ao;
    vs_train_sgemm_amx(NULL, false, true, nr, L, D, 1.0f, dor, qs, j->v + kvo, ks, 0.0f, dr, Tk);
    if (j->dv) vs_train_sgemm_amx(NULL, true, false, L, D, nr, 1.0f, ar, Tk, dor, qs, 1.0f, j->dv + kvo, ks);
    for (int r = 0; r < nr; r++) {
        const float *a = ar + (size_t)r * Tk;
        float *d = dr + (size_t)r * Tk;
        const int lim = att_limit(j, b, t0 + r);
        double dot = 0;
        for (int s = 0; s < lim; s++) dot += (double)a[s] * d[s];
        for (int s = 0; s < lim; s++) d[s] = a[s] * (d[s] - (float)dot) * scale;
        for (int s = lim; s < L; s++) d[s] = 0.0f;
    }
    if (j->dq)
        vs_train_sgemm_amx(NULL, false, false, nr, D, L, 1.0f, dr, Tk, j->k + kvo, ks, 1.0f, j->dq + qo, qs);
    if (j->dk)
        vs_train_sgemm_amx(NULL, true, false, L, D, nr, 1.0f, dr, Tk, j->q + qo, qs, 1.0f, j->dk + kvo, ks);
}

/* The units [lo, hi): every query head of the unit, block by block. */
static void att_gemm_units(const att_job *j, int64_t lo, int64_t hi, bool backward) {
    const int H = j->H, KVH = j->KVH, D = j->D, Tq = j->Tq, Tk = j->Tk, G = H / KVH;
    const size_t qs = (size_t)H * D, ks = (size_t)KVH * D;
    for (int64_t u = lo; u < hi; u++) {
        const int b = (int)(u / KVH), kh = (int)(u % KVH);
        const size_t kvo = (size_t)b * Tk * ks + (size_t)kh * D;
        for (int h = kh * G; h < (kh + 1) * G; h++) {
            const size_t qo = (size_t)b * Tq * qs + (size_t)h * D, ao = ((size_t)b * H + h) * Tq * Tk;
            for (int t0 = 0; t0 < Tq; t0 += ATT_GEMM_ROWS) {
                const int t1 = VS_MIN(Tq, t0 + ATT_GEMM_ROWS), L = att_block_limit(j, b, t0, t1);
                const size_t qb = qo + (size_t)t0 * qs, ab = ao + (size_t)t0 * Tk;
                if (!backward) att_gemm_fwd_block(j, kvo, qb, ab, b, t0, t1 - t0, L);
                else if (L > 0) att_gemm_bwd_block(j, kvo, qb, ab, b, t0, t1 - t0, L);
            }
        }
    }
}

static void att_forward_task(void *ctx, int ith, int nth) {
    const att_job *j = ctx;
    int H = j->H, KVH = j->KVH, D = j->D, Tq = j->Tq, Tk = j->Tk, G = H / KVH;
    float scale = 1.0f / sqrtf((float)D);
    int64_t lo, hi;
    vs_split_range((int64_t)j->B * KVH, ith, nth, 1, &lo, &hi);
    if (j->gemm) {
        att_gemm_units(j, lo, hi, false);
        return;
    }
#ifdef ATT_HAVE_AVX
    if (j->avx) {
        att_forward_avx(j, lo, hi);
        return;
    }
#endif
    for (int64_t u = lo; u < hi; u++) {
        int b = (int)(u / KVH), kh = (int)(u % KVH);
        for (int h = kh * G; h < (kh + 1) * G; h++) {
            for (int t = 0; t < Tq; t++) {
                const float *qr = j->q + ((size_t)b * Tq + t) * H * D + (size_t)h * D;
                float *ar = j->att + (((size_t)b * H + h) * Tq + t) * Tk;
                float *orow = j->out + ((size_t)b * Tq + t) * H * D + (size_t)h * D;
                int lim = att_limit(j, b, t);
                float mx = -INFINITY;
                for (int s = 0; s < lim; s++) {
                    const float *kr = j->k + ((size_t)b * Tk + s) * KVH * D + (size_t)kh * D;
                    ar[s] = dot8(qr, kr, D) * scale;
                    if (ar[s] > mx) mx = ar[s];
                }
                double sum = 0;
                for (int s = 0; s < lim; s++) {
                    ar[s] = expf(ar[s] - mx);
                    sum += ar[s];
                }
                float inv = lim > 0 ? (float)(1.0 / sum) : 0.0f;
                for (int s = 0; s < lim; s++) ar[s] *= inv;
                for (int s = lim; s < Tk; s++) ar[s] = 0.0f;
                memset(orow, 0, sizeof(float) * D);
                for (int s = 0; s < lim; s++) {
                    const float *vr = j->v + ((size_t)b * Tk + s) * KVH * D + (size_t)kh * D;
                    axpy8(orow, ar[s], vr, D);
                }
            }
        }
    }
}

static void att_backward_task(void *ctx, int ith, int nth) {
    const att_job *j = ctx;
    int H = j->H, KVH = j->KVH, D = j->D, Tq = j->Tq, Tk = j->Tk, G = H / KVH;
    float scale = 1.0f / sqrtf((float)D);
    int64_t lo, hi;
    vs_split_range((int64_t)j->B * KVH, ith, nth, 1, &lo, &hi);
    if (j->gemm) {
        att_gemm_units(j, lo, hi, true);
        return;
    }
#ifdef ATT_HAVE_AVX
    if (j->avx) {
        att_backward_avx(j, lo, hi);
        return;
    }
#endif
    for (int64_t u = lo; u < hi; u++) {
        int b = (int)(u / KVH), kh = (int)(u % KVH);
        for (int h = kh * G; h < (kh + 1) * G; h++) {
            for (int t = 0; t < Tq; t++) {
                size_t qoff = ((size_t)b * Tq + t) * H * D + (size_t)h * D;
                const float *qr = j->q + qoff, *dor = j->dout + qoff;
                const float *ar = j->att_in + (((size_t)b * H + h) * Tq + t) * Tk;
                float *dar = j->datt + (((size_t)b * H + h) * Tq + t) * Tk;
                int lim = att_limit(j, b, t);
                /* datt_s = dout . v_s; dpre_s = att_s (datt_s - sum_r att_r datt_r) */
                double dot_ad = 0;
                for (int s = 0; s < lim; s++) {
                    const float *vr = j->v + ((size_t)b * Tk + s) * KVH * D + (size_t)kh * D;
                    dar[s] = dot8(dor, vr, D);
                    dot_ad += (double)ar[s] * dar[s];
                    if (j->dv) axpy8(j->dv + ((size_t)b * Tk + s) * KVH * D + (size_t)kh * D, ar[s], dor, D);
                }
                for (int s = 0; s < lim; s++) {
                    float dpre = ar[s] * (dar[s] - (float)dot_ad) * scale;
                    size_t koff = ((size_t)b * Tk + s) * KVH * D + (size_t)kh * D;
                    if (j->dq) axpy8(j->dq + qoff, dpre, j->k + koff, D);
                    if (j->dk) axpy8(j->dk + koff, dpre, qr, D);
                }
            }
        }
    }
}

/* vs_train_set_attention's choice: "auto" is the gemm path when vs_train_sgemm uses the AMX tiles. */
typedef enum { ATT_AUTO, ATT_DIRECT, ATT_GEMM } att_kind;
static _Atomic int g_att = ATT_AUTO;

bool vs_train_set_attention(const char *name) {
    att_kind k;
    if (!strcmp(name, "auto")) k = ATT_AUTO;
    else if (!strcmp(name, "direct")) k = ATT_DIRECT;
    else if (!strcmp(name, "gemm") && vs_train_amx_available()) k = ATT_GEMM;
    else return false;
    g_att = k;
    return true;
}

static bool att_use_gemm(void) {
    const int k = g_att;
    if (k == ATT_AUTO) return !strcmp(vs_train_sgemm_backend(), "amx-bf16x3");
    return k == ATT_GEMM && vs_train_amx_available();
}

const char *vs_train_attention_backend(void) { return att_use_gemm() ? "gemm" : "direct"; }

/* The AVX path runs where the ISA in force (vs_isa_active: VLMSPEC_ISA / vs_isa_set_max cap it) has
 * AVX2; the plain path is its reference (test_train_grad compares their bits). */
static bool att_use_avx(void) {
#ifdef ATT_HAVE_AVX
    return vs_isa_active() >= VS_ISA_AVX2;
#else
    return false;
#endif
}

void vs_train_self_attention_forward(vs_threadpool *tp, float *out, float *att, const float *q,
                                     const float *k, const float *v, int B, int T, int H, int KVH,
                                     int D, bool causal) {
    att_job j = {.out = out, .att = att, .q = q, .k = k, .v = v, .causal = causal, .avx = att_use_avx(),
                 .gemm = att_use_gemm(), .B = B, .Tq = T, .Tk = T, .H = H, .KVH = KVH, .D = D};
    vs_threadpool_run(tp, att_forward_task, &j);
}

void vs_train_self_attention_backward(vs_threadpool *tp, float *dq, float *dk, float *dv, float *datt,
                                      const float *dout, const float *att, const float *q,
                                      const float *k, const float *v, int B, int T, int H, int KVH,
                                      int D, bool causal) {
    att_job j = {.dq = dq, .dk = dk, .dv = dv, .datt = datt, .dout = dout, .att_in = att, .q = q, .k = k,
                 .v = v, .causal = causal, .avx = att_use_avx(), .gemm = att_use_gemm(), .B = B, .Tq = T,
                 .Tk = T, .H = H, .KVH = KVH, .D = D};
    vs_threadpool_run(tp, att_backward_task, &j);
}

void vs_train_cross_attention_forward(vs_threadpool *tp, float *out, float *att, const float *q,
                                      const float *k, const float *v, const int32_t *kv_len, int B,
                                      int Tq, int Tk, int H, int KVH, int D) {
    att_job j = {.out = out, .att = att, .q = q, .k = k, .v = v, .kv_len = kv_len, .avx = att_use_avx(),
                 .gemm = att_use_gemm(), .B = B, .Tq = Tq, .Tk = Tk, .H = H, .KVH = KVH, .D = D};
    vs_threadpool_run(tp, att_forward_task, &j);
}

void vs_train_cross_attention_backward(vs_threadpool *tp, float *dq, float *dk, float *dv, float *datt,
                                       const float *dout, const float *att, const float *q,
                                       const float *k, const float *v, const int32_t *kv_len, int B,
                                       int Tq, int Tk, int H, int KVH, int D) {
    att_job j = {.dq = dq, .dk = dk, .dv = dv, .datt = datt, .dout = dout, .att_in = att, .q = q, .k = k,
                 .v = v, .kv_len = kv_len, .avx = att_use_avx(), .gemm = att_use_gemm(), .B = B, .Tq = Tq,
                 .Tk = Tk, .H = H, .KVH = KVH, .D = D};
    vs_threadpool_run(tp, att_backward_task, &j);
}

/* ---------------------------------------------------------------------------------------------- */
/* Activations */

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

void vs_train_swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = gate[i] * sigmoidf_(gate[i]) * up[i];
}

void vs_train_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                              const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], s = sigmoidf_(g), silu = g * s;
        if (dgate) dgate[i] += dout[i] * up[i] * s * (1.0f + g * (1.0f - s));
        if (dup) dup[i] += dout[i] * silu;
    }
}

#define GELU_K0 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_K1 0.044715f

void vs_train_gelu_forward(float *out, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_K0 * (x + GELU_K1 * x * x * x)));
    }
}

void vs_train_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i], t = tanhf(GELU_K0 * (x + GELU_K1 * x * x * x));
        float d = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x);
        dinp[i] += dout[i] * d;
    }
}

void vs_train_gelu_erf_forward(float *out, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = 0.5f * inp[i] * (1.0f + erff(inp[i] * 0.70710678118654752f));
}

void vs_train_gelu_erf_backward(float *dinp, const float *dout, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float d =
            0.5f * (1.0f + erff(x * 0.70710678118654752f)) + x * expf(-0.5f * x * x) * 0.3989422804014327f;
        dinp[i] += dout[i] * d;
    }
}

void vs_train_quick_gelu_forward(float *out, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = inp[i] * sigmoidf_(1.702f * inp[i]);
}

void vs_train_quick_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i], s = sigmoidf_(1.702f * x);
        dinp[i] += dout[i] * (s + 1.702f * x * s * (1.0f - s));
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Patch embedding and ViT token assembly */

void vs_train_patch_embed_forward(vs_threadpool *tp, float *out, float *col, const float *img,
                                  const float *w, int B, int CH, int S, int P, int C) {
    int G = S / P, NP = G * G, K = CH * P * P;
    for (int b = 0; b < B; b++)
        for (int p = 0; p < NP; p++) {
            float *cr = col + ((size_t)b * NP + p) * K;
            int y0 = (p / G) * P, x0 = (p % G) * P;
            for (int ch = 0; ch < CH; ch++)
                for (int y = 0; y < P; y++)
                    memcpy(cr + ((size_t)ch * P + y) * P,
                           img + (((size_t)b * CH + ch) * S + y0 + y) * S + x0, sizeof(float) * P);
        }
    vs_train_linear_forward(tp, out, col, w, NULL, B * NP, K, C);
}

void vs_train_patch_embed_backward(vs_threadpool *tp, float *dimg, float *dw, const float *dout,
                                   const float *col, const float *w, int B, int CH, int S, int P,
                                   int C) {
    int G = S / P, NP = G * G, K = CH * P * P;
    vs_train_linear_backward(tp, NULL, dw, NULL, dout, col, w, B * NP, K, C);
    if (!dimg) return;
    /* col2im of dcol = dout * w, one pixel at a time (pixels are rarely differentiated) */
    for (int b = 0; b < B; b++)
        for (int p = 0; p < NP; p++) {
            const float *dr = dout + ((size_t)b * NP + p) * C;
            int y0 = (p / G) * P, x0 = (p % G) * P;
            for (int ch = 0; ch < CH; ch++)
                for (int y = 0; y < P; y++)
                    for (int x = 0; x < P; x++) {
                        int kk = (ch * P + y) * P + x;
                        float s = 0;
                        for (int o = 0; o < C; o++) s += dr[o] * w[(size_t)o * K + kk];
                        dimg[(((size_t)b * CH + ch) * S + y0 + y) * S + x0 + x] += s;
                    }
        }
}

void vs_train_vit_embed_forward(float *out, const float *patches, const float *cls, const float *pos,
                                int B, int NP, int C) {
    for (int b = 0; b < B; b++) {
        float *o = out + (size_t)b * (NP + 1) * C;
        for (int c = 0; c < C; c++) o[c] = cls[c] + pos[c];
        for (int p = 0; p < NP; p++) {
            const float *x = patches + ((size_t)b * NP + p) * C, *pe = pos + (size_t)(p + 1) * C;
            float *y = o + (size_t)(p + 1) * C;
            for (int c = 0; c < C; c++) y[c] = x[c] + pe[c];
        }
    }
}

void vs_train_vit_embed_backward(float *dpatches, float *dcls, float *dpos, const float *dout, int B,
                                 int NP, int C) {
    for (int b = 0; b < B; b++) {
        const float *d = dout + (size_t)b * (NP + 1) * C;
        if (dcls) axpy8(dcls, 1.0f, d, C);
        if (dpos) axpy8(dpos, 1.0f, d, (NP + 1) * C);
        if (dpatches) axpy8(dpatches + (size_t)b * NP * C, 1.0f, d + C, NP * C);
    }
}

void vs_train_drop_cls_forward(float *out, const float *inp, int B, int NP, int C) {
    for (int b = 0; b < B; b++)
        memcpy(out + (size_t)b * NP * C, inp + ((size_t)b * (NP + 1) + 1) * C, sizeof(float) * NP * C);
}

void vs_train_drop_cls_backward(float *dinp, const float *dout, int B, int NP, int C) {
    for (int b = 0; b < B; b++)
        axpy8(dinp + ((size_t)b * (NP + 1) + 1) * C, 1.0f, dout + (size_t)b * NP * C, NP * C);
}

void vs_train_pool_grid_forward(float *out, const float *inp, int B, int G, int k, int C) {
    const int Gk = vs_pool_out_side(G, k);
    for (int b = 0; b < B; b++)
        vs_pool_grid_avg(inp + (size_t)b * G * G * C, G, G, C, k, out + (size_t)b * Gk * Gk * C, NULL, NULL);
}

void vs_train_pool_grid_backward(float *dinp, const float *dout, int B, int G, int k, int C) {
    const int Gk = vs_pool_out_side(G, k);
    for (int b = 0; b < B; b++)
        for (int r = 0; r < Gk; r++)
            for (int c = 0; c < Gk; c++) {
                const int r1 = VS_MIN(r * k + k, G), c1 = VS_MIN(c * k + k, G);
                const float inv = 1.0f / (float)((r1 - r * k) * (c1 - c * k)); /* the forward's scale */
                const float *d = dout + (((size_t)b * Gk + r) * Gk + c) * C;
                for (int y = r * k; y < r1; y++)
                    for (int x = c * k; x < c1; x++) axpy8(dinp + (((size_t)b * G + y) * G + x) * C, inv, d, C);
            }
}

/* ---------------------------------------------------------------------------------------------- */
/* Threaded twins of the element-wise and row-wise ops: each thread runs the plain function on its
 * own slice of independent outputs (elements, rows, or for the RMSNorm weight gradient columns, each
 * still summed over rows in increasing n), so the results are the plain functions' bits. */

/* Below this many values a dispatch costs more than it saves. */
#define PAR_MIN 4096

typedef struct ew_job {
    float *o0, *o1;
    const float *i0, *i1, *i2;
    size_t n;
    bool avx; /* SwiGLU: the AVX loops (same bits) */
} ew_job;

static bool par_worth(vs_threadpool *tp, size_t work) {
    return vs_threadpool_size(tp) > 1 && work >= PAR_MIN;
}

#ifdef ATT_HAVE_AVX
/* SwiGLU over [0, n) in blocks: expf(-gate) one value at a time (glibc's scalar expf, as in
 * sigmoidf_), the rest eight at a time with the plain loops' float operations in their order
 * (sigmoid = 1 / (1 + e); AVX without FMA, division correctly rounded). */
enum { SWIGLU_BLK = 256 };

ATT_AVX static void swiglu_fwd_avx(float *out, const float *gate, const float *up, size_t n) {
    float e[SWIGLU_BLK];
    const __m256 one = _mm256_set1_ps(1.0f);
    for (size_t b0 = 0; b0 < n; b0 += SWIGLU_BLK) {
        size_t bn = VS_MIN((size_t)SWIGLU_BLK, n - b0), i = 0;
        const float *g = gate + b0, *u = up + b0;
        float *o = out + b0;
        for (size_t k = 0; k < bn; k++) e[k] = expf(-g[k]);
        for (; i + 8 <= bn; i += 8) {
            __m256 gv = _mm256_loadu_ps(g + i);
            __m256 sv = _mm256_div_ps(one, _mm256_add_ps(one, _mm256_loadu_ps(e + i)));
            _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_mul_ps(gv, sv), _mm256_loadu_ps(u + i)));
        }
        for (; i < bn; i++) o[i] = g[i] * (1.0f / (1.0f + e[i])) * u[i];
    }
}

ATT_AVX static void swiglu_bwd_avx(float *dgate, float *dup, const float *dout, const float *gate,
                                   const float *up, size_t n) {
    float e[SWIGLU_BLK];
    const __m256 one = _mm256_set1_ps(1.0f);
    for (size_t b0 = 0; b0 < n; b0 += SWIGLU_BLK) {
        size_t bn = VS_MIN((size_t)SWIGLU_BLK, n - b0), i = 0;
        const float *g = gate + b0, *u = up + b0, *d = dout + b0;
        float *dg = dgate ? dgate + b0 : NULL, *du = dup ? dup + b0 : NULL;
        for (size_t k = 0; k < bn; k++) e[k] = expf(-g[k]);
        for (; i + 8 <= bn; i += 8) {
            __m256 gv = _mm256_loadu_ps(g + i), dv = _mm256_loadu_ps(d + i);
            __m256 sv = _mm256_div_ps(one, _mm256_add_ps(one, _mm256_loadu_ps(e + i)));
            if (dg) {
                /* dout * up * s * (1 + g * (1 - s)) */
                __m256 t = _mm256_mul_ps(_mm256_mul_ps(dv, _mm256_loadu_ps(u + i)), sv);
                t = _mm256_mul_ps(t, _mm256_add_ps(one, _mm256_mul_ps(gv, _mm256_sub_ps(one, sv))));
                _mm256_storeu_ps(dg + i, _mm256_add_ps(_mm256_loadu_ps(dg + i), t));
            }
            if (du) { /* dout * silu, silu = g * s */
                __m256 t = _mm256_mul_ps(dv, _mm256_mul_ps(gv, sv));
                _mm256_storeu_ps(du + i, _mm256_add_ps(_mm256_loadu_ps(du + i), t));
            }
        }
        for (; i < bn; i++) {
            float gg = g[i], sg = 1.0f / (1.0f + e[i]), silu = gg * sg;
            if (dg) dg[i] += d[i] * u[i] * sg * (1.0f + gg * (1.0f - sg));
            if (du) du[i] += d[i] * silu;
        }
    }
}
#endif

static void swiglu_fwd_task(void *ctx, int ith, int nth) {
    const ew_job *j = ctx;
    int64_t lo, hi;
    vs_split_range((int64_t)j->n, ith, nth, 16, &lo, &hi);
    if (lo >= hi) return;
#ifdef ATT_HAVE_AVX
    if (j->avx) {
        swiglu_fwd_avx(j->o0 + lo, j->i0 + lo, j->i1 + lo, (size_t)(hi - lo));
        return;
    }
#endif
    vs_train_swiglu_forward(j->o0 + lo, j->i0 + lo, j->i1 + lo, (size_t)(hi - lo));
}

void vs_train_swiglu_forward_tp(vs_threadpool *tp, float *out, const float *gate, const float *up,
                                size_t n) {
    if (!par_worth(tp, n)) {
        vs_train_swiglu_forward(out, gate, up, n);
        return;
    }
    ew_job j = {.o0 = out, .i0 = gate, .i1 = up, .n = n, .avx = att_use_avx()};
    vs_threadpool_run(tp, swiglu_fwd_task, &j);
}

static void swiglu_bwd_task(void *ctx, int ith, int nth) {
    const ew_job *j = ctx;
    int64_t lo, hi;
    vs_split_range((int64_t)j->n, ith, nth, 16, &lo, &hi);
    if (lo >= hi) return;
#ifdef ATT_HAVE_AVX
    if (j->avx) {
        swiglu_bwd_avx(j->o0 ? j->o0 + lo : NULL, j->o1 ? j->o1 + lo : NULL, j->i0 + lo, j->i1 + lo,
                       j->i2 + lo, (size_t)(hi - lo));
        return;
    }
#endif
    vs_train_swiglu_backward(j->o0 ? j->o0 + lo : NULL, j->o1 ? j->o1 + lo : NULL, j->i0 + lo, j->i1 + lo,
                                 j->i2 + lo, (size_t)(hi - lo));
}

void vs_train_swiglu_backward_tp(vs_threadpool *tp, float *dgate, float *dup, const float *dout,
                                 const float *gate, const float *up, size_t n) {
    if (!par_worth(tp, n)) {
        vs_train_swiglu_backward(dgate, dup, dout, gate, up, n);
        return;
    }
    ew_job j = {.o0 = dgate, .o1 = dup, .i0 = dout, .i1 = gate, .i2 = up, .n = n,
                .avx = att_use_avx()};
    vs_threadpool_run(tp, swiglu_bwd_task, &j);
}

static void add_fwd_task(void *ctx, int ith, int nth) {
    const ew_job *j = ctx;
    int64_t lo, hi;
    vs_split_range((int64_t)j->n, ith, nth, 16, &lo, &hi);
    if (lo < hi) vs_train_add_forward(j->o0 + lo, j->i0 + lo, j->i1 + lo, (size_t)(hi - lo));
}

void vs_train_add_forward_tp(vs_threadpool *tp, float *out, const float *a, const float *b, size_t n) {
    if (!par_worth(tp, n)) {
        vs_train_add_forward(out, a, b, n);
        return;
    }
    ew_job j = {.o0 = out, .i0 = a, .i1 = b, .n = n};
    vs_threadpool_run(tp, add_fwd_task, &j);
}

typedef struct row_job {
    float *o0, *o1;
    const float *i0, *i1, *i2, *i3;
    const int32_t *pos;
    int N, C, H, D;
    float eps;
} row_job;

/* Rows [lo, hi) of vs_train_rmsnorm_forward, four at a time: each row's sum of squares is the same
 * double-precision chain in increasing i, the four chains interleaved so they overlap. */
static void rmsnorm_fwd_rows(const row_job *j, int64_t lo, int64_t hi) {
    size_t C = (size_t)j->C;
    const float *w = j->i1;
    int64_t n = lo;
    for (; n + 4 <= hi; n += 4) {
        const float *x0 = j->i0 + n * C, *x1 = x0 + C, *x2 = x1 + C, *x3 = x2 + C;
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (size_t i = 0; i < C; i++) {
            s0 += (double)x0[i] * x0[i];
            s1 += (double)x1[i] * x1[i];
            s2 += (double)x2[i] * x2[i];
            s3 += (double)x3[i] * x3[i];
        }
        double ss[4] = {s0, s1, s2, s3};
        for (int q = 0; q < 4; q++) {
            const float *x = j->i0 + (n + q) * C;
            float *y = j->o0 + (n + q) * C;
            float r = (float)(1.0 / sqrt(ss[q] / j->C + j->eps));
            for (size_t i = 0; i < C; i++) y[i] = x[i] * r * w[i];
            j->o1[n + q] = r;
        }
    }
    if (n < hi)
        vs_train_rmsnorm_forward(j->o0 + n * C, j->o1 + n, j->i0 + n * C, w, (int)(hi - n), j->C, j->eps);
}

static void rmsnorm_fwd_task(void *ctx, int ith, int nth) {
    const row_job *j = ctx;
    int64_t lo, hi;
    vs_split_range(j->N, ith, nth, 1, &lo, &hi);
    if (lo < hi) rmsnorm_fwd_rows(j, lo, hi);
}

void vs_train_rmsnorm_forward_tp(vs_threadpool *tp, float *out, float *rstd, const float *inp,
                                 const float *w, int N, int C, float eps) {
    if (!par_worth(tp, (size_t)N * C)) {
        vs_train_rmsnorm_forward(out, rstd, inp, w, N, C, eps);
        return;
    }
    row_job j = {.o0 = out, .o1 = rstd, .i0 = inp, .i1 = w, .N = N, .C = C, .eps = eps};
    vs_threadpool_run(tp, rmsnorm_fwd_task, &j);
}

/* dinp rows split by row; dw (the sum over rows) split by column, each column summed over n in order
 * with the plain function's expression. */
static void rmsnorm_bwd_task(void *ctx, int ith, int nth) {
    const row_job *j = ctx;
    size_t C = (size_t)j->C;
    int64_t lo, hi;
    if (j->o1) {
        vs_split_range(j->C, ith, nth, 16, &lo, &hi);
        float *dw = j->o1;
        for (int n = 0; n < j->N; n++) {
            const float *x = j->i1 + (size_t)n * C, *dy = j->i0 + (size_t)n * C;
            float r = j->i3[n];
            for (int64_t i = lo; i < hi; i++) dw[i] += dy[i] * x[i] * r;
        }
    }
    vs_split_range(j->N, ith, nth, 1, &lo, &hi);
    if (!j->o0 || lo >= hi) return;
    /* dinp rows four at a time: each row's sum is the plain function's double chain in increasing i,
     * the four chains interleaved */
    const float *w = j->i2;
    int64_t n = lo;
    for (; n + 4 <= hi; n += 4) {
        const float *x0 = j->i1 + n * C, *x1 = x0 + C, *x2 = x1 + C, *x3 = x2 + C;
        const float *d0 = j->i0 + n * C, *d1 = d0 + C, *d2 = d1 + C, *d3 = d2 + C;
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (size_t i = 0; i < C; i++) {
            s0 += (double)d0[i] * w[i] * x0[i];
            s1 += (double)d1[i] * w[i] * x1[i];
            s2 += (double)d2[i] * w[i] * x2[i];
            s3 += (double)d3[i] * w[i] * x3[i];
        }
        double sq[4] = {s0, s1, s2, s3};
        for (int q = 0; q < 4; q++) {
            const float *x = j->i1 + (n + q) * C, *dy = j->i0 + (n + q) * C;
            float r = j->i3[n + q];
            float k = (float)(sq[q] * r * r * r / j->C);
            float *dx = j->o0 + (n + q) * C;
            for (size_t i = 0; i < C; i++) dx[i] += r * w[i] * dy[i] - k * x[i];
        }
    }
    if (n < hi)
        vs_train_rmsnorm_backward(j->o0 + n * C, NULL, j->i0 + n * C, j->i1 + n * C, w, j->i3 + n,
                                  (int)(hi - n), j->C);
}

void vs_train_rmsnorm_backward_tp(vs_threadpool *tp, float *dinp, float *dw, const float *dout,
                                  const float *inp, const float *w, const float *rstd, int N, int C) {
    if (!par_worth(tp, (size_t)N * C)) {
        vs_train_rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
        return;
    }
    row_job j = {.o0 = dinp, .o1 = dw, .i0 = dout, .i1 = inp, .i2 = w, .i3 = rstd, .N = N, .C = C};
    vs_threadpool_run(tp, rmsnorm_bwd_task, &j);
}

static void rope_task(void *ctx, int ith, int nth, bool backward) {
    const row_job *j = ctx;
    int64_t lo, hi;
    vs_split_range(j->N, ith, nth, 1, &lo, &hi);
    size_t rs = (size_t)j->H * j->D;
    if (lo >= hi) return;
    if (backward)
        vs_train_rope_backward(j->o0 + lo * rs, j->i0 + lo * rs, j->i1, j->pos + lo, (int)(hi - lo), j->H,
                               j->D);
    else
        vs_train_rope_forward(j->o0 + lo * rs, j->i0 + lo * rs, j->i1, j->pos + lo, (int)(hi - lo), j->H,
                              j->D);
}

static void rope_fwd_task(void *ctx, int ith, int nth) { rope_task(ctx, ith, nth, false); }
static void rope_bwd_task(void *ctx, int ith, int nth) { rope_task(ctx, ith, nth, true); }

void vs_train_rope_forward_tp(vs_threadpool *tp, float *out, const float *inp, const float *cs,
                              const int32_t *pos, int N, int H, int D) {
    if (!par_worth(tp, (size_t)N * H * D)) {
        vs_train_rope_forward(out, inp, cs, pos, N, H, D);
        return;
    }
    row_job j = {.o0 = out, .i0 = inp, .i1 = cs, .pos = pos, .N = N, .H = H, .D = D};
    vs_threadpool_run(tp, rope_fwd_task, &j);
}

void vs_train_rope_backward_tp(vs_threadpool *tp, float *dinp, const float *dout, const float *cs,
                               const int32_t *pos, int N, int H, int D) {
    if (!par_worth(tp, (size_t)N * H * D)) {
        vs_train_rope_backward(dinp, dout, cs, pos, N, H, D);
        return;
    }
    row_job j = {.o0 = dinp, .i0 = dout, .i1 = cs, .pos = pos, .N = N, .H = H, .D = D};
    vs_threadpool_run(tp, rope_bwd_task, &j);
}

static void fill0_task(void *ctx, int ith, int nth) {
    const ew_job *j = ctx;
    int64_t lo, hi;
    vs_split_range((int64_t)j->n, ith, nth, 16, &lo, &hi);
    if (lo < hi) memset(j->o0 + lo, 0, sizeof(float) * (size_t)(hi - lo));
}

void vs_train_zero_tp(vs_threadpool *tp, float *x, size_t n) {
    if (!par_worth(tp, n)) {
        memset(x, 0, sizeof(float) * n);
        return;
    }
    ew_job j = {.o0 = x, .n = n};
    vs_threadpool_run(tp, fill0_task, &j);
}
