/* train_ops: forward/backward pairs of the layers vlmspec trains (see train.h for the conventions and
 * the dimension letters). Each pair is written out plainly; only linear and attention are threaded. */
#include "train.h"

#include <math.h>
#include <string.h>

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
 * of a unit are written by one thread only (GQA heads sharing them run in the same unit). */

typedef struct att_job {
    float *out, *att, *dq, *dk, *dv, *datt; /* att: written by the forward */
    const float *att_in, *dout, *q, *k, *v;  /* att_in: read by the backward */
    const int32_t *kv_len; /* NULL: mask by `causal` */
    bool causal;
    int B, Tq, Tk, H, KVH, D;
} att_job;

static int att_limit(const att_job *j, int b, int t) {
    if (j->kv_len) return VS_MAX(0, VS_MIN(j->kv_len[(size_t)b * j->Tq + t], j->Tk));
    return j->causal ? t + 1 : j->Tk;
}

static void att_forward_task(void *ctx, int ith, int nth) {
    const att_job *j = ctx;
    int H = j->H, KVH = j->KVH, D = j->D, Tq = j->Tq, Tk = j->Tk, G = H / KVH;
    float scale = 1.0f / sqrtf((float)D);
    int64_t lo, hi;
    vs_split_range((int64_t)j->B * KVH, ith, nth, 1, &lo, &hi);
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

void vs_train_self_attention_forward(vs_threadpool *tp, float *out, float *att, const float *q,
                                     const float *k, const float *v, int B, int T, int H, int KVH,
                                     int D, bool causal) {
    att_job j = {.out = out, .att = att, .q = q, .k = k, .v = v, .causal = causal,
                 .B = B, .Tq = T, .Tk = T, .H = H, .KVH = KVH, .D = D};
    vs_threadpool_run(tp, att_forward_task, &j);
}

void vs_train_self_attention_backward(vs_threadpool *tp, float *dq, float *dk, float *dv, float *datt,
                                      const float *dout, const float *att, const float *q,
                                      const float *k, const float *v, int B, int T, int H, int KVH,
                                      int D, bool causal) {
    att_job j = {.dq = dq, .dk = dk, .dv = dv, .datt = datt, .dout = dout, .att_in = att, .q = q, .k = k,
                 .v = v, .causal = causal, .B = B, .Tq = T, .Tk = T, .H = H, .KVH = KVH, .D = D};
    vs_threadpool_run(tp, att_backward_task, &j);
}

void vs_train_cross_attention_forward(vs_threadpool *tp, float *out, float *att, const float *q,
                                      const float *k, const float *v, const int32_t *kv_len, int B,
                                      int Tq, int Tk, int H, int KVH, int D) {
    att_job j = {.out = out, .att = att, .q = q, .k = k, .v = v, .kv_len = kv_len,
                 .B = B, .Tq = Tq, .Tk = Tk, .H = H, .KVH = KVH, .D = D};
    vs_threadpool_run(tp, att_forward_task, &j);
}

void vs_train_cross_attention_backward(vs_threadpool *tp, float *dq, float *dk, float *dv, float *datt,
                                       const float *dout, const float *att, const float *q,
                                       const float *k, const float *v, const int32_t *kv_len, int B,
                                       int Tq, int Tk, int H, int KVH, int D) {
    att_job j = {.dq = dq, .dk = dk, .dv = dv, .datt = datt, .dout = dout, .att_in = att, .q = q, .k = k,
                 .v = v, .kv_len = kv_len, .B = B, .Tq = Tq, .Tk = Tk, .H = H, .KVH = KVH, .D = D};
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
