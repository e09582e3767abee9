/* train_msd: the MSD head's training forward and backward (see train_msd.h). */
#include "train_msd.h"

#include <math.h>
#include <string.h>

#include "kernels.h"
#include "kv.h"
#include "quant.h"

enum { T_FC, T_FC_B, T_Q, T_K, T_V, T_O, T_FFN_NORM, T_GATE, T_UP, T_DOWN };

struct vs_train_msd {
    vs_msd_shape s;
    const float *lm_head; /* (V, C), borrowed */
    int max_B, max_T;
    int C, H, KVH, D, HD, KVD, F, V;
    vs_train_params params;
    float *w[VS_MSD_N_TENSORS], *g[VS_MSD_N_TENSORS]; /* views of params.data / params.grad */
    float *arena;
    /* activations, N = B * (T - 1) slots */
    float *cat;              /* (NF, 2C) fc inputs of the NF slots that go through fc, in slot order */
    float *x;                /* (N, C) block inputs */
    float *q, *k, *v;        /* (N, HD), (N, KVD) x2; q, k after RoPE */
    float *att;              /* (B, H, S, S) */
    float *atty;             /* (N, HD) */
    float *res1, *ln2, *r2;  /* (N, C), (N, C), (N) */
    float *gate, *up, *hmid; /* (N, F) */
    float *out;              /* (N, C) block outputs o */
    float *tmp;              /* (N, C) */
    float *rope_cs;          /* (max_T, D / 2, 2) */
    int32_t *pos;            /* (N) */
    int32_t *fc_slot;        /* (NF) the slot of each fc row */
    /* counted slots, M <= N */
    int32_t *idx;            /* (M) slot of each counted row */
    float *lw;               /* (M) loss weight */
    float *pred, *tgt;       /* (M, C) o and f_{p+1} of counted slots */
    float *lg, *probs;       /* (M, V) head logits and softmax */
    float *tprobs;           /* (M, V) the target's distribution */
    /* gradients */
    float *dpred;            /* (M, C) */
    float *dlg;              /* (M, V) */
    float *dx, *dln;         /* (N, C) */
    float *dq, *dk, *dv, *dqr, *dkr, *datty; /* (N, HD or KVD) */
    float *datt;             /* attention scratch */
    float *dgate, *dup, *dh; /* (N, F) */
    int B, S, M, NF;
    bool have_forward;
};

vs_train_msd *vs_train_msd_new(const vs_msd_shape *shape, const float *lm_head, int max_B, int max_T,
                               vs_error *err) {
    if (vs_msd_shape_check(shape, err)) return NULL;
    if (!lm_head || max_B < 1 || max_T < 2 || max_T > shape->n_ctx + 1) {
        vs_error_set(err, VS_ERR_INVALID, "MSD training: need the target's LM head and 1 x 2 .. %d rows per batch "
                     "(asked %d x %d)", shape->n_ctx + 1, max_B, max_T);
        return NULL;
    }
    vs_train_msd *m = vs_calloc(1, sizeof(*m));
    if (!m) {
        vs_error_set(err, VS_ERR_NOMEM, "MSD training: out of memory");
        return NULL;
    }
    m->s = *shape;
    if (m->s.n_head_kv <= 0) m->s.n_head_kv = m->s.n_head;
    m->lm_head = lm_head;
    m->max_B = max_B, m->max_T = max_T;
    m->C = shape->width, m->H = shape->n_head, m->KVH = m->s.n_head_kv, m->D = m->C / m->H;
    m->HD = m->H * m->D, m->KVD = m->KVH * m->D, m->F = shape->n_ff, m->V = shape->n_vocab;
    vs_train_tensor t[VS_MSD_N_TENSORS];
    for (int i = 0; i < VS_MSD_N_TENSORS; i++) {
        int64_t ne[2];
        int nd;
        vs_msd_tensor_ne(&m->s, i, ne, &nd);
        vs_train_tensor_from_ne(&t[i], vs_msd_tensor_name(i), ne, nd);
    }
    if (vs_train_params_init(&m->params, t, VS_MSD_N_TENSORS, err)) {
        vs_free(m);
        return NULL;
    }
    for (int i = 0; i < VS_MSD_N_TENSORS; i++) {
        m->w[i] = m->params.data + m->params.tensors[i].offset;
        m->g[i] = m->params.grad + m->params.tensors[i].offset;
    }
    const size_t N = (size_t)max_B * (max_T - 1), C = m->C, HD = m->HD, KVD = m->KVD, F = m->F, V = m->V;
    const size_t S = (size_t)max_T - 1, att = (size_t)max_B * m->H * S * S;
    const size_t sizes[] = {N * 2 * C, N * C, N * HD, N * KVD, N * KVD, att, N * HD, N * C, N * C, N, N * F,
                            N * F, N * F, N * C, N * C, (size_t)max_T * m->D, N, N * C, N * C, N * V, N * V,
                            N * V, N * C, N * V, N * C, N * C, N * HD, N * KVD, N * KVD, N * HD, N * KVD,
                            N * HD, att, N * F, N * F, N * F};
    size_t total = 0;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) total += (sizes[i] + 15) & ~(size_t)15;
    m->arena = vs_malloc(total * sizeof(float));
    m->pos = vs_malloc(N * sizeof(int32_t));
    m->idx = vs_malloc(N * sizeof(int32_t));
    m->fc_slot = vs_malloc(N * sizeof(int32_t));
    if (!m->arena || !m->pos || !m->idx || !m->fc_slot) {
        vs_error_set(err, VS_ERR_NOMEM, "MSD training: cannot allocate %zu MiB of activations for %d x %d rows",
                     total * sizeof(float) >> 20, max_B, max_T);
        vs_train_msd_free(m);
        return NULL;
    }
    float *c = m->arena;
    m->cat = vs_train_take(&c, N * 2 * C), m->x = vs_train_take(&c, N * C), m->q = vs_train_take(&c, N * HD), m->k = vs_train_take(&c, N * KVD);
    m->v = vs_train_take(&c, N * KVD), m->att = vs_train_take(&c, att), m->atty = vs_train_take(&c, N * HD), m->res1 = vs_train_take(&c, N * C);
    m->ln2 = vs_train_take(&c, N * C), m->r2 = vs_train_take(&c, N), m->gate = vs_train_take(&c, N * F), m->up = vs_train_take(&c, N * F);
    m->hmid = vs_train_take(&c, N * F), m->out = vs_train_take(&c, N * C), m->tmp = vs_train_take(&c, N * C);
    m->rope_cs = vs_train_take(&c, (size_t)max_T * m->D), m->lw = vs_train_take(&c, N), m->pred = vs_train_take(&c, N * C);
    m->tgt = vs_train_take(&c, N * C), m->lg = vs_train_take(&c, N * V), m->probs = vs_train_take(&c, N * V), m->tprobs = vs_train_take(&c, N * V);
    m->dpred = vs_train_take(&c, N * C), m->dlg = vs_train_take(&c, N * V), m->dx = vs_train_take(&c, N * C), m->dln = vs_train_take(&c, N * C);
    m->dq = vs_train_take(&c, N * HD), m->dk = vs_train_take(&c, N * KVD), m->dv = vs_train_take(&c, N * KVD), m->dqr = vs_train_take(&c, N * HD);
    m->dkr = vs_train_take(&c, N * KVD), m->datty = vs_train_take(&c, N * HD), m->datt = vs_train_take(&c, att);
    m->dgate = vs_train_take(&c, N * F), m->dup = vs_train_take(&c, N * F), m->dh = vs_train_take(&c, N * F);
    vs_train_rope_table(m->rope_cs, max_T, m->D, m->s.rope_base);
    return m;
}

void vs_train_msd_free(vs_train_msd *m) {
    if (!m) return;
    vs_train_params_free(&m->params);
    vs_free(m->arena);
    vs_free(m->pos);
    vs_free(m->idx);
    vs_free(m->fc_slot);
    vs_free(m);
}

const vs_msd_shape *vs_train_msd_shape(const vs_train_msd *m) { return &m->s; }
vs_train_params *vs_train_msd_params(vs_train_msd *m) { return &m->params; }
const float *vs_train_msd_pred(const vs_train_msd *m) { return m->out; }

void vs_train_msd_init(vs_train_msd *m, uint64_t seed) {
    vs_rng rng;
    vs_rng_seed(&rng, seed);
    for (int i = 0; i < VS_MSD_N_TENSORS; i++) {
        const vs_train_tensor *t = &m->params.tensors[i];
        const float sd = i <= T_FC_B ? 0.01f : 0.02f;
        for (size_t j = 0; j < t->numel; j++) m->w[i][j] = i == T_FFN_NORM ? 1.0f : sd * vs_rng_normal(&rng);
    }
}

vs_status vs_train_msd_export(const vs_train_msd *m, const float probe[VS_MSD_PROBE], vs_type mat_type,
                              const char *path, vs_error *err) {
    const float *data[VS_MSD_N_TENSORS];
    for (int i = 0; i < VS_MSD_N_TENSORS; i++) data[i] = m->w[i];
    return vs_msd_head_write(&m->s, probe, data, mat_type, "vlmspec-msd", path, err);
}

vs_status vs_train_msd_forward(vs_train_msd *m, vs_threadpool *tp, const vs_train_msd_batch *b,
                               vs_train_msd_loss *loss, vs_error *err) {
    m->have_forward = false;
    if (!b || b->B < 1 || b->T < 2 || b->B > m->max_B || b->T > m->max_T || !b->emb || !b->feat || !b->mask ||
        !b->is_image)
        return vs_error_set(err, VS_ERR_INVALID, "MSD training: batch of %d x %d rows (at most %d x %d, T >= 2, "
                            "embeddings, features, image flags and mask all given)",
                            b ? b->B : 0, b ? b->T : 0, m->max_B, m->max_T);
    const int B = b->B, T = b->T, S = T - 1, N = B * S, C = m->C, V = m->V;
    const int H = m->H, KVH = m->KVH, D = m->D, HD = m->HD, KVD = m->KVD, F = m->F;
    m->B = B, m->S = S;
    /* slot inputs */
    double msum = 0;
    int M = 0, NF = 0;
    for (int bi = 0; bi < B; bi++)
        for (int p = 0; p < S; p++) {
            const int n = bi * S + p;
            const size_t rp = (size_t)bi * T + p; /* target row p; row p + 1 is rp + 1 */
            m->pos[n] = p;
            if (m->s.decoupled && b->is_image[rp + 1]) {
                memcpy(m->x + (size_t)n * C, b->emb + (rp + 1) * C, sizeof(float) * C);
            } else {
                m->fc_slot[NF] = n;
                float *cat = m->cat + (size_t)NF++ * 2 * C;
                memcpy(cat, b->emb + (rp + 1) * C, sizeof(float) * C);
                const float *f = b->feat + rp * C, *z = b->noise ? b->noise + rp * C : NULL;
                for (int i = 0; i < C; i++) cat[C + i] = z ? f[i] + z[i] : f[i];
            }
            const float w = b->mask[rp];
            if (w > 0) {
                m->idx[M++] = n;
                msum += w;
            }
        }
    m->M = M, m->NF = NF;
    /* fc over the slots that take it, one product, scattered into the block's input */
    if (NF > 0) vs_train_linear_forward(tp, m->tmp, m->cat, m->w[T_FC], m->w[T_FC_B], NF, 2 * C, C);
    for (int j = 0; j < NF; j++)
        memcpy(m->x + (size_t)m->fc_slot[j] * C, m->tmp + (size_t)j * C, sizeof(float) * C);
    /* the block, without input norm */
    vs_train_linear_forward(tp, m->q, m->x, m->w[T_Q], NULL, N, C, HD);
    vs_train_linear_forward(tp, m->k, m->x, m->w[T_K], NULL, N, C, KVD);
    vs_train_linear_forward(tp, m->v, m->x, m->w[T_V], NULL, N, C, KVD);
    vs_train_rope_forward_tp(tp, m->q, m->q, m->rope_cs, m->pos, N, H, D);
    vs_train_rope_forward_tp(tp, m->k, m->k, m->rope_cs, m->pos, N, KVH, D);
    vs_train_self_attention_forward(tp, m->atty, m->att, m->q, m->k, m->v, B, S, H, KVH, D, true);
    vs_train_linear_forward(tp, m->tmp, m->atty, m->w[T_O], NULL, N, HD, C);
    vs_train_add_forward_tp(tp, m->res1, m->x, m->tmp, (size_t)N * C);
    vs_train_rmsnorm_forward_tp(tp, m->ln2, m->r2, m->res1, m->w[T_FFN_NORM], N, C, m->s.rms_eps);
    vs_train_linear_forward(tp, m->gate, m->ln2, m->w[T_GATE], NULL, N, C, F);
    vs_train_linear_forward(tp, m->up, m->ln2, m->w[T_UP], NULL, N, C, F);
    vs_train_swiglu_forward_tp(tp, m->hmid, m->gate, m->up, (size_t)N * F);
    vs_train_linear_forward(tp, m->tmp, m->hmid, m->w[T_DOWN], NULL, N, F, C);
    vs_train_add_forward_tp(tp, m->out, m->res1, m->tmp, (size_t)N * C);
    /* the loss over counted slots */
    vs_train_msd_loss l = {.counted = M};
    if (M > 0) {
        for (int j = 0; j < M; j++) {
            const int n = m->idx[j], bi = n / S, p = n % S;
            memcpy(m->pred + (size_t)j * C, m->out + (size_t)n * C, sizeof(float) * C);
            memcpy(m->tgt + (size_t)j * C, b->feat + ((size_t)bi * T + p + 1) * C, sizeof(float) * C);
            m->lw[j] = (float)(b->mask[(size_t)bi * T + p] / msum);
        }
        vs_train_linear_forward(tp, m->tprobs, m->tgt, m->lm_head, NULL, M, C, V);
        vs_train_linear_forward(tp, m->lg, m->pred, m->lm_head, NULL, M, C, V);
        for (int j = 0; j < M; j++) {
            float *t = m->tprobs + (size_t)j * V;
            l.top1 += vs_argmax_f32(m->lg + (size_t)j * V, V) == vs_argmax_f32(t, V);
            vs_softmax_inplace(t, V);
        }
        l.feat = vs_train_smooth_l1_forward(m->pred, m->tgt, m->lw, M, C, 1.0f);
        l.xent = vs_train_soft_xent_forward(m->probs, m->lg, m->tprobs, m->lw, M, V);
        l.total = l.feat + VS_TRAIN_MSD_XENT_WEIGHT * l.xent;
    }
    if (loss) *loss = l;
    m->have_forward = true;
    return VS_OK;
}

static void zero(vs_threadpool *tp, float *x, size_t n) { vs_train_zero_tp(tp, x, n); }

vs_status vs_train_msd_backward(vs_train_msd *m, vs_threadpool *tp, vs_error *err) {
    if (!m->have_forward) return vs_error_set(err, VS_ERR_INVALID, "MSD training: backward without a forward");
    const int B = m->B, S = m->S, N = B * S, M = m->M, C = m->C, V = m->V;
    const int H = m->H, KVH = m->KVH, D = m->D, HD = m->HD, KVD = m->KVD, F = m->F;
    float *const *g = m->g;
    float *const *w = m->w;
    zero(tp, m->dx, (size_t)N * C);
    if (M > 0) {
        zero(tp, m->dpred, (size_t)M * C);
        vs_train_smooth_l1_backward(m->dpred, NULL, m->pred, m->tgt, m->lw, 1.0f, M, C, 1.0f);
        zero(tp, m->dlg, (size_t)M * V);
        vs_train_soft_xent_backward(m->dlg, m->probs, m->tprobs, m->lw, VS_TRAIN_MSD_XENT_WEIGHT, M, V);
        vs_train_linear_backward(tp, m->dpred, NULL, NULL, m->dlg, m->pred, m->lm_head, M, C, V);
        for (int j = 0; j < M; j++) {
            float *dst = m->dx + (size_t)m->idx[j] * C;
            const float *src = m->dpred + (size_t)j * C;
            for (int i = 0; i < C; i++) dst[i] += src[i];
        }
    }
    /* MLP branch: out = res1 + down(swiglu(gate ln2, up ln2)), ln2 = rms(res1) */
    zero(tp, m->dh, (size_t)N * F);
    vs_train_linear_backward(tp, m->dh, g[T_DOWN], NULL, m->dx, m->hmid, w[T_DOWN], N, F, C);
    zero(tp, m->dgate, (size_t)N * F);
    zero(tp, m->dup, (size_t)N * F);
    vs_train_swiglu_backward_tp(tp, m->dgate, m->dup, m->dh, m->gate, m->up, (size_t)N * F);
    zero(tp, m->dln, (size_t)N * C);
    vs_train_linear_backward(tp, m->dln, g[T_GATE], NULL, m->dgate, m->ln2, w[T_GATE], N, C, F);
    vs_train_linear_backward(tp, m->dln, g[T_UP], NULL, m->dup, m->ln2, w[T_UP], N, C, F);
    vs_train_rmsnorm_backward_tp(tp, m->dx, g[T_FFN_NORM], m->dln, m->res1, w[T_FFN_NORM], m->r2, N, C);
    /* attention branch: res1 = x + o(attn(rope(q x), rope(k x), v x)) */
    zero(tp, m->datty, (size_t)N * HD);
    vs_train_linear_backward(tp, m->datty, g[T_O], NULL, m->dx, m->atty, w[T_O], N, HD, C);
    zero(tp, m->dq, (size_t)N * HD);
    zero(tp, m->dk, (size_t)N * KVD);
    zero(tp, m->dv, (size_t)N * KVD);
    vs_train_self_attention_backward(tp, m->dq, m->dk, m->dv, m->datt, m->datty, m->att, m->q, m->k, m->v, B, S,
                                     H, KVH, D, true);
    zero(tp, m->dqr, (size_t)N * HD);
    zero(tp, m->dkr, (size_t)N * KVD);
    vs_train_rope_backward_tp(tp, m->dqr, m->dq, m->rope_cs, m->pos, N, H, D);
    vs_train_rope_backward_tp(tp, m->dkr, m->dk, m->rope_cs, m->pos, N, KVH, D);
    /* dx (the residual) += the three projections' input gradients */
    vs_train_linear_backward(tp, m->dx, g[T_Q], NULL, m->dqr, m->x, w[T_Q], N, C, HD);
    vs_train_linear_backward(tp, m->dx, g[T_K], NULL, m->dkr, m->x, w[T_K], N, C, KVD);
    vs_train_linear_backward(tp, m->dx, g[T_V], NULL, m->dv, m->x, w[T_V], N, C, KVD);
    /* fc: the gradients of the slots that went through it, gathered (image rows that bypass it are data) */
    for (int j = 0; j < m->NF; j++)
        memcpy(m->dln + (size_t)j * C, m->dx + (size_t)m->fc_slot[j] * C, sizeof(float) * C);
    if (m->NF > 0) vs_train_linear_backward(tp, NULL, g[T_FC], g[T_FC_B], m->dln, m->cat, w[T_FC], m->NF, 2 * C, C);
    return VS_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Training data from the target */

float *vs_train_msd_lm_head(const vs_lm *target, vs_error *err) {
    const vs_lm_mat *o = &vs_lm_w(target)->output;
    float *w = vs_malloc(sizeof(float) * (size_t)(o->n_out * o->n_in));
    if (!w) {
        vs_error_set(err, VS_ERR_NOMEM, "MSD training: no memory for the LM head (%lld x %lld)", (long long)o->n_out,
                     (long long)o->n_in);
        return NULL;
    }
    const size_t rb = vs_type_row_bytes(o->type, o->n_in);
    for (int64_t r = 0; r < o->n_out; r++)
        vs_dequantize_row(o->type, (const uint8_t *)o->data + (size_t)r * rb, w + (size_t)r * o->n_in, o->n_in);
    return w;
}

bool vs_msd_seq_alloc(vs_msd_seq *s, int32_t T, int C) {
    s->T = T;
    s->emb = vs_malloc(sizeof(float) * (size_t)T * C);
    s->feat = vs_malloc(sizeof(float) * (size_t)T * C);
    s->is_image = vs_malloc((size_t)T);
    s->mask = vs_malloc(sizeof(float) * (size_t)T);
    if (s->emb && s->feat && s->is_image && s->mask) return true;
    vs_msd_seq_free(s);
    return false;
}

void vs_msd_seq_free(vs_msd_seq *s) {
    if (!s) return;
    vs_free(s->emb), vs_free(s->feat), vs_free(s->is_image), vs_free(s->mask), vs_free(s->mid);
    memset(s, 0, sizeof(*s));
}

/* The attention entropy of each (layer, row, head), each written once by the forward's observer. */
typedef struct entropy_obs {
    float *ent; /* (L, T, H) */
    int T, H;
} entropy_obs;

static void entropy_cb(void *ctx, int layer, int row, int head, const float *p, int n_keys) {
    entropy_obs *o = ctx;
    double e = 0;
    for (int k = 0; k < n_keys; k++)
        if (p[k] > 0) e -= (double)p[k] * log((double)p[k]);
    o->ent[((size_t)layer * o->T + row) * o->H + head] = (float)e;
}

vs_status vs_train_msd_sequence(vs_lm *target, vs_threadpool *tp, const int32_t *tokens, const int32_t *img_row,
                                const uint8_t *answer, int32_t T, const float *img_rows, vs_msd_seq *out,
                                vs_error *err) {
    return vs_train_msd_sequence_mid(target, tp, tokens, img_row, answer, T, img_rows, VS_MSD_MID_NONE, out, err);
}

vs_status vs_train_msd_sequence_mid(vs_lm *target, vs_threadpool *tp, const int32_t *tokens, const int32_t *img_row,
                                    const uint8_t *answer, int32_t T, const float *img_rows, int mid_layer,
                                    vs_msd_seq *out, vs_error *err) {
    memset(out, 0, sizeof(*out));
    out->mid_layer = -1;
    const vs_lm_config *c = vs_lm_cfg(target);
    const int C = c->n_embd, L = c->n_layer;
    if (T < 2 || T > c->n_ctx_train)
        return vs_error_set(err, VS_ERR_INVALID, "MSD training data: a sequence of %d rows (the target takes 2 .. %d)",
                            T, c->n_ctx_train);
    const bool want_mid = mid_layer != VS_MSD_MID_NONE;
    if (want_mid && (L < 2 || mid_layer < VS_MSD_MID_AUTO || mid_layer == 0 || mid_layer >= L))
        return vs_error_set(err, VS_ERR_INVALID, "intermediate target: layer %d of a target of %d layers (1 .. %d, "
                            "or the least-entropy layer)", mid_layer, L, L - 1);
    const bool have = vs_msd_seq_alloc(out, T, C);
    vs_lm_row *rows = vs_calloc((size_t)T, sizeof(vs_lm_row));
    vs_kv *kv = NULL;
    vs_status st = VS_OK;
    /* with an intermediate target: every layer's input (outputs of layers 0 .. L - 2) and the entropies */
    float **lh = NULL, *ent = NULL;
    int *lids = NULL;
    if (want_mid) {
        lh = vs_calloc((size_t)L, sizeof(float *));
        lids = vs_malloc(sizeof(int) * (size_t)L);
        ent = mid_layer == VS_MSD_MID_AUTO ? vs_malloc(sizeof(float) * (size_t)L * T * c->n_head) : NULL;
        bool ok = lh && lids && (ent || mid_layer != VS_MSD_MID_AUTO);
        /* the least-entropy layer needs every candidate's input; a fixed layer its own only */
        const int l0 = mid_layer == VS_MSD_MID_AUTO ? 0 : mid_layer - 1, l1 = mid_layer == VS_MSD_MID_AUTO ? L - 1 : mid_layer;
        for (int l = l0; ok && l < l1; l++) ok = (lh[l] = vs_malloc(sizeof(float) * (size_t)T * C)) != NULL, lids[l - l0] = l;
        if (!ok) {
            st = vs_error_set(err, VS_ERR_NOMEM, "MSD training data: out of memory for %d layers of %d rows", L, T);
            goto done;
        }
    }
    if (!have || !rows) {
        st = vs_error_set(err, VS_ERR_NOMEM, "MSD training data: out of memory for %d rows", T);
        goto done;
    }
    for (int32_t p = 0; p < T; p++) {
        float *e = out->emb + (size_t)p * C;
        const bool img = img_row && img_row[p] >= 0;
        out->is_image[p] = img;
        if (img) {
            if (!img_rows) {
                st = vs_error_set(err, VS_ERR_INVALID, "MSD training data: row %d is an image row but no image rows "
                                  "were given", p);
                goto done;
            }
            memcpy(e, img_rows + (size_t)img_row[p] * C, sizeof(float) * C);
        } else if ((st = vs_lm_embed(target, tokens[p], e, err))) {
            goto done;
        }
        out->mask[p] = p + 2 < T && answer && answer[p + 2] ? 1.0f : 0.0f;
        rows[p] = (vs_lm_row){.embd = e, .pos = p};
    }
    if (!(kv = vs_lm_kv_new(target, 1, T, VS_TYPE_F32, err))) {
        st = err ? err->code : VS_ERR_NOMEM;
        goto done;
    }
    entropy_obs eo = {.ent = ent, .T = T, .H = c->n_head};
    const bool fixed = want_mid && mid_layer != VS_MSD_MID_AUTO;
    const vs_lm_out o = {.hidden = out->feat, .attn_layer = -1,
                         .n_layer_out = !want_mid ? 0 : fixed ? 1 : L - 1, .layer_ids = lids,
                         .layer_hidden = fixed ? lh + (mid_layer - 1) : lh, .attn_fn = ent ? entropy_cb : NULL,
                         .attn_ctx = &eo};
    if ((st = vs_lm_forward(target, kv, tp, rows, T, &o, err))) goto done;
    if (want_mid) {
        int best = mid_layer;
        if (mid_layer == VS_MSD_MID_AUTO) { /* the least mean entropy among layers 1 .. max(1, L - 2) */
            double lowest = INFINITY;
            for (int l = 1; l <= VS_MAX(1, L - 2); l++) {
                double s = 0;
                for (size_t i = 0; i < (size_t)T * c->n_head; i++) s += ent[(size_t)l * T * c->n_head + i];
                if (s < lowest) lowest = s, best = l;
            }
        }
        out->mid_layer = best;
        out->mid = lh[best - 1]; /* the input of layer `best` */
        lh[best - 1] = NULL;
    }
    const float *nw = vs_lm_w(target)->output_norm;
    for (int32_t p = 0; p < T; p++) { /* in place: vs_rmsnorm reads the row before it writes it */
        float *f = out->feat + (size_t)p * C;
        vs_rmsnorm(f, f, nw, C, c->rms_eps);
    }
done:
    if (lh)
        for (int l = 0; l < L; l++) vs_free(lh[l]);
    vs_free(lh), vs_free(lids), vs_free(ent);
    vs_kv_free(kv);
    vs_free(rows);
    if (st) vs_msd_seq_free(out);
    return st;
}
