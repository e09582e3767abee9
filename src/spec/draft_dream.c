/* draft_dream: the DREAM draft model and its drafter. See draft_dream.h. */
#include "draft_dream.h"

#include <math.h>
#include <string.h>

#include "kernels.h"
#include "quant.h"
#include "sample.h"
#include "feat_ctx.h"
#include "tree_build.h"

/* ------------------------------------------------------------------------------------------------
 * The file */

enum { T_BLK0 = 0, T_XBLK = 9, T_BLK1 = 22, T_FINAL = 31 };
/* offsets inside the cross-attention block */
enum { X_ANORM, X_Q, X_K, X_V, X_O, X_QNORM, X_KNORM, X_AGATE, X_FNORM, X_GATE, X_UP, X_DOWN, X_FGATE };

static const char *const k_names[VS_DREAM_N_TENSORS] = {
    "blk.0.attn_norm.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
    "blk.0.attn_output.weight", "blk.0.ffn_norm.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight",
    "blk.0.ffn_down.weight",
    "xblk.attn_norm.weight", "xblk.attn_q.weight", "xblk.attn_k.weight", "xblk.attn_v.weight",
    "xblk.attn_output.weight", "xblk.attn_q_norm.weight", "xblk.attn_k_norm.weight", "xblk.attn_tanh_gate",
    "xblk.ffn_norm.weight", "xblk.ffn_gate.weight", "xblk.ffn_up.weight", "xblk.ffn_down.weight",
    "xblk.ffn_tanh_gate",
    "blk.1.attn_norm.weight", "blk.1.attn_q.weight", "blk.1.attn_k.weight", "blk.1.attn_v.weight",
    "blk.1.attn_output.weight", "blk.1.ffn_norm.weight", "blk.1.ffn_gate.weight", "blk.1.ffn_up.weight",
    "blk.1.ffn_down.weight",
    "final_norm.weight"};

const char *vs_dream_tensor_name(int i) { return i >= 0 && i < VS_DREAM_N_TENSORS ? k_names[i] : NULL; }

bool vs_dream_tensor_is_norm(int i) {
    if (i < 0 || i >= VS_DREAM_N_TENSORS) return false;
    if (i == T_FINAL) return true;
    if (i >= T_XBLK && i < T_BLK1) {
        const int x = i - T_XBLK;
        return x == X_ANORM || x == X_QNORM || x == X_KNORM || x == X_FNORM;
    }
    const int b = i < T_XBLK ? i : i - T_BLK1;
    return b == 0 || b == 5;
}

void vs_dream_tensor_ne(const vs_dream_shape *s, int i, int64_t ne[2], int *n_dims) {
    const int64_t E = s->width, hd = E / s->n_head, F = s->n_ff;
    const int64_t KV = (int64_t)(s->n_head_kv > 0 ? s->n_head_kv : s->n_head) * hd;
    ne[1] = 1, *n_dims = 1;
    if (i == T_FINAL) {
        ne[0] = E;
        return;
    }
    if (i >= T_XBLK && i < T_BLK1) {
        static const int64_t kind[] = {[X_ANORM] = 0, [X_Q] = 1, [X_K] = 2, [X_V] = 2, [X_O] = 1, [X_QNORM] = 3,
                                       [X_KNORM] = 3, [X_AGATE] = 4, [X_FNORM] = 0, [X_GATE] = 5, [X_UP] = 5,
                                       [X_DOWN] = 6, [X_FGATE] = 4};
        switch (kind[i - T_XBLK]) {
        case 0: ne[0] = E; return;
        case 1: ne[0] = E, ne[1] = E; break;
        case 2: ne[0] = E, ne[1] = KV; break;
        case 3: ne[0] = hd; return;
        case 4: ne[0] = 1; return;
        case 5: ne[0] = E, ne[1] = F; break;
        default: ne[0] = F, ne[1] = E; break;
        }
        *n_dims = 2;
        return;
    }
    const int b = i < T_XBLK ? i : i - T_BLK1;
    static const int64_t in_f[9] = {0, 0, 0, 0, 0, 0, 0, 0, 1}; /* ffn_down reads F values */
    static const int out_k[9] = {0, 1, 2, 2, 1, 0, 3, 3, 1};    /* 0 vector, 1 E, 2 KV, 3 F */
    ne[0] = in_f[b] ? F : E;
    if (out_k[b] == 0) return;
    ne[1] = out_k[b] == 1 ? E : out_k[b] == 2 ? KV : F;
    *n_dims = 2;
}

vs_status vs_dream_shape_check(const vs_dream_shape *s, vs_error *err) {
    const int H = s->width, nh = s->n_head, nkv = s->n_head_kv > 0 ? s->n_head_kv : s->n_head;
    if (H < 2 || nh < 1 || H % nh || (H / nh) % 2 || nkv < 1 || nh % nkv || s->n_ff < 1 || s->n_ctx < 1 ||
        s->n_vocab < 1)
        return vs_error_set(err, VS_ERR_INVALID,
                            "DREAM model: bad shape (width %d, heads %d / %d, ffn %d, ctx %d, vocabulary %d)", H,
                            nh, nkv, s->n_ff, s->n_ctx, s->n_vocab);
    return VS_OK;
}

vs_dream_shape vs_dream_shape_for(const vs_lm *target, int n_head, int n_head_kv, int n_ff, int n_ctx) {
    const vs_lm_config *tc = vs_lm_cfg(target);
    return (vs_dream_shape){.width = tc->n_embd, .n_head = n_head, .n_head_kv = n_head_kv > 0 ? n_head_kv : n_head,
                            .n_ff = n_ff, .n_ctx = n_ctx, .n_vocab = tc->n_vocab, .rms_eps = tc->rms_eps,
                            .rope_base = tc->rope_base};
}

vs_status vs_dream_head_write(const vs_dream_shape *s, const float probe[VS_MSD_PROBE],
                              const float *const data[VS_DREAM_N_TENSORS], vs_type mat_type, const char *name,
                              const char *path, vs_error *err) {
    vs_status st = vs_dream_shape_check(s, err);
    if (st) return st;
    if (mat_type != VS_TYPE_F32 && mat_type != VS_TYPE_F16 && mat_type != VS_TYPE_BF16)
        return vs_error_set(err, VS_ERR_INVALID, "DREAM model: matrices are written as F32, F16 or BF16 (not %s)",
                            vs_type_name(mat_type));
    vs_gguf_writer *w = vs_gguf_writer_new();
    if (!w) return vs_error_set(err, VS_ERR_NOMEM, "DREAM model: out of memory");
    vs_head_file_keys(w, VS_LM_ARCH_DREAM, name ? name : "vlmspec-dream", s->n_ctx, s->width, 2, s->n_ff, s->n_head,
                      s->n_head_kv > 0 ? s->n_head_kv : s->n_head, s->rms_eps, s->rope_base, s->n_vocab, probe);
    for (int i = 0; i < VS_DREAM_N_TENSORS && !st; i++) {
        int64_t ne[2];
        int nd;
        vs_dream_tensor_ne(s, i, ne, &nd);
        st = vs_head_file_tensor(w, k_names[i], nd, ne, data[i], mat_type, "DREAM model", err);
    }
    if (!st) st = vs_gguf_write(w, path, err);
    vs_gguf_writer_free(w);
    return st;
}

vs_status vs_dream_head_write_random(const vs_dream_random_opts *o, const vs_lm *target, const char *path,
                                     vs_error *err) {
    const vs_dream_shape s = vs_dream_shape_for(target, o->n_head, o->n_head_kv, o->n_ff, o->n_ctx);
    vs_status st = vs_dream_shape_check(&s, err);
    if (st) return st;
    vs_rng rng;
    vs_rng_seed(&rng, o->seed);
    const float std = o->std > 0 ? o->std : 0.02f;
    float *data[VS_DREAM_N_TENSORS] = {0};
    for (int i = 0; i < VS_DREAM_N_TENSORS && !st; i++) {
        int64_t ne[2];
        int nd;
        vs_dream_tensor_ne(&s, i, ne, &nd);
        const int64_t n = ne[0] * ne[1];
        if (!(data[i] = vs_malloc(sizeof(float) * (size_t)n))) {
            st = vs_error_set(err, VS_ERR_NOMEM, "random DREAM model: out of memory");
            break;
        }
        const bool gate = i == T_XBLK + X_AGATE || i == T_XBLK + X_FGATE;
        for (int64_t j = 0; j < n; j++)
            data[i][j] = gate ? o->gate : vs_dream_tensor_is_norm(i) ? 1.0f : std * vs_rng_normal(&rng);
    }
    float probe[VS_MSD_PROBE];
    vs_msd_embd_probe(target, probe);
    if (!st)
        st = vs_dream_head_write(&s, probe, (const float *const *)data, VS_TYPE_F32, "vlmspec-dream-random", path,
                                 err);
    for (int i = 0; i < VS_DREAM_N_TENSORS; i++) vs_free(data[i]);
    return st;
}

struct vs_dream_head {
    const vs_gguf *g;
    vs_gguf *owned; /* set by vs_dream_head_load */
    vs_lm *lm;      /* blocks 1 and 3 */
    int H, nh, nkv, hd, F;
    float eps;
    vs_lm_mat xq, xk, xv, xo, xgate, xup, xdown;
    float *vec;                         /* the vectors below, F32 */
    const float *an, *fn, *qn, *kn, *fin; /* block 2's norms, q / k norms, the final norm */
    float ga, gf;                       /* tanh of the two gates */
    float probe[VS_MSD_PROBE];
};

static const char *hname(const vs_dream_head *h) { return vs_gguf_name(h->g); }

void vs_dream_head_free(vs_dream_head *h) {
    if (!h) return;
    vs_lm_free(h->lm);
    vs_free(h->vec);
    vs_gguf_close(h->owned);
    vs_free(h);
}

vs_dream_head *vs_dream_head_load(const char *path, vs_error *err) {
    vs_gguf *g = vs_gguf_open(path, err);
    if (!g) return NULL;
    vs_dream_head *h = vs_dream_head_from_gguf(g, err);
    if (!h) {
        vs_gguf_close(g);
        return NULL;
    }
    h->owned = g;
    return h;
}

/* Tensor i of the cross-attention block or the final norm, shape-checked: a matrix into *m, a vector
 * dequantised into dst. */
static vs_status load_tensor(vs_dream_head *h, const vs_dream_shape *s, int i, vs_lm_mat *m, float *dst,
                             vs_error *err) {
    int64_t ne[2];
    int nd;
    vs_dream_tensor_ne(s, i, ne, &nd);
    const vs_gguf_tensor *t;
    vs_status st = vs_gguf_require_tensor(h->g, k_names[i], nd, ne, &t, err);
    if (st) return st;
    const vs_type ty = (vs_type)t->type;
    if (ne[0] % vs_type_block_size(ty) || t->nbytes < vs_type_row_bytes(ty, ne[0]) * (size_t)ne[1])
        return vs_error_set(err, VS_ERR_FORMAT, "%s: tensor %s does not hold its shape", hname(h), k_names[i]);
    if (m) *m = (vs_lm_mat){.type = ty, .n_out = ne[1], .n_in = ne[0], .data = t->data};
    else vs_dequantize_row(ty, t->data, dst, ne[0]);
    return VS_OK;
}

vs_dream_head *vs_dream_head_from_gguf(const vs_gguf *g, vs_error *err) {
    const char *path = vs_gguf_name(g);
    vs_dream_head *h = vs_calloc(1, sizeof(*h));
    if (!h) {
        vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", path);
        return NULL;
    }
    h->g = g;
    vs_gguf_str arch;
    if (vs_gguf_get_str(g, "general.architecture", &arch) != 1 || !vs_gguf_str_eq(arch, VS_LM_ARCH_DREAM)) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: not a DREAM model (general.architecture must be '%s')", path,
                     VS_LM_ARCH_DREAM);
        goto fail;
    }
    if (!(h->lm = vs_lm_from_gguf(g, err))) goto fail;
    const vs_lm_config *c = vs_lm_cfg(h->lm);
    if (c->n_layer != 2) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: %s.block_count is %d, a DREAM model has 2 self-attention blocks", path,
                     VS_LM_ARCH_DREAM, c->n_layer);
        goto fail;
    }
    h->H = c->n_embd, h->nh = c->n_head, h->nkv = c->n_head_kv, h->hd = c->head_dim, h->F = c->n_ff;
    h->eps = c->rms_eps;
    const vs_dream_shape s = {.width = h->H, .n_head = h->nh, .n_head_kv = h->nkv, .n_ff = h->F,
                              .n_ctx = c->n_ctx_train, .n_vocab = c->n_vocab};
    if (!(h->vec = vs_malloc(sizeof(float) * (size_t)(3 * h->H + 2 * h->hd + 2)))) {
        vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    float *an = h->vec, *fn = an + h->H, *fin = fn + h->H, *qn = fin + h->H, *kn = qn + h->hd, *gates = kn + h->hd;
    vs_lm_mat *mats[] = {[X_Q] = &h->xq,      [X_K] = &h->xk,  [X_V] = &h->xv,      [X_O] = &h->xo,
                         [X_GATE] = &h->xgate, [X_UP] = &h->xup, [X_DOWN] = &h->xdown, [X_FGATE] = NULL};
    float *vecs[] = {[X_ANORM] = an, [X_QNORM] = qn, [X_KNORM] = kn, [X_AGATE] = gates, [X_FNORM] = fn,
                     [X_FGATE] = gates + 1};
    for (int x = 0; x <= X_FGATE; x++)
        if (load_tensor(h, &s, T_XBLK + x, x < (int)VS_ARRAY_LEN(mats) ? mats[x] : NULL,
                        x < (int)VS_ARRAY_LEN(vecs) ? vecs[x] : NULL, err))
            goto fail;
    if (load_tensor(h, &s, T_FINAL, NULL, fin, err)) goto fail;
    for (int i = 0; i < 3 * h->H + 2 * h->hd + 2; i++)
        if (!isfinite(h->vec[i])) {
            vs_error_set(err, VS_ERR_FORMAT, "%s: a norm or gate of the cross-attention block is not finite", path);
            goto fail;
        }
    h->an = an, h->fn = fn, h->fin = fin, h->qn = qn, h->kn = kn;
    h->ga = tanhf(gates[0]), h->gf = tanhf(gates[1]);
    int64_t ki = vs_gguf_find_key(g, VS_LM_ARCH_DREAM ".target.embd_probe");
    if (ki < 0 || vs_gguf_kv_type(g, ki) != VS_GGUF_ARRAY || vs_gguf_arr_type(g, ki) != VS_GGUF_F32 ||
        vs_gguf_arr_len(g, ki) != VS_MSD_PROBE) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: %s.target.embd_probe (%d float32 values) is missing or malformed",
                     path, VS_LM_ARCH_DREAM, VS_MSD_PROBE);
        goto fail;
    }
    memcpy(h->probe, vs_gguf_arr_data(g, ki), sizeof(h->probe));
    for (int i = 0; i < VS_MSD_PROBE; i++)
        if (!isfinite(h->probe[i])) {
            vs_error_set(err, VS_ERR_FORMAT, "%s: %s.target.embd_probe holds a non-finite value", path,
                         VS_LM_ARCH_DREAM);
            goto fail;
        }
    return h;
fail:
    vs_dream_head_free(h);
    return NULL;
}

const vs_lm *vs_dream_head_lm(const vs_dream_head *h) { return h->lm; }

vs_status vs_dream_head_check(const vs_dream_head *h, const vs_lm *target, vs_error *err) {
    const vs_lm_config *tc = vs_lm_cfg(target);
    const char *tn = vs_gguf_name(vs_lm_gguf(target));
    if (h->H != tc->n_embd)
        return vs_error_set(err, VS_ERR_INVALID, "DREAM model %s has width %d but the target %s has %d", hname(h),
                            h->H, tn, tc->n_embd);
    if (vs_lm_cfg(h->lm)->n_vocab != tc->n_vocab)
        return vs_error_set(err, VS_ERR_INVALID,
                            "DREAM model %s was made for a vocabulary of %d tokens, the target %s has %d", hname(h),
                            vs_lm_cfg(h->lm)->n_vocab, tn, tc->n_vocab);
    const double cs = vs_msd_probe_cosine(h->probe, target);
    if (!(cs >= 0.9))
        return vs_error_set(err, VS_ERR_INVALID,
                            "DREAM model %s was trained on another target's token embedding than %s's (probe "
                            "cosine %.3f < 0.9)", hname(h), tn, cs);
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------
 * The drafter */

typedef struct dream {
    vs_spec_drafter hdr;
    const vs_dream_head *h;
    vs_lm *target;
    vs_lm *draft; /* h->lm (the forward needs a mutable model: its scratch) */
    vs_kv *kv;
    vs_threadpool *tp;
    int32_t H, V, KV, n_ctx; /* KV: key width (kv heads x head dim) */
    float teps;
    const float *tnorm;  /* the target's output_norm */
    const vs_lm_mat *out; /* the target's LM head */
    vs_sampler *sampler;
    bool greedy, force_greedy, leak;
    int32_t topk, tnodes;
    vs_feat_ctx cx;   /* the context mirror (feat_ctx.h) */
    char who[320];    /* "DREAM drafter FILE", for errors */
    float *ck, *cv;   /* [cx.cap][KV] cross-attention keys / values of the final rows' features, by row */
    int32_t n_feat;   /* rows 0 .. n_feat - 1 have keys / values */
    bool starved;
    /* visual token compression: the draft's stream holds the kept rows only (every text row, the best
     * `keep` of each image's rows by the attention they received in the target's prefill) */
    float keep;       /* fraction of each image's rows kept; 1 = all */
    float *score;     /* [cap] attention received (image rows of this request) */
    int32_t *imgseg;  /* [cap] image rows awaiting a decision: their prompt segment; else -1 */
    uint8_t *drop;    /* [cap] row left out of the draft's stream */
    int32_t *krow;    /* [cap] the row of each stream slot */
    int32_t *slot_of; /* [cap] the stream slot of each row, -1 = dropped */
    /* drafted features of the block in flight: entry 0 = the pending row's slot, 1 + s = fed row s */
    float *ak, *av, *af; /* [cap_app][KV], [cap_app][KV], [cap_app][H] */
    int32_t n_app, cap_app;
    bool fed;
    int32_t base; /* draft cache length before the drafted slots (= pending row + 1) */
    /* what each row of the forward in flight cross-attends to: the keys of stream slots [0, vis_true)
     * (rows krow[0 .. vis_true)), and the vis_n drafted entries listed at vis + r * vis_cap */
    int32_t *vis_true, *vis_n, *vis;
    int32_t vis_cap;
    /* scratch, [rows][...] */
    float *in, *hid, *feat, *xn, *xq, *xatt, *xo, *xg, *xu, *sc; /* [rows][...] */
    float *logits, *q; /* [V]: one row at a time */
    size_t cap_sc;
    vs_lm_row *rows;
    int32_t cap_rows;
    vs_tree_cand *cand;
    int32_t *order, *panc;
    int32_t cap_cand, cap_order, cap_panc;
    int32_t prop_nodes; /* nodes of the last proposal (order[] maps them to candidates) */
    bool prop_tree;
    vs_draft_dream_stats stats;
} dream;

static const vs_spec_drafter_vt dream_vt;
static const char *dname(const dream *d) { return hname(d->h); }
static vs_status doom(const dream *d, vs_error *err) {
    return vs_error_set(err, VS_ERR_NOMEM, "DREAM drafter %s: out of memory", dname(d));
}

static bool grow_f(float **p, size_t n) {
    float *q = vs_realloc(*p, sizeof(float) * (n ? n : 1));
    if (q) *p = q;
    return q != NULL;
}

/* Scratch for n rows at once, each seeing up to vis_cap drafted entries. */
static vs_status ensure_rows(dream *d, int32_t n, int32_t vis_cap, vs_error *err) {
    if (n <= d->cap_rows && vis_cap <= d->vis_cap) return VS_OK;
    int32_t c = VS_MAX(d->cap_rows, 16);
    while (c < n) c *= 2;
    const int32_t vc = VS_MAX(vis_cap, d->vis_cap);
    const size_t H = (size_t)d->H, F = (size_t)vs_lm_cfg(d->draft)->n_ff, C = (size_t)c;
    bool ok = grow_f(&d->in, C * H) && grow_f(&d->hid, C * H) && grow_f(&d->feat, C * H) &&
              grow_f(&d->xn, C * H) && grow_f(&d->xq, C * H) &&
              grow_f(&d->xatt, C * H) && grow_f(&d->xo, C * H) && grow_f(&d->xg, C * F) && grow_f(&d->xu, C * F);
    vs_lm_row *rows = vs_realloc(d->rows, sizeof(vs_lm_row) * C);
    if (rows) d->rows = rows;
    int32_t *vt = vs_realloc(d->vis_true, sizeof(int32_t) * C), *vn = vs_realloc(d->vis_n, sizeof(int32_t) * C);
    if (vt) d->vis_true = vt;
    if (vn) d->vis_n = vn;
    int32_t *vis = vs_realloc(d->vis, sizeof(int32_t) * C * (size_t)VS_MAX(vc, 1));
    if (vis) d->vis = vis;
    if (!ok || !rows || !vt || !vn || !vis) return doom(d, err);
    d->cap_rows = c, d->vis_cap = vc;
    return VS_OK;
}

/* Room for n drafted entries and score rows over every key a row can see. */
static vs_status ensure_app(dream *d, int32_t n, vs_error *err) {
    if (n > d->cap_app) {
        const size_t c = (size_t)VS_MAX(n, 2 * d->cap_app);
        if (!grow_f(&d->ak, c * (size_t)d->KV) || !grow_f(&d->av, c * (size_t)d->KV) ||
            !grow_f(&d->af, c * (size_t)d->H))
            return doom(d, err);
        d->cap_app = (int32_t)c;
    }
    const size_t need = (size_t)d->cx.cap + (size_t)d->cap_app;
    if (need > d->cap_sc) {
        if (!grow_f(&d->sc, need)) return doom(d, err);
        d->cap_sc = need;
    }
    return VS_OK;
}

/* Per-head RMSNorm of n rows of `heads` heads in place. */
static void head_norm(float *x, int32_t n, int heads, int hd, const float *w, float eps) {
    for (int64_t i = 0; i < (int64_t)n * heads; i++) vs_rmsnorm(x + i * hd, x + i * hd, w, hd, eps);
}

/* Keys and values of n feature rows f [n][H] into k, v [n][KV]. */
static void project_kv(dream *d, const float *f, int32_t n, float *k, float *v) {
    const vs_dream_head *h = d->h;
    vs_matmul(d->tp, h->xk.type, h->xk.data, h->xk.n_out, h->xk.n_in, f, n, k);
    vs_matmul(d->tp, h->xv.type, h->xv.data, h->xv.n_out, h->xv.n_in, f, n, v);
    head_norm(k, n, h->nkv, h->hd, h->kn, h->eps);
}

/* Block 2 (vs_lm_layer_fn after block 1): the gated cross-attention and feed-forward branches over the
 * rows of the forward in flight, each attending to what d->vis_* lists for it. */
static void cross_block(void *ctx, int layer, float *x, int n) {
    dream *d = ctx;
    const vs_dream_head *h = d->h;
    (void)layer;
    const int H = d->H, hd = h->hd, G = h->nh / h->nkv, F = h->F;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int r = 0; r < n; r++) vs_rmsnorm(d->xn + (size_t)r * H, x + (size_t)r * H, h->an, H, h->eps);
    vs_matmul(d->tp, h->xq.type, h->xq.data, h->xq.n_out, h->xq.n_in, d->xn, n, d->xq);
    head_norm(d->xq, n, h->nh, hd, h->qn, h->eps);
    for (int r = 0; r < n; r++) {
        const int32_t nt = d->vis_true[r], na = d->vis_n[r];
        const int32_t *va = d->vis + (size_t)r * d->vis_cap;
        for (int hh = 0; hh < h->nh; hh++) {
            const float *q = d->xq + (size_t)r * H + (size_t)hh * hd;
            const size_t ko = (size_t)(hh / G) * hd;
            float *o = d->xatt + (size_t)r * H + (size_t)hh * hd;
            memset(o, 0, sizeof(float) * (size_t)hd);
            const int32_t nk = nt + na;
            if (nk == 0) continue; /* nothing to attend to (the first row): the branch adds 0 */
            for (int32_t j = 0; j < nt; j++)
                d->sc[j] = vs_dot_f32(q, d->ck + (size_t)d->krow[j] * d->KV + ko, hd) * scale;
            for (int32_t a = 0; a < na; a++)
                d->sc[nt + a] = vs_dot_f32(q, d->ak + (size_t)va[a] * d->KV + ko, hd) * scale;
            vs_softmax_inplace(d->sc, nk);
            for (int32_t j = 0; j < nt; j++) vs_axpy_f32(o, d->sc[j], d->cv + (size_t)d->krow[j] * d->KV + ko, hd);
            for (int32_t a = 0; a < na; a++) vs_axpy_f32(o, d->sc[nt + a], d->av + (size_t)va[a] * d->KV + ko, hd);
        }
    }
    vs_matmul(d->tp, h->xo.type, h->xo.data, h->xo.n_out, h->xo.n_in, d->xatt, n, d->xo);
    for (int r = 0; r < n; r++) vs_axpy_f32(x + (size_t)r * H, h->ga, d->xo + (size_t)r * H, H);
    for (int r = 0; r < n; r++) vs_rmsnorm(d->xn + (size_t)r * H, x + (size_t)r * H, h->fn, H, h->eps);
    vs_matmul(d->tp, h->xgate.type, h->xgate.data, h->xgate.n_out, h->xgate.n_in, d->xn, n, d->xg);
    vs_matmul(d->tp, h->xup.type, h->xup.data, h->xup.n_out, h->xup.n_in, d->xn, n, d->xu);
    for (int64_t i = 0; i < (int64_t)n * F; i++) {
        const float g = d->xg[i];
        d->xg[i] = g / (1.0f + expf(-g)) * d->xu[i];
    }
    vs_matmul(d->tp, h->xdown.type, h->xdown.data, h->xdown.n_out, h->xdown.n_in, d->xg, n, d->xo);
    for (int r = 0; r < n; r++) vs_axpy_f32(x + (size_t)r * H, h->gf, d->xo + (size_t)r * H, H);
}

/* One draft forward of rows [0, n) (inputs d->in; positions, masks and d->vis_* set by the caller):
 * block outputs into d->hid, features (final norm) into d->feat. */
static vs_status draft_forward(dream *d, int32_t n, vs_error *err) {
    for (int32_t r = 0; r < n; r++) d->rows[r].embd = d->in + (size_t)r * d->H;
    vs_lm_out out = {.hidden = d->hid, .attn_layer = -1, .layer_fn = cross_block, .layer_ctx = d};
    vs_status st = vs_lm_forward(d->draft, d->kv, d->tp, d->rows, n, &out, err);
    if (st) return vs_error_wrap(err, "DREAM model %s", dname(d));
    for (int32_t r = 0; r < n; r++)
        vs_rmsnorm(d->feat + (size_t)r * d->H, d->hid + (size_t)r * d->H, d->h->fin, d->H, d->h->eps);
    d->stats.draft_rows += n;
    d->stats.forwards++;
    return VS_OK;
}

/* Appends n features f [n][H] as drafted entries (with their keys and values). f must not point into
 * d->af (it may move). */
static vs_status append_drafted(dream *d, const float *f, int32_t n, vs_error *err) {
    vs_status st = ensure_app(d, d->n_app + n, err);
    if (st) return st;
    const size_t a = (size_t)d->n_app;
    memcpy(d->af + a * d->H, f, sizeof(float) * (size_t)n * (size_t)d->H);
    project_kv(d, d->af + a * d->H, n, d->ak + a * d->KV, d->av + a * d->KV);
    d->n_app += n;
    return VS_OK;
}

/* Evaluates the draft slots that became computable: slot t needs row t and the keys of rows < t.
 * Chunks of 512 rows. The last slot, the pending row's, must be among them: its feature becomes drafted
 * entry 0, seen by every drafted node. */
static vs_status fill_true(dream *d, vs_error *err) {
    int32_t t = vs_kv_seq_len(d->kv, 0), n = 0;
    const int32_t end = d->slot_of[d->cx.n_rows - 1]; /* the pending row's slot (every earlier row has keys) */
    if (t > end) return vs_error_set(err, VS_ERR_INVALID, "DREAM drafter %s: no slot to draft from", dname(d));
    while (t <= end) {
        n = VS_MIN(512, end - t + 1);
        vs_status st = ensure_rows(d, n, 1, err);
        if (st) return st;
        for (int32_t r = 0; r < n; r++) {
            vs_lm_row *row = &d->rows[r];
            memset(row, 0, sizeof(*row));
            row->pos = t + r;
            d->vis_true[r] = t + r;
            d->vis_n[r] = 0;
            if ((st = vs_feat_ctx_row_embd(&d->cx, d->target, d->krow[t + r], d->in + (size_t)r * d->H, d->who, err)))
                return st;
        }
        if ((st = draft_forward(d, n, err))) return st;
        d->stats.true_rows += n;
        t += n;
    }
    d->n_app = 0;
    return append_drafted(d, d->feat + (size_t)(n - 1) * d->H, 1, err);
}

/* The context mirror and the per-row arrays for cap rows (kept contents). */
static vs_status ensure_cap(dream *d, int32_t cap, vs_error *err) {
    if (cap <= d->cx.cap) return VS_OK;
    float *score = vs_realloc(d->score, sizeof(float) * (size_t)cap);
    if (score) d->score = score;
    int32_t *imgseg = vs_realloc(d->imgseg, sizeof(int32_t) * (size_t)cap);
    if (imgseg) d->imgseg = imgseg;
    uint8_t *drop = vs_realloc(d->drop, (size_t)cap);
    if (drop) d->drop = drop;
    int32_t *krow = vs_realloc(d->krow, sizeof(int32_t) * (size_t)cap);
    if (krow) d->krow = krow;
    int32_t *slot_of = vs_realloc(d->slot_of, sizeof(int32_t) * (size_t)cap);
    if (slot_of) d->slot_of = slot_of;
    if (!score || !imgseg || !drop || !krow || !slot_of || !grow_f(&d->ck, (size_t)cap * d->KV) ||
        !grow_f(&d->cv, (size_t)cap * d->KV) || !vs_feat_ctx_reserve(&d->cx, cap))
        return doom(d, err);
    return ensure_app(d, 1, err); /* score rows cover the new context */
}

static vs_status dr_begin(vs_spec_drafter *base, const vs_spec_begin_info *req, vs_error *err) {
    dream *d = (dream *)base;
    const vs_spec_prompt *p = req->prompt;
    vs_sampler_params sp = req->params->sampling;
    sp.seed ^= 0x6A09E667F3BCC909ull;
    vs_status st = vs_sampler_set_params(d->sampler, &sp, err);
    if (st) return st;
    vs_sampler_seed(d->sampler, sp.seed);
    d->greedy = sp.temperature == 0 || d->force_greedy;
    d->hdr.max_nodes = d->topk ? d->tnodes : 0;
    d->fed = false;
    d->starved = false;
    d->prop_nodes = 0;
    const int64_t n = vs_spec_prompt_rows(p);
    if ((st = ensure_cap(d, VS_MAX(req->n_ctx_target, (int32_t)VS_MIN(n, INT32_MAX - 2)) + 2, err))) return st;
    /* the new context's rows; the common prefix with the old one keeps its keys, values and slots */
    const int32_t common = vs_feat_ctx_begin(&d->cx, p, req->params->reuse_prefix);
    /* rows after the common prefix: kept unless compression drops them (decided at the first propose,
     * when the prefill has delivered every score); the prefix keeps its decisions */
    for (int32_t s = 0, r = 0; s < p->n_seg; s++)
        for (int32_t j = 0; j < p->seg[s].n; j++, r++) {
            if (r < common) continue;
            d->drop[r] = 0;
            d->score[r] = 0;
            d->imgseg[r] = p->seg[s].kind == VS_SPEC_SEG_IMAGE && d->keep < 1 ? s : -1;
        }
    d->n_feat = VS_MIN(d->n_feat, common);
    /* slot t stays when the rows up to its row are unchanged and the keys of the rows before it kept */
    const int32_t valid = VS_MIN(common, d->n_feat + 1);
    int32_t slots = 0;
    for (int32_t r = 0; r < valid; r++) slots += !d->drop[r];
    return vs_kv_seq_truncate(d->kv, 0, VS_MIN(vs_kv_seq_len(d->kv, 0), slots), err);
}

static vs_status dr_target_rows(vs_spec_drafter *base, const vs_spec_features *f, vs_error *err) {
    dream *d = (dream *)base;
    if (f->n_embd != d->H)
        return vs_error_set(err, VS_ERR_INVALID, "DREAM drafter %s: features of width %d", dname(d), f->n_embd);
    if (f->pos0 > d->n_feat) { /* rows this drafter never saw: it cannot attend to them */
        d->stats.n_starved += !d->starved;
        d->starved = true;
        return VS_OK;
    }
    if (f->pos0 + f->n > d->cx.cap)
        return vs_error_set(err, VS_ERR_RANGE, "DREAM drafter %s: feature row %d beyond its %d", dname(d),
                            f->pos0 + f->n, d->cx.cap);
    for (int32_t a = 0; a < f->n;) {
        const int32_t n = VS_MIN(512, f->n - a);
        vs_status st = ensure_rows(d, n, 1, err);
        if (st) return st;
        for (int32_t r = 0; r < n; r++)
            vs_rmsnorm(d->xn + (size_t)r * d->H, f->hidden + (size_t)(a + r) * d->H, d->tnorm, d->H, d->teps);
        const size_t at = (size_t)(f->pos0 + a) * d->KV;
        project_kv(d, d->xn, n, d->ck + at, d->cv + at);
        a += n;
    }
    d->n_feat = VS_MAX(d->n_feat, f->pos0 + f->n);
    d->stats.features += f->n;
    if (f->attn_recv) /* the prefill's attention: scores of the image rows awaiting a decision */
        for (int32_t k = 0; k < f->n_attn && k < d->cx.n_rows; k++)
            if (d->imgseg[k] >= 0) d->score[k] += f->attn_recv[k];
    return VS_OK;
}

/* Visual token compression: for each image whose rows await a decision, keeps the ceil(keep n) rows of
 * highest score (ties: the earlier row) and drops the rest. Rows from `upto` on (the pending row, which
 * the prefill did not evaluate, so it has no score) are always kept. Returns the first row whose decision
 * dropped it (n_rows: none). */
static int32_t decide_pending(dream *d, int32_t upto) {
    int32_t changed = d->cx.n_rows;
    for (int32_t a = upto; a < d->cx.n_rows; a++) d->imgseg[a] = -1;
    for (int32_t a = 0; a < upto;) {
        if (d->imgseg[a] < 0) {
            a++;
            continue;
        }
        int32_t b = a;
        while (b < upto && d->imgseg[b] == d->imgseg[a]) b++;
        /* keep is a percentage / 100: keep n is a whole number or at least 0.01 above one */
        const int32_t n = b - a, m = VS_MAX(1, (int32_t)ceil((double)d->keep * n - 1e-4));
        for (int32_t i = a; i < b; i++) { /* row i's rank: rows that beat it */
            int32_t rank = 0;
            for (int32_t j = a; j < b; j++)
                rank += d->score[j] > d->score[i] || (d->score[j] == d->score[i] && j < i);
            d->drop[i] = rank >= m;
            d->stats.dropped_rows += d->drop[i];
            if (d->drop[i]) changed = VS_MIN(changed, a);
        }
        for (int32_t i = a; i < b; i++) d->imgseg[i] = -1;
        a = b;
    }
    return changed;
}

/* The stream: the slot of every kept row, after the pending decisions. Slots already cached after the
 * first row whose decision dropped it leave the draft cache. */
static vs_status build_stream(dream *d, vs_error *err) {
    const int32_t changed = decide_pending(d, d->cx.n_rows - 1);
    int32_t s = 0, valid = 0;
    for (int32_t r = 0; r < d->cx.n_rows; r++) {
        if (r == changed) valid = s;
        d->slot_of[r] = d->drop[r] ? -1 : s;
        if (!d->drop[r]) d->krow[s++] = r;
    }
    if (changed == d->cx.n_rows) return VS_OK;
    return vs_kv_seq_truncate(d->kv, 0, VS_MIN(vs_kv_seq_len(d->kv, 0), valid), err);
}

/* EAGLE-2: the K best children of candidate `parent` (-1 = the root) from the draft feature f, appended. */
static vs_status expand(dream *d, const float *f, int32_t parent, int32_t *nc, vs_error *err) {
    return vs_feat_expand(d->tp, d->out, d->sampler, d->greedy, f, d->logits, d->q, d->topk, d->cand, nc, parent, err);
}

/* EAGLE-2 tree of depth k, at most N nodes. Beams of depth j are draft rows at position base + j - 1
 * that see the true slots and their cached ancestors (self-attention), and the target's keys of rows
 * < base - 1 plus the drafted entries of their path (cross-attention): entry 0 and their ancestors'. */
static vs_status propose_tree(dream *d, int32_t k, int32_t N, vs_spec_proposal *out, vs_error *err) {
    const int32_t H = d->H, K = d->topk;
    const int32_t need = K + (k - 1) * K * K;
    if (vs_grow((void **)&d->cand, &d->cap_cand, need, sizeof(vs_tree_cand)) ||
        vs_grow((void **)&d->order, &d->cap_order, need, sizeof(int32_t)) ||
        vs_grow((void **)&d->panc, &d->cap_panc, K * k, sizeof(int32_t)))
        return doom(d, err);
    const int32_t vis_cap = d->leak ? 1 + K * (k - 1) : k;
    vs_status st = ensure_rows(d, K, vis_cap, err);
    if (!st) st = ensure_app(d, 1 + K * (k - 1), err);
    if (st) return st;
    int32_t nc = 0, beams[VS_TREE_MAX_TOP_K], nb = 0, nfed = 0;
    st = expand(d, d->af, -1, &nc, err);
    for (int32_t i = 0; !st && i < nc; i++) beams[nb++] = i;
    for (int32_t j = 1; !st && j < k && nb > 0; j++) {
        for (int32_t b = 0; b < nb && !st; b++) {
            const vs_tree_cand *c = &d->cand[beams[b]];
            st = vs_lm_embed(d->target, c->token, d->in + (size_t)b * H, err);
            vs_lm_row *row = &d->rows[b];
            memset(row, 0, sizeof(*row));
            int32_t *pa = d->panc + (size_t)b * k, na = 0;
            int32_t *va = d->vis + (size_t)b * d->vis_cap, nv = 0;
            for (int32_t a = c->parent; a >= 0; a = d->cand[a].parent) {
                pa[na++] = d->base + d->cand[a].slot;
                va[nv++] = 1 + d->cand[a].slot;
            }
            va[nv++] = 0;
            if (d->leak) /* TEST ONLY: every drafted entry so far, other branches' too */
                for (nv = 0; nv < d->n_app; nv++) va[nv] = nv;
            d->vis_true[b] = d->base - 1;
            d->vis_n[b] = nv;
            row->pos = d->base + j - 1;
            row->tree = true;
            row->mask_past = true;
            row->past_len = d->base;
            row->n_past_anc = na;
            row->past_anc = pa;
        }
        if (st) break;
        if ((st = draft_forward(d, nb, err))) break;
        d->fed = true;
        out->n_steps++;
        const int32_t a0 = d->n_app;
        if ((st = append_drafted(d, d->feat, nb, err))) break;
        const int32_t c0 = nc;
        for (int32_t b = 0; b < nb && !st; b++) {
            d->cand[beams[b]].slot = nfed++;
            st = expand(d, d->af + (size_t)(a0 + b) * H, beams[b], &nc, err);
        }
        nb = st ? 0 : vs_tree_next_beams(d->cand, c0, nc, K, beams);
    }
    if (st) return st;
    if ((st = vs_tree_emit(d->cand, nc, N, out, d->order, err)))
        return vs_error_wrap(err, "DREAM drafter %s", dname(d));
    d->prop_tree = true;
    d->prop_nodes = out->n;
    return VS_OK;
}

/* The chain row of depth i + 1 (its token t at position base + i) seeing drafted entries 0 .. i. */
static vs_status chain_row(dream *d, int32_t t, int32_t i, vs_error *err) {
    vs_status st = ensure_rows(d, 1, i + 1, err);
    if (!st) st = vs_lm_embed(d->target, t, d->in, err);
    if (st) return st;
    memset(&d->rows[0], 0, sizeof(vs_lm_row));
    d->rows[0].pos = d->base + i;
    d->vis_true[0] = d->base - 1;
    d->vis_n[0] = i + 1;
    for (int32_t a = 0; a <= i; a++) d->vis[a] = d->n_app - 1 - i + a;
    return VS_OK;
}

/* A chain of k drafts from drafted entry 0. */
static vs_status propose_chain(dream *d, int32_t k, vs_spec_proposal *out, vs_error *err) {
    const int32_t V = d->V;
    vs_status st = ensure_app(d, k, err);
    if (st) return st;
    for (int32_t i = 0; i < k; i++) {
        vs_feat_lm_head(d->tp, d->out, d->af + (size_t)i * d->H, 1, d->logits);
        int32_t t;
        if (d->greedy) {
            t = vs_argmax(d->logits, V);
            out->q_row[i] = -1;
        } else {
            float *q = out->q + (size_t)i * V;
            if ((st = vs_sampler_probs(d->sampler, d->logits, q, err))) return st;
            if ((st = vs_sampler_pick(d->sampler, q, &t, err))) return st;
            out->q_row[i] = i;
        }
        out->token[i] = t;
        out->parent[i] = i - 1;
        out->depth[i] = i + 1;
        out->n = i + 1;
        if (i + 1 == k) break;
        if ((st = chain_row(d, t, i, err)) || (st = draft_forward(d, 1, err))) return st;
        d->fed = true;
        out->n_steps++;
        if ((st = append_drafted(d, d->feat, 1, err))) return st;
    }
    d->prop_tree = false;
    d->prop_nodes = out->n;
    return VS_OK;
}

static vs_status dr_propose(vs_spec_drafter *base, const vs_spec_limits *lim, vs_spec_proposal *out,
                            vs_error *err) {
    dream *d = (dream *)base;
    out->n = 0;
    out->n_steps = 0;
    d->fed = false;
    d->prop_nodes = 0;
    if (d->starved) return VS_OK;
    const int32_t P = d->cx.n_rows - 1; /* the pending row */
    if (P < 0 || d->n_feat != P) return VS_OK; /* keys missing: nothing to draft from */
    vs_status st = build_stream(d, err);
    if (st) return st;
    const int32_t sp = d->slot_of[P];
    if (sp < 0 || sp >= d->n_ctx) return VS_OK; /* the draft cache is full: plain decoding */
    /* the pending row's slot is (re)computed here: its output starts the drafts */
    st = vs_kv_seq_truncate(d->kv, 0, VS_MIN(vs_kv_seq_len(d->kv, 0), sp), err);
    if (!st) st = fill_true(d, err);
    if (st) return st;
    out->n_steps = 1;
    d->base = vs_kv_seq_len(d->kv, 0);
    const int32_t room = d->n_ctx - d->base;
    int32_t k = lim->max_depth;
    if (d->topk) k = VS_MIN(k, room / d->topk + 1);
    else k = VS_MIN(k, room + 1);
    if (k < 1) return VS_OK;
    return d->topk ? propose_tree(d, k, VS_MIN(d->tnodes, lim->max_nodes), out, err) : propose_chain(d, k, out, err);
}

static vs_status dr_commit(vs_spec_drafter *base, const vs_spec_commit *c, vs_error *err) {
    dream *d = (dream *)base;
    vs_status st;
    /* drafted slots held predictions: back to the true slots */
    if (d->fed && (st = vs_kv_seq_truncate(d->kv, 0, d->base, err))) return st;
    d->fed = false;
    d->prop_nodes = 0;
    const int32_t old = d->cx.n_rows;
    if (!vs_feat_ctx_commit(&d->cx, c))
        return vs_error_set(err, VS_ERR_RANGE, "%s: context beyond %d rows", d->who, d->cx.cap);
    for (int32_t i = old; i < d->cx.n_rows; i++) d->drop[i] = 0, d->imgseg[i] = -1; /* new text rows, kept */
    return VS_OK;
}

static void dr_end(vs_spec_drafter *base) {
    dream *d = (dream *)base;
    /* images still undecided (no block drafted): decided on this request's scores, which are complete
     * after its prefill; a later request reusing the rows keeps the decision */
    decide_pending(d, VS_MIN(d->n_feat, d->cx.n_rows));
    vs_feat_ctx_end(&d->cx); /* the request's image rows are gone */
    d->fed = false;
    d->prop_nodes = 0;
}

static void dr_free(vs_spec_drafter *base) {
    dream *d = (dream *)base;
    if (!d) return;
    vs_kv_free(d->kv);
    vs_sampler_free(d->sampler);
    vs_feat_ctx_free(&d->cx);
    vs_free(d->ck), vs_free(d->cv);
    vs_free(d->score), vs_free(d->imgseg), vs_free(d->drop), vs_free(d->krow), vs_free(d->slot_of);
    vs_free(d->ak), vs_free(d->av), vs_free(d->af), vs_free(d->vis_true), vs_free(d->vis_n), vs_free(d->vis);
    vs_free(d->in), vs_free(d->hid), vs_free(d->feat), vs_free(d->logits), vs_free(d->q), vs_free(d->xn);
    vs_free(d->xq), vs_free(d->xatt), vs_free(d->xo), vs_free(d->xg), vs_free(d->xu), vs_free(d->sc);
    vs_free(d->rows), vs_free(d->cand), vs_free(d->order), vs_free(d->panc);
    vs_free(d);
}

static const vs_spec_drafter_vt dream_vt = {
    .name = "dream",
    .begin = dr_begin,
    .target_rows = dr_target_rows,
    .propose = dr_propose,
    .commit = dr_commit,
    .end = dr_end,
    .free = dr_free,
};

vs_spec_drafter *vs_draft_dream_new(const vs_dream_head *h, vs_lm *target, const vs_draft_dream_opts *o,
                                    vs_error *err) {
    vs_draft_dream_opts def = {0};
    if (!o) o = &def;
    if (!h || !target) {
        vs_error_set(err, VS_ERR_INVALID, "DREAM drafter: needs a draft model and a target");
        return NULL;
    }
    if (vs_dream_head_check(h, target, err) ||
        vs_feat_check_opts("DREAM drafter", o->tree_top_k, o->tree_nodes, target, err))
        return NULL;
    if (!(o->visual_keep >= 0 && o->visual_keep <= 1)) {
        vs_error_set(err, VS_ERR_INVALID, "DREAM drafter: visual token keep ratio %g outside (0, 1] (0: every row)",
                     (double)o->visual_keep);
        return NULL;
    }
    const vs_lm_weights *tw = vs_lm_w(target);
    dream *d = vs_calloc(1, sizeof(*d));
    if (!d) {
        vs_error_set(err, VS_ERR_NOMEM, "DREAM drafter: out of memory");
        return NULL;
    }
    const vs_lm_config *tc = vs_lm_cfg(target);
    d->hdr.vt = &dream_vt;
    d->hdr.n_vocab = tc->n_vocab;
    d->hdr.want_hidden = true;
    d->hdr.keeps_features = true;
    d->h = h;
    d->draft = (vs_lm *)h->lm;
    d->target = target;
    d->tp = o->tp;
    d->H = tc->n_embd, d->V = tc->n_vocab, d->KV = h->nkv * h->hd;
    d->cx.H = d->H;
    snprintf(d->who, sizeof(d->who), "DREAM drafter %s", hname(h));
    d->n_ctx = o->n_ctx > 0 ? o->n_ctx : tc->n_ctx_train;
    d->teps = tc->rms_eps;
    d->tnorm = tw->output_norm;
    d->out = &tw->output;
    d->force_greedy = o->greedy;
    d->leak = o->debug_leak_tree;
    d->keep = o->visual_keep > 0 ? o->visual_keep : 1.0f;
    d->hdr.want_attn_recv = d->keep < 1;
    d->topk = o->tree_top_k;
    d->tnodes = o->tree_nodes > 0 ? o->tree_nodes : vs_tree_default_nodes(o->tree_top_k);
    vs_sampler_params sp = vs_sampler_params_default();
    const vs_type kvt = o->kv_type == VS_TYPE_F16 || o->kv_type == VS_TYPE_BF16 ? o->kv_type : VS_TYPE_F32;
    if (!(d->sampler = vs_sampler_new(d->V, &sp, err)) || !(d->kv = vs_lm_kv_new(d->draft, 1, d->n_ctx, kvt, err))) {
        dr_free(&d->hdr);
        return NULL;
    }
    d->q = vs_malloc(sizeof(float) * (size_t)d->V);
    d->logits = vs_malloc(sizeof(float) * (size_t)d->V); /* one row at a time */
    if (!d->q || !d->logits || ensure_cap(d, tc->n_ctx_train + 1, err)) {
        vs_error_set(err, VS_ERR_NOMEM, "DREAM drafter: out of memory");
        dr_free(&d->hdr);
        return NULL;
    }
    return &d->hdr;
}

const vs_draft_dream_stats *vs_draft_dream_get_stats(const vs_spec_drafter *d) {
    return d && d->vt == &dream_vt ? &((const dream *)d)->stats : NULL;
}

int vs_draft_dream_row_kept(const vs_spec_drafter *base, int32_t row) {
    if (!base || base->vt != &dream_vt) return -1;
    const dream *d = (const dream *)base;
    return row >= 0 && row < d->cx.n_rows ? !d->drop[row] : -1;
}

vs_kv *vs_draft_dream_kv(vs_spec_drafter *d) { return d && d->vt == &dream_vt ? ((dream *)d)->kv : NULL; }

const float *vs_draft_dream_node_feature(const vs_spec_drafter *base, int32_t i) {
    if (!base || base->vt != &dream_vt) return NULL;
    const dream *d = (const dream *)base;
    if (i == -1) return d->n_app > 0 ? d->af : NULL;
    if (i < 0 || i >= d->prop_nodes) return NULL;
    if (!d->prop_tree) return i + 1 < d->n_app ? d->af + (size_t)(i + 1) * d->H : NULL;
    const int32_t s = d->cand[d->order[i]].slot;
    return s >= 0 && 1 + s < d->n_app ? d->af + (size_t)(1 + s) * d->H : NULL;
}

vs_status vs_draft_dream_path_feature(vs_spec_drafter *base, const int32_t *path, int32_t n, float *out,
                                      vs_error *err) {
    if (!base || base->vt != &dream_vt) return vs_error_set(err, VS_ERR_INVALID, "not a DREAM drafter");
    dream *d = (dream *)base;
    if (n < 1 || d->n_app < 1 || vs_kv_seq_len(d->kv, 0) < d->base)
        return vs_error_set(err, VS_ERR_INVALID, "DREAM drafter %s: no proposal to follow", dname(d));
    vs_status st = vs_kv_seq_truncate(d->kv, 0, d->base, err);
    const int32_t app0 = d->n_app;
    /* entry 0 followed by this chain's own entries: a copy of entry 0 at the end of the store */
    if (!st) {
        memcpy(d->feat, d->af, sizeof(float) * (size_t)d->H);
        st = append_drafted(d, d->feat, 1, err);
    }
    for (int32_t i = 0; i < n && !st; i++) {
        if (!(st = chain_row(d, path[i], i, err)) && !(st = draft_forward(d, 1, err)))
            st = append_drafted(d, d->feat, 1, err);
    }
    if (!st) memcpy(out, d->feat, sizeof(float) * (size_t)d->H);
    d->n_app = app0;
    d->fed = true; /* the cache holds drafted slots again: commit truncates them */
    return st;
}
