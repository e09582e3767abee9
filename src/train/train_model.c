/* train_model: the trainable VLM (ViT + projector + LLaMA LM), see train_model.h. Sections: tensor
 * table, creation, forward, backward, FLOPs, checkpoints. Export lives in train_export.c. */
#include "train_model.h"

#include <assert.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "image.h"
#include "train_model_internal.h"

/* ---------------------------------------------------------------------------------------------- */
/* Tensor table: the order is the order of vs_train_vlm_tensors' fields (bind_views). Init kinds:
 * 'n' N(0, 0.02^2), 'r' the same scaled by 1/sqrt(2 * blocks) (residual outputs), '1' ones, '0' zeros. */

typedef struct tensor_spec {
    const char *name;
    int group;
    bool decay;
    char init;
} tensor_spec;

static const tensor_spec k_specs[VS_TRAIN_VLM_N_TENSORS] = {
    {"v.patch_embd", VS_TRAIN_GROUP_VISION, true, 'n'},
    {"v.class_embd", VS_TRAIN_GROUP_VISION, false, 'n'},
    {"v.position_embd", VS_TRAIN_GROUP_VISION, true, 'n'},
    {"v.pre_ln.weight", VS_TRAIN_GROUP_VISION, false, '1'},
    {"v.pre_ln.bias", VS_TRAIN_GROUP_VISION, false, '0'},
    {"v.ln1.weight", VS_TRAIN_GROUP_VISION, false, '1'},
    {"v.ln1.bias", VS_TRAIN_GROUP_VISION, false, '0'},
    {"v.attn_q.weight", VS_TRAIN_GROUP_VISION, true, 'n'},
    {"v.attn_q.bias", VS_TRAIN_GROUP_VISION, false, '0'},
    {"v.attn_k.weight", VS_TRAIN_GROUP_VISION, true, 'n'},
    {"v.attn_k.bias", VS_TRAIN_GROUP_VISION, false, '0'},
    {"v.attn_v.weight", VS_TRAIN_GROUP_VISION, true, 'n'},
    {"v.attn_v.bias", VS_TRAIN_GROUP_VISION, false, '0'},
    {"v.attn_out.weight", VS_TRAIN_GROUP_VISION, true, 'r'},
    {"v.attn_out.bias", VS_TRAIN_GROUP_VISION, false, '0'},
    {"v.ln2.weight", VS_TRAIN_GROUP_VISION, false, '1'},
    {"v.ln2.bias", VS_TRAIN_GROUP_VISION, false, '0'},
    {"v.fc1.weight", VS_TRAIN_GROUP_VISION, true, 'n'},
    {"v.fc1.bias", VS_TRAIN_GROUP_VISION, false, '0'},
    {"v.fc2.weight", VS_TRAIN_GROUP_VISION, true, 'r'},
    {"v.fc2.bias", VS_TRAIN_GROUP_VISION, false, '0'},
    {"v.post_ln.weight", VS_TRAIN_GROUP_VISION, false, '1'},
    {"v.post_ln.bias", VS_TRAIN_GROUP_VISION, false, '0'},
    {"mm.0.weight", VS_TRAIN_GROUP_PROJECTOR, true, 'n'},
    {"mm.0.bias", VS_TRAIN_GROUP_PROJECTOR, false, '0'},
    {"mm.2.weight", VS_TRAIN_GROUP_PROJECTOR, true, 'n'},
    {"mm.2.bias", VS_TRAIN_GROUP_PROJECTOR, false, '0'},
    {"token_embd", VS_TRAIN_GROUP_LM, true, 'n'},
    {"attn_norm", VS_TRAIN_GROUP_LM, false, '1'},
    {"attn_q", VS_TRAIN_GROUP_LM, true, 'n'},
    {"attn_k", VS_TRAIN_GROUP_LM, true, 'n'},
    {"attn_v", VS_TRAIN_GROUP_LM, true, 'n'},
    {"attn_output", VS_TRAIN_GROUP_LM, true, 'r'},
    {"ffn_norm", VS_TRAIN_GROUP_LM, false, '1'},
    {"ffn_gate", VS_TRAIN_GROUP_LM, true, 'n'},
    {"ffn_up", VS_TRAIN_GROUP_LM, true, 'n'},
    {"ffn_down", VS_TRAIN_GROUP_LM, true, 'r'},
    {"output_norm", VS_TRAIN_GROUP_LM, false, '1'},
    {"output", VS_TRAIN_GROUP_LM, true, 'n'},
};

/* Shapes in table order. */
static void tensor_shapes(const vs_train_vlm_config *c, int64_t shape[][VS_TRAIN_MAX_DIMS], int *ndim) {
    int64_t W = c->v_width, VF = c->v_ffn, VL = c->v_blocks, G = c->image_size / c->patch_size;
    int64_t C = c->width, L = c->n_layers, D = c->width / c->n_heads, HD = (int64_t)c->n_heads * D;
    int64_t KVD = (int64_t)c->n_kv_heads * D, F = c->ffn, V = c->vocab,
            PP = 3LL * c->patch_size * c->patch_size;
    const int64_t s[VS_TRAIN_VLM_N_TENSORS][4] = {
        {2, W, PP}, {1, W}, {2, G * G + 1, W}, {1, W}, {1, W},                    /* patch .. pre_ln */
        {2, VL, W}, {2, VL, W},                                                    /* ln1 */
        {3, VL, W, W}, {2, VL, W}, {3, VL, W, W}, {2, VL, W}, {3, VL, W, W}, {2, VL, W}, /* q k v */
        {3, VL, W, W}, {2, VL, W},                                                 /* out */
        {2, VL, W}, {2, VL, W},                                                    /* ln2 */
        {3, VL, VF, W}, {2, VL, VF}, {3, VL, W, VF}, {2, VL, W},                   /* fc1 fc2 */
        {1, W}, {1, W},                                                            /* post_ln */
        {2, C, W}, {1, C}, {2, C, C}, {1, C},                                      /* projector */
        {2, V, C}, {2, L, C}, {3, L, HD, C}, {3, L, KVD, C}, {3, L, KVD, C}, {3, L, C, HD},
        {2, L, C}, {3, L, F, C}, {3, L, F, C}, {3, L, C, F}, {1, C}, {2, V, C},
    };
    for (int i = 0; i < VS_TRAIN_VLM_N_TENSORS; i++) {
        ndim[i] = (int)s[i][0];
        for (int d = 0; d < VS_TRAIN_MAX_DIMS; d++) shape[i][d] = d < ndim[i] ? s[i][d + 1] : 1;
    }
}

static void bind_views(vs_train_vlm_tensors *v, float *buf, const vs_train_params *p) {
    float **slot[VS_TRAIN_VLM_N_TENSORS] = {
        &v->v_patch, &v->v_cls, &v->v_pos, &v->v_pre_ln_w, &v->v_pre_ln_b, &v->v_ln1_w, &v->v_ln1_b,
        &v->v_q_w, &v->v_q_b, &v->v_k_w, &v->v_k_b, &v->v_v_w, &v->v_v_b, &v->v_o_w, &v->v_o_b,
        &v->v_ln2_w, &v->v_ln2_b, &v->v_fc1_w, &v->v_fc1_b, &v->v_fc2_w, &v->v_fc2_b,
        &v->v_post_ln_w, &v->v_post_ln_b,
        &v->mm0_w, &v->mm0_b, &v->mm2_w, &v->mm2_b,
        &v->wte, &v->attn_norm, &v->wq, &v->wk, &v->wv, &v->wo, &v->ffn_norm, &v->w_gate, &v->w_up,
        &v->w_down, &v->out_norm, &v->lm_head,
    };
    for (int i = 0; i < VS_TRAIN_VLM_N_TENSORS; i++) *slot[i] = buf + p->tensors[i].offset;
}

/* ---------------------------------------------------------------------------------------------- */
/* Creation */

vs_train_vlm_config vs_train_vlm_target_shape(void) {
    return (vs_train_vlm_config){.image_size = 64, .patch_size = 8, .v_width = 192, .v_ffn = 768, .v_heads = 3,
                                 .v_blocks = 6, .v_eps = 1e-5f, .v_post_ln = true, .width = 512, .n_layers = 8,
                                 .n_heads = 8, .n_kv_heads = 4, .ffn = 1408, .rms_eps = 1e-5f,
                                 .rope_base = 10000.0f};
}

vs_status vs_train_vlm_config_check(const vs_train_vlm_config *c, vs_error *err) {
#define BAD(...) return vs_error_set(err, VS_ERR_INVALID, "VLM config: " __VA_ARGS__)
    if (c->image_size < 1 || c->patch_size < 1 || c->image_size % c->patch_size)
        BAD("image size %d must be a positive multiple of the patch size %d", c->image_size, c->patch_size);
    if (c->v_width < 1 || c->v_ffn < 1 || c->v_heads < 1 || c->v_width % c->v_heads || c->v_blocks < 0)
        BAD("vision width %d / ffn %d / heads %d / blocks %d are inconsistent", c->v_width, c->v_ffn,
            c->v_heads, c->v_blocks);
    if (c->vocab < 2 || c->width < 2 || c->n_layers < 1 || c->ffn < 1 || c->max_seq < 1)
        BAD("vocab %d, width %d, layers %d, ffn %d, max_seq %d must be positive", c->vocab, c->width,
            c->n_layers, c->ffn, c->max_seq);
    if (c->n_heads < 1 || c->width % c->n_heads || (c->width / c->n_heads) % 2)
        BAD("width %d must split into %d heads of even size", c->width, c->n_heads);
    if (c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads)
        BAD("%d heads are not a multiple of %d kv heads", c->n_heads, c->n_kv_heads);
    if (!(c->v_eps > 0) || !(c->rms_eps > 0) || !(c->rope_base > 1))
        BAD("epsilons must be > 0 and rope_base > 1");
    for (int i = 0; i < 3; i++)
        if (!(c->image_std[i] > 0)) BAD("image_std[%d] must be > 0", i);
    int64_t big = (int64_t)c->vocab * c->width + (int64_t)c->n_layers * c->ffn * c->width * 3;
    if (c->vocab > (1 << 24) || c->width > (1 << 16) || c->ffn > (1 << 18) || c->v_width > (1 << 16) ||
        c->v_ffn > (1 << 18) || c->image_size > 4096 || c->max_seq > (1 << 20) || big > ((int64_t)1 << 32))
        BAD("sizes beyond what the trainer supports");
#undef BAD
    return VS_OK;
}

/* Registers (pointer, count) pairs of an arena allocated in one piece. */
typedef struct arena_plan {
    float **ptr[96];
    size_t n[96];
    int k;
} arena_plan;

static void plan(arena_plan *a, float **p, size_t n) {
    assert(a->k < (int)VS_ARRAY_LEN(a->ptr));
    a->ptr[a->k] = p;
    a->n[a->k++] = n;
}

static float *arena_alloc(arena_plan *a, size_t *total_out) {
    size_t total = 0;
    for (int i = 0; i < a->k; i++) total += (a->n[i] + 15) & ~(size_t)15;
    float *buf = vs_malloc(sizeof(float) * (total ? total : 1));
    if (!buf) return NULL;
    size_t off = 0;
    for (int i = 0; i < a->k; i++) {
        *a->ptr[i] = buf + off;
        off += (a->n[i] + 15) & ~(size_t)15;
    }
    *total_out = total;
    return buf;
}

vs_train_vlm *vs_train_vlm_new(const vs_train_vlm_config *cfg, int max_B, int max_T, int max_images,
                               vs_error *err) {
    if (vs_train_vlm_config_check(cfg, err)) return NULL;
    if (max_B < 1 || max_T < 1 || max_T > cfg->max_seq || max_images < 0 || max_images > (1 << 16) ||
        (int64_t)max_B * max_T > (1 << 24)) {
        vs_error_set(err, VS_ERR_INVALID, "VLM: batch capacity %d x %d rows, %d images is out of range "
                     "(max_seq %d)", max_B, max_T, max_images, cfg->max_seq);
        return NULL;
    }
    vs_train_vlm *m = vs_calloc(1, sizeof(*m));
    if (!m) {
        vs_error_set(err, VS_ERR_NOMEM, "VLM: out of memory");
        return NULL;
    }
    m->cfg = *cfg;
    m->max_B = max_B, m->max_T = max_T, m->max_images = max_images;
    m->G = cfg->image_size / cfg->patch_size;
    m->NP = m->G * m->G;
    m->TV = m->NP + 1;
    m->pool_k = 1, m->NR = m->NP;
    m->D = cfg->width / cfg->n_heads;
    m->HD = cfg->n_heads * m->D;
    m->KVD = cfg->n_kv_heads * m->D;

    vs_train_tensor tt[VS_TRAIN_VLM_N_TENSORS];
    int64_t shape[VS_TRAIN_VLM_N_TENSORS][VS_TRAIN_MAX_DIMS];
    int ndim[VS_TRAIN_VLM_N_TENSORS];
    tensor_shapes(cfg, shape, ndim);
    memset(tt, 0, sizeof(tt));
    for (int i = 0; i < VS_TRAIN_VLM_N_TENSORS; i++) {
        snprintf(tt[i].name, sizeof(tt[i].name), "%s", k_specs[i].name);
        tt[i].ndim = ndim[i];
        memcpy(tt[i].shape, shape[i], sizeof(shape[i]));
        tt[i].group = k_specs[i].group;
        tt[i].decay = k_specs[i].decay;
    }
    /* A tower with zero blocks still has stacked tensors of zero rows: give them one dummy row. */
    for (int i = 0; i < VS_TRAIN_VLM_N_TENSORS; i++)
        if (tt[i].shape[0] == 0) tt[i].shape[0] = 1;
    if (vs_train_params_init(&m->params, tt, VS_TRAIN_VLM_N_TENSORS, err)) {
        vs_free(m);
        return NULL;
    }
    bind_views(&m->w, m->params.data, &m->params);
    bind_views(&m->g, m->params.grad, &m->params);

    /* activations and gradient scratch */
    size_t W = cfg->v_width, VF = cfg->v_ffn, VL = cfg->v_blocks, VH = cfg->v_heads, C = cfg->width;
    size_t L = cfg->n_layers, H = cfg->n_heads, F = cfg->ffn, V = cfg->vocab;
    size_t NI = max_images, Nv = NI * m->TV, Np = NI * m->NP, N = (size_t)max_B * max_T;
    size_t PP3 = 3 * (size_t)cfg->patch_size * cfg->patch_size, T = max_T, B = max_B;
    size_t HD = m->HD, KVD = m->KVD, TV = m->TV;
    vlm_acts *a = &m->a;
    vlm_grads *d = &m->d;
    arena_plan ap = {0};
    plan(&ap, &a->v_col, Np * PP3);
    plan(&ap, &a->v_patch, Np * W);
    plan(&ap, &a->v_emb, Nv * W);
    plan(&ap, &a->v_x0, Nv * W);
    plan(&ap, &a->v_pre_mean, Nv);
    plan(&ap, &a->v_pre_rstd, Nv);
    plan(&ap, &a->v_ln1, VL * Nv * W);
    plan(&ap, &a->v_ln1_mean, VL * Nv);
    plan(&ap, &a->v_ln1_rstd, VL * Nv);
    plan(&ap, &a->v_q, VL * Nv * W);
    plan(&ap, &a->v_k, VL * Nv * W);
    plan(&ap, &a->v_v, VL * Nv * W);
    plan(&ap, &a->v_att, VL * NI * VH * TV * TV);
    plan(&ap, &a->v_atty, VL * Nv * W);
    plan(&ap, &a->v_res1, VL * Nv * W);
    plan(&ap, &a->v_ln2, VL * Nv * W);
    plan(&ap, &a->v_ln2_mean, VL * Nv);
    plan(&ap, &a->v_ln2_rstd, VL * Nv);
    plan(&ap, &a->v_fc1, VL * Nv * VF);
    plan(&ap, &a->v_act, VL * Nv * VF);
    plan(&ap, &a->v_res2, VL * Nv * W);
    plan(&ap, &a->v_feat_raw, Np * W);
    plan(&ap, &a->v_post_mean, Np);
    plan(&ap, &a->v_post_rstd, Np);
    plan(&ap, &a->v_feat, Np * W);
    plan(&ap, &a->v_pool, Np * W);
    plan(&ap, &a->mm_h, Np * C);
    plan(&ap, &a->mm_act, Np * C);
    plan(&ap, &a->mm_out, Np * C);
    plan(&ap, &a->x_emb, N * C);
    plan(&ap, &a->ln1, L * N * C);
    plan(&ap, &a->ln1_rstd, L * N);
    plan(&ap, &a->q, L * N * HD);
    plan(&ap, &a->k, L * N * KVD);
    plan(&ap, &a->v, L * N * KVD);
    plan(&ap, &a->att, L * B * H * T * T);
    plan(&ap, &a->atty, L * N * HD);
    plan(&ap, &a->res1, L * N * C);
    plan(&ap, &a->ln2, L * N * C);
    plan(&ap, &a->ln2_rstd, L * N);
    plan(&ap, &a->gate, L * N * F);
    plan(&ap, &a->up, L * N * F);
    plan(&ap, &a->hmid, L * N * F);
    plan(&ap, &a->res2, L * N * C);
    plan(&ap, &a->lnf, N * C);
    plan(&ap, &a->lnf_rstd, N);
    plan(&ap, &a->logits, N * V);
    plan(&ap, &a->probs, N * V);
    plan(&ap, &a->tmp, VS_MAX(N * C, Nv * W));
    plan(&ap, &a->rope_cs, (size_t)cfg->max_seq * m->D);
    plan(&ap, &a->lw, N);
    /* gradient scratch, reused layer after layer */
    plan(&ap, &d->dlogits, N * V);
    plan(&ap, &d->dx, N * C);
    plan(&ap, &d->dln, N * C);
    plan(&ap, &d->dq, N * HD);
    plan(&ap, &d->dk, N * KVD);
    plan(&ap, &d->dv, N * KVD);
    plan(&ap, &d->dqr, N * HD);
    plan(&ap, &d->dkr, N * KVD);
    plan(&ap, &d->datty, N * HD);
    plan(&ap, &d->datt, VS_MAX(B * H * T * T, NI * VH * TV * TV));
    plan(&ap, &d->dgate, N * F);
    plan(&ap, &d->dup, N * F);
    plan(&ap, &d->dh, N * F);
    plan(&ap, &d->dmm_out, Np * C);
    plan(&ap, &d->dmm_act, Np * C);
    plan(&ap, &d->dmm_h, Np * C);
    plan(&ap, &d->dfeat, Np * W);
    plan(&ap, &d->dpool, Np * W);
    plan(&ap, &d->dfeat_raw, Np * W);
    plan(&ap, &d->dvx, Nv * W);
    plan(&ap, &d->dvln, Nv * W);
    plan(&ap, &d->dvq, Nv * W);
    plan(&ap, &d->dvk, Nv * W);
    plan(&ap, &d->dvv, Nv * W);
    plan(&ap, &d->dvatty, Nv * W);
    plan(&ap, &d->dvact, Nv * VF);
    plan(&ap, &d->dvfc1, Nv * VF);
    plan(&ap, &d->dvpatch, Np * W);
    m->arena = arena_alloc(&ap, &m->arena_floats);
    m->tokens = vs_calloc(N, sizeof(int32_t));
    m->img_row = vs_calloc(N, sizeof(int32_t));
    m->targets = vs_calloc(N, sizeof(int32_t));
    m->pos = vs_calloc(N, sizeof(int32_t));
    if (!m->arena || !m->tokens || !m->img_row || !m->targets || !m->pos) {
        vs_error_set(err, VS_ERR_NOMEM, "VLM: cannot allocate activations (%zu MiB)",
                     (m->arena_floats ? m->arena_floats : 0) * 4 >> 20);
        vs_train_vlm_free(m);
        return NULL;
    }
    vs_train_rope_table(a->rope_cs, cfg->max_seq, m->D, cfg->rope_base);
    return m;
}

void vs_train_vlm_free(vs_train_vlm *m) {
    if (!m) return;
    vs_train_params_free(&m->params);
    vs_free(m->arena);
    vs_free(m->tokens);
    vs_free(m->img_row);
    vs_free(m->targets);
    vs_free(m->pos);
    vs_free(m->ground);
    vs_free(m);
}

const vs_train_vlm_config *vs_train_vlm_cfg(const vs_train_vlm *m) { return &m->cfg; }
vs_train_params *vs_train_vlm_params(vs_train_vlm *m) { return &m->params; }

void vs_train_vlm_views(vs_train_vlm *m, vs_train_vlm_tensors *w, vs_train_vlm_tensors *dw) {
    if (w) *w = m->w;
    if (dw) *dw = m->g;
}

int64_t vs_train_vlm_n_params(const vs_train_vlm *m, int group) {
    int64_t n = 0;
    for (int i = 0; i < m->params.n_tensors; i++) {
        const vs_train_tensor *t = &m->params.tensors[i];
        if (group >= 0 && t->group != group) continue;
        if (m->cfg.v_blocks == 0 && t->group == VS_TRAIN_GROUP_VISION && i >= 5 && i <= 20) continue;
        n += (int64_t)t->numel;
    }
    return n;
}

void vs_train_vlm_init(vs_train_vlm *m, uint64_t seed) {
    vs_rng rng;
    vs_rng_seed(&rng, seed);
    vs_train_params *p = &m->params;
    for (int i = 0; i < p->n_tensors; i++) {
        const vs_train_tensor *t = &p->tensors[i];
        float *x = p->data + t->offset;
        int blocks = t->group == VS_TRAIN_GROUP_VISION ? m->cfg.v_blocks : m->cfg.n_layers;
        float std = 0.02f;
        if (k_specs[i].init == 'r') std = (float)(0.02 / sqrt(2.0 * VS_MAX(blocks, 1)));
        for (size_t j = 0; j < t->numel; j++) {
            switch (k_specs[i].init) {
            case '1': x[j] = 1.0f; break;
            case '0': x[j] = 0.0f; break;
            default: x[j] = std * vs_rng_normal(&rng); break;
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Forward */

static vs_status check_batch(const vs_train_vlm *m, const vs_train_batch *b, vs_error *err) {
    const vs_train_vlm_config *c = &m->cfg;
    if (b->B < 1 || b->T < 1 || b->B > m->max_B || b->T > m->max_T)
        return vs_error_set(err, VS_ERR_INVALID, "VLM batch: %d x %d rows exceeds the capacity %d x %d", b->B,
                            b->T, m->max_B, m->max_T);
    if (b->n_images < 0 || b->n_images > m->max_images || (b->n_images > 0 && !b->pixels))
        return vs_error_set(err, VS_ERR_INVALID, "VLM batch: %d images (capacity %d, pixels %s)", b->n_images,
                            m->max_images, b->pixels ? "given" : "missing");
    if (!b->tokens || !b->targets || !b->loss_mask)
        return vs_error_set(err, VS_ERR_INVALID, "VLM batch: tokens, targets and loss_mask are required");
    int64_t n_img_rows = (int64_t)b->n_images * m->NR;
    for (int64_t i = 0; i < (int64_t)b->B * b->T; i++) {
        int32_t ir = b->img_row ? b->img_row[i] : -1;
        if (ir >= 0) {
            if (ir >= n_img_rows)
                return vs_error_set(err, VS_ERR_INVALID, "VLM batch: row %lld takes image row %d of %lld",
                                    (long long)i, ir, (long long)n_img_rows);
        } else if (b->tokens[i] < 0 || b->tokens[i] >= c->vocab) {
            return vs_error_set(err, VS_ERR_INVALID, "VLM batch: row %lld has token %d (vocab %d)",
                                (long long)i, b->tokens[i], c->vocab);
        }
        if (b->loss_mask[i] != 0.0f && (b->targets[i] < 0 || b->targets[i] >= c->vocab))
            return vs_error_set(err, VS_ERR_INVALID, "VLM batch: row %lld has target %d (vocab %d)",
                                (long long)i, b->targets[i], c->vocab);
        if (!(b->loss_mask[i] >= 0.0f) || !isfinite(b->loss_mask[i]))
            return vs_error_set(err, VS_ERR_INVALID, "VLM batch: row %lld has loss mask %g", (long long)i,
                                (double)b->loss_mask[i]);
        if (b->pos && (b->pos[i] < 0 || b->pos[i] >= c->max_seq))
            return vs_error_set(err, VS_ERR_INVALID, "VLM batch: row %lld has position %d (max_seq %d)",
                                (long long)i, b->pos[i], c->max_seq);
    }
    if (b->n_ground < 0 || (b->n_ground > 0 && !b->ground))
        return vs_error_set(err, VS_ERR_INVALID, "VLM batch: %d grounds", b->n_ground);
    for (int i = 0; i < b->n_ground; i++) {
        const vs_train_ground *g = &b->ground[i];
        int last = 63;
        while (last >= 0 && !(g->mask >> last & 1)) last--;
        if (g->b < 0 || g->b >= b->B || g->q < 0 || g->q >= b->T || g->k0 < 0 || last < 0 || g->k0 + last > g->q)
            return vs_error_set(err, VS_ERR_INVALID,
                                "VLM batch: ground %d (sequence %d, query row %d, keys from row %d) is outside "
                                "the batch or after its query",
                                i, g->b, g->q, g->k0);
    }
    return VS_OK;
}

/* The tower: pixels -> a->v_feat (NI * NP, W), the projector's input. */
static void tower_forward(vs_train_vlm *m, vs_threadpool *tp, const float *pixels, int NI) {
    const vs_train_vlm_config *c = &m->cfg;
    const vs_train_vlm_tensors *w = &m->w;
    vlm_acts *a = &m->a;
    int W = c->v_width, VF = c->v_ffn, VH = c->v_heads, NP = m->NP, TV = m->TV;
    int Nv = NI * TV, Np = NI * NP;
    size_t sNv = (size_t)m->max_images * TV; /* per-block stride in rows */
    vs_train_patch_embed_forward(tp, a->v_patch, a->v_col, pixels, w->v_patch, NI, 3, c->image_size,
                                 c->patch_size, W);
    vs_train_vit_embed_forward(a->v_emb, a->v_patch, w->v_cls, w->v_pos, NI, NP, W);
    vs_train_layernorm_forward(a->v_x0, a->v_pre_mean, a->v_pre_rstd, a->v_emb, w->v_pre_ln_w, w->v_pre_ln_b,
                               Nv, W, c->v_eps);
    const float *x = a->v_x0;
    for (int l = 0; l < c->v_blocks; l++) {
        size_t ow = (size_t)l * W, oww = (size_t)l * W * W, ovf = (size_t)l * VF, o = l * sNv;
        float *ln1 = a->v_ln1 + o * W, *q = a->v_q + o * W, *k = a->v_k + o * W, *v = a->v_v + o * W;
        float *att = a->v_att + (size_t)l * m->max_images * VH * TV * TV, *atty = a->v_atty + o * W;
        float *res1 = a->v_res1 + o * W, *ln2 = a->v_ln2 + o * W, *res2 = a->v_res2 + o * W;
        float *fc1 = a->v_fc1 + o * VF, *act = a->v_act + o * VF;
        vs_train_layernorm_forward(ln1, a->v_ln1_mean + o, a->v_ln1_rstd + o, x, w->v_ln1_w + ow,
                                   w->v_ln1_b + ow, Nv, W, c->v_eps);
        vs_train_linear_forward(tp, q, ln1, w->v_q_w + oww, w->v_q_b + ow, Nv, W, W);
        vs_train_linear_forward(tp, k, ln1, w->v_k_w + oww, w->v_k_b + ow, Nv, W, W);
        vs_train_linear_forward(tp, v, ln1, w->v_v_w + oww, w->v_v_b + ow, Nv, W, W);
        vs_train_self_attention_forward(tp, atty, att, q, k, v, NI, TV, VH, VH, W / VH, false);
        vs_train_linear_forward(tp, a->tmp, atty, w->v_o_w + oww, w->v_o_b + ow, Nv, W, W);
        vs_train_add_forward_tp(tp, res1, x, a->tmp, (size_t)Nv * W);
        vs_train_layernorm_forward(ln2, a->v_ln2_mean + o, a->v_ln2_rstd + o, res1, w->v_ln2_w + ow,
                                   w->v_ln2_b + ow, Nv, W, c->v_eps);
        vs_train_linear_forward(tp, fc1, ln2, w->v_fc1_w + ovf * W, w->v_fc1_b + ovf, Nv, W, VF);
        vs_train_quick_gelu_forward(act, fc1, (size_t)Nv * VF);
        vs_train_linear_forward(tp, a->tmp, act, w->v_fc2_w + ovf * W, w->v_fc2_b + ow, Nv, VF, W);
        vs_train_add_forward_tp(tp, res2, res1, a->tmp, (size_t)Nv * W);
        x = res2;
    }
    vs_train_drop_cls_forward(a->v_feat_raw, x, NI, NP, W);
    if (c->v_post_ln)
        vs_train_layernorm_forward(a->v_feat, a->v_post_mean, a->v_post_rstd, a->v_feat_raw, w->v_post_ln_w,
                                   w->v_post_ln_b, Np, W, c->v_eps);
    else
        memcpy(a->v_feat, a->v_feat_raw, sizeof(float) * (size_t)Np * W);
}

static void vision_forward(vs_train_vlm *m, vs_threadpool *tp, const float *pixels, int NI) {
    const vs_train_vlm_config *c = &m->cfg;
    const vs_train_vlm_tensors *w = &m->w;
    vlm_acts *a = &m->a;
    int W = c->v_width, C = c->width, Np = NI * m->NR;
    tower_forward(m, tp, pixels, NI);
    const float *feat = a->v_feat;
    if (m->pool_k > 1) {
        vs_train_pool_grid_forward(a->v_pool, a->v_feat, NI, m->G, m->pool_k, W);
        feat = a->v_pool;
    }
    vs_train_linear_forward(tp, a->mm_h, feat, w->mm0_w, w->mm0_b, Np, W, C);
    vs_train_gelu_erf_forward(a->mm_act, a->mm_h, (size_t)Np * C);
    vs_train_linear_forward(tp, a->mm_out, a->mm_act, w->mm2_w, w->mm2_b, Np, C, C);
}

/* Stride of one LM layer's slice of a (L, N, X) activation. */
#define LSTRIDE(m, X) ((size_t)(m)->max_B * (m)->max_T * (X))

static double lm_forward(vs_train_vlm *m, vs_threadpool *tp, int B, int T) {
    const vs_train_vlm_config *c = &m->cfg;
    const vs_train_vlm_tensors *w = &m->w;
    vlm_acts *a = &m->a;
    int C = c->width, H = c->n_heads, KVH = c->n_kv_heads, D = m->D, HD = m->HD, KVD = m->KVD, F = c->ffn;
    int N = B * T, V = c->vocab;
    vs_train_embed_forward(a->x_emb, m->tokens, w->wte, N, C);
    for (int n = 0; n < N; n++)
        if (m->img_row[n] >= 0)
            memcpy(a->x_emb + (size_t)n * C, a->mm_out + (size_t)m->img_row[n] * C, sizeof(float) * C);
    const float *x = a->x_emb;
    for (int l = 0; l < c->n_layers; l++) {
        float *ln1 = a->ln1 + l * LSTRIDE(m, C), *r1 = a->ln1_rstd + l * LSTRIDE(m, 1);
        float *q = a->q + l * LSTRIDE(m, HD), *k = a->k + l * LSTRIDE(m, KVD),
              *v = a->v + l * LSTRIDE(m, KVD);
        float *att = a->att + (size_t)l * m->max_B * H * m->max_T * m->max_T,
              *atty = a->atty + l * LSTRIDE(m, HD);
        float *res1 = a->res1 + l * LSTRIDE(m, C), *ln2 = a->ln2 + l * LSTRIDE(m, C);
        float *r2 = a->ln2_rstd + l * LSTRIDE(m, 1), *res2 = a->res2 + l * LSTRIDE(m, C);
        float *gate = a->gate + l * LSTRIDE(m, F), *up = a->up + l * LSTRIDE(m, F),
              *h = a->hmid + l * LSTRIDE(m, F);
        vs_train_rmsnorm_forward_tp(tp, ln1, r1, x, w->attn_norm + (size_t)l * C, N, C, c->rms_eps);
        vs_train_linear_forward(tp, q, ln1, w->wq + (size_t)l * HD * C, NULL, N, C, HD);
        vs_train_linear_forward(tp, k, ln1, w->wk + (size_t)l * KVD * C, NULL, N, C, KVD);
        vs_train_linear_forward(tp, v, ln1, w->wv + (size_t)l * KVD * C, NULL, N, C, KVD);
        vs_train_rope_forward_tp(tp, q, q, a->rope_cs, m->pos, N, H, D);
        vs_train_rope_forward_tp(tp, k, k, a->rope_cs, m->pos, N, KVH, D);
        vs_train_self_attention_forward(tp, atty, att, q, k, v, B, T, H, KVH, D, true);
        vs_train_linear_forward(tp, a->tmp, atty, w->wo + (size_t)l * C * HD, NULL, N, HD, C);
        vs_train_add_forward_tp(tp, res1, x, a->tmp, (size_t)N * C);
        vs_train_rmsnorm_forward_tp(tp, ln2, r2, res1, w->ffn_norm + (size_t)l * C, N, C, c->rms_eps);
        vs_train_linear_forward(tp, gate, ln2, w->w_gate + (size_t)l * F * C, NULL, N, C, F);
        vs_train_linear_forward(tp, up, ln2, w->w_up + (size_t)l * F * C, NULL, N, C, F);
        vs_train_swiglu_forward_tp(tp, h, gate, up, (size_t)N * F);
        vs_train_linear_forward(tp, a->tmp, h, w->w_down + (size_t)l * C * F, NULL, N, F, C);
        vs_train_add_forward_tp(tp, res2, res1, a->tmp, (size_t)N * C);
        x = res2;
    }
    vs_train_rmsnorm_forward_tp(tp, a->lnf, a->lnf_rstd, x, w->out_norm, N, C, c->rms_eps);
    vs_train_linear_forward(tp, a->logits, a->lnf, w->lm_head, NULL, N, C, V);
    return vs_train_xent_forward_tp(tp, a->probs, a->logits, m->targets, a->lw, N, V);
}

vs_status vs_train_vlm_set_pool(vs_train_vlm *m, int k, vs_error *err) {
    if (k < 1 || k > m->G)
        return vs_error_set(err, VS_ERR_INVALID, "VLM: pool size %d (1 .. the %d x %d patch grid)", k, m->G, m->G);
    const int Gk = vs_pool_out_side(m->G, k);
    m->pool_k = k, m->NR = Gk * Gk;
    m->have_forward = false;
    return VS_OK;
}

int vs_train_vlm_image_rows(const vs_train_vlm *m) { return m->NR; }

void vs_train_vlm_set_norm_cap(vs_train_vlm *m, float ratio, float weight) {
    m->cap_ratio = ratio > 0 ? ratio : 0;
    m->cap_weight = ratio > 0 && weight > 0 ? weight : 0;
}

double vs_train_vlm_norm_cap_loss(const vs_train_vlm *m) { return m->cap_loss; }

vs_status vs_train_vlm_set_ground(vs_train_vlm *m, int layer, float weight, vs_train_ground_mode mode,
                                  vs_error *err) {
    if (layer < 0 || layer >= m->cfg.n_layers)
        return vs_error_set(err, VS_ERR_INVALID, "VLM: grounding layer %d (0 .. %d)", layer, m->cfg.n_layers - 1);
    if (mode != VS_TRAIN_GROUND_ALL && mode != VS_TRAIN_GROUND_LM && mode != VS_TRAIN_GROUND_QK)
        return vs_error_set(err, VS_ERR_INVALID, "VLM: grounding mode %d", (int)mode);
    m->ground_layer = layer;
    m->ground_weight = weight > 0 ? weight : 0;
    m->ground_mode = mode;
    return VS_OK;
}

double vs_train_vlm_ground_loss(const vs_train_vlm *m) { return m->ground_loss; }

vs_status vs_train_vlm_forward(vs_train_vlm *m, vs_threadpool *tp, const vs_train_batch *b, float *loss,
                               vs_error *err) {
    m->have_forward = false;
    vs_status s = check_batch(m, b, err);
    if (s) return s;
    int N = b->B * b->T;
    double counted = 0;
    for (int i = 0; i < N; i++) {
        m->tokens[i] = b->img_row && b->img_row[i] >= 0 ? -1 : b->tokens[i];
        m->img_row[i] = b->img_row && b->img_row[i] >= 0 ? b->img_row[i] : -1;
        m->targets[i] = b->loss_mask[i] != 0.0f ? b->targets[i] : 0;
        m->pos[i] = b->pos ? b->pos[i] : i % b->T;
        counted += b->loss_mask[i];
    }
    double norm = b->loss_norm > 0 ? b->loss_norm : counted;
    for (int i = 0; i < N; i++) m->a.lw[i] = norm > 0 ? (float)(b->loss_mask[i] / norm) : 0.0f;
    m->B = b->B, m->T = b->T, m->NI = b->n_images;
    m->has_images = false;
    for (int i = 0; i < N; i++) m->has_images |= m->img_row[i] >= 0;
    if (m->has_images) vision_forward(m, tp, b->pixels, b->n_images);
    double l = lm_forward(m, tp, b->B, b->T);
    m->ground_loss = 0, m->n_ground = 0;
    if (m->ground_weight > 0 && b->n_ground > 0) {
        if (b->n_ground > m->ground_cap) {
            vs_train_ground *g = vs_realloc(m->ground, sizeof(*g) * (size_t)b->n_ground);
            if (!g) return vs_error_set(err, VS_ERR_NOMEM, "VLM forward: out of memory");
            m->ground = g, m->ground_cap = b->n_ground;
        }
        memcpy(m->ground, b->ground, sizeof(*m->ground) * (size_t)b->n_ground);
        m->n_ground = b->n_ground;
        const int H = m->cfg.n_heads;
        const float *att = m->a.att + (size_t)m->ground_layer * m->max_B * H * m->max_T * m->max_T;
        m->ground_loss = vs_train_attn_ground_forward(att, b->B, b->T, H, 0, m->ground, m->n_ground);
        l += m->ground_weight * m->ground_loss;
    }
    m->cap_loss = 0;
    if (m->has_images && m->cap_weight > 0) {
        const int C = m->cfg.width;
        m->cap_tau = (float)(m->cap_ratio * vs_mean_row_norm(m->w.wte, m->cfg.vocab, C));
        if (m->cap_tau > 0)
            m->cap_loss = m->cap_weight * vs_train_norm_cap_forward(m->a.mm_out, b->n_images * m->NR, C, m->cap_tau);
        l += m->cap_loss;
    }
    if (loss) *loss = (float)l;
    m->have_forward = true;
    return VS_OK;
}

const float *vs_train_vlm_logits(const vs_train_vlm *m) { return m->a.logits; }

/* ---------------------------------------------------------------------------------------------- */
/* Backward */

static void zero(vs_threadpool *tp, float *x, size_t n) { vs_train_zero_tp(tp, x, n); }

/* Layer l's query and key projections, backward: d->dq and d->dk (after RoPE) into wq's and wk's
 * gradients (when train_lm) and into dln (when not NULL). */
static void qk_backward(vs_train_vlm *m, vs_threadpool *tp, int l, const float *ln1, float *dln, bool train_lm) {
    const vs_train_vlm_config *c = &m->cfg;
    vlm_grads *d = &m->d;
    const int N = m->B * m->T, C = c->width, HD = m->HD, KVD = m->KVD;
    const size_t oq = (size_t)l * HD * C, ok = (size_t)l * KVD * C;
    zero(tp, d->dqr, (size_t)N * HD);
    zero(tp, d->dkr, (size_t)N * KVD);
    vs_train_rope_backward_tp(tp, d->dqr, d->dq, m->a.rope_cs, m->pos, N, c->n_heads, m->D);
    vs_train_rope_backward_tp(tp, d->dkr, d->dk, m->a.rope_cs, m->pos, N, c->n_kv_heads, m->D);
    vs_train_linear_backward(tp, dln, train_lm ? m->g.wq + oq : NULL, NULL, d->dqr, ln1, m->w.wq + oq, N, C, HD);
    vs_train_linear_backward(tp, dln, train_lm ? m->g.wk + ok : NULL, NULL, d->dkr, ln1, m->w.wk + ok, N, C, KVD);
}

/* LM backward; leaves d(loss)/d(image rows) in d->dmm_out when want_img. ground_only: the grounding
 * term's gradient alone, from the grounded layer down, into the LM's weights (VS_TRAIN_GROUND_LM's second
 * pass); otherwise the LM loss's, with the term's as its mode says. */
static void lm_backward(vs_train_vlm *m, vs_threadpool *tp, bool train_lm, bool want_img, bool ground_only) {
    const vs_train_vlm_config *c = &m->cfg;
    const vs_train_vlm_tensors *w = &m->w;
    vlm_acts *a = &m->a;
    vlm_grads *d = &m->d;
    int B = m->B, T = m->T, N = B * T, C = c->width, H = c->n_heads, KVH = c->n_kv_heads, D = m->D;
    int HD = m->HD, KVD = m->KVD, F = c->ffn, V = c->vocab, L = c->n_layers;
#define G(field) (train_lm ? m->g.field : NULL)
#define GL(field, off) (train_lm ? m->g.field + (off) : NULL)
    const bool has_ground = m->n_ground > 0;
    zero(tp, d->dx, (size_t)N * C);
    if (!ground_only) {
        zero(tp, d->dlogits, (size_t)N * V);
        vs_train_xent_backward_tp(tp, d->dlogits, a->probs, m->targets, a->lw, 1.0f, N, V);
        zero(tp, d->dln, (size_t)N * C);
        vs_train_linear_backward(tp, d->dln, G(lm_head), NULL, d->dlogits, a->lnf, w->lm_head, N, C, V);
        const float *xlast = a->res2 + (L - 1) * LSTRIDE(m, C);
        vs_train_rmsnorm_backward_tp(tp, d->dx, G(out_norm), d->dln, xlast, w->out_norm, a->lnf_rstd, N, C);
    }
    for (int l = ground_only ? m->ground_layer : L - 1; l >= 0; l--) {
        /* the second pass starts at the grounded layer, where nothing but the term pulls (dx is 0 there,
         * so its MLP, output projection and values have nothing to pass on) */
        const bool top_of_ground = ground_only && l == m->ground_layer;
        const float *xin = l ? a->res2 + (l - 1) * LSTRIDE(m, C) : a->x_emb;
        const float *ln1 = a->ln1 + l * LSTRIDE(m, C), *r1 = a->ln1_rstd + l * LSTRIDE(m, 1);
        const float *q = a->q + l * LSTRIDE(m, HD), *k = a->k + l * LSTRIDE(m, KVD);
        const float *v = a->v + l * LSTRIDE(m, KVD);
        const float *att = a->att + (size_t)l * m->max_B * H * m->max_T * m->max_T;
        const float *atty = a->atty + l * LSTRIDE(m, HD), *res1 = a->res1 + l * LSTRIDE(m, C);
        const float *ln2 = a->ln2 + l * LSTRIDE(m, C), *r2 = a->ln2_rstd + l * LSTRIDE(m, 1);
        const float *gate = a->gate + l * LSTRIDE(m, F), *up = a->up + l * LSTRIDE(m, F);
        const float *h = a->hmid + l * LSTRIDE(m, F);
        size_t oc = (size_t)l * C;
        zero(tp, d->dq, (size_t)N * HD);
        zero(tp, d->dk, (size_t)N * KVD);
        zero(tp, d->dv, (size_t)N * KVD);
        if (!top_of_ground) {
            /* MLP branch: res2 = res1 + w_down(swiglu(w_gate ln2, w_up ln2)), ln2 = rms(res1) */
            zero(tp, d->dh, (size_t)N * F);
            vs_train_linear_backward(tp, d->dh, GL(w_down, oc * F), NULL, d->dx, h, w->w_down + oc * F, N, F, C);
            zero(tp, d->dgate, (size_t)N * F);
            zero(tp, d->dup, (size_t)N * F);
            vs_train_swiglu_backward_tp(tp, d->dgate, d->dup, d->dh, gate, up, (size_t)N * F);
            zero(tp, d->dln, (size_t)N * C);
            vs_train_linear_backward(tp, d->dln, GL(w_gate, oc * F), NULL, d->dgate, ln2, w->w_gate + oc * F, N,
                                     C, F);
            vs_train_linear_backward(tp, d->dln, GL(w_up, oc * F), NULL, d->dup, ln2, w->w_up + oc * F, N, C, F);
            vs_train_rmsnorm_backward_tp(tp, d->dx, GL(ffn_norm, oc), d->dln, res1, w->ffn_norm + oc, r2, N, C);
            /* attention branch: res1 = xin + wo(attn(rope(wq ln1), rope(wk ln1), wv ln1)), ln1 = rms(xin) */
            zero(tp, d->datty, (size_t)N * HD);
            vs_train_linear_backward(tp, d->datty, GL(wo, oc * HD), NULL, d->dx, atty, w->wo + oc * HD, N, HD, C);
            vs_train_self_attention_backward(tp, d->dq, d->dk, d->dv, d->datt, d->datty, att, q, k, v, B, T, H,
                                             KVH, D, true);
        }
        const bool ground_here = l == m->ground_layer && has_ground;
        if (ground_here && (top_of_ground || m->ground_mode == VS_TRAIN_GROUND_ALL)) /* the term's pull on head 0 */
            vs_train_attn_ground_backward(d->dq, d->dk, att, q, k, B, T, H, KVH, D, 0, m->ground, m->n_ground,
                                          m->ground_weight);
        zero(tp, d->dln, (size_t)N * C);
        qk_backward(m, tp, l, ln1, d->dln, train_lm);
        if (!top_of_ground)
            vs_train_linear_backward(tp, d->dln, GL(wv, (size_t)l * KVD * C), NULL, d->dv, ln1,
                                     w->wv + (size_t)l * KVD * C, N, C, KVD);
        vs_train_rmsnorm_backward_tp(tp, d->dx, GL(attn_norm, oc), d->dln, xin, w->attn_norm + oc, r1, N, C);
        if (ground_here && m->ground_mode == VS_TRAIN_GROUND_QK && train_lm) {
            /* the grounding term's pull, into this layer's query and key weights alone: nothing below
             * them (the residual stream, the projector, the tower) learns from it */
            zero(tp, d->dq, (size_t)N * HD);
            zero(tp, d->dk, (size_t)N * KVD);
            vs_train_attn_ground_backward(d->dq, d->dk, att, q, k, B, T, H, KVH, D, 0, m->ground, m->n_ground,
                                          m->ground_weight);
            qk_backward(m, tp, l, ln1, NULL, true);
        }
    }
    if (train_lm) vs_train_embed_backward(m->g.wte, d->dx, m->tokens, N, C);
    if (want_img) {
        zero(tp, d->dmm_out, (size_t)m->NI * m->NR * C);
        for (int n = 0; n < N; n++)
            if (m->img_row[n] >= 0) {
                float *dst = d->dmm_out + (size_t)m->img_row[n] * C;
                const float *src = d->dx + (size_t)n * C;
                for (int i = 0; i < C; i++) dst[i] += src[i];
            }
    }
#undef G
#undef GL
}

static void tower_backward(vs_train_vlm *m, vs_threadpool *tp, const float *dfeat);

static void vision_backward(vs_train_vlm *m, vs_threadpool *tp, bool train_proj, bool train_vis) {
    const vs_train_vlm_config *c = &m->cfg;
    const vs_train_vlm_tensors *w = &m->w;
    vlm_acts *a = &m->a;
    vlm_grads *d = &m->d;
    int W = c->v_width, C = c->width, Np = m->NI * m->NR;
    const bool pooled = m->pool_k > 1;
#define GP(field) (train_proj ? m->g.field : NULL)
    zero(tp, d->dmm_act, (size_t)Np * C);
    vs_train_linear_backward(tp, d->dmm_act, GP(mm2_w), GP(mm2_b), d->dmm_out, a->mm_act, w->mm2_w, Np, C, C);
    zero(tp, d->dmm_h, (size_t)Np * C);
    vs_train_gelu_erf_backward(d->dmm_h, d->dmm_act, a->mm_h, (size_t)Np * C);
    float *dproj_in = pooled ? d->dpool : d->dfeat;
    if (train_vis) zero(tp, dproj_in, (size_t)Np * W);
    vs_train_linear_backward(tp, train_vis ? dproj_in : NULL, GP(mm0_w), GP(mm0_b), d->dmm_h,
                             pooled ? a->v_pool : a->v_feat, w->mm0_w, Np, W, C);
#undef GP
    if (!train_vis) return;
    if (pooled) {
        zero(tp, d->dfeat, (size_t)m->NI * m->NP * W);
        vs_train_pool_grid_backward(d->dfeat, d->dpool, m->NI, m->G, m->pool_k, W);
    }
    tower_backward(m, tp, d->dfeat);
}

/* The tower's backward from dfeat = dL/d(v_feat) (NI * NP, W), accumulated into its gradients. */
static void tower_backward(vs_train_vlm *m, vs_threadpool *tp, const float *dfeat) {
    const vs_train_vlm_config *c = &m->cfg;
    const vs_train_vlm_tensors *w = &m->w;
    const vs_train_vlm_tensors *g = &m->g;
    vlm_acts *a = &m->a;
    vlm_grads *d = &m->d;
    int NI = m->NI, W = c->v_width, VF = c->v_ffn, VH = c->v_heads, NP = m->NP, TV = m->TV;
    int Nv = NI * TV, Np = NI * NP;
    size_t sNv = (size_t)m->max_images * TV;
    if (c->v_post_ln) {
        zero(tp, d->dfeat_raw, (size_t)Np * W);
        vs_train_layernorm_backward(d->dfeat_raw, g->v_post_ln_w, g->v_post_ln_b, dfeat, a->v_feat_raw,
                                    w->v_post_ln_w, a->v_post_mean, a->v_post_rstd, Np, W);
        dfeat = d->dfeat_raw;
    }
    zero(tp, d->dvx, (size_t)Nv * W);
    vs_train_drop_cls_backward(d->dvx, dfeat, NI, NP, W);
    for (int l = c->v_blocks - 1; l >= 0; l--) {
        size_t ow = (size_t)l * W, oww = (size_t)l * W * W, ovf = (size_t)l * VF, o = l * sNv;
        const float *xin = l ? a->v_res2 + (o - sNv) * W : a->v_x0;
        const float *ln1 = a->v_ln1 + o * W, *q = a->v_q + o * W, *k = a->v_k + o * W, *v = a->v_v + o * W;
        const float *att = a->v_att + (size_t)l * m->max_images * VH * TV * TV, *atty = a->v_atty + o * W;
        const float *res1 = a->v_res1 + o * W, *ln2 = a->v_ln2 + o * W;
        const float *fc1 = a->v_fc1 + o * VF, *act = a->v_act + o * VF;
        /* MLP branch: res2 = res1 + fc2(quick_gelu(fc1(ln2))), ln2 = LN(res1) */
        zero(tp, d->dvact, (size_t)Nv * VF);
        vs_train_linear_backward(tp, d->dvact, g->v_fc2_w + ovf * W, g->v_fc2_b + ow, d->dvx, act,
                                 w->v_fc2_w + ovf * W, Nv, VF, W);
        zero(tp, d->dvfc1, (size_t)Nv * VF);
        vs_train_quick_gelu_backward(d->dvfc1, d->dvact, fc1, (size_t)Nv * VF);
        zero(tp, d->dvln, (size_t)Nv * W);
        vs_train_linear_backward(tp, d->dvln, g->v_fc1_w + ovf * W, g->v_fc1_b + ovf, d->dvfc1, ln2,
                                 w->v_fc1_w + ovf * W, Nv, W, VF);
        vs_train_layernorm_backward(d->dvx, g->v_ln2_w + ow, g->v_ln2_b + ow, d->dvln, res1, w->v_ln2_w + ow,
                                    a->v_ln2_mean + o, a->v_ln2_rstd + o, Nv, W);
        /* attention branch: res1 = xin + o(MHA(q ln1, k ln1, v ln1)), ln1 = LN(xin) */
        zero(tp, d->dvatty, (size_t)Nv * W);
        vs_train_linear_backward(tp, d->dvatty, g->v_o_w + oww, g->v_o_b + ow, d->dvx, atty, w->v_o_w + oww,
                                 Nv, W, W);
        zero(tp, d->dvq, (size_t)Nv * W);
        zero(tp, d->dvk, (size_t)Nv * W);
        zero(tp, d->dvv, (size_t)Nv * W);
        vs_train_self_attention_backward(tp, d->dvq, d->dvk, d->dvv, d->datt, d->dvatty, att, q, k, v, NI, TV,
                                         VH, VH, W / VH, false);
        zero(tp, d->dvln, (size_t)Nv * W);
        vs_train_linear_backward(tp, d->dvln, g->v_q_w + oww, g->v_q_b + ow, d->dvq, ln1, w->v_q_w + oww, Nv,
                                 W, W);
        vs_train_linear_backward(tp, d->dvln, g->v_k_w + oww, g->v_k_b + ow, d->dvk, ln1, w->v_k_w + oww, Nv,
                                 W, W);
        vs_train_linear_backward(tp, d->dvln, g->v_v_w + oww, g->v_v_b + ow, d->dvv, ln1, w->v_v_w + oww, Nv,
                                 W, W);
        vs_train_layernorm_backward(d->dvx, g->v_ln1_w + ow, g->v_ln1_b + ow, d->dvln, xin, w->v_ln1_w + ow,
                                    a->v_ln1_mean + o, a->v_ln1_rstd + o, Nv, W);
    }
    /* x0 = LN_pre(emb), emb = [cls; patches] + pos, patches = conv(pixels) */
    zero(tp, d->dvln, (size_t)Nv * W);
    vs_train_layernorm_backward(d->dvln, g->v_pre_ln_w, g->v_pre_ln_b, d->dvx, a->v_emb, w->v_pre_ln_w,
                                a->v_pre_mean, a->v_pre_rstd, Nv, W);
    zero(tp, d->dvpatch, (size_t)Np * W);
    vs_train_vit_embed_backward(d->dvpatch, g->v_cls, g->v_pos, d->dvln, NI, NP, W);
    vs_train_patch_embed_backward(tp, NULL, g->v_patch, d->dvpatch, a->v_col, w->v_patch, NI, 3,
                                  c->image_size, c->patch_size, W);
}

vs_status vs_train_vlm_backward(vs_train_vlm *m, vs_threadpool *tp, vs_error *err) {
    if (!m->have_forward)
        return vs_error_set(err, VS_ERR_INVALID, "VLM backward: no forward to differentiate (or it failed)");
    const bool *fz = m->params.frozen;
    bool train_lm = !fz[VS_TRAIN_GROUP_LM], train_proj = !fz[VS_TRAIN_GROUP_PROJECTOR];
    bool train_vis = !fz[VS_TRAIN_GROUP_VISION] && m->cfg.v_blocks >= 0;
    bool want_img = m->has_images && (train_proj || train_vis);
    if (!train_lm && !want_img) return VS_OK;
    lm_backward(m, tp, train_lm, want_img, false);
    if (train_lm && m->ground_mode == VS_TRAIN_GROUND_LM && m->n_ground > 0) lm_backward(m, tp, true, false, true);
    if (want_img && m->cap_weight > 0 && m->cap_tau > 0) /* the norm cap's pull on the image rows */
        vs_train_norm_cap_backward(m->d.dmm_out, m->a.mm_out, m->cap_weight, m->NI * m->NR, m->cfg.width,
                                   m->cap_tau);
    if (want_img) vision_backward(m, tp, train_proj, train_vis);
    return VS_OK;
}

vs_status vs_train_vlm_tower_forward(vs_train_vlm *m, vs_threadpool *tp, const float *pixels, int n_images,
                                     vs_error *err) {
    m->have_forward = false;
    if (m->cfg.v_blocks < 0 || n_images < 1 || n_images > m->max_images)
        return vs_error_set(err, VS_ERR_INVALID, "tower forward: %d images (1..%d)", n_images, m->max_images);
    m->NI = n_images;
    tower_forward(m, tp, pixels, n_images);
    return VS_OK;
}

const float *vs_train_vlm_tower_features(const vs_train_vlm *m) { return m->a.v_feat; }

void vs_train_vlm_tower_backward(vs_train_vlm *m, vs_threadpool *tp, const float *dfeat) {
    if (!m->params.frozen[VS_TRAIN_GROUP_VISION]) tower_backward(m, tp, dfeat);
}

/* ---------------------------------------------------------------------------------------------- */
/* FLOPs */

double vs_train_vlm_flops(const vs_train_vlm *m, int B, int T, int n_images) {
    const vs_train_vlm_config *c = &m->cfg;
    double W = c->v_width, VF = c->v_ffn, C = c->width, F = c->ffn, V = c->vocab;
    double NI = n_images, TV = m->TV, NP = m->NP, PP3 = 3.0 * c->patch_size * c->patch_size;
    double Nv = NI * TV, Np = NI * NP, Nr = NI * m->NR, N = (double)B * T, HD = m->HD, KVD = m->KVD;
    double fwd = 0;
    if (n_images > 0) {
        fwd += 2 * Np * PP3 * W;
        fwd += c->v_blocks * (2 * Nv * W * W * 4 + 2 * Nv * W * VF * 2 + 4 * NI * TV * TV * W);
        fwd += 2 * Nr * W * C + 2 * Nr * C * C;
    }
    double causal_keys = (T + 1) / 2.0;
    fwd += c->n_layers * (2 * N * C * (HD + 2 * KVD) + 2 * N * HD * C + 2 * N * C * F * 3 +
                          4 * N * causal_keys * HD);
    fwd += 2 * N * C * V;
    return 3 * fwd; /* backward = input gradients + weight gradients = 2 forwards */
}

/* ---------------------------------------------------------------------------------------------- */
/* Checkpoints */

vs_status vs_train_vlm_save(const vs_train_vlm *m, const vs_train_state *st, const char *path,
                            vs_error *err) {
    return vs_train_vlm_save_ex(m, st, NULL, NULL, path, err);
}

vs_status vs_train_vlm_save_ex(const vs_train_vlm *m, const vs_train_state *st, const vs_train_params *extra,
                               const char *tag, const char *path, vs_error *err) {
    const vs_train_vlm_config *c = &m->cfg;
    vs_gguf_writer *w = vs_gguf_writer_new();
    if (!w) return vs_error_set(err, VS_ERR_NOMEM, "checkpoint %s: out of memory", path);
    vs_gguf_set_str(w, "general.architecture", "vlmspec-train-checkpoint");
    vs_gguf_set_u32(w, "vlm.image_size", (uint32_t)c->image_size);
    vs_gguf_set_u32(w, "vlm.patch_size", (uint32_t)c->patch_size);
    vs_gguf_set_u32(w, "vlm.v_width", (uint32_t)c->v_width);
    vs_gguf_set_u32(w, "vlm.v_ffn", (uint32_t)c->v_ffn);
    vs_gguf_set_u32(w, "vlm.v_heads", (uint32_t)c->v_heads);
    vs_gguf_set_u32(w, "vlm.v_blocks", (uint32_t)c->v_blocks);
    vs_gguf_set_f32(w, "vlm.v_eps", c->v_eps);
    vs_gguf_set_bool(w, "vlm.v_post_ln", c->v_post_ln);
    vs_gguf_set_arr(w, "vlm.image_mean", VS_GGUF_F32, c->image_mean, 3);
    vs_gguf_set_arr(w, "vlm.image_std", VS_GGUF_F32, c->image_std, 3);
    vs_gguf_set_u32(w, "vlm.vocab", (uint32_t)c->vocab);
    vs_gguf_set_u32(w, "vlm.width", (uint32_t)c->width);
    vs_gguf_set_u32(w, "vlm.n_layers", (uint32_t)c->n_layers);
    vs_gguf_set_u32(w, "vlm.n_heads", (uint32_t)c->n_heads);
    vs_gguf_set_u32(w, "vlm.n_kv_heads", (uint32_t)c->n_kv_heads);
    vs_gguf_set_u32(w, "vlm.ffn", (uint32_t)c->ffn);
    vs_gguf_set_u32(w, "vlm.max_seq", (uint32_t)c->max_seq);
    vs_gguf_set_f32(w, "vlm.rms_eps", c->rms_eps);
    vs_gguf_set_f32(w, "vlm.rope_base", c->rope_base);
    vs_status s = extra ? vs_train_checkpoint_add_set(w, extra, tag, err) : VS_OK;
    if (s == VS_OK) s = vs_train_checkpoint_write(w, &m->params, st, path, err);
    else vs_error_wrap(err, "checkpoint %s", path);
    vs_gguf_writer_free(w);
    return s;
}

static vs_status read_cfg(const vs_gguf *g, vs_train_vlm_config *c, vs_error *err) {
    static const char *ikeys[] = {"vlm.image_size", "vlm.patch_size", "vlm.v_width", "vlm.v_ffn",
                                  "vlm.v_heads", "vlm.v_blocks", "vlm.vocab", "vlm.width", "vlm.n_layers",
                                  "vlm.n_heads", "vlm.n_kv_heads", "vlm.ffn", "vlm.max_seq"};
    int *idst[] = {&c->image_size, &c->patch_size, &c->v_width, &c->v_ffn, &c->v_heads, &c->v_blocks,
                   &c->vocab, &c->width, &c->n_layers, &c->n_heads, &c->n_kv_heads, &c->ffn, &c->max_seq};
    for (size_t i = 0; i < VS_ARRAY_LEN(ikeys); i++) {
        int64_t v;
        vs_status s = vs_gguf_require_int(g, ikeys[i], &v, err);
        if (s) return s;
        if (v < 0 || v > (1 << 30))
            return vs_error_set(err, VS_ERR_FORMAT, "%s: %s = %lld out of range", vs_gguf_name(g), ikeys[i],
                                (long long)v);
        *idst[i] = (int)v;
    }
    static const char *fkeys[] = {"vlm.v_eps", "vlm.rms_eps", "vlm.rope_base"};
    float *fdst[] = {&c->v_eps, &c->rms_eps, &c->rope_base};
    for (size_t i = 0; i < VS_ARRAY_LEN(fkeys); i++) {
        double v;
        vs_status s = vs_gguf_require_float(g, fkeys[i], &v, err);
        if (s) return s;
        *fdst[i] = (float)v;
    }
    bool post = false; /* absent in checkpoints from before v.post_ln existed */
    if (vs_gguf_get_bool(g, "vlm.v_post_ln", &post) == -1)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: vlm.v_post_ln is not a bool", vs_gguf_name(g));
    c->v_post_ln = post;
    if (vs_gguf_get_f32_array(g, "vlm.image_mean", c->image_mean, 3) != 3 ||
        vs_gguf_get_f32_array(g, "vlm.image_std", c->image_std, 3) != 3)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: vlm.image_mean / image_std must be 3 floats",
                            vs_gguf_name(g));
    return VS_OK;
}

vs_status vs_train_vlm_config_read(const char *path, vs_train_vlm_config *c, vs_error *err) {
    vs_gguf *g = vs_gguf_open(path, err);
    if (!g) return err ? err->code : VS_ERR_IO;
    memset(c, 0, sizeof(*c));
    vs_status s = read_cfg(g, c, err);
    if (s) vs_error_wrap(err, "reading checkpoint %s", path);
    vs_gguf_close(g);
    return s;
}

/* One field of vs_train_vlm_config as the messages name it. */
typedef struct cfg_field {
    const char *name;
    char kind; /* 'i' int, 'f' float, 'b' bool */
    size_t off;
} cfg_field;

#define CFG_F(name, kind, member) {name, kind, offsetof(vs_train_vlm_config, member)}
static const cfg_field k_cfg_fields[] = {
    CFG_F("image size", 'i', image_size),
    CFG_F("patch", 'i', patch_size),
    CFG_F("ViT width", 'i', v_width),
    CFG_F("ViT MLP", 'i', v_ffn),
    CFG_F("ViT heads", 'i', v_heads),
    CFG_F("ViT blocks", 'i', v_blocks),
    CFG_F("post-LN", 'b', v_post_ln),
    CFG_F("vocabulary", 'i', vocab),
    CFG_F("LM width", 'i', width),
    CFG_F("LM layers", 'i', n_layers),
    CFG_F("LM heads", 'i', n_heads),
    CFG_F("KV heads", 'i', n_kv_heads),
    CFG_F("SwiGLU width", 'i', ffn),
    CFG_F("context", 'i', max_seq),
    CFG_F("ViT LayerNorm epsilon", 'f', v_eps),
    CFG_F("RMSNorm epsilon", 'f', rms_eps),
    CFG_F("RoPE base", 'f', rope_base),
    CFG_F("image mean[0]", 'f', image_mean[0]),
    CFG_F("image mean[1]", 'f', image_mean[1]),
    CFG_F("image mean[2]", 'f', image_mean[2]),
    CFG_F("image std[0]", 'f', image_std[0]),
    CFG_F("image std[1]", 'f', image_std[1]),
    CFG_F("image std[2]", 'f', image_std[2]),
};
#undef CFG_F

static void cfg_field_str(const cfg_field *f, const vs_train_vlm_config *c, char *buf, size_t n) {
    const char *p = (const char *)c + f->off;
    if (f->kind == 'i') snprintf(buf, n, "%d", *(const int *)p);
    else if (f->kind == 'b') snprintf(buf, n, "%s", *(const bool *)p ? "on" : "off");
    else snprintf(buf, n, "%.9g", (double)*(const float *)p);
}

static bool cfg_field_same(const cfg_field *f, const vs_train_vlm_config *a, const vs_train_vlm_config *b) {
    const char *pa = (const char *)a + f->off, *pb = (const char *)b + f->off;
    if (f->kind == 'i') return *(const int *)pa == *(const int *)pb;
    if (f->kind == 'b') return *(const bool *)pa == *(const bool *)pb;
    return *(const float *)pa == *(const float *)pb; /* stored as F32: the same setting is bit-equal */
}

vs_status vs_train_vlm_config_match(const vs_train_vlm_config *want, const char *want_what,
                                    const vs_train_vlm_config *have, const char *path, vs_error *err) {
    for (size_t i = 0; i < VS_ARRAY_LEN(k_cfg_fields); i++) {
        const cfg_field *f = &k_cfg_fields[i];
        if (cfg_field_same(f, want, have)) continue;
        char h[32], w[32];
        cfg_field_str(f, have, h, sizeof(h));
        cfg_field_str(f, want, w, sizeof(w));
        return vs_error_set(err, VS_ERR_INVALID, "%s: its model has %s %s, %s %s", path, f->name, h,
                            want_what ? want_what : "expected", w);
    }
    return VS_OK;
}

vs_train_vlm *vs_train_vlm_load(const char *path, int max_B, int max_T, int max_images,
                                vs_train_state *st, vs_error *err) {
    vs_gguf *g = vs_gguf_open(path, err);
    if (!g) return NULL;
    vs_train_vlm_config c;
    memset(&c, 0, sizeof(c));
    vs_train_vlm *m = NULL;
    if (read_cfg(g, &c, err) == VS_OK) m = vs_train_vlm_new(&c, max_B, max_T, max_images, err);
    if (m && vs_train_checkpoint_read(g, &m->params, st, err) != VS_OK) {
        vs_train_vlm_free(m);
        m = NULL;
    }
    if (!m) vs_error_wrap(err, "loading checkpoint %s", path);
    vs_gguf_close(g);
    return m;
}
