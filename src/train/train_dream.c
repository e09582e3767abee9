/* train_dream: the DREAM draft model's training forward and backward (see train_dream.h). */
#include "train_dream.h"

#include <math.h>
#include <string.h>

#include "kernels.h"

/* tensor indices (the order of draft_dream.h): blocks 1 and 3 start at T_B1 / T_B3 with the nine tensors
 * of a LLaMA block; the cross-attention block's thirteen start at T_X */
enum { T_B1 = 0, T_X = 9, T_B3 = 22, T_FIN = 31 };
enum { B_AN, B_Q, B_K, B_V, B_O, B_FN, B_GATE, B_UP, B_DOWN };
enum { X_AN, X_Q, X_K, X_V, X_O, X_QN, X_KN, X_AG, X_FN, X_GATE, X_UP, X_DOWN, X_FG };

/* A self-attention block's activations (N rows). */
typedef struct blk {
    float *in;               /* (N, C) the block's input (the caller's buffer) */
    float *ln1, *r1;         /* (N, C), (N) */
    float *q, *k, *v;        /* (N, HD), (N, KVD) x2; q, k after RoPE */
    float *att, *atty;       /* (B, H, T, T), (N, HD) */
    float *res1, *ln2, *r2;  /* (N, C), (N, C), (N) */
    float *gate, *up, *hmid; /* (N, F) */
    float *out;              /* (N, C) */
} blk;

struct vs_train_dream {
    vs_dream_shape s;
    const float *lm_head; /* (V, C), borrowed */
    int max_B, max_T;
    int C, H, KVH, D, HD, KVD, F, V;
    vs_train_params params;
    float *w[VS_DREAM_N_TENSORS], *g[VS_DREAM_N_TENSORS];
    float *arena;
    float *x0;           /* (N, C) the inputs */
    blk b1, b3;
    /* block 2 */
    float *xln, *xr1;    /* (N, C), (N) */
    float *qraw, *qn, *qrs;  /* (N, HD) x2, (N H) */
    float *kin;          /* (N, C) features + noise */
    float *kraw, *kn, *krs, *xv; /* (N, KVD) x2, (N KVH), (N, KVD) */
    float *xatt, *xatty; /* (B, H, T, T), (N, HD) */
    float *o, *x2;       /* (N, C): the attention branch before its gate, the residual after it */
    float *fln, *fr;     /* (N, C), (N) */
    float *xgate, *xup, *xhmid; /* (N, F) */
    float *mo, *x2b;     /* (N, C): the MLP branch before its gate, the block's output */
    float *dn, *fr3;     /* (N, C) draft features, (N) */
    float *tmp;          /* (N, C) */
    float *rope_cs;
    int32_t *pos, *kv_len; /* (N) */
    /* counted rows, M <= N */
    int32_t *idx;
    float *lw, *pred, *tgt, *mpred, *mtgt; /* (M), (M, C) x4 */
    float *lg, *probs, *tprobs;            /* (M, V) */
    bool has_mid;
    /* gradients */
    float *dpred, *dmpred, *dlg, *dx, *dln, *dtmp;
    float *dq, *dk, *dv, *dqr, *dkr, *datty, *datt;
    float *dgate, *dup, *dh;
    int B, T, M;
    bool have_forward;
};

vs_train_dream *vs_train_dream_new(const vs_dream_shape *shape, const float *lm_head, int max_B, int max_T,
                                   vs_error *err) {
    if (vs_dream_shape_check(shape, err)) return NULL;
    if (!lm_head || max_B < 1 || max_T < 1 || max_T > shape->n_ctx) {
        vs_error_set(err, VS_ERR_INVALID, "DREAM training: need the target's LM head and 1 x 1 .. %d rows per batch "
                     "(asked %d x %d)", shape->n_ctx, max_B, max_T);
        return NULL;
    }
    vs_train_dream *m = vs_calloc(1, sizeof(*m));
    if (!m) {
        vs_error_set(err, VS_ERR_NOMEM, "DREAM training: out of memory");
        return NULL;
    }
    m->s = *shape;
    if (m->s.n_head_kv <= 0) m->s.n_head_kv = m->s.n_head;
    m->lm_head = lm_head;
    m->max_B = max_B, m->max_T = max_T;
    m->C = shape->width, m->H = shape->n_head, m->KVH = m->s.n_head_kv, m->D = m->C / m->H;
    m->HD = m->H * m->D, m->KVD = m->KVH * m->D, m->F = shape->n_ff, m->V = shape->n_vocab;
    vs_train_tensor t[VS_DREAM_N_TENSORS];
    for (int i = 0; i < VS_DREAM_N_TENSORS; i++) {
        int64_t ne[2];
        int nd;
        vs_dream_tensor_ne(&m->s, i, ne, &nd);
        vs_train_tensor_from_ne(&t[i], vs_dream_tensor_name(i), ne, nd);
    }
    if (vs_train_params_init(&m->params, t, VS_DREAM_N_TENSORS, err)) {
        vs_free(m);
        return NULL;
    }
    for (int i = 0; i < VS_DREAM_N_TENSORS; i++) {
        m->w[i] = m->params.data + m->params.tensors[i].offset;
        m->g[i] = m->params.grad + m->params.tensors[i].offset;
    }
    const size_t N = (size_t)max_B * max_T, C = m->C, HD = m->HD, KVD = m->KVD, F = m->F, V = m->V;
    const size_t att = (size_t)max_B * m->H * max_T * max_T, NH = N * m->H, NKV = N * m->KVH;
    /* per self-attention block: ln1 r1 q k v att atty res1 ln2 r2 gate up hmid out */
    const size_t blk_sz[] = {N * C, N, N * HD, N * KVD, N * KVD, att, N * HD, N * C, N * C, N, N * F, N * F, N * F,
                             N * C};
    const size_t rest[] = {N * C, /* x0 */
                           N * C, N, N * HD, N * HD, NH, N * C, N * KVD, N * KVD, NKV, N * KVD, att, N * HD, N * C,
                           N * C, N * C, N, N * F, N * F, N * F, N * C, N * C, N * C, N, N * C,
                           (size_t)max_T * m->D,
                           N, N * C, N * C, N * C, N * C, N * V, N * V, N * V, /* loss rows */
                           N * C, N * C, N * V, N * C, N * C, N * C,            /* dpred dmpred dlg dx dln dtmp */
                           N * HD, N * KVD, N * KVD, N * HD, N * KVD, N * HD, att, N * F, N * F, N * F};
    size_t total = 0;
    for (size_t i = 0; i < VS_ARRAY_LEN(blk_sz); i++) total += 2 * ((blk_sz[i] + 15) & ~(size_t)15);
    for (size_t i = 0; i < VS_ARRAY_LEN(rest); i++) total += (rest[i] + 15) & ~(size_t)15;
    m->arena = vs_malloc(total * sizeof(float));
    m->pos = vs_malloc(N * sizeof(int32_t));
    m->kv_len = vs_malloc(N * sizeof(int32_t));
    m->idx = vs_malloc(N * sizeof(int32_t));
    if (!m->arena || !m->pos || !m->kv_len || !m->idx) {
        vs_error_set(err, VS_ERR_NOMEM, "DREAM training: cannot allocate %zu MiB of activations for %d x %d rows",
                     total * sizeof(float) >> 20, max_B, max_T);
        vs_train_dream_free(m);
        return NULL;
    }
    float *c = m->arena;
    blk *bs[2] = {&m->b1, &m->b3};
    for (int i = 0; i < 2; i++) {
        blk *b = bs[i];
        b->ln1 = vs_train_take(&c, N * C), b->r1 = vs_train_take(&c, N), b->q = vs_train_take(&c, N * HD), b->k = vs_train_take(&c, N * KVD);
        b->v = vs_train_take(&c, N * KVD), b->att = vs_train_take(&c, att), b->atty = vs_train_take(&c, N * HD), b->res1 = vs_train_take(&c, N * C);
        b->ln2 = vs_train_take(&c, N * C), b->r2 = vs_train_take(&c, N), b->gate = vs_train_take(&c, N * F), b->up = vs_train_take(&c, N * F);
        b->hmid = vs_train_take(&c, N * F), b->out = vs_train_take(&c, N * C);
    }
    m->x0 = vs_train_take(&c, N * C);
    m->xln = vs_train_take(&c, N * C), m->xr1 = vs_train_take(&c, N), m->qraw = vs_train_take(&c, N * HD), m->qn = vs_train_take(&c, N * HD);
    m->qrs = vs_train_take(&c, NH), m->kin = vs_train_take(&c, N * C), m->kraw = vs_train_take(&c, N * KVD), m->kn = vs_train_take(&c, N * KVD);
    m->krs = vs_train_take(&c, NKV), m->xv = vs_train_take(&c, N * KVD), m->xatt = vs_train_take(&c, att), m->xatty = vs_train_take(&c, N * HD);
    m->o = vs_train_take(&c, N * C), m->x2 = vs_train_take(&c, N * C), m->fln = vs_train_take(&c, N * C), m->fr = vs_train_take(&c, N);
    m->xgate = vs_train_take(&c, N * F), m->xup = vs_train_take(&c, N * F), m->xhmid = vs_train_take(&c, N * F), m->mo = vs_train_take(&c, N * C);
    m->x2b = vs_train_take(&c, N * C), m->dn = vs_train_take(&c, N * C), m->fr3 = vs_train_take(&c, N), m->tmp = vs_train_take(&c, N * C);
    m->rope_cs = vs_train_take(&c, (size_t)max_T * m->D);
    m->lw = vs_train_take(&c, N), m->pred = vs_train_take(&c, N * C), m->tgt = vs_train_take(&c, N * C), m->mpred = vs_train_take(&c, N * C);
    m->mtgt = vs_train_take(&c, N * C), m->lg = vs_train_take(&c, N * V), m->probs = vs_train_take(&c, N * V), m->tprobs = vs_train_take(&c, N * V);
    m->dpred = vs_train_take(&c, N * C), m->dmpred = vs_train_take(&c, N * C), m->dlg = vs_train_take(&c, N * V), m->dx = vs_train_take(&c, N * C);
    m->dln = vs_train_take(&c, N * C), m->dtmp = vs_train_take(&c, N * C);
    m->dq = vs_train_take(&c, N * HD), m->dk = vs_train_take(&c, N * KVD), m->dv = vs_train_take(&c, N * KVD), m->dqr = vs_train_take(&c, N * HD);
    m->dkr = vs_train_take(&c, N * KVD), m->datty = vs_train_take(&c, N * HD), m->datt = vs_train_take(&c, att);
    m->dgate = vs_train_take(&c, N * F), m->dup = vs_train_take(&c, N * F), m->dh = vs_train_take(&c, N * F);
    vs_train_rope_table(m->rope_cs, max_T, m->D, m->s.rope_base);
    return m;
}

void vs_train_dream_free(vs_train_dream *m) {
    if (!m) return;
    vs_train_params_free(&m->params);
    vs_free(m->arena), vs_free(m->pos), vs_free(m->kv_len), vs_free(m->idx);
    vs_free(m);
}

const vs_dream_shape *vs_train_dream_shape(const vs_train_dream *m) { return &m->s; }
vs_train_params *vs_train_dream_params(vs_train_dream *m) { return &m->params; }
const float *vs_train_dream_pred(const vs_train_dream *m) { return m->dn; }
const float *vs_train_dream_mid_out(const vs_train_dream *m) { return m->x2b; }

void vs_train_dream_init(vs_train_dream *m, uint64_t seed) {
    vs_rng rng;
    vs_rng_seed(&rng, seed);
    for (int i = 0; i < VS_DREAM_N_TENSORS; i++) {
        const vs_train_tensor *t = &m->params.tensors[i];
        const bool gate = i == T_X + X_AG || i == T_X + X_FG, norm = vs_dream_tensor_is_norm(i);
        for (size_t j = 0; j < t->numel; j++) m->w[i][j] = gate ? 0.0f : norm ? 1.0f : 0.02f * vs_rng_normal(&rng);
    }
}

vs_status vs_train_dream_export(const vs_train_dream *m, const float probe[VS_MSD_PROBE], vs_type mat_type,
                                const char *path, vs_error *err) {
    const float *data[VS_DREAM_N_TENSORS];
    for (int i = 0; i < VS_DREAM_N_TENSORS; i++) data[i] = m->w[i];
    return vs_dream_head_write(&m->s, probe, data, mat_type, "vlmspec-dream", path, err);
}

/* A LLaMA decoder block over b->in (set by the caller) into b->out; w: its nine tensors. */
static void blk_forward(vs_train_dream *m, vs_threadpool *tp, blk *b, float *const *w) {
    const int N = m->B * m->T, C = m->C, H = m->H, KVH = m->KVH, D = m->D, HD = m->HD, KVD = m->KVD, F = m->F;
    vs_train_rmsnorm_forward_tp(tp, b->ln1, b->r1, b->in, w[B_AN], N, C, m->s.rms_eps);
    vs_train_linear_forward(tp, b->q, b->ln1, w[B_Q], NULL, N, C, HD);
    vs_train_linear_forward(tp, b->k, b->ln1, w[B_K], NULL, N, C, KVD);
    vs_train_linear_forward(tp, b->v, b->ln1, w[B_V], NULL, N, C, KVD);
    vs_train_rope_forward_tp(tp, b->q, b->q, m->rope_cs, m->pos, N, H, D);
    vs_train_rope_forward_tp(tp, b->k, b->k, m->rope_cs, m->pos, N, KVH, D);
    vs_train_self_attention_forward(tp, b->atty, b->att, b->q, b->k, b->v, m->B, m->T, H, KVH, D, true);
    vs_train_linear_forward(tp, m->tmp, b->atty, w[B_O], NULL, N, HD, C);
    vs_train_add_forward_tp(tp, b->res1, b->in, m->tmp, (size_t)N * C);
    vs_train_rmsnorm_forward_tp(tp, b->ln2, b->r2, b->res1, w[B_FN], N, C, m->s.rms_eps);
    vs_train_linear_forward(tp, b->gate, b->ln2, w[B_GATE], NULL, N, C, F);
    vs_train_linear_forward(tp, b->up, b->ln2, w[B_UP], NULL, N, C, F);
    vs_train_swiglu_forward_tp(tp, b->hmid, b->gate, b->up, (size_t)N * F);
    vs_train_linear_forward(tp, m->tmp, b->hmid, w[B_DOWN], NULL, N, F, C);
    vs_train_add_forward_tp(tp, b->out, b->res1, m->tmp, (size_t)N * C);
}

static void zero(vs_threadpool *tp, float *x, size_t n) { vs_train_zero_tp(tp, x, n); }

/* A block's backward in place: m->dx holds d(out) and becomes d(in). */
static void blk_backward(vs_train_dream *m, vs_threadpool *tp, blk *b, float *const *w, float *const *g) {
    const int N = m->B * m->T, C = m->C, H = m->H, KVH = m->KVH, D = m->D, HD = m->HD, KVD = m->KVD, F = m->F;
    zero(tp, m->dh, (size_t)N * F);
    vs_train_linear_backward(tp, m->dh, g[B_DOWN], NULL, m->dx, b->hmid, w[B_DOWN], N, F, C);
    zero(tp, m->dgate, (size_t)N * F);
    zero(tp, m->dup, (size_t)N * F);
    vs_train_swiglu_backward_tp(tp, m->dgate, m->dup, m->dh, b->gate, b->up, (size_t)N * F);
    zero(tp, m->dln, (size_t)N * C);
    vs_train_linear_backward(tp, m->dln, g[B_GATE], NULL, m->dgate, b->ln2, w[B_GATE], N, C, F);
    vs_train_linear_backward(tp, m->dln, g[B_UP], NULL, m->dup, b->ln2, w[B_UP], N, C, F);
    vs_train_rmsnorm_backward_tp(tp, m->dx, g[B_FN], m->dln, b->res1, w[B_FN], b->r2, N, C);
    zero(tp, m->datty, (size_t)N * HD);
    vs_train_linear_backward(tp, m->datty, g[B_O], NULL, m->dx, b->atty, w[B_O], N, HD, C);
    zero(tp, m->dq, (size_t)N * HD);
    zero(tp, m->dk, (size_t)N * KVD);
    zero(tp, m->dv, (size_t)N * KVD);
    vs_train_self_attention_backward(tp, m->dq, m->dk, m->dv, m->datt, m->datty, b->att, b->q, b->k, b->v, m->B,
                                     m->T, H, KVH, D, true);
    zero(tp, m->dqr, (size_t)N * HD);
    zero(tp, m->dkr, (size_t)N * KVD);
    vs_train_rope_backward_tp(tp, m->dqr, m->dq, m->rope_cs, m->pos, N, H, D);
    vs_train_rope_backward_tp(tp, m->dkr, m->dk, m->rope_cs, m->pos, N, KVH, D);
    zero(tp, m->dln, (size_t)N * C);
    vs_train_linear_backward(tp, m->dln, g[B_Q], NULL, m->dqr, b->ln1, w[B_Q], N, C, HD);
    vs_train_linear_backward(tp, m->dln, g[B_K], NULL, m->dkr, b->ln1, w[B_K], N, C, KVD);
    vs_train_linear_backward(tp, m->dln, g[B_V], NULL, m->dv, b->ln1, w[B_V], N, C, KVD);
    vs_train_rmsnorm_backward_tp(tp, m->dx, g[B_AN], m->dln, b->in, w[B_AN], b->r1, N, C);
}

/* Block 2 over in (N, C) into m->x2b. */
static void cross_forward(vs_train_dream *m, vs_threadpool *tp, const float *in) {
    const int N = m->B * m->T, C = m->C, H = m->H, KVH = m->KVH, D = m->D, HD = m->HD, KVD = m->KVD, F = m->F;
    float *const *w = m->w + T_X;
    const float ga = tanhf(w[X_AG][0]), gf = tanhf(w[X_FG][0]), eps = m->s.rms_eps;
    vs_train_rmsnorm_forward_tp(tp, m->xln, m->xr1, in, w[X_AN], N, C, eps);
    vs_train_linear_forward(tp, m->qraw, m->xln, w[X_Q], NULL, N, C, HD);
    vs_train_rmsnorm_forward(m->qn, m->qrs, m->qraw, w[X_QN], N * H, D, eps);
    vs_train_linear_forward(tp, m->kraw, m->kin, w[X_K], NULL, N, C, KVD);
    vs_train_rmsnorm_forward(m->kn, m->krs, m->kraw, w[X_KN], N * KVH, D, eps);
    vs_train_linear_forward(tp, m->xv, m->kin, w[X_V], NULL, N, C, KVD);
    vs_train_cross_attention_forward(tp, m->xatty, m->xatt, m->qn, m->kn, m->xv, m->kv_len, m->B, m->T, m->T, H, KVH,
                                     D);
    vs_train_linear_forward(tp, m->o, m->xatty, w[X_O], NULL, N, HD, C);
    for (size_t i = 0; i < (size_t)N * C; i++) m->x2[i] = in[i] + ga * m->o[i];
    vs_train_rmsnorm_forward_tp(tp, m->fln, m->fr, m->x2, w[X_FN], N, C, eps);
    vs_train_linear_forward(tp, m->xgate, m->fln, w[X_GATE], NULL, N, C, F);
    vs_train_linear_forward(tp, m->xup, m->fln, w[X_UP], NULL, N, C, F);
    vs_train_swiglu_forward_tp(tp, m->xhmid, m->xgate, m->xup, (size_t)N * F);
    vs_train_linear_forward(tp, m->mo, m->xhmid, w[X_DOWN], NULL, N, F, C);
    for (size_t i = 0; i < (size_t)N * C; i++) m->x2b[i] = m->x2[i] + gf * m->mo[i];
}

/* Block 2's backward in place: m->dx holds d(x2b) and becomes d(in). */
/* A gated residual y = x + tanh(g) b backwards: the gate's gradient gets (1 - tanh(g)^2) sum(dy b) (summed
 * in double) and db = tanh(g) dy goes to dtmp. */
static void gate_backward(const float *dy, const float *b, float tg, size_t n, float *dtmp, float *dg) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)dy[i] * b[i], dtmp[i] = tg * dy[i];
    *dg += (float)((1.0 - (double)tg * tg) * s);
}

static void cross_backward(vs_train_dream *m, vs_threadpool *tp, const float *in) {
    const int N = m->B * m->T, C = m->C, H = m->H, KVH = m->KVH, D = m->D, HD = m->HD, KVD = m->KVD, F = m->F;
    float *const *w = m->w + T_X, *const *g = m->g + T_X;
    const float ga = tanhf(w[X_AG][0]), gf = tanhf(w[X_FG][0]);
    const size_t NC = (size_t)N * C;
    /* x2b = x2 + tanh(g_f) mo */
    gate_backward(m->dx, m->mo, gf, NC, m->dtmp, &g[X_FG][0]);
    zero(tp, m->dh, (size_t)N * F);
    vs_train_linear_backward(tp, m->dh, g[X_DOWN], NULL, m->dtmp, m->xhmid, w[X_DOWN], N, F, C);
    zero(tp, m->dgate, (size_t)N * F);
    zero(tp, m->dup, (size_t)N * F);
    vs_train_swiglu_backward_tp(tp, m->dgate, m->dup, m->dh, m->xgate, m->xup, (size_t)N * F);
    zero(tp, m->dln, NC);
    vs_train_linear_backward(tp, m->dln, g[X_GATE], NULL, m->dgate, m->fln, w[X_GATE], N, C, F);
    vs_train_linear_backward(tp, m->dln, g[X_UP], NULL, m->dup, m->fln, w[X_UP], N, C, F);
    vs_train_rmsnorm_backward_tp(tp, m->dx, g[X_FN], m->dln, m->x2, w[X_FN], m->fr, N, C);
    /* x2 = in + tanh(g_a) o */
    gate_backward(m->dx, m->o, ga, NC, m->dtmp, &g[X_AG][0]);
    zero(tp, m->datty, (size_t)N * HD);
    vs_train_linear_backward(tp, m->datty, g[X_O], NULL, m->dtmp, m->xatty, w[X_O], N, HD, C);
    zero(tp, m->dq, (size_t)N * HD);
    zero(tp, m->dk, (size_t)N * KVD);
    zero(tp, m->dv, (size_t)N * KVD);
    vs_train_cross_attention_backward(tp, m->dq, m->dk, m->dv, m->datt, m->datty, m->xatt, m->qn, m->kn, m->xv,
                                      m->kv_len, m->B, m->T, m->T, H, KVH, D);
    zero(tp, m->dqr, (size_t)N * HD);
    vs_train_rmsnorm_backward(m->dqr, g[X_QN], m->dq, m->qraw, w[X_QN], m->qrs, N * H, D);
    zero(tp, m->dkr, (size_t)N * KVD);
    vs_train_rmsnorm_backward(m->dkr, g[X_KN], m->dk, m->kraw, w[X_KN], m->krs, N * KVH, D);
    vs_train_linear_backward(tp, NULL, g[X_K], NULL, m->dkr, m->kin, w[X_K], N, C, KVD);
    vs_train_linear_backward(tp, NULL, g[X_V], NULL, m->dv, m->kin, w[X_V], N, C, KVD);
    zero(tp, m->dln, NC);
    vs_train_linear_backward(tp, m->dln, g[X_Q], NULL, m->dqr, m->xln, w[X_Q], N, C, HD);
    vs_train_rmsnorm_backward_tp(tp, m->dx, g[X_AN], m->dln, in, w[X_AN], m->xr1, N, C);
}

vs_status vs_train_dream_forward(vs_train_dream *m, vs_threadpool *tp, const vs_train_dream_batch *b,
                                 vs_train_dream_loss *loss, vs_error *err) {
    m->have_forward = false;
    if (!b || b->B < 1 || b->T < 1 || b->B > m->max_B || b->T > m->max_T || !b->emb || !b->feat || !b->mask)
        return vs_error_set(err, VS_ERR_INVALID, "DREAM training: batch of %d x %d rows (at most %d x %d; "
                            "embeddings, features and mask all given)", b ? b->B : 0, b ? b->T : 0, m->max_B,
                            m->max_T);
    const int B = b->B, T = b->T, N = B * T, C = m->C, V = m->V;
    m->B = B, m->T = T, m->has_mid = b->mid != NULL;
    const size_t NC = (size_t)N * C;
    double msum = 0;
    int M = 0;
    for (int n = 0; n < N; n++) {
        m->pos[n] = n % T;
        m->kv_len[n] = n % T; /* row p reads the features of rows < p */
        if (b->mask[n] > 0) m->idx[M++] = n, msum += b->mask[n];
    }
    m->M = M;
    memcpy(m->x0, b->emb, sizeof(float) * NC);
    for (size_t i = 0; i < NC; i++) m->kin[i] = b->noise ? b->feat[i] + b->noise[i] : b->feat[i];
    m->b1.in = m->x0;
    blk_forward(m, tp, &m->b1, m->w + T_B1);
    cross_forward(m, tp, m->b1.out);
    m->b3.in = m->x2b;
    blk_forward(m, tp, &m->b3, m->w + T_B3);
    vs_train_rmsnorm_forward_tp(tp, m->dn, m->fr3, m->b3.out, m->w[T_FIN], N, C, m->s.rms_eps);
    vs_train_dream_loss l = {.counted = M};
    if (M > 0) {
        for (int j = 0; j < M; j++) {
            const int n = m->idx[j];
            memcpy(m->pred + (size_t)j * C, m->dn + (size_t)n * C, sizeof(float) * C);
            memcpy(m->tgt + (size_t)j * C, b->feat + (size_t)n * C, sizeof(float) * C);
            if (b->mid) {
                memcpy(m->mpred + (size_t)j * C, m->x2b + (size_t)n * C, sizeof(float) * C);
                memcpy(m->mtgt + (size_t)j * C, b->mid + (size_t)n * C, sizeof(float) * C);
            }
            m->lw[j] = (float)(b->mask[n] / msum);
        }
        vs_train_linear_forward(tp, m->tprobs, m->tgt, m->lm_head, NULL, M, C, V);
        vs_train_linear_forward(tp, m->lg, m->pred, m->lm_head, NULL, M, C, V);
        for (int j = 0; j < M; j++) {
            float *t = m->tprobs + (size_t)j * V;
            l.top1 += vs_argmax_f32(m->lg + (size_t)j * V, V) == vs_argmax_f32(t, V);
            vs_softmax_inplace(t, V);
        }
        l.feat = vs_train_smooth_l1_forward(m->pred, m->tgt, m->lw, M, C, 1.0f);
        if (b->mid) l.mid = vs_train_smooth_l1_forward(m->mpred, m->mtgt, m->lw, M, C, 1.0f);
        l.kl = vs_train_kl_forward(m->probs, m->lg, m->tprobs, m->lw, M, V);
        l.total = VS_TRAIN_DREAM_FEAT_WEIGHT * l.feat + VS_TRAIN_DREAM_MID_WEIGHT * l.mid +
                  VS_TRAIN_DREAM_KL_WEIGHT * l.kl;
    }
    if (loss) *loss = l;
    m->have_forward = true;
    return VS_OK;
}

vs_status vs_train_dream_backward(vs_train_dream *m, vs_threadpool *tp, vs_error *err) {
    if (!m->have_forward) return vs_error_set(err, VS_ERR_INVALID, "DREAM training: backward without a forward");
    const int N = m->B * m->T, M = m->M, C = m->C, V = m->V;
    /* the losses' gradients w.r.t. the draft features (dln) and block 2's output (dmpred) */
    zero(tp, m->dln, (size_t)N * C);
    if (M > 0) {
        zero(tp, m->dpred, (size_t)M * C);
        vs_train_smooth_l1_backward(m->dpred, NULL, m->pred, m->tgt, m->lw, VS_TRAIN_DREAM_FEAT_WEIGHT, M, C, 1.0f);
        zero(tp, m->dlg, (size_t)M * V);
        vs_train_kl_backward(m->dlg, m->probs, m->tprobs, m->lw, VS_TRAIN_DREAM_KL_WEIGHT, M, V);
        vs_train_linear_backward(tp, m->dpred, NULL, NULL, m->dlg, m->pred, m->lm_head, M, C, V);
        for (int j = 0; j < M; j++) {
            float *dst = m->dln + (size_t)m->idx[j] * C;
            const float *src = m->dpred + (size_t)j * C;
            for (int i = 0; i < C; i++) dst[i] += src[i];
        }
    }
    /* the final norm, block 3 */
    zero(tp, m->dx, (size_t)N * C);
    vs_train_rmsnorm_backward_tp(tp, m->dx, m->g[T_FIN], m->dln, m->b3.out, m->w[T_FIN], m->fr3, N, C);
    blk_backward(m, tp, &m->b3, m->w + T_B3, m->g + T_B3);
    /* the intermediate target on block 2's output */
    if (M > 0 && m->has_mid) {
        zero(tp, m->dmpred, (size_t)M * C);
        vs_train_smooth_l1_backward(m->dmpred, NULL, m->mpred, m->mtgt, m->lw, VS_TRAIN_DREAM_MID_WEIGHT, M, C, 1.0f);
        for (int j = 0; j < M; j++) {
            float *dst = m->dx + (size_t)m->idx[j] * C;
            const float *src = m->dmpred + (size_t)j * C;
            for (int i = 0; i < C; i++) dst[i] += src[i];
        }
    }
    cross_backward(m, tp, m->b1.out);
    blk_backward(m, tp, &m->b1, m->w + T_B1, m->g + T_B1);
    return VS_OK;
}
