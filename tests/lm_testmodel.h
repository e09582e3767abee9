/* lm_testmodel: helpers shared by tests/test_lm.c and tests/test_kv.c (header-only, static functions):
 * writing and loading small random-weight models, an independent double-precision reference forward
 * (plain loops over dequantised weights, no batching, no cache), and running token chains. */
#ifndef VS_LM_TESTMODEL_H
#define VS_LM_TESTMODEL_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lm.h"
#include "testutil.h"

#define TM_UNUSED __attribute__((unused))

/* A small GQA model: dim 64, 2 layers, 4 heads / 2 kv heads, ffn 96, vocab 64, ctx 64. */
TM_UNUSED static vs_lm_random_opts tm_small_opts(vs_type type, uint64_t seed) {
    vs_lm_random_opts o = {0};
    o.n_embd = 64;
    o.n_layer = 2;
    o.n_head = 4;
    o.n_head_kv = 2;
    o.n_ff = 96;
    o.n_ctx = 64;
    o.n_vocab = 64;
    o.type = type;
    o.rope_base = 10000.0f;
    o.init_std = 0.15f; /* logits of order 1 at this width, so comparisons mean something */
    o.seed = seed;
    return o;
}

TM_UNUSED static const char *tm_path(const char *name) {
    TM_UNUSED static char buf[8][512];
    TM_UNUSED static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", vt_tmpdir(), name);
    return p;
}

TM_UNUSED static vs_lm *tm_model(const vs_lm_random_opts *o, const char *name) {
    vs_error err = {0};
    const char *p = tm_path(name);
    VT_REQUIRE(vs_lm_write_random(o, p, &err) == VS_OK, "writing %s: %s", p, err.msg);
    vs_lm *lm = vs_lm_load(p, &err);
    VT_REQUIRE(lm != NULL, "loading %s: %s", p, err.msg);
    return lm;
}

TM_UNUSED static float *tm_deq(const vs_lm_mat *m) {
    float *d = malloc(sizeof(float) * (size_t)(m->n_out * m->n_in));
    size_t rb = vs_type_row_bytes(m->type, m->n_in);
    for (int64_t o = 0; o < m->n_out; o++)
        vs_dequantize_row(m->type, (const uint8_t *)m->data + (size_t)o * rb, d + o * m->n_in, m->n_in);
    return d;
}

/* y[o] = sum_i W[o][i] x[i] in double. */
TM_UNUSED static void tm_mv(double *y, const float *w, const double *x, int64_t n_out, int64_t n_in) {
    for (int64_t o = 0; o < n_out; o++) {
        double a = 0;
        for (int64_t i = 0; i < n_in; i++) a += (double)w[o * n_in + i] * x[i];
        y[o] = a;
    }
}

TM_UNUSED static void tm_rmsnorm(double *out, const double *x, const float *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * s * w[i];
}

TM_UNUSED static void tm_rope(double *x, int n_heads, int hd, int rope_dim, double base, int pos) {
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < rope_dim / 2; i++) {
            double th = pos * pow(base, -2.0 * i / rope_dim);
            double a = x[h * hd + 2 * i], b = x[h * hd + 2 * i + 1];
            x[h * hd + 2 * i] = a * cos(th) - b * sin(th);
            x[h * hd + 2 * i + 1] = a * sin(th) + b * cos(th);
        }
}

/* Reference forward of tokens[0..n) at positions 0..n-1, causal: logits [n][n_vocab]. */
TM_UNUSED static void tm_ref_forward(const vs_lm *lm, const int32_t *tokens, int n, float *logits) {
    const vs_lm_config *c = vs_lm_cfg(lm);
    const vs_lm_weights *w = vs_lm_w(lm);
    const int E = c->n_embd, hd = c->head_dim, H = c->n_head, KVH = c->n_head_kv, F = c->n_ff;
    const int Q = H * hd, KV = KVH * hd;
    double *x = calloc((size_t)n * E, sizeof(double)), *xn = malloc(sizeof(double) * E);
    double *q = malloc(sizeof(double) * (size_t)n * Q), *k = malloc(sizeof(double) * (size_t)n * KV);
    double *v = malloc(sizeof(double) * (size_t)n * KV), *att = malloc(sizeof(double) * Q);
    double *tmp = malloc(sizeof(double) * (E > F ? E : F) * 2), *g = malloc(sizeof(double) * F);
    double *u = malloc(sizeof(double) * F), *sc = malloc(sizeof(double) * n);
    float *emb = tm_deq(&w->tok_embd);
    for (int t = 0; t < n; t++)
        for (int i = 0; i < E; i++) x[t * E + i] = emb[(size_t)tokens[t] * E + i];
    for (int l = 0; l < c->n_layer; l++) {
        const vs_lm_layer *L = &w->layers[l];
        float *wq = tm_deq(&L->wq), *wk = tm_deq(&L->wk), *wv = tm_deq(&L->wv), *wo = tm_deq(&L->wo);
        float *wg = tm_deq(&L->w_gate), *wu = tm_deq(&L->w_up), *wd = tm_deq(&L->w_down);
        for (int t = 0; t < n; t++) {
            tm_rmsnorm(xn, x + t * E, L->attn_norm, E, c->rms_eps);
            tm_mv(q + t * Q, wq, xn, Q, E);
            tm_mv(k + t * KV, wk, xn, KV, E);
            tm_mv(v + t * KV, wv, xn, KV, E);
            tm_rope(q + t * Q, H, hd, c->rope_dim, c->rope_base, t);
            tm_rope(k + t * KV, KVH, hd, c->rope_dim, c->rope_base, t);
        }
        for (int t = 0; t < n; t++) {
            for (int h = 0; h < H; h++) {
                int kh = h / (H / KVH);
                double mx = -1e300, sum = 0;
                for (int s = 0; s <= t; s++) {
                    double a = 0;
                    for (int d = 0; d < hd; d++) a += q[t * Q + h * hd + d] * k[s * KV + kh * hd + d];
                    sc[s] = a / sqrt((double)hd);
                    if (sc[s] > mx) mx = sc[s];
                }
                for (int s = 0; s <= t; s++) sum += (sc[s] = exp(sc[s] - mx));
                for (int d = 0; d < hd; d++) {
                    double a = 0;
                    for (int s = 0; s <= t; s++) a += sc[s] / sum * v[s * KV + kh * hd + d];
                    att[h * hd + d] = a;
                }
            }
            tm_mv(tmp, wo, att, E, Q);
            for (int i = 0; i < E; i++) x[t * E + i] += tmp[i];
            tm_rmsnorm(xn, x + t * E, L->ffn_norm, E, c->rms_eps);
            tm_mv(g, wg, xn, F, E);
            tm_mv(u, wu, xn, F, E);
            for (int i = 0; i < F; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
            tm_mv(tmp, wd, g, E, F);
            for (int i = 0; i < E; i++) x[t * E + i] += tmp[i];
        }
        free(wq), free(wk), free(wv), free(wo), free(wg), free(wu), free(wd);
    }
    float *wout = tm_deq(&w->output);
    double *lg = malloc(sizeof(double) * c->n_vocab);
    for (int t = 0; t < n; t++) {
        tm_rmsnorm(xn, x + t * E, w->output_norm, E, c->rms_eps);
        tm_mv(lg, wout, xn, c->n_vocab, E);
        for (int i = 0; i < c->n_vocab; i++) logits[(size_t)t * c->n_vocab + i] = (float)lg[i];
    }
    free(lg), free(wout), free(emb), free(x), free(xn), free(q), free(k), free(v), free(att), free(tmp);
    free(g), free(u), free(sc);
}

/* Feeds tokens[0..n) to sequence seq as ONE causal batch at positions start.., logits for every row
 * into logits [n][n_vocab] (may be NULL). */
TM_UNUSED static vs_status tm_feed(vs_lm *lm, vs_kv *kv, vs_threadpool *tp, int seq, const int32_t *tokens, int n,
                         float *logits, vs_error *err) {
    vs_lm_row *rows = calloc((size_t)n, sizeof(vs_lm_row));
    int start = vs_kv_seq_len(kv, seq);
    for (int i = 0; i < n; i++) {
        rows[i].token = tokens[i];
        rows[i].seq = seq;
        rows[i].pos = start + i;
        rows[i].want_logits = logits != NULL;
    }
    vs_lm_out out = {.logits = logits};
    vs_status st = vs_lm_forward(lm, kv, tp, rows, n, &out, err);
    free(rows);
    return st;
}

TM_UNUSED static void tm_random_tokens(int32_t *t, int n, int n_vocab, uint64_t seed) {
    vs_rng r;
    vs_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) t[i] = (int32_t)vs_rng_below(&r, (uint32_t)n_vocab);
}

#endif
