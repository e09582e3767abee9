/* train_loss: the training losses as forward/backward pairs (see train.h): masked softmax
 * cross-entropy, soft cross-entropy, KL divergence to a given distribution, smooth L1. */
#include "train.h"

#include <math.h>

/* probs row = softmax(logits row); returns log(sum exp(x - max)) + max (the log-partition). */
static double softmax_row(float *probs, const float *x, int V) {
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
    double sum = 0;
    for (int v = 0; v < V; v++) {
        probs[v] = expf(x[v] - mx);
        sum += probs[v];
    }
    float inv = (float)(1.0 / sum);
    for (int v = 0; v < V; v++) probs[v] *= inv;
    return log(sum) + mx;
}

double vs_train_xent_forward(float *probs, const float *logits, const int32_t *targets, const float *w,
                             int N, int V) {
    double loss = 0;
    for (int n = 0; n < N; n++) {
        if (w[n] == 0.0f) continue;
        const float *x = logits + (size_t)n * V;
        double lse = softmax_row(probs + (size_t)n * V, x, V);
        loss += (double)w[n] * (lse - x[targets[n]]);
    }
    return loss;
}

void vs_train_xent_backward(float *dlogits, const float *probs, const int32_t *targets, const float *w,
                            float dloss, int N, int V) {
    for (int n = 0; n < N; n++) {
        if (w[n] == 0.0f) continue;
        const float *q = probs + (size_t)n * V;
        float *d = dlogits + (size_t)n * V, g = dloss * w[n];
        for (int v = 0; v < V; v++) d[v] += g * q[v];
        d[targets[n]] -= g;
    }
}

double vs_train_soft_xent_forward(float *probs, const float *logits, const float *p, const float *w,
                                  int N, int V) {
    double loss = 0;
    for (int n = 0; n < N; n++) {
        if (w[n] == 0.0f) continue;
        const float *x = logits + (size_t)n * V, *pr = p + (size_t)n * V;
        double lse = softmax_row(probs + (size_t)n * V, x, V), l = 0;
        /* -sum p log q = sum p (lse - x) */
        for (int v = 0; v < V; v++) l += (double)pr[v] * (lse - x[v]);
        loss += (double)w[n] * l;
    }
    return loss;
}

/* d/dx_v of -sum_u p_u log q_u is q_v sum_u p_u - p_v (sum p kept: p need not be normalised). */
void vs_train_soft_xent_backward(float *dlogits, const float *probs, const float *p, const float *w,
                                 float dloss, int N, int V) {
    for (int n = 0; n < N; n++) {
        if (w[n] == 0.0f) continue;
        const float *q = probs + (size_t)n * V, *pr = p + (size_t)n * V;
        double sp = 0;
        for (int v = 0; v < V; v++) sp += pr[v];
        float *d = dlogits + (size_t)n * V, g = dloss * w[n], spf = (float)sp;
        for (int v = 0; v < V; v++) d[v] += g * (q[v] * spf - pr[v]);
    }
}

double vs_train_kl_forward(float *probs, const float *logits, const float *p, const float *w, int N,
                           int V) {
    double loss = 0;
    for (int n = 0; n < N; n++) {
        if (w[n] == 0.0f) continue;
        const float *x = logits + (size_t)n * V, *pr = p + (size_t)n * V;
        double lse = softmax_row(probs + (size_t)n * V, x, V), l = 0;
        /* sum p (log p - log q), log q = x - lse; terms with p == 0 contribute 0 */
        for (int v = 0; v < V; v++)
            if (pr[v] > 0.0f) l += (double)pr[v] * (log((double)pr[v]) - (x[v] - lse));
        loss += (double)w[n] * l;
    }
    return loss;
}

void vs_train_kl_backward(float *dlogits, const float *probs, const float *p, const float *w,
                          float dloss, int N, int V) {
    vs_train_soft_xent_backward(dlogits, probs, p, w, dloss, N, V);
}

double vs_train_smooth_l1_forward(const float *pred, const float *target, const float *w, int N, int C,
                                  float beta) {
    double loss = 0;
    for (int n = 0; n < N; n++) {
        if (w[n] == 0.0f) continue;
        const float *x = pred + (size_t)n * C, *y = target + (size_t)n * C;
        double l = 0;
        for (int c = 0; c < C; c++) {
            double d = fabs((double)x[c] - y[c]);
            l += d < beta ? 0.5 * d * d / beta : d - 0.5 * beta;
        }
        loss += (double)w[n] * l / C;
    }
    return loss;
}

void vs_train_smooth_l1_backward(float *dpred, float *dtarget, const float *pred, const float *target,
                                 const float *w, float dloss, int N, int C, float beta) {
    for (int n = 0; n < N; n++) {
        if (w[n] == 0.0f) continue;
        const float *x = pred + (size_t)n * C, *y = target + (size_t)n * C;
        float g = dloss * w[n] / C;
        for (int c = 0; c < C; c++) {
            float d = x[c] - y[c];
            float h = fabsf(d) < beta ? d / beta : (d > 0 ? 1.0f : -1.0f);
            if (dpred) dpred[(size_t)n * C + c] += g * h;
            if (dtarget) dtarget[(size_t)n * C + c] -= g * h;
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Threaded softmax cross-entropy: rows split across the pool; each row's term is the plain
 * function's, and the caller adds the terms in increasing n as the plain function does. */

typedef struct xent_job {
    float *probs, *dlogits;
    const float *q, *logits; /* q: the probabilities, read by the backward */
    const int32_t *targets;
    const float *w;
    double *terms; /* (N) */
    float dloss;
    int N, V;
} xent_job;

static void xent_fwd_task(void *ctx, int ith, int nth) {
    const xent_job *j = ctx;
    int64_t lo, hi;
    vs_split_range(j->N, ith, nth, 1, &lo, &hi);
    size_t V = (size_t)j->V;
    for (int64_t n = lo; n < hi; n++)
        j->terms[n] = vs_train_xent_forward(j->probs + n * V, j->logits + n * V, j->targets + n, j->w + n, 1,
                                            j->V);
}

double vs_train_xent_forward_tp(vs_threadpool *tp, float *probs, const float *logits,
                                const int32_t *targets, const float *w, int N, int V) {
    double *terms = vs_threadpool_size(tp) > 1 && N > 1 ? vs_malloc(sizeof(double) * (size_t)N) : NULL;
    if (!terms) return vs_train_xent_forward(probs, logits, targets, w, N, V);
    xent_job j = {.probs = probs, .logits = logits, .targets = targets, .w = w, .terms = terms, .N = N,
                  .V = V};
    vs_threadpool_run(tp, xent_fwd_task, &j);
    double loss = 0;
    for (int n = 0; n < N; n++)
        if (w[n] != 0.0f) loss += terms[n];
    vs_free(terms);
    return loss;
}

static void xent_bwd_task(void *ctx, int ith, int nth) {
    const xent_job *j = ctx;
    int64_t lo, hi;
    vs_split_range(j->N, ith, nth, 1, &lo, &hi);
    size_t V = (size_t)j->V;
    if (lo < hi)
        vs_train_xent_backward(j->dlogits + lo * V, j->q + lo * V, j->targets + lo, j->w + lo, j->dloss,
                               (int)(hi - lo), j->V);
}

void vs_train_xent_backward_tp(vs_threadpool *tp, float *dlogits, const float *probs,
                               const int32_t *targets, const float *w, float dloss, int N, int V) {
    if (vs_threadpool_size(tp) <= 1 || N <= 1) {
        vs_train_xent_backward(dlogits, probs, targets, w, dloss, N, V);
        return;
    }
    xent_job j = {.q = probs, .dlogits = dlogits, .targets = targets, .w = w, .dloss = dloss,
                  .N = N, .V = V};
    vs_threadpool_run(tp, xent_bwd_task, &j);
}

double vs_train_norm_cap_forward(const float *x, int N, int C, float tau) {
    double loss = 0;
    for (int n = 0; n < N; n++) {
        double q = 0;
        for (int c = 0; c < C; c++) q += (double)x[(size_t)n * C + c] * x[(size_t)n * C + c];
        double e = sqrt(q) / tau - 1;
        if (e > 0) loss += e * e;
    }
    return N > 0 ? loss / N : 0;
}

void vs_train_norm_cap_backward(float *dx, const float *x, float dloss, int N, int C, float tau) {
    for (int n = 0; n < N; n++) {
        double q = 0;
        for (int c = 0; c < C; c++) q += (double)x[(size_t)n * C + c] * x[(size_t)n * C + c];
        double norm = sqrt(q), e = norm / tau - 1;
        if (e <= 0) continue;
        /* d/dx (norm / tau - 1)^2 = 2 e / tau * x / norm */
        float g = (float)(dloss * 2 * e / (tau * norm) / N);
        for (int c = 0; c < C; c++) dx[(size_t)n * C + c] += g * x[(size_t)n * C + c];
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Attention grounding */

static double ground_share(const float *ar, const vs_train_ground *gi, int *n_in) {
    double sg = 0;
    *n_in = 0;
    for (int p = 0; p < 64; p++)
        if (gi->mask >> p & 1) sg += ar[gi->k0 + p], ++*n_in;
    return sg;
}

double vs_train_attn_ground_forward(const float *att, int B, int T, int H, int head, const vs_train_ground *g,
                                    int n) {
    (void)B;
    double l = 0;
    for (int i = 0; i < n; i++) {
        const float *ar = att + (((size_t)g[i].b * H + head) * T + g[i].q) * T;
        int n_in;
        double sg = ground_share(ar, &g[i], &n_in);
        l -= log(sg > 1e-30 ? sg : 1e-30);
    }
    return n > 0 ? l / n : 0.0;
}

void vs_train_attn_ground_backward(float *dq, float *dk, const float *att, const float *q, const float *k,
                                   int B, int T, int H, int KVH, int D, int head, const vs_train_ground *g,
                                   int n, float dloss) {
    (void)B;
    if (n < 1) return;
    const int kh = head / (H / KVH);
    const float scale = 1.0f / sqrtf((float)D);
    for (int i = 0; i < n; i++) {
        const float *ar = att + (((size_t)g[i].b * H + head) * T + g[i].q) * T;
        int n_in;
        double sg = ground_share(ar, &g[i], &n_in);
        float *dqr = dq + ((size_t)g[i].b * T + g[i].q) * H * D + (size_t)head * D;
        const float *qr = q + ((size_t)g[i].b * T + g[i].q) * H * D + (size_t)head * D;
        for (int s = 0; s <= g[i].q; s++) {
            const int p = s - g[i].k0;
            const bool in = p >= 0 && p < 64 && (g[i].mask >> p & 1);
            double r = !in ? 0.0 : sg > 0 ? ar[s] / sg : 1.0 / n_in;
            const float ds = (float)((ar[s] - r) * dloss / n) * scale;
            if (ds == 0.0f) continue;
            float *dkr = dk + ((size_t)g[i].b * T + s) * KVH * D + (size_t)kh * D;
            const float *kr = k + ((size_t)g[i].b * T + s) * KVH * D + (size_t)kh * D;
            for (int d = 0; d < D; d++) dqr[d] += ds * kr[d], dkr[d] += ds * qr[d];
        }
    }
}
