/* train_grad: every training op's backward against central finite differences of its forward, and
 * the matrix-product paths against their naive reference twin.
 *
 * For an op y = f(x1, x2, ...) the scalar objective is L = sum_i y_i r_i with fixed random r, so the
 * analytic gradient is the op's backward with dout = r; each loss is its own scalar objective. The
 * numerical derivative is (L(x + h) - L(x - h)) / (2h) with L summed in double and h chosen so that
 * F32 rounding and truncation both stay well below the tolerance. The error of one gradient tensor
 * is max |analytic - numeric| / max |numeric| over its (sampled) elements; it must be <= 1e-3. */
#include <string.h>

#include "kernels.h"
#include "testutil.h"
#include "train.h"

#define GRAD_TOL 1e-3
#define FD_EPS 3e-3
#define MAX_PROBES 96 /* elements probed per tensor (all of them when the tensor is smaller) */

static vs_rng g_rng;
static double g_worst = 0;

static float *randn(size_t n, float scale) {
    float *x = vs_malloc(sizeof(float) * (n ? n : 1));
    VT_REQUIRE(x, "alloc");
    for (size_t i = 0; i < n; i++) x[i] = scale * vs_rng_normal(&g_rng);
    return x;
}

static float *zeros(size_t n) {
    float *x = vs_calloc(n ? n : 1, sizeof(float));
    VT_REQUIRE(x, "alloc");
    return x;
}

static double dot_d(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

typedef double (*objective_fn)(void *ctx);

/* Compares the analytic gradient an (n) of objective f w.r.t. x (n) with central differences. */
static void check_grad(const char *op, const char *what, objective_fn f, void *ctx, float *x, size_t n,
                       const float *an) {
    size_t stride = n > MAX_PROBES ? n / MAX_PROBES : 1;
    double max_err = 0, max_num = 0;
    for (size_t i = 0; i < n; i += stride) {
        float x0 = x[i];
        float xp = x0 + (float)FD_EPS, xm = x0 - (float)FD_EPS;
        x[i] = xp;
        double lp = f(ctx);
        x[i] = xm;
        double lm = f(ctx);
        x[i] = x0;
        double num = (lp - lm) / ((double)xp - (double)xm);
        double e = fabs(num - an[i]);
        if (e > max_err) max_err = e;
        if (fabs(num) > max_num) max_num = fabs(num);
    }
    double rel = max_err / (max_num > 1e-6 ? max_num : 1e-6);
    if (rel > g_worst) g_worst = rel;
    printf("  %-22s %-8s rel err %.2e (max |grad| %.3g)\n", op, what, rel, max_num);
    VT_CHECK(rel <= GRAD_TOL, "%s: d%s relative error %.3e > %.0e", op, what, rel, GRAD_TOL);
}

/* ---------------------------------------------------------------------------------------------- */
/* linear */
typedef struct {
    vs_threadpool *tp;
    int N, C, OC;
    float *inp, *w, *b, *out, *r;
} lin_ctx;

static double lin_L(void *p) {
    lin_ctx *c = p;
    vs_train_linear_forward(c->tp, c->out, c->inp, c->w, c->b, c->N, c->C, c->OC);
    return dot_d(c->out, c->r, (size_t)c->N * c->OC);
}

static void test_linear(vs_threadpool *tp, bool bias) {
    lin_ctx c = {.tp = tp, .N = 5, .C = 7, .OC = 6};
    c.inp = randn(c.N * c.C, 1);
    c.w = randn(c.OC * c.C, 0.5f);
    c.b = bias ? randn(c.OC, 0.5f) : NULL;
    c.out = zeros(c.N * c.OC);
    c.r = randn(c.N * c.OC, 1);
    float *dinp = zeros(c.N * c.C), *dw = zeros(c.OC * c.C), *db = zeros(c.OC);
    lin_L(&c);
    vs_train_linear_backward(tp, dinp, dw, bias ? db : NULL, c.r, c.inp, c.w, c.N, c.C, c.OC);
    const char *nm = bias ? "linear+bias" : "linear";
    check_grad(nm, "inp", lin_L, &c, c.inp, c.N * c.C, dinp);
    check_grad(nm, "w", lin_L, &c, c.w, c.OC * c.C, dw);
    if (bias) check_grad(nm, "b", lin_L, &c, c.b, c.OC, db);
    vs_free(c.inp), vs_free(c.w), vs_free(c.b), vs_free(c.out), vs_free(c.r);
    vs_free(dinp), vs_free(dw), vs_free(db);
}

/* ---------------------------------------------------------------------------------------------- */
/* embedding */
typedef struct {
    int N, C;
    const int32_t *tok;
    float *wte, *out, *r;
} emb_ctx;

static double emb_L(void *p) {
    emb_ctx *c = p;
    vs_train_embed_forward(c->out, c->tok, c->wte, c->N, c->C);
    return dot_d(c->out, c->r, (size_t)c->N * c->C);
}

static void test_embed(void) {
    int32_t tok[6] = {3, 1, -1, 3, 0, 4};
    emb_ctx c = {.N = 6, .C = 5, .tok = tok};
    c.wte = randn(6 * c.C, 1);
    c.out = zeros(c.N * c.C);
    c.r = randn(c.N * c.C, 1);
    float *dwte = zeros(6 * c.C);
    emb_L(&c);
    vs_train_embed_backward(dwte, c.r, tok, c.N, c.C);
    check_grad("embed", "wte", emb_L, &c, c.wte, 6 * c.C, dwte);
    /* the row of token -1 is left untouched by the forward */
    float probe = c.out[2 * c.C];
    c.out[2 * c.C] = 123.0f;
    emb_L(&c);
    VT_CHECK(c.out[2 * c.C] == 123.0f, "embed wrote a row with token -1 (%g)", probe);
    vs_free(c.wte), vs_free(c.out), vs_free(c.r), vs_free(dwte);
}

/* ---------------------------------------------------------------------------------------------- */
/* RMSNorm and LayerNorm */
typedef struct {
    int N, C;
    bool layer;
    float *inp, *w, *b, *out, *s1, *s2, *r;
} norm_ctx;

static double norm_L(void *p) {
    norm_ctx *c = p;
    if (c->layer) vs_train_layernorm_forward(c->out, c->s1, c->s2, c->inp, c->w, c->b, c->N, c->C, 1e-5f);
    else vs_train_rmsnorm_forward(c->out, c->s1, c->inp, c->w, c->N, c->C, 1e-5f);
    return dot_d(c->out, c->r, (size_t)c->N * c->C);
}

static void test_norm(bool layer) {
    norm_ctx c = {.N = 4, .C = 9, .layer = layer};
    c.inp = randn(c.N * c.C, 1);
    for (int i = 0; i < c.N * c.C; i++) c.inp[i] += 0.5f; /* a non-zero mean matters for LayerNorm */
    c.w = randn(c.C, 1);
    c.b = randn(c.C, 1);
    c.out = zeros(c.N * c.C);
    c.s1 = zeros(c.N);
    c.s2 = zeros(c.N);
    c.r = randn(c.N * c.C, 1);
    float *dinp = zeros(c.N * c.C), *dw = zeros(c.C), *db = zeros(c.C);
    norm_L(&c);
    const char *nm = layer ? "layernorm" : "rmsnorm";
    if (layer) vs_train_layernorm_backward(dinp, dw, db, c.r, c.inp, c.w, c.s1, c.s2, c.N, c.C);
    else vs_train_rmsnorm_backward(dinp, dw, c.r, c.inp, c.w, c.s1, c.N, c.C);
    check_grad(nm, "inp", norm_L, &c, c.inp, c.N * c.C, dinp);
    check_grad(nm, "w", norm_L, &c, c.w, c.C, dw);
    if (layer) check_grad(nm, "b", norm_L, &c, c.b, c.C, db);
    vs_free(c.inp), vs_free(c.w), vs_free(c.b), vs_free(c.out), vs_free(c.s1), vs_free(c.s2);
    vs_free(c.r), vs_free(dinp), vs_free(dw), vs_free(db);
}

/* ---------------------------------------------------------------------------------------------- */
/* residual add */
typedef struct {
    size_t n;
    float *a, *b, *out, *r;
} add_ctx;

static double add_L(void *p) {
    add_ctx *c = p;
    vs_train_add_forward(c->out, c->a, c->b, c->n);
    return dot_d(c->out, c->r, c->n);
}

static void test_add(void) {
    add_ctx c = {.n = 13};
    c.a = randn(c.n, 1), c.b = randn(c.n, 1), c.out = zeros(c.n), c.r = randn(c.n, 1);
    float *da = zeros(c.n), *db = zeros(c.n);
    vs_train_add_backward(da, db, c.r, c.n);
    check_grad("add", "a", add_L, &c, c.a, c.n, da);
    check_grad("add", "b", add_L, &c, c.b, c.n, db);
    vs_free(c.a), vs_free(c.b), vs_free(c.out), vs_free(c.r), vs_free(da), vs_free(db);
}

/* ---------------------------------------------------------------------------------------------- */
/* RoPE */
typedef struct {
    int N, H, D;
    const float *cs;
    const int32_t *pos;
    float *inp, *out, *r;
} rope_ctx;

static double rope_L(void *p) {
    rope_ctx *c = p;
    vs_train_rope_forward(c->out, c->inp, c->cs, c->pos, c->N, c->H, c->D);
    return dot_d(c->out, c->r, (size_t)c->N * c->H * c->D);
}

static void test_rope(void) {
    int32_t pos[5] = {0, 1, 7, 30, 2};
    rope_ctx c = {.N = 5, .H = 3, .D = 8, .pos = pos};
    float *cs = zeros(32 * 8);
    vs_train_rope_table(cs, 32, 8, 10000.0f);
    c.cs = cs;
    size_t n = (size_t)c.N * c.H * c.D;
    c.inp = randn(n, 1), c.out = zeros(n), c.r = randn(n, 1);
    float *dinp = zeros(n);
    vs_train_rope_backward(dinp, c.r, cs, pos, c.N, c.H, c.D);
    check_grad("rope", "inp", rope_L, &c, c.inp, n, dinp);
    /* position 0 is the identity; pair i of position p rotates by p * 10000^(-2i/D) */
    rope_L(&c);
    VT_CHECK(c.out[0] == c.inp[0] && c.out[1] == c.inp[1], "rope at position 0 is not the identity");
    {
        double th = 7.0 * pow(10000.0, -2.0 * 1 / 8);
        const float *x = c.inp + (size_t)2 * c.H * c.D + 2; /* row 2 (pos 7), head 0, pair 1 */
        const float *y = c.out + (size_t)2 * c.H * c.D + 2;
        double y0 = x[0] * cos(th) - x[1] * sin(th), y1 = x[0] * sin(th) + x[1] * cos(th);
        VT_CHECK(fabs(y[0] - y0) < 1e-5 && fabs(y[1] - y1) < 1e-5, "rope rotates adjacent pairs");
    }
    vs_free(cs), vs_free(c.inp), vs_free(c.out), vs_free(c.r), vs_free(dinp);
}

/* ---------------------------------------------------------------------------------------------- */
/* attention (causal, bidirectional, cross) */
typedef struct {
    vs_threadpool *tp;
    int mode; /* 0 causal self, 1 bidirectional self, 2 cross */
    int B, Tq, Tk, H, KVH, D;
    const int32_t *kv_len;
    float *q, *k, *v, *out, *att, *r;
} att_ctx;

static double att_L(void *p) {
    att_ctx *c = p;
    if (c->mode == 2)
        vs_train_cross_attention_forward(c->tp, c->out, c->att, c->q, c->k, c->v, c->kv_len, c->B, c->Tq,
                                         c->Tk, c->H, c->KVH, c->D);
    else
        vs_train_self_attention_forward(c->tp, c->out, c->att, c->q, c->k, c->v, c->B, c->Tq, c->H,
                                        c->KVH, c->D, c->mode == 0);
    return dot_d(c->out, c->r, (size_t)c->B * c->Tq * c->H * c->D);
}

static void test_attention(vs_threadpool *tp, int mode) {
    static const int32_t kv_len[2 * 4] = {0, 1, 3, 5, 2, 5, 4, 1};
    att_ctx c = {.tp = tp, .mode = mode, .B = 2, .Tq = mode == 2 ? 4 : 5, .Tk = 5, .H = 4, .KVH = 2, .D = 8,
                 .kv_len = mode == 2 ? kv_len : NULL};
    size_t nq = (size_t)c.B * c.Tq * c.H * c.D, nk = (size_t)c.B * c.Tk * c.KVH * c.D;
    size_t na = (size_t)c.B * c.H * c.Tq * c.Tk;
    c.q = randn(nq, 1), c.k = randn(nk, 1), c.v = randn(nk, 1), c.out = zeros(nq), c.att = zeros(na);
    c.r = randn(nq, 1);
    float *dq = zeros(nq), *dk = zeros(nk), *dv = zeros(nk), *datt = zeros(na);
    att_L(&c);
    if (mode == 2)
        vs_train_cross_attention_backward(tp, dq, dk, dv, datt, c.r, c.att, c.q, c.k, c.v, kv_len, c.B,
                                          c.Tq, c.Tk, c.H, c.KVH, c.D);
    else
        vs_train_self_attention_backward(tp, dq, dk, dv, datt, c.r, c.att, c.q, c.k, c.v, c.B, c.Tq, c.H,
                                         c.KVH, c.D, mode == 0);
    const char *nm = mode == 0   ? "attention causal GQA"
                     : mode == 1 ? "attention bidir GQA"
                                 : "cross-attention";
    check_grad(nm, "q", att_L, &c, c.q, nq, dq);
    check_grad(nm, "k", att_L, &c, c.k, nk, dk);
    check_grad(nm, "v", att_L, &c, c.v, nk, dv);
    /* masks: causal rows see no later key; a cross row with kv_len 0 is all zero */
    att_L(&c);
    if (mode == 0) {
        bool ok = true;
        for (int b = 0; b < c.B; b++)
            for (int h = 0; h < c.H; h++)
                for (int t = 0; t < c.Tq; t++)
                    for (int s = t + 1; s < c.Tk; s++)
                        ok &= c.att[(((size_t)b * c.H + h) * c.Tq + t) * c.Tk + s] == 0.0f;
        VT_CHECK(ok, "causal attention put weight on a later key");
    }
    if (mode == 2) {
        bool ok = true;
        for (int i = 0; i < c.H * c.D; i++) ok &= c.out[i] == 0.0f;
        VT_CHECK(ok, "cross-attention row with kv_len 0 is not zero");
    }
    vs_free(c.q), vs_free(c.k), vs_free(c.v), vs_free(c.out), vs_free(c.att), vs_free(c.r);
    vs_free(dq), vs_free(dk), vs_free(dv), vs_free(datt);
}

/* ---------------------------------------------------------------------------------------------- */
/* element-wise activations */
typedef struct {
    int kind; /* 0 swiglu, 1 gelu tanh, 2 gelu erf, 3 quick gelu */
    size_t n;
    float *x, *y, *out, *r;
} act_ctx;

static double act_L(void *p) {
    act_ctx *c = p;
    switch (c->kind) {
    case 0: vs_train_swiglu_forward(c->out, c->x, c->y, c->n); break;
    case 1: vs_train_gelu_forward(c->out, c->x, c->n); break;
    case 2: vs_train_gelu_erf_forward(c->out, c->x, c->n); break;
    default: vs_train_quick_gelu_forward(c->out, c->x, c->n); break;
    }
    return dot_d(c->out, c->r, c->n);
}

static void test_activation(int kind) {
    static const char *names[] = {"swiglu", "gelu (tanh)", "gelu (erf)", "quick-gelu"};
    act_ctx c = {.kind = kind, .n = 40};
    c.x = randn(c.n, 2), c.y = randn(c.n, 1), c.out = zeros(c.n), c.r = randn(c.n, 1);
    float *dx = zeros(c.n), *dy = zeros(c.n);
    switch (kind) {
    case 0: vs_train_swiglu_backward(dx, dy, c.r, c.x, c.y, c.n); break;
    case 1: vs_train_gelu_backward(dx, c.r, c.x, c.n); break;
    case 2: vs_train_gelu_erf_backward(dx, c.r, c.x, c.n); break;
    default: vs_train_quick_gelu_backward(dx, c.r, c.x, c.n); break;
    }
    check_grad(names[kind], kind == 0 ? "gate" : "inp", act_L, &c, c.x, c.n, dx);
    if (kind == 0) check_grad(names[kind], "up", act_L, &c, c.y, c.n, dy);
    vs_free(c.x), vs_free(c.y), vs_free(c.out), vs_free(c.r), vs_free(dx), vs_free(dy);
}

static void test_activation_values(void) {
    /* spot values: gelu_tanh(1) = 0.841192, gelu_erf(1) = 0.841345, quick_gelu(1) = 0.845796 */
    float x = 1.0f, y;
    vs_train_gelu_forward(&y, &x, 1);
    VT_CHECK_NEAR(y, 0.8411920, 1e-6, "gelu tanh(1)");
    vs_train_gelu_erf_forward(&y, &x, 1);
    VT_CHECK_NEAR(y, 0.8413447, 1e-6, "gelu erf(1)");
    vs_train_quick_gelu_forward(&y, &x, 1);
    VT_CHECK_NEAR(y, 0.8457957, 1e-6, "quick gelu(1)");
}

/* ---------------------------------------------------------------------------------------------- */
/* patch embedding, ViT token assembly, class-token drop */
typedef struct {
    vs_threadpool *tp;
    int B, CH, S, P, C;
    float *img, *w, *col, *out, *r;
} patch_ctx;

static double patch_L(void *p) {
    patch_ctx *c = p;
    vs_train_patch_embed_forward(c->tp, c->out, c->col, c->img, c->w, c->B, c->CH, c->S, c->P, c->C);
    int NP = (c->S / c->P) * (c->S / c->P);
    return dot_d(c->out, c->r, (size_t)c->B * NP * c->C);
}

static void test_patch_embed(vs_threadpool *tp) {
    patch_ctx c = {.tp = tp, .B = 2, .CH = 3, .S = 6, .P = 3, .C = 5};
    int NP = 4, K = c.CH * c.P * c.P;
    size_t ni = (size_t)c.B * c.CH * c.S * c.S;
    c.img = randn(ni, 1), c.w = randn((size_t)c.C * K, 0.3f), c.col = zeros((size_t)c.B * NP * K);
    c.out = zeros((size_t)c.B * NP * c.C), c.r = randn((size_t)c.B * NP * c.C, 1);
    float *dimg = zeros(ni), *dw = zeros((size_t)c.C * K);
    patch_L(&c);
    vs_train_patch_embed_backward(tp, dimg, dw, c.r, c.col, c.w, c.B, c.CH, c.S, c.P, c.C);
    check_grad("patch embed", "w", patch_L, &c, c.w, (size_t)c.C * K, dw);
    check_grad("patch embed", "img", patch_L, &c, c.img, ni, dimg);
    /* the convolution itself: patch 3 (bottom right) of image 1, output channel 2 */
    patch_L(&c);
    {
        double s = 0;
        for (int ch = 0; ch < c.CH; ch++)
            for (int y = 0; y < c.P; y++)
                for (int x = 0; x < c.P; x++)
                    s += (double)c.w[(size_t)2 * K + (ch * c.P + y) * c.P + x] *
                         c.img[(((size_t)1 * c.CH + ch) * c.S + 3 + y) * c.S + 3 + x];
        VT_CHECK_NEAR(c.out[((size_t)1 * NP + 3) * c.C + 2], s, 1e-4, "patch embed is a stride-P conv");
    }
    vs_free(c.img), vs_free(c.w), vs_free(c.col), vs_free(c.out), vs_free(c.r), vs_free(dimg), vs_free(dw);
}

typedef struct {
    int B, NP, C;
    float *patches, *cls, *pos, *out, *r;
} vemb_ctx;

static double vemb_L(void *p) {
    vemb_ctx *c = p;
    vs_train_vit_embed_forward(c->out, c->patches, c->cls, c->pos, c->B, c->NP, c->C);
    return dot_d(c->out, c->r, (size_t)c->B * (c->NP + 1) * c->C);
}

static void test_vit_embed(void) {
    vemb_ctx c = {.B = 2, .NP = 4, .C = 3};
    size_t np = (size_t)c.B * c.NP * c.C, no = (size_t)c.B * (c.NP + 1) * c.C;
    c.patches = randn(np, 1), c.cls = randn(c.C, 1), c.pos = randn((size_t)(c.NP + 1) * c.C, 1);
    c.out = zeros(no), c.r = randn(no, 1);
    float *dp = zeros(np), *dc = zeros(c.C), *dpos = zeros((size_t)(c.NP + 1) * c.C);
    vs_train_vit_embed_backward(dp, dc, dpos, c.r, c.B, c.NP, c.C);
    check_grad("vit embed", "patches", vemb_L, &c, c.patches, np, dp);
    check_grad("vit embed", "cls", vemb_L, &c, c.cls, c.C, dc);
    check_grad("vit embed", "pos", vemb_L, &c, c.pos, (size_t)(c.NP + 1) * c.C, dpos);
    vs_free(c.patches), vs_free(c.cls), vs_free(c.pos), vs_free(c.out), vs_free(c.r);
    vs_free(dp), vs_free(dc), vs_free(dpos);
}

typedef struct {
    int B, NP, C;
    float *inp, *out, *r;
} drop_ctx;

static double drop_L(void *p) {
    drop_ctx *c = p;
    vs_train_drop_cls_forward(c->out, c->inp, c->B, c->NP, c->C);
    return dot_d(c->out, c->r, (size_t)c->B * c->NP * c->C);
}

static void test_drop_cls(void) {
    drop_ctx c = {.B = 2, .NP = 3, .C = 4};
    size_t ni = (size_t)c.B * (c.NP + 1) * c.C, no = (size_t)c.B * c.NP * c.C;
    c.inp = randn(ni, 1), c.out = zeros(no), c.r = randn(no, 1);
    float *di = zeros(ni);
    vs_train_drop_cls_backward(di, c.r, c.B, c.NP, c.C);
    check_grad("drop cls", "inp", drop_L, &c, c.inp, ni, di);
    vs_free(c.inp), vs_free(c.out), vs_free(c.r), vs_free(di);
}

typedef struct {
    int B, G, k, C;
    float *inp, *out, *r;
} pool_ctx;

static double pool_L(void *p) {
    pool_ctx *c = p;
    vs_train_pool_grid_forward(c->out, c->inp, c->B, c->G, c->k, c->C);
    const int Gk = (c->G + c->k - 1) / c->k;
    return dot_d(c->out, c->r, (size_t)c->B * Gk * Gk * c->C);
}

/* k x k pooling, windows inside the grid (G 4, k 2) and at its edge (G 5, k 2 and 3) */
static void test_pool_grid(int G, int k) {
    pool_ctx c = {.B = 2, .G = G, .k = k, .C = 5};
    const int Gk = (G + k - 1) / k;
    size_t ni = (size_t)c.B * G * G * c.C, no = (size_t)c.B * Gk * Gk * c.C;
    c.inp = randn(ni, 1), c.out = zeros(no), c.r = randn(no, 1);
    float *di = zeros(ni);
    vs_train_pool_grid_backward(di, c.r, c.B, G, k, c.C);
    char name[32];
    snprintf(name, sizeof(name), "pool grid %dx%d /%d", G, G, k);
    check_grad(name, "inp", pool_L, &c, c.inp, ni, di);
    /* the forward is the engine's pooling: an edge window averages only what is inside */
    const float *last = c.inp + ((size_t)(G * G) - 1) * c.C; /* image 0's bottom-right patch */
    if (G % k == 1) VT_CHECK(c.out[((size_t)Gk * Gk - 1) * c.C] == last[0], "edge window of one patch");
    vs_free(c.inp), vs_free(c.out), vs_free(c.r), vs_free(di);
}

/* ---------------------------------------------------------------------------------------------- */
/* losses */
typedef struct {
    int kind; /* 0 xent, 1 soft xent, 2 kl, 3 smooth l1 */
    int N, V;
    const int32_t *targets;
    const float *w;
    float *logits, *probs, *p, *target;
} loss_ctx;

static double loss_L(void *q) {
    loss_ctx *c = q;
    switch (c->kind) {
    case 0: return vs_train_xent_forward(c->probs, c->logits, c->targets, c->w, c->N, c->V);
    case 1: return vs_train_soft_xent_forward(c->probs, c->logits, c->p, c->w, c->N, c->V);
    case 2: return vs_train_kl_forward(c->probs, c->logits, c->p, c->w, c->N, c->V);
    default: return vs_train_smooth_l1_forward(c->logits, c->target, c->w, c->N, c->V, 0.7f);
    }
}

static void test_loss(int kind) {
    static const char *names[] = {"xent (masked)", "soft xent", "kl", "smooth l1"};
    static const int32_t targets[5] = {3, 0, 6, 6, 1};
    static const float w[5] = {0.25f, 0.0f, 0.5f, 0.25f, 1.0f};
    loss_ctx c = {.kind = kind, .N = 5, .V = 7, .targets = targets, .w = w};
    size_t n = (size_t)c.N * c.V;
    c.logits = randn(n, 1.5f), c.probs = zeros(n), c.p = zeros(n), c.target = randn(n, 1);
    for (int r = 0; r < c.N; r++) { /* p: a softmax of random logits, with one exact zero */
        double s = 0;
        for (int v = 0; v < c.V; v++) s += c.p[r * c.V + v] = expf(vs_rng_normal(&g_rng));
        for (int v = 0; v < c.V; v++) c.p[r * c.V + v] = (float)(c.p[r * c.V + v] / s);
    }
    { /* an exact zero in row 0, renormalised */
        double s = 1.0 - c.p[2];
        c.p[2] = 0.0f;
        for (int v = 0; v < c.V; v++) c.p[v] = (float)(c.p[v] / s);
    }
    if (kind == 3) /* keep |pred - target| away from the kink at beta by more than the FD step */
        for (size_t i = 0; i < n; i++) {
            float d = c.logits[i] - c.target[i];
            if (fabsf(fabsf(d) - 0.7f) < 0.05f) c.logits[i] += d > 0 ? 0.2f : -0.2f;
        }
    float *dl = zeros(n), *dt = zeros(n);
    double L = loss_L(&c);
    switch (kind) {
    case 0: vs_train_xent_backward(dl, c.probs, targets, w, 1.0f, c.N, c.V); break;
    case 1: vs_train_soft_xent_backward(dl, c.probs, c.p, w, 1.0f, c.N, c.V); break;
    case 2: vs_train_kl_backward(dl, c.probs, c.p, w, 1.0f, c.N, c.V); break;
    default: vs_train_smooth_l1_backward(dl, dt, c.logits, c.target, w, 1.0f, c.N, c.V, 0.7f); break;
    }
    check_grad(names[kind], kind == 3 ? "pred" : "logits", loss_L, &c, c.logits, n, dl);
    if (kind == 3) check_grad(names[kind], "target", loss_L, &c, c.target, n, dt);
    if (kind == 0) { /* value: the weighted sum of -log softmax at the targets */
        double ref = 0;
        for (int r = 0; r < c.N; r++) {
            double mx = -1e30, s = 0;
            for (int v = 0; v < c.V; v++) mx = fmax(mx, c.logits[r * c.V + v]);
            for (int v = 0; v < c.V; v++) s += exp(c.logits[r * c.V + v] - mx);
            ref += w[r] * (log(s) + mx - c.logits[r * c.V + targets[r]]);
        }
        VT_CHECK_NEAR(L, ref, 1e-5, "xent value");
        bool zero_row = true; /* a row with weight 0 gets no gradient */
        for (int v = 0; v < c.V; v++) zero_row &= dl[1 * c.V + v] == 0.0f;
        VT_CHECK(zero_row, "masked row received a gradient");
    }
    if (kind == 2) { /* KL(p || p) = 0 */
        loss_ctx c2 = c;
        float *lp = zeros(n);
        for (size_t i = 0; i < n; i++) lp[i] = c.p[i] > 0 ? logf(c.p[i]) : -1e4f;
        c2.logits = lp;
        VT_CHECK_NEAR(loss_L(&c2), 0.0, 1e-5, "KL(p || p) should be 0");
        vs_free(lp);
    }
    vs_free(c.logits), vs_free(c.probs), vs_free(c.p), vs_free(c.target), vs_free(dl), vs_free(dt);
}

/* norm cap: rows louder than tau (norms 0.5 tau .. 3 tau, none within the FD step of the kink) */
typedef struct {
    int N, C;
    float tau, *x;
} cap_ctx;

static double cap_L(void *p) {
    cap_ctx *c = p;
    return vs_train_norm_cap_forward(c->x, c->N, c->C, c->tau);
}

static void test_norm_cap(void) {
    cap_ctx c = {.N = 6, .C = 5, .tau = 2.0f};
    c.x = randn((size_t)c.N * c.C, 1);
    static const float want[6] = {1.0f, 3.0f, 6.0f, 2.6f, 4.4f, 0.5f}; /* target norms: 3 quiet, 3 loud */
    double ref = 0;
    for (int n = 0; n < c.N; n++) {
        double q = 0;
        for (int k = 0; k < c.C; k++) q += (double)c.x[n * c.C + k] * c.x[n * c.C + k];
        for (int k = 0; k < c.C; k++) c.x[n * c.C + k] *= (float)(want[n] / sqrt(q));
        double e = want[n] / c.tau - 1;
        ref += e > 0 ? e * e : 0;
    }
    float *dx = zeros((size_t)c.N * c.C);
    VT_CHECK_NEAR(cap_L(&c), ref / c.N, 1e-6, "norm cap value");
    vs_train_norm_cap_backward(dx, c.x, 1.0f, c.N, c.C, c.tau);
    check_grad("norm cap", "x", cap_L, &c, c.x, (size_t)c.N * c.C, dx);
    bool quiet_free = true;
    for (int k = 0; k < c.C; k++) quiet_free &= dx[0 * c.C + k] == 0.0f && dx[5 * c.C + k] == 0.0f;
    VT_CHECK(quiet_free, "rows under the cap get no gradient");
    vs_free(c.x), vs_free(dx);
}

/* attention grounding: -log of head `head`'s attention share on the grounded key rows, through the
 * causal softmax (GQA: the head's key head gets the key gradients) */
typedef struct {
    vs_threadpool *tp;
    int B, T, H, KVH, D, head, n;
    const vs_train_ground *g;
    float *q, *k, *v, *out, *att;
} ground_ctx;

static double ground_L(void *p) {
    ground_ctx *c = p;
    vs_train_self_attention_forward(c->tp, c->out, c->att, c->q, c->k, c->v, c->B, c->T, c->H, c->KVH, c->D, true);
    return vs_train_attn_ground_forward(c->att, c->B, c->T, c->H, c->head, c->g, c->n);
}

static void test_attn_ground(vs_threadpool *tp) {
    /* three grounds: keys before the query, a key on the query row itself, a single key */
    static const vs_train_ground g[3] = {{0, 6, 1, 0x7}, {1, 5, 2, 0xd}, {1, 3, 0, 0x1}};
    ground_ctx c = {.tp = tp, .B = 2, .T = 7, .H = 4, .KVH = 2, .D = 8, .head = 3, .n = 3, .g = g};
    size_t nq = (size_t)c.B * c.T * c.H * c.D, nk = (size_t)c.B * c.T * c.KVH * c.D;
    c.q = randn(nq, 1), c.k = randn(nk, 1), c.v = randn(nk, 1), c.out = zeros(nq);
    c.att = zeros((size_t)c.B * c.H * c.T * c.T);
    float *dq = zeros(nq), *dk = zeros(nk);
    double l = ground_L(&c), ref = 0;
    for (int i = 0; i < 3; i++) {
        double sg = 0;
        for (int p = 0; p < 64; p++)
            if (g[i].mask >> p & 1) sg += c.att[(((size_t)g[i].b * c.H + c.head) * c.T + g[i].q) * c.T + g[i].k0 + p];
        ref -= log(sg);
    }
    VT_CHECK_NEAR(l, ref / 3, 1e-9, "grounding loss value");
    vs_train_attn_ground_backward(dq, dk, c.att, c.q, c.k, c.B, c.T, c.H, c.KVH, c.D, c.head, g, 3, 1.0f);
    check_grad("attention grounding", "q", ground_L, &c, c.q, nq, dq);
    check_grad("attention grounding", "k", ground_L, &c, c.k, nk, dk);
    /* only head 3's query rows and key head 1 move */
    bool only = true;
    for (size_t i = 0; i < nq; i++) only &= dq[i] == 0.0f || (int)(i / c.D % c.H) == c.head;
    for (size_t i = 0; i < nk; i++) only &= dk[i] == 0.0f || (int)(i / c.D % c.KVH) == 1;
    VT_CHECK(only, "grounding gradients reach other heads");
    vs_free(c.q), vs_free(c.k), vs_free(c.v), vs_free(c.out), vs_free(c.att), vs_free(dq), vs_free(dk);
}

/* ---------------------------------------------------------------------------------------------- */
/* sgemm paths vs the reference */

/* One product's inputs: op(A) (m, k), op(B) (k, n), transposes from bits of t, padded strides, and a
 * random C0 to start from; copy_c gives a fresh copy of C0. */
typedef struct gemm_case {
    int m, n, k, lda, ldb, ldc;
    bool ta, tb;
    float *A, *B, *C0;
} gemm_case;

static gemm_case gemm_case_new(int m, int n, int k, int t) {
    gemm_case g = {.m = m, .n = n, .k = k, .ta = t & 1, .tb = t & 2};
    g.lda = (g.ta ? m : k) + 3, g.ldb = (g.tb ? k : n) + 1, g.ldc = n + 2;
    g.A = randn((size_t)(g.ta ? k : m) * g.lda, 1), g.B = randn((size_t)(g.tb ? n : k) * g.ldb, 1);
    g.C0 = randn((size_t)m * g.ldc, 1);
    return g;
}

static float *copy_c(const gemm_case *g) {
    float *c = vs_malloc(sizeof(float) * g->m * g->ldc);
    VT_REQUIRE(c, "alloc");
    memcpy(c, g->C0, sizeof(float) * g->m * g->ldc);
    return c;
}

static void gemm_case_free(gemm_case *g) { vs_free(g->A), vs_free(g->B), vs_free(g->C0); }

static void test_sgemm(vs_threadpool *tp) {
    static const int dims[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 9}, {70, 300, 270}, {129, 65, 513}};
    double worst = 0;
    for (size_t d = 0; d < VS_ARRAY_LEN(dims); d++)
        for (int t = 0; t < 4; t++) {
            gemm_case g = gemm_case_new(dims[d][0], dims[d][1], dims[d][2], t);
            const int m = g.m, n = g.n, k = g.k, lda = g.lda, ldb = g.ldb, ldc = g.ldc;
            const bool ta = g.ta, tb = g.tb;
            const float *A = g.A, *B = g.B, *C0 = g.C0;
            float *C1 = copy_c(&g), *C2 = copy_c(&g), *C3 = copy_c(&g);
            float alpha = 0.75f, beta = d % 2 ? 0.5f : 0.0f;
            vs_train_sgemm_ref(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C1, ldc);
            vs_train_sgemm_blocked(tp, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C2, ldc);
            vs_train_sgemm(tp, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C3, ldc);
            double mx = 0, e2 = 0, e3 = 0;
            bool pad_ok = true;
            for (int i = 0; i < m; i++) {
                for (int j = 0; j < n; j++) {
                    size_t o = (size_t)i * ldc + j;
                    mx = fmax(mx, fabs(C1[o]));
                    e2 = fmax(e2, fabs(C2[o] - C1[o]));
                    e3 = fmax(e3, fabs(C3[o] - C1[o]));
                }
                for (int j = n; j < ldc; j++) pad_ok &= C2[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j];
            }
            double tol = 1e-6 * sqrt((double)k) * (mx > 1 ? mx : 1) + 1e-6;
            VT_CHECK(e2 <= tol, "sgemm blocked %dx%dx%d ta=%d tb=%d err %g", m, n, k, ta, tb, e2);
            VT_CHECK(e3 <= tol, "sgemm %s %dx%dx%d ta=%d tb=%d err %g", vs_train_sgemm_backend(), m, n, k,
                     ta, tb, e3);
            VT_CHECK(pad_ok, "sgemm blocked wrote past n in a row of C");
            worst = fmax(worst, fmax(e2, e3) / (mx > 1 ? mx : 1));
            gemm_case_free(&g), vs_free(C1), vs_free(C2), vs_free(C3);
        }
    printf("sgemm (%s and blocked) vs reference: worst relative error %.2e\n", vs_train_sgemm_backend(),
           worst);
}

/* A bf16 product (amx-bf16x3 or avx512-bf16) vs the double reference: |err| <= 2^log2_bound * sum_p
 * |a_ip b_pj| + 1e-6 per element, on shapes with every edge case (rows, columns and depth that are and
 * are not multiples of the register and tile blocks and of the 256-deep slice, several 1024-column
 * panels), every transpose, alpha, beta 0 / 0.5 / 1, padded strides; columns past n stay untouched, C's
 * old contents are not read when beta is 0, and the result has the same bits with 1 and 2 threads. */
typedef void (*sgemm_fn)(vs_threadpool *, bool, bool, int, int, int, float, const float *, int, const float *,
                         int, float, float *, int);
static void test_sgemm_bf16_path(vs_threadpool *tp, const char *name, sgemm_fn fn, int log2_bound) {
    static const int dims[][3] = {{1, 1, 1},   {3, 5, 7},     {16, 16, 32},  {32, 32, 32}, {33, 31, 65},
                                  {70, 300, 270}, {129, 65, 513}, {64, 600, 1100}, {300, 48, 40}, {9, 1100, 17}};
    double worst = 0;
    for (size_t d = 0; d < VS_ARRAY_LEN(dims); d++)
        for (int t = 0; t < 4; t++) {
            gemm_case g = gemm_case_new(dims[d][0], dims[d][1], dims[d][2], t);
            const int m = g.m, n = g.n, k = g.k, lda = g.lda, ldb = g.ldb, ldc = g.ldc;
            const bool ta = g.ta, tb = g.tb;
            const float *A = g.A, *B = g.B, *C0 = g.C0;
            float *C1 = copy_c(&g), *C2 = copy_c(&g), *C3 = copy_c(&g);
            float alpha = d % 3 ? 0.75f : 1.0f, beta = d % 3 == 0 ? 0.0f : d % 3 == 1 ? 0.5f : 1.0f;
            if (beta == 0.0f) /* C's old contents must not be read: NaN there stays out of the result */
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++)
                        C1[(size_t)i * ldc + j] = C2[(size_t)i * ldc + j] = C3[(size_t)i * ldc + j] = NAN;
            vs_train_sgemm_ref(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C1, ldc);
            fn(tp, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C2, ldc);
            fn(NULL, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C3, ldc);
            int bad = 0;
            bool pad_ok = true, same = true;
            for (int i = 0; i < m; i++) {
                for (int j = 0; j < n; j++) {
                    double s = 0;
                    for (int p = 0; p < k; p++) {
                        double a = ta ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p];
                        double b = tb ? B[(size_t)j * ldb + p] : B[(size_t)p * ldb + j];
                        s += fabs(a * b);
                    }
                    size_t o = (size_t)i * ldc + j;
                    double e = fabs((double)C2[o] - (double)C1[o]);
                    double bound = ldexp(fabs(alpha) * s, log2_bound) + 1e-6;
                    bad += !(e <= bound);
                    worst = fmax(worst, e / (fabs(alpha) * s + 1e-30));
                    same &= memcmp(&C2[o], &C3[o], sizeof(float)) == 0;
                }
                for (int j = n; j < ldc; j++) pad_ok &= C2[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j];
            }
            VT_CHECK(bad == 0, "sgemm %s %dx%dx%d ta=%d tb=%d: %d elements off", name, m, n, k, ta, tb, bad);
            VT_CHECK(pad_ok, "sgemm %s wrote past n in a row of C", name);
            VT_CHECK(same, "sgemm %s %dx%dx%d ta=%d tb=%d: 1 and 2 threads differ", name, m, n, k, ta, tb);
            gemm_case_free(&g), vs_free(C1), vs_free(C2), vs_free(C3);
        }
    printf("sgemm %s vs reference: worst error / sum |a b| = %.2e (bound 2^%d = %.2e)\n", name, worst, log2_bound,
           ldexp(1, log2_bound));
}

static void test_sgemm_amx(vs_threadpool *tp) {
    if (!vs_train_amx_available()) {
        printf("sgemm amx-bf16x3: not run (no AMX-BF16 on this CPU)\n");
        return;
    }
    test_sgemm_bf16_path(tp, "amx-bf16x3", vs_train_sgemm_amx, -14); /* the split's bound is about 2^-15 */
}

/* One bf16 rounding per operand (2^-9 each) and f32 sums: 2^-7 per term is a safe bound. */
static void test_sgemm_bf16(vs_threadpool *tp) {
    if (!vs_train_bf16_available()) {
        printf("sgemm avx512-bf16: not run (no AVX512-BF16 on this CPU, or capped by VLMSPEC_ISA)\n");
        return;
    }
    test_sgemm_bf16_path(tp, "avx512-bf16", vs_train_sgemm_bf16, -7);
    VT_CHECK(vs_train_set_gemm("avx512-bf16") && !strcmp(vs_train_sgemm_backend(), "avx512-bf16"), "select");
    VT_CHECK(vs_train_set_gemm("default"), "back to the default");
}

/* The attention output and gradients are the same with 1 and 2 threads (fixed reduction order). */
static void test_thread_invariance(vs_threadpool *tp) {
    int B = 3, T = 6, H = 4, KVH = 2, D = 8;
    size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * KVH * D, na = (size_t)B * H * T * T;
    float *q = randn(nq, 1), *k = randn(nk, 1), *v = randn(nk, 1), *dout = randn(nq, 1);
    float *o[2], *a[2], *dq[2], *dk[2], *dv[2], *datt = zeros(na);
    for (int r = 0; r < 2; r++) {
        o[r] = zeros(nq), a[r] = zeros(na), dq[r] = zeros(nq), dk[r] = zeros(nk), dv[r] = zeros(nk);
        vs_threadpool *p = r ? tp : NULL;
        vs_train_self_attention_forward(p, o[r], a[r], q, k, v, B, T, H, KVH, D, true);
        vs_train_self_attention_backward(p, dq[r], dk[r], dv[r], datt, dout, a[r], q, k, v, B, T, H, KVH, D,
                                         true);
    }
    VT_CHECK(memcmp(o[0], o[1], nq * 4) == 0 && memcmp(dq[0], dq[1], nq * 4) == 0 &&
                 memcmp(dk[0], dk[1], nk * 4) == 0 && memcmp(dv[0], dv[1], nk * 4) == 0,
             "attention results depend on the thread count");
    for (int r = 0; r < 2; r++) vs_free(o[r]), vs_free(a[r]), vs_free(dq[r]), vs_free(dk[r]), vs_free(dv[r]);
    vs_free(q), vs_free(k), vs_free(v), vs_free(dout), vs_free(datt);
}

/* One attention case for the path comparisons: inputs for a (B, Tq, Tk, H, KVH, D) shape and a mask
 * (mode 0 causal, 1 bidirectional, 2 cross-attention with kv_len rows of 0..Tk+1), and the gradients'
 * nonzero starting values. att_case_run runs the forward and backward into fresh output buffers. */
typedef struct att_case {
    int B, Tq, Tk, H, KVH, D, mode;
    size_t nq, nk, na;
    int32_t *kv_len;
    float *q, *k, *v, *dout, *dq0, *dk0, *dv0, *datt;
} att_case;

typedef struct att_out {
    float *o, *a, *dq, *dk, *dv;
} att_out;

static void att_case_init(att_case *c, const int shape[6], int mode) {
    c->B = shape[0], c->Tq = shape[1], c->Tk = mode == 2 ? shape[2] : shape[1];
    c->H = shape[3], c->KVH = shape[4], c->D = shape[5], c->mode = mode;
    c->nq = (size_t)c->B * c->Tq * c->H * c->D, c->nk = (size_t)c->B * c->Tk * c->KVH * c->D;
    c->na = (size_t)c->B * c->H * c->Tq * c->Tk;
    c->kv_len = vs_malloc(sizeof(int32_t) * (size_t)c->B * c->Tq);
    for (int i = 0; i < c->B * c->Tq; i++) c->kv_len[i] = (i * 7 + 3) % (c->Tk + 2); /* 0..Tk+1 */
    c->q = randn(c->nq, 1), c->k = randn(c->nk, 1), c->v = randn(c->nk, 1), c->dout = randn(c->nq, 1);
    c->dq0 = randn(c->nq, 1), c->dk0 = randn(c->nk, 1), c->dv0 = randn(c->nk, 1), c->datt = zeros(c->na);
}

static att_out att_case_run(const att_case *c, vs_threadpool *tp) {
    att_out r = {zeros(c->nq), zeros(c->na), zeros(c->nq), zeros(c->nk), zeros(c->nk)};
    memcpy(r.dq, c->dq0, c->nq * 4), memcpy(r.dk, c->dk0, c->nk * 4), memcpy(r.dv, c->dv0, c->nk * 4);
    for (size_t i = 0; i < c->na; i++) r.a[i] = NAN; /* every entry must be written */
    if (c->mode == 2) {
        vs_train_cross_attention_forward(tp, r.o, r.a, c->q, c->k, c->v, c->kv_len, c->B, c->Tq, c->Tk, c->H,
                                         c->KVH, c->D);
        vs_train_cross_attention_backward(tp, r.dq, r.dk, r.dv, c->datt, c->dout, r.a, c->q, c->k, c->v,
                                          c->kv_len, c->B, c->Tq, c->Tk, c->H, c->KVH, c->D);
    } else {
        vs_train_self_attention_forward(tp, r.o, r.a, c->q, c->k, c->v, c->B, c->Tq, c->H, c->KVH, c->D,
                                        c->mode == 0);
        vs_train_self_attention_backward(tp, r.dq, r.dk, r.dv, c->datt, c->dout, r.a, c->q, c->k, c->v, c->B,
                                         c->Tq, c->H, c->KVH, c->D, c->mode == 0);
    }
    return r;
}

static bool att_out_same(const att_case *c, const att_out *x, const att_out *y) {
    return memcmp(x->o, y->o, c->nq * 4) == 0 && memcmp(x->a, y->a, c->na * 4) == 0 &&
           memcmp(x->dq, y->dq, c->nq * 4) == 0 && memcmp(x->dk, y->dk, c->nk * 4) == 0 &&
           memcmp(x->dv, y->dv, c->nk * 4) == 0;
}

static void att_out_free(att_out *r) {
    vs_free(r->o), vs_free(r->a), vs_free(r->dq), vs_free(r->dk), vs_free(r->dv);
}

static void att_case_free(att_case *c) {
    vs_free(c->q), vs_free(c->k), vs_free(c->v), vs_free(c->dout), vs_free(c->dq0), vs_free(c->dk0);
    vs_free(c->dv0), vs_free(c->datt), vs_free(c->kv_len);
}

/* The attention's AVX path (four query rows at a time) gives the bits of the plain path: for each
 * mask, shapes with head sizes that are and are not multiples of 8, query counts that are not
 * multiples of 4, GQA, kv_len with empty rows, gradients accumulated onto nonzero values. */
static void test_attention_paths(vs_threadpool *tp) {
    if (vs_isa_detect() < VS_ISA_AVX2) {
        printf("attention AVX path: not run (no AVX2 on this CPU)\n");
        return;
    }
    static const int shapes[][6] = {/* B, Tq, Tk, H, KVH, D */
                                    {2, 13, 13, 4, 2, 64}, {1, 9, 9, 2, 1, 20}, {3, 7, 7, 3, 3, 5},
                                    {2, 11, 6, 4, 1, 16}, {1, 4, 4, 1, 1, 8}};
    vs_isa cap = vs_isa_active();
    int n_ok = 0, n_run = 0;
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
        for (int mode = 0; mode < 3; mode++) {
            att_case c;
            att_case_init(&c, shapes[si], mode);
            att_out r[2];
            for (int i = 0; i < 2; i++) {
                vs_isa_set_max(i ? cap : VS_ISA_SCALAR);
                r[i] = att_case_run(&c, tp);
            }
            vs_isa_set_max(cap);
            bool same = att_out_same(&c, &r[0], &r[1]);
            VT_CHECK(same, "attention AVX path differs from the plain path (mode %d, B %d Tq %d Tk %d H %d "
                     "KVH %d D %d)", mode, c.B, c.Tq, c.Tk, c.H, c.KVH, c.D);
            n_ok += same, n_run++;
            att_out_free(&r[0]), att_out_free(&r[1]), att_case_free(&c);
        }
    printf("attention AVX path vs plain path: %d/%d cases bitwise equal\n", n_ok, n_run);
}

/* The gemm attention path (AMX-BF16 products per head and 128-row block) against the direct one: for
 * each mask, shapes with several row blocks and a partial one, head sizes that are not multiples of 16,
 * GQA, kv_len with empty and over-long rows, gradients accumulated onto nonzero values. Each output
 * tensor's worst error, as a share of its largest magnitude, stays under 1e-4; masked probabilities and
 * the outputs of rows that see no key are exactly 0; 1 and 2 threads give the same bits. */
static float worst_rel(const float *x, const float *ref, size_t n) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)x[i] - ref[i]));
        m = fmax(m, fabs((double)ref[i]));
    }
    return (float)(m > 0 ? e / m : e);
}

static void test_attention_gemm(vs_threadpool *tp) {
    if (!vs_train_amx_available()) {
        printf("attention gemm path: not run (no AMX-BF16 on this CPU)\n");
        return;
    }
    static const int shapes[][6] = {/* B, Tq, Tk, H, KVH, D */
                                    {2, 300, 300, 4, 2, 64}, {1, 130, 70, 3, 3, 20}, {3, 7, 9, 2, 1, 8},
                                    {1, 257, 129, 8, 4, 32}};
    double worst = 0;
    int n_run = 0;
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
        for (int mode = 0; mode < 3; mode++) {
            att_case c;
            att_case_init(&c, shapes[si], mode);
            att_out r[3];
            for (int i = 0; i < 3; i++) { /* direct; gemm with tp; gemm with one thread */
                VT_REQUIRE(vs_train_set_attention(i ? "gemm" : "direct"), "vs_train_set_attention");
                VT_CHECK(!strcmp(vs_train_attention_backend(), i ? "gemm" : "direct"), "attention backend");
                r[i] = att_case_run(&c, i == 2 ? NULL : tp);
            }
            VT_REQUIRE(vs_train_set_attention("auto"), "vs_train_set_attention auto");
            float e[5] = {worst_rel(r[1].o, r[0].o, c.nq), worst_rel(r[1].a, r[0].a, c.na),
                          worst_rel(r[1].dq, r[0].dq, c.nq), worst_rel(r[1].dk, r[0].dk, c.nk),
                          worst_rel(r[1].dv, r[0].dv, c.nk)};
            bool close = true, zeros_ok = true;
            for (int i = 0; i < 5; i++) close &= e[i] <= 1e-4f, worst = fmax(worst, e[i]);
            for (size_t i = 0; i < c.na; i++) zeros_ok &= (r[0].a[i] == 0.0f) == (r[1].a[i] == 0.0f);
            for (size_t i = 0; i < c.nq; i++) zeros_ok &= (r[0].o[i] == 0.0f) == (r[1].o[i] == 0.0f);
            VT_CHECK(close, "attention gemm path vs direct (mode %d, B %d Tq %d Tk %d H %d KVH %d D %d): "
                     "out %.2e att %.2e dq %.2e dk %.2e dv %.2e",
                     mode, c.B, c.Tq, c.Tk, c.H, c.KVH, c.D, e[0], e[1], e[2], e[3], e[4]);
            VT_CHECK(zeros_ok, "attention gemm path: masked probabilities or empty rows are not exactly 0 "
                     "(mode %d, shape %zu)", mode, si);
            VT_CHECK(att_out_same(&c, &r[1], &r[2]),
                     "attention gemm path depends on the thread count (mode %d, shape %zu)", mode, si);
            n_run++;
            for (int i = 0; i < 3; i++) att_out_free(&r[i]);
            att_case_free(&c);
        }
    printf("attention gemm path vs direct: %d cases, worst error / largest magnitude %.2e (bound 1e-4)\n",
           n_run, worst);
}

/* The threaded twins (vs_train_*_tp) give the plain functions' bits, accumulating onto nonzero
 * values, with row counts and widths that split unevenly. */
static bool same_f(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

static void test_threaded_twins(vs_threadpool *tp) {
    int N = 67, C = 200, H = 5, D = 40, V = 97;
    size_t n = (size_t)N * C;
    float *x = randn(n, 1), *y = randn(n, 1), *z = randn(n, 1), *w = randn((size_t)C, 1);
    float *o[2], *o2[2], *r[2];
    static const float extreme[8] = {-100.0f, 100.0f, 88.7f, -88.7f, 0.0f, -0.0f, 1e-30f, -1e-30f};
    for (int i = 0; i < 8; i++) x[100 * i + 3] = extreme[i]; /* sigmoid saturation and signed zeros */
    for (int k = 0; k < 2; k++) o[k] = randn(n, 1), o2[k] = randn(n, 1), r[k] = zeros((size_t)N);
    memcpy(o[1], o[0], n * 4), memcpy(o2[1], o2[0], n * 4);
    vs_train_swiglu_forward(o[0], x, y, n);
    vs_train_swiglu_forward_tp(tp, o[1], x, y, n);
    VT_CHECK(same_f(o[0], o[1], n), "swiglu forward: threaded twin differs");
    vs_train_swiglu_backward(o[0], o2[0], z, x, y, n);
    vs_train_swiglu_backward_tp(tp, o[1], o2[1], z, x, y, n);
    VT_CHECK(same_f(o[0], o[1], n) && same_f(o2[0], o2[1], n), "swiglu backward: threaded twin differs");
    vs_train_add_forward(o[0], x, y, n);
    vs_train_add_forward_tp(tp, o[1], x, y, n);
    VT_CHECK(same_f(o[0], o[1], n), "add forward: threaded twin differs");
    vs_train_rmsnorm_forward(o[0], r[0], x, w, N, C, 1e-5f);
    vs_train_rmsnorm_forward_tp(tp, o[1], r[1], x, w, N, C, 1e-5f);
    VT_CHECK(same_f(o[0], o[1], n) && same_f(r[0], r[1], (size_t)N),
             "rmsnorm forward: threaded twin differs");
    float *dw[2] = {randn((size_t)C, 1), zeros((size_t)C)};
    memcpy(dw[1], dw[0], (size_t)C * 4);
    vs_train_rmsnorm_backward(o2[0], dw[0], z, x, w, r[0], N, C);
    vs_train_rmsnorm_backward_tp(tp, o2[1], dw[1], z, x, w, r[1], N, C);
    VT_CHECK(same_f(o2[0], o2[1], n) && same_f(dw[0], dw[1], (size_t)C),
             "rmsnorm backward: threaded twin differs");
    int32_t *pos = vs_malloc(sizeof(int32_t) * (size_t)N), *tg = vs_malloc(sizeof(int32_t) * (size_t)N);
    for (int i = 0; i < N; i++) pos[i] = (i * 13) % 50, tg[i] = (i * 31) % V;
    float *cs = zeros((size_t)50 * D);
    vs_train_rope_table(cs, 50, D, 10000.0f);
    vs_train_rope_forward(o[0], x, cs, pos, N, H, D); /* N x (H*D) = N x 200 */
    vs_train_rope_forward_tp(tp, o[1], x, cs, pos, N, H, D);
    VT_CHECK(same_f(o[0], o[1], n), "rope forward: threaded twin differs");
    vs_train_rope_backward(o2[0], z, cs, pos, N, H, D);
    vs_train_rope_backward_tp(tp, o2[1], z, cs, pos, N, H, D);
    VT_CHECK(same_f(o2[0], o2[1], n), "rope backward: threaded twin differs");
    vs_train_zero_tp(tp, o[1], n);
    bool zero_ok = true;
    for (size_t i = 0; i < n; i++) zero_ok &= o[1][i] == 0.0f;
    VT_CHECK(zero_ok, "zero: threaded twin left a nonzero value");
    size_t nv = (size_t)N * V;
    float *lg = randn(nv, 3), *lw = randn((size_t)N, 1), *pr[2] = {zeros(nv), zeros(nv)};
    float *dl[2] = {randn(nv, 1), zeros(nv)};
    memcpy(dl[1], dl[0], nv * 4);
    for (int i = 0; i < N; i += 5) lw[i] = 0.0f;
    double l0 = vs_train_xent_forward(pr[0], lg, tg, lw, N, V);
    double l1 = vs_train_xent_forward_tp(tp, pr[1], lg, tg, lw, N, V);
    VT_CHECK(memcmp(&l0, &l1, sizeof(l0)) == 0 && same_f(pr[0], pr[1], nv),
             "xent forward: threaded twin differs");
    vs_train_xent_backward(dl[0], pr[0], tg, lw, 0.7f, N, V);
    vs_train_xent_backward_tp(tp, dl[1], pr[1], tg, lw, 0.7f, N, V);
    VT_CHECK(same_f(dl[0], dl[1], nv), "xent backward: threaded twin differs");
    for (int k = 0; k < 2; k++)
        vs_free(o[k]), vs_free(o2[k]), vs_free(r[k]), vs_free(dw[k]), vs_free(pr[k]), vs_free(dl[k]);
    vs_free(x), vs_free(y), vs_free(z), vs_free(w), vs_free(pos), vs_free(tg), vs_free(cs), vs_free(lg);
    vs_free(lw);
    printf("threaded twins (%d threads) vs plain functions: compared bit for bit\n", vs_threadpool_size(tp));
}

int main(void) {
    vs_rng_seed(&g_rng, 1234);
    vs_error err = {0};
    vs_threadpool *tp = vs_threadpool_new(2, &err);
    VT_REQUIRE(tp, "threadpool: %s", err.msg);

    printf("gradient checks (central differences, h = %g, tolerance %g):\n", FD_EPS, GRAD_TOL);
    test_linear(tp, true);
    test_linear(NULL, false);
    test_embed();
    test_norm(false);
    test_norm(true);
    test_add();
    test_rope();
    test_attention(tp, 0);
    test_attention(NULL, 1);
    test_attention(tp, 2);
    for (int k = 0; k < 4; k++) test_activation(k);
    test_activation_values();
    test_patch_embed(tp);
    test_vit_embed();
    test_drop_cls();
    test_pool_grid(4, 2);
    test_pool_grid(5, 2);
    test_pool_grid(5, 3);
    for (int k = 0; k < 4; k++) test_loss(k);
    test_norm_cap();
    test_attn_ground(tp);
    printf("worst relative error over all ops: %.2e\n", g_worst);
    test_sgemm(tp);
    test_sgemm_amx(tp);
    test_sgemm_bf16(tp);
    test_thread_invariance(tp);
    test_attention_paths(tp);
    test_attention_paths(NULL);
    test_attention_gemm(tp);
    test_threaded_twins(tp);

    vs_threadpool_free(tp);
    return vt_finish("train_grad");
}
