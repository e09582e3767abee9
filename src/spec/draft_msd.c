/* draft_msd: the MSD feature-level draft head and its drafter. See draft_msd.h. */
#include "draft_msd.h"

#include <math.h>
#include <string.h>

#include "kernels.h"
#include "quant.h"
#include "sample.h"
#include "feat_ctx.h"
#include "tree_build.h"

/* ------------------------------------------------------------------------------------------------
 * The head file */

struct vs_msd_head {
    const vs_gguf *g;
    vs_gguf *owned;   /* set by vs_msd_head_load */
    vs_lm *lm;        /* the decoder block(s), architecture VS_LM_ARCH_HEAD */
    vs_lm_mat fc;     /* [H][2H] */
    float *fc_bias;   /* [H] (F32 copy) */
    bool decoupled;
    float probe[VS_MSD_PROBE];
};

static const char *hname(const vs_msd_head *h) { return vs_gguf_name(h->g); }

void vs_msd_head_free(vs_msd_head *h) {
    if (!h) return;
    vs_lm_free(h->lm);
    vs_free(h->fc_bias);
    vs_gguf_close(h->owned);
    vs_free(h);
}

vs_msd_head *vs_msd_head_load(const char *path, vs_error *err) {
    vs_gguf *g = vs_gguf_open(path, err);
    if (!g) return NULL;
    vs_msd_head *h = vs_msd_head_from_gguf(g, err);
    if (!h) {
        vs_gguf_close(g);
        return NULL;
    }
    h->owned = g;
    return h;
}

vs_msd_head *vs_msd_head_from_gguf(const vs_gguf *g, vs_error *err) {
    const char *path = vs_gguf_name(g);
    vs_msd_head *h = vs_calloc(1, sizeof(*h));
    if (!h) {
        vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", path);
        return NULL;
    }
    h->g = g;
    vs_gguf_str arch;
    if (vs_gguf_get_str(h->g, "general.architecture", &arch) != 1 || !vs_gguf_str_eq(arch, VS_LM_ARCH_HEAD)) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: not an MSD head (general.architecture must be '%s')", path,
                     VS_LM_ARCH_HEAD);
        goto fail;
    }
    if (!(h->lm = vs_lm_from_gguf(h->g, err))) goto fail;
    const vs_lm_config *c = vs_lm_cfg(h->lm);
    const int64_t H = c->n_embd;
    const vs_gguf_tensor *t;
    const int64_t ne_fc[2] = {2 * H, H}, ne_b[1] = {H};
    if (vs_gguf_require_tensor(h->g, "fc.weight", 2, ne_fc, &t, err)) goto fail;
    if ((2 * H) % vs_type_block_size((vs_type)t->type) ||
        t->nbytes < vs_type_row_bytes((vs_type)t->type, 2 * H) * (size_t)H) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: tensor fc.weight does not hold its shape", path);
        goto fail;
    }
    h->fc = (vs_lm_mat){.type = (vs_type)t->type, .n_out = H, .n_in = 2 * H, .data = t->data};
    if (vs_gguf_require_tensor(h->g, "fc.bias", 1, ne_b, &t, err)) goto fail;
    if (H % vs_type_block_size((vs_type)t->type) || t->nbytes < vs_type_row_bytes((vs_type)t->type, H)) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: tensor fc.bias does not hold %lld values", path, (long long)H);
        goto fail;
    }
    if (!(h->fc_bias = vs_malloc(sizeof(float) * (size_t)H))) {
        vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    vs_dequantize_row((vs_type)t->type, t->data, h->fc_bias, H);
    bool dec = true;
    int r = vs_gguf_get_bool(h->g, VS_LM_ARCH_HEAD ".decoupled_images", &dec);
    if (r < 0) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: %s.decoupled_images is not a bool", path, VS_LM_ARCH_HEAD);
        goto fail;
    }
    h->decoupled = r ? dec : true;
    int64_t ki = vs_gguf_find_key(h->g, VS_LM_ARCH_HEAD ".target.embd_probe");
    if (ki < 0 || vs_gguf_kv_type(h->g, ki) != VS_GGUF_ARRAY || vs_gguf_arr_type(h->g, ki) != VS_GGUF_F32 ||
        vs_gguf_arr_len(h->g, ki) != VS_MSD_PROBE) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: %s.target.embd_probe (%d float32 values) is missing or malformed",
                     path, VS_LM_ARCH_HEAD, VS_MSD_PROBE);
        goto fail;
    }
    memcpy(h->probe, vs_gguf_arr_data(h->g, ki), sizeof(h->probe));
    for (int i = 0; i < VS_MSD_PROBE; i++)
        if (!isfinite(h->probe[i])) {
            vs_error_set(err, VS_ERR_FORMAT, "%s: %s.target.embd_probe holds a non-finite value", path,
                         VS_LM_ARCH_HEAD);
            goto fail;
        }
    return h;
fail:
    vs_msd_head_free(h);
    return NULL;
}

const vs_lm *vs_msd_head_lm(const vs_msd_head *h) { return h->lm; }
bool vs_msd_head_decoupled(const vs_msd_head *h) { return h->decoupled; }

void vs_msd_embd_probe(const vs_lm *target, float probe[VS_MSD_PROBE]) {
    const vs_lm_config *c = vs_lm_cfg(target);
    float *row = vs_malloc(sizeof(float) * (size_t)c->n_embd);
    for (int i = 0; i < VS_MSD_PROBE; i++) {
        const int32_t tok = (int32_t)(((int64_t)i * 7919) % c->n_vocab);
        const int64_t col = ((int64_t)i * 104729) % c->n_embd;
        probe[i] = row && vs_lm_embed(target, tok, row, NULL) == VS_OK ? row[col] : 0;
    }
    vs_free(row);
}

double vs_msd_probe_cosine(const float stored[VS_MSD_PROBE], const vs_lm *target) {
    float p[VS_MSD_PROBE];
    vs_msd_embd_probe(target, p);
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < VS_MSD_PROBE; i++)
        ab += (double)p[i] * stored[i], aa += (double)p[i] * p[i], bb += (double)stored[i] * stored[i];
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0;
}

vs_status vs_msd_head_check(const vs_msd_head *h, const vs_lm *target, vs_error *err) {
    const vs_lm_config *hc = vs_lm_cfg(h->lm), *tc = vs_lm_cfg(target);
    const char *tn = vs_gguf_name(vs_lm_gguf(target));
    if (hc->n_embd != tc->n_embd)
        return vs_error_set(err, VS_ERR_INVALID, "MSD head %s has width %d but the target %s has %d", hname(h),
                            hc->n_embd, tn, tc->n_embd);
    if (hc->n_vocab != tc->n_vocab)
        return vs_error_set(err, VS_ERR_INVALID, "MSD head %s was made for a vocabulary of %d tokens, the target %s "
                            "has %d", hname(h), hc->n_vocab, tn, tc->n_vocab);
    const double cs = vs_msd_probe_cosine(h->probe, target);
    if (!(cs >= 0.9))
        return vs_error_set(err, VS_ERR_INVALID,
                            "MSD head %s was trained on another target's token embedding than %s's (probe "
                            "cosine %.3f < 0.9)", hname(h), tn, cs);
    return VS_OK;
}

static const char *const k_tensor_names[VS_MSD_N_TENSORS] = {
    "fc.weight",          "fc.bias",
    "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight", "blk.0.attn_output.weight",
    "blk.0.ffn_norm.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight"};

const char *vs_msd_tensor_name(int i) { return i >= 0 && i < VS_MSD_N_TENSORS ? k_tensor_names[i] : NULL; }

void vs_msd_tensor_ne(const vs_msd_shape *s, int i, int64_t ne[2], int *n_dims) {
    const int64_t E = s->width, KV = (int64_t)(s->n_head_kv > 0 ? s->n_head_kv : s->n_head) * (E / s->n_head),
                  F = s->n_ff;
    static const int dims[VS_MSD_N_TENSORS] = {2, 1, 2, 2, 2, 2, 1, 2, 2, 2};
    const int64_t in[VS_MSD_N_TENSORS] = {2 * E, E, E, E, E, E, E, E, E, F};
    const int64_t out[VS_MSD_N_TENSORS] = {E, 1, E, KV, KV, E, 1, F, F, E};
    ne[0] = in[i];
    ne[1] = out[i];
    *n_dims = dims[i];
}

vs_status vs_msd_shape_check(const vs_msd_shape *s, vs_error *err) {
    const int H = s->width, nh = s->n_head, nkv = s->n_head_kv > 0 ? s->n_head_kv : s->n_head;
    if (H < 2 || nh < 1 || H % nh || (H / nh) % 2 || nkv < 1 || nh % nkv || s->n_ff < 1 || s->n_ctx < 1 ||
        s->n_vocab < 1)
        return vs_error_set(err, VS_ERR_INVALID,
                            "MSD head: bad shape (width %d, heads %d / %d, ffn %d, ctx %d, vocabulary %d)", H, nh,
                            nkv, s->n_ff, s->n_ctx, s->n_vocab);
    return VS_OK;
}

void vs_head_file_keys(vs_gguf_writer *w, const char *arch, const char *name, int n_ctx, int width, int blocks,
                       int n_ff, int n_head, int n_head_kv, float rms_eps, float rope_base, int n_vocab,
                       const float probe[VS_MSD_PROBE]) {
    char k[96];
#define KEY(x) (snprintf(k, sizeof(k), "%s." x, arch), k)
    vs_gguf_set_str(w, "general.architecture", arch);
    vs_gguf_set_str(w, "general.name", name);
    vs_gguf_set_u32(w, KEY("context_length"), (uint32_t)n_ctx);
    vs_gguf_set_u32(w, KEY("embedding_length"), (uint32_t)width);
    vs_gguf_set_u32(w, KEY("block_count"), (uint32_t)blocks);
    vs_gguf_set_u32(w, KEY("feed_forward_length"), (uint32_t)n_ff);
    vs_gguf_set_u32(w, KEY("attention.head_count"), (uint32_t)n_head);
    vs_gguf_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)n_head_kv);
    vs_gguf_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), rms_eps);
    vs_gguf_set_f32(w, KEY("rope.freq_base"), rope_base);
    vs_gguf_set_u32(w, KEY("vocab_size"), (uint32_t)n_vocab);
    vs_gguf_set_arr(w, KEY("target.embd_probe"), VS_GGUF_F32, probe, VS_MSD_PROBE);
#undef KEY
}

vs_status vs_head_file_tensor(vs_gguf_writer *w, const char *tensor, int n_dims, const int64_t ne[2],
                              const float *data, vs_type mat_type, const char *what, vs_error *err) {
    if (n_dims == 1 || mat_type == VS_TYPE_F32) /* vectors stay F32 */
        return vs_gguf_add_tensor(w, tensor, VS_TYPE_F32, n_dims, ne, data, err);
    const int64_t n = ne[0] * ne[1];
    uint16_t *half = vs_malloc(sizeof(uint16_t) * (size_t)n);
    if (!half) return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", what);
    vs_quantize_row(mat_type, data, half, n);
    const vs_status st = vs_gguf_add_tensor(w, tensor, mat_type, n_dims, ne, half, err);
    vs_free(half);
    return st;
}

vs_status vs_msd_head_write(const vs_msd_shape *s, const float probe[VS_MSD_PROBE],
                            const float *const data[VS_MSD_N_TENSORS], vs_type mat_type, const char *name,
                            const char *path, vs_error *err) {
    vs_status st = vs_msd_shape_check(s, err);
    if (st) return st;
    if (mat_type != VS_TYPE_F32 && mat_type != VS_TYPE_F16 && mat_type != VS_TYPE_BF16)
        return vs_error_set(err, VS_ERR_INVALID, "MSD head: matrices are written as F32, F16 or BF16 (not %s)",
                            vs_type_name(mat_type));
    vs_gguf_writer *w = vs_gguf_writer_new();
    if (!w) return vs_error_set(err, VS_ERR_NOMEM, "MSD head: out of memory");
    vs_head_file_keys(w, VS_LM_ARCH_HEAD, name ? name : "vlmspec-msd", s->n_ctx, s->width, 1, s->n_ff, s->n_head,
                      s->n_head_kv > 0 ? s->n_head_kv : s->n_head, s->rms_eps, s->rope_base, s->n_vocab, probe);
    vs_gguf_set_bool(w, VS_LM_ARCH_HEAD ".decoupled_images", s->decoupled);
    for (int i = 0; i < VS_MSD_N_TENSORS && !st; i++) {
        int64_t ne[2];
        int nd;
        vs_msd_tensor_ne(s, i, ne, &nd);
        st = vs_head_file_tensor(w, k_tensor_names[i], nd, ne, data[i], mat_type, "MSD head", err);
    }
    if (!st) st = vs_gguf_write(w, path, err);
    vs_gguf_writer_free(w);
    return st;
}

vs_msd_shape vs_msd_shape_for(const vs_lm *target, int n_head, int n_head_kv, int n_ff, int n_ctx, bool decoupled) {
    const vs_lm_config *tc = vs_lm_cfg(target);
    return (vs_msd_shape){.width = tc->n_embd, .n_head = n_head, .n_head_kv = n_head_kv > 0 ? n_head_kv : n_head,
                          .n_ff = n_ff, .n_ctx = n_ctx, .n_vocab = tc->n_vocab, .rms_eps = tc->rms_eps,
                          .rope_base = tc->rope_base, .decoupled = decoupled};
}

vs_status vs_msd_head_write_random(const vs_msd_random_opts *o, const vs_lm *target, const char *path,
                                   vs_error *err) {
    const vs_msd_shape s = vs_msd_shape_for(target, o->n_head, o->n_head_kv, o->n_ff, o->n_ctx, o->decoupled);
    vs_status st = vs_msd_shape_check(&s, err);
    if (st) return st;
    vs_rng rng;
    vs_rng_seed(&rng, o->seed);
    const float std = o->std > 0 ? o->std : 0.02f;
    float *data[VS_MSD_N_TENSORS] = {0};
    for (int i = 0; i < VS_MSD_N_TENSORS && !st; i++) {
        int64_t ne[2];
        int nd;
        vs_msd_tensor_ne(&s, i, ne, &nd);
        const int64_t n = ne[0] * ne[1];
        if (!(data[i] = vs_malloc(sizeof(float) * (size_t)n))) {
            st = vs_error_set(err, VS_ERR_NOMEM, "random MSD head: out of memory");
            break;
        }
        /* fc (weight and bias) at half the spread, the norm at 1, the rest N(0, std^2) */
        const bool norm = i == 6;
        const float sd = i <= 1 ? std / 2 : std;
        for (int64_t j = 0; j < n; j++) data[i][j] = norm ? 1.0f : sd * vs_rng_normal(&rng);
    }
    float probe[VS_MSD_PROBE];
    vs_msd_embd_probe(target, probe);
    if (!st) st = vs_msd_head_write(&s, probe, (const float *const *)data, VS_TYPE_F32, "vlmspec-msd-random", path,
                                          err);
    for (int i = 0; i < VS_MSD_N_TENSORS; i++) vs_free(data[i]);
    return st;
}

/* ------------------------------------------------------------------------------------------------
 * The drafter */

typedef struct msd {
    vs_spec_drafter hdr;
    const vs_msd_head *h;
    vs_lm *target;
    vs_lm *head; /* h->lm (the forward needs a mutable model: its scratch) */
    vs_kv *kv;
    vs_threadpool *tp;
    int32_t H, V, n_ctx;
    float eps;
    const float *norm_w;       /* the target's output_norm */
    const vs_lm_mat *out;      /* the target's LM head */
    vs_sampler *sampler;
    bool greedy, force_greedy;
    int32_t topk, tnodes;
    vs_feat_ctx cx;  /* the context mirror (feat_ctx.h) */
    char who[320];   /* "MSD drafter FILE", for errors */
    float *feat;     /* [cx.cap][H] post-norm target features */
    int32_t n_feat;  /* rows 0 .. n_feat - 1 have features */
    bool starved;    /* a feature gap this request: no drafting */
    /* the block in flight */
    bool fed;
    int32_t base;    /* head cache length before the drafted slots */
    /* scratch */
    float *in;       /* [rows][H] head inputs */
    float *cat;      /* [rows][2H] fc inputs */
    float *hid;      /* [rows][H] head outputs */
    float *logits;   /* [V]: one row at a time */
    float *q;        /* [V] */
    float *bout;     /* [fed beams][H] outputs of the beams (tree); chains: the current prediction */
    float *hroot;    /* [H] the output of the last true slot */
    vs_lm_row *rows;
    int32_t cap_rows, cap_bout;
    vs_tree_cand *cand;
    int32_t *order;
    int32_t cap_cand, cap_order;
    int32_t *panc;
    int32_t cap_panc;
    vs_draft_msd_stats stats;
} msd;

static const vs_spec_drafter_vt msd_vt;
static const char *mname(const msd *d) { return hname(d->h); }
static vs_status moom(const msd *d, vs_error *err) {
    return vs_error_set(err, VS_ERR_NOMEM, "MSD drafter %s: out of memory", mname(d));
}


/* Scratch for n rows at once. */
static vs_status ensure_rows(msd *d, int32_t n, vs_error *err) {
    if (n <= d->cap_rows) return VS_OK;
    int32_t c = d->cap_rows ? d->cap_rows : 16;
    while (c < n) c *= 2;
    const size_t H = (size_t)d->H;
    float *in = vs_realloc(d->in, sizeof(float) * (size_t)c * H);
    if (in) d->in = in;
    float *cat = vs_realloc(d->cat, sizeof(float) * (size_t)c * 2 * H);
    if (cat) d->cat = cat;
    float *hid = vs_realloc(d->hid, sizeof(float) * (size_t)c * H);
    if (hid) d->hid = hid;
    vs_lm_row *rows = vs_realloc(d->rows, sizeof(vs_lm_row) * (size_t)c);
    if (rows) d->rows = rows;
    if (!in || !cat || !hid || !rows) return moom(d, err);
    d->cap_rows = c;
    return VS_OK;
}

/* fc over n rows: in[r] = W_fc cat[r] + bias. */
static void fc_rows(msd *d, int32_t n) {
    const vs_lm_mat *m = &d->h->fc;
    vs_matmul(d->tp, m->type, m->data, m->n_out, m->n_in, d->cat, n, d->in);
    for (int32_t r = 0; r < n; r++) vs_axpy_f32(d->in + (size_t)r * d->H, 1.0f, d->h->fc_bias, d->H);
}

/* One head forward of rows [0, n) (embedding rows d->in, positions and masks set by the caller: causal
 * rows continue the sequence); outputs into d->hid. */
static vs_status head_forward(msd *d, int32_t n, vs_error *err) {
    for (int32_t r = 0; r < n; r++) d->rows[r].embd = d->in + (size_t)r * d->H;
    vs_lm_out out = {.hidden = d->hid, .attn_layer = -1};
    vs_status st = vs_lm_forward(d->head, d->kv, d->tp, d->rows, n, &out, err);
    if (st) return vs_error_wrap(err, "MSD head %s", mname(d));
    d->stats.head_rows += n;
    d->stats.forwards++;
    return VS_OK;
}

/* Evaluates the head slots that became computable from true features: slot p needs f_p and row p + 1.
 * Chunks of 512 rows. */
static vs_status fill_true(msd *d, vs_error *err) {
    const int32_t H = d->H;
    int32_t p = vs_kv_seq_len(d->kv, 0);
    const int32_t end = VS_MIN(d->n_feat, d->cx.n_rows - 1);
    while (p < end) {
        const int32_t n = VS_MIN(512, end - p);
        vs_status st = ensure_rows(d, n, err);
        if (st) return st;
        int32_t nfc = 0;
        /* rows that go through fc first (contiguous in cat), images copied straight */
        for (int32_t r = 0; r < n; r++) {
            const int32_t i = p + r;
            vs_lm_row *row = &d->rows[r];
            memset(row, 0, sizeof(*row));
            row->pos = i;
            if (d->h->decoupled && d->cx.tok[i + 1] < 0) continue;
            float *c = d->cat + (size_t)nfc++ * 2 * H;
            if ((st = vs_feat_ctx_row_embd(&d->cx, d->target, i + 1, c, d->who, err))) return st;
            memcpy(c + H, d->feat + (size_t)i * H, sizeof(float) * (size_t)H);
        }
        if (nfc) fc_rows(d, nfc);
        /* spread: fc outputs were packed; walk backwards so nothing is overwritten early */
        for (int32_t r = n - 1, f = nfc - 1; r >= 0; r--) {
            const int32_t i = p + r;
            float *dst = d->in + (size_t)r * H;
            if (d->h->decoupled && d->cx.tok[i + 1] < 0) {
                if ((st = vs_feat_ctx_row_embd(&d->cx, d->target, i + 1, dst, d->who, err))) return st;
            } else {
                if (f != r) memmove(dst, d->in + (size_t)f * H, sizeof(float) * (size_t)H);
                f--;
            }
        }
        if ((st = head_forward(d, n, err))) return st;
        memcpy(d->hroot, d->hid + (size_t)(n - 1) * H, sizeof(float) * (size_t)H);
        d->stats.true_rows += n;
        p += n;
    }
    return VS_OK;
}

/* The context mirror and the features for cap rows (kept contents). */
static vs_status ensure_cap(msd *d, int32_t cap, vs_error *err) {
    if (cap <= d->cx.cap) return VS_OK;
    float *feat = vs_realloc(d->feat, sizeof(float) * (size_t)cap * (size_t)d->H);
    if (feat) d->feat = feat;
    if (!feat || !vs_feat_ctx_reserve(&d->cx, cap)) return moom(d, err);
    return VS_OK;
}

static vs_status md_begin(vs_spec_drafter *base, const vs_spec_begin_info *req, vs_error *err) {
    msd *d = (msd *)base;
    const vs_spec_prompt *p = req->prompt;
    vs_sampler_params sp = req->params->sampling;
    sp.seed ^= 0x3C6EF372FE94F82Bull;
    vs_status st = vs_sampler_set_params(d->sampler, &sp, err);
    if (st) return st;
    vs_sampler_seed(d->sampler, sp.seed);
    d->greedy = sp.temperature == 0 || d->force_greedy;
    d->hdr.max_nodes = d->topk ? d->tnodes : 0;
    d->fed = false;
    d->starved = false;
    const int64_t n = vs_spec_prompt_rows(p);
    if ((st = ensure_cap(d, VS_MAX(req->n_ctx_target, (int32_t)VS_MIN(n, INT32_MAX - 2)) + 2, err))) return st;
    /* the new context's rows; the common prefix with the old one keeps its features and slots */
    const int32_t common = vs_feat_ctx_begin(&d->cx, p, req->params->reuse_prefix);
    d->n_feat = VS_MIN(d->n_feat, common);
    /* slot p stays when rows 0 .. p + 1 are unchanged and f_p is kept */
    const int32_t keep = VS_MIN(vs_kv_seq_len(d->kv, 0), VS_MAX(VS_MIN(common - 1, d->n_feat), 0));
    return vs_kv_seq_truncate(d->kv, 0, keep, err);
}

static vs_status md_target_rows(vs_spec_drafter *base, const vs_spec_features *f, vs_error *err) {
    msd *d = (msd *)base;
    if (f->n_embd != d->H) return vs_error_set(err, VS_ERR_INVALID, "MSD drafter %s: features of width %d", mname(d), f->n_embd);
    if (f->pos0 > d->n_feat) { /* rows this drafter never saw: it cannot compute their slots */
        d->stats.n_starved += !d->starved;
        d->starved = true;
        return VS_OK;
    }
    if (f->pos0 + f->n > d->cx.cap)
        return vs_error_set(err, VS_ERR_RANGE, "MSD drafter %s: feature row %d beyond its %d", mname(d),
                            f->pos0 + f->n, d->cx.cap);
    for (int32_t r = 0; r < f->n; r++)
        vs_rmsnorm(d->feat + (size_t)(f->pos0 + r) * d->H, f->hidden + (size_t)r * d->H, d->norm_w, d->H, d->eps);
    d->n_feat = VS_MAX(d->n_feat, f->pos0 + f->n);
    d->stats.features += f->n;
    return VS_OK;
}

/* EAGLE-2: the K best children of candidate `parent` (-1 = the root) from the head output h, appended. */
static vs_status expand(msd *d, const float *h, int32_t parent, int32_t *nc, vs_error *err) {
    return vs_feat_expand(d->tp, d->out, d->sampler, d->greedy, h, d->logits, d->q, d->topk, d->cand, nc, parent, err);
}

/* EAGLE-2 tree of depth k, at most N nodes, from the head output hroot (the last true slot's, at
 * position base - 1). Beams of depth j are head rows at position base + j - 1 seeing the true slots and
 * their own cached ancestors; their inputs are fc(E(token), the parent's output). */
static vs_status propose_tree(msd *d, const float *hroot, int32_t k, int32_t N, vs_spec_proposal *out,
                              vs_error *err) {
    const int32_t H = d->H, K = d->topk;
    const int32_t need = K + (k - 1) * K * K;
    if (vs_grow((void **)&d->cand, &d->cap_cand, need, sizeof(vs_tree_cand)) ||
        vs_grow((void **)&d->order, &d->cap_order, need, sizeof(int32_t)) ||
        vs_grow((void **)&d->panc, &d->cap_panc, K * k, sizeof(int32_t)) ||
        vs_grow((void **)&d->bout, &d->cap_bout, (K * (k - 1) + 1) * H, sizeof(float)))
        return moom(d, err);
    vs_status st = ensure_rows(d, K, err);
    if (st) return st;
    int32_t nc = 0, beams[VS_TREE_MAX_TOP_K], nb = 0, nfed = 0;
    st = expand(d, hroot, -1, &nc, err);
    for (int32_t i = 0; !st && i < nc; i++) beams[nb++] = i;
    for (int32_t j = 1; !st && j < k && nb > 0; j++) {
        for (int32_t b = 0; b < nb && !st; b++) {
            const vs_tree_cand *c = &d->cand[beams[b]];
            float *cat = d->cat + (size_t)b * 2 * H;
            st = vs_lm_embed(d->target, c->token, cat, err);
            const float *hp = c->parent < 0 ? hroot : d->bout + (size_t)d->cand[c->parent].slot * H;
            memcpy(cat + H, hp, sizeof(float) * (size_t)H);
            vs_lm_row *row = &d->rows[b];
            memset(row, 0, sizeof(*row));
            int32_t *pa = d->panc + (size_t)b * k, na = 0;
            for (int32_t a = c->parent; a >= 0; a = d->cand[a].parent) pa[na++] = d->base + d->cand[a].slot;
            row->pos = d->base + j - 1;
            row->tree = true;
            row->mask_past = true;
            row->past_len = d->base;
            row->n_past_anc = na;
            row->past_anc = pa;
        }
        if (st) break;
        fc_rows(d, nb);
        if ((st = head_forward(d, nb, err))) break;
        d->fed = true;
        out->n_steps++;
        const int32_t c0 = nc;
        for (int32_t b = 0; b < nb && !st; b++) {
            d->cand[beams[b]].slot = nfed;
            memcpy(d->bout + (size_t)nfed++ * H, d->hid + (size_t)b * H, sizeof(float) * (size_t)H);
            st = expand(d, d->hid + (size_t)b * H, beams[b], &nc, err);
        }
        nb = st ? 0 : vs_tree_next_beams(d->cand, c0, nc, K, beams);
    }
    if (st) return st;
    if ((st = vs_tree_emit(d->cand, nc, N, out, d->order, err))) return vs_error_wrap(err, "MSD drafter %s", mname(d));
    return VS_OK;
}

/* A chain of k drafts from the head output hroot. */
static vs_status propose_chain(msd *d, const float *hroot, int32_t k, vs_spec_proposal *out, vs_error *err) {
    const int32_t H = d->H, V = d->V;
    vs_status st = ensure_rows(d, 1, err);
    if (st) return st;
    if (vs_grow((void **)&d->bout, &d->cap_bout, H, sizeof(float))) return moom(d, err);
    memcpy(d->bout, hroot, sizeof(float) * (size_t)H);
    for (int32_t i = 0; i < k; i++) {
        vs_feat_lm_head(d->tp, d->out, d->bout, 1, d->logits);
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
        /* the next slot: fc(E(d_i), the prediction it continues) at position base + i */
        if ((st = vs_lm_embed(d->target, t, d->cat, err))) return st;
        memcpy(d->cat + H, d->bout, sizeof(float) * (size_t)H);
        fc_rows(d, 1);
        memset(&d->rows[0], 0, sizeof(vs_lm_row));
        d->rows[0].pos = d->base + i;
        if ((st = head_forward(d, 1, err))) return st;
        d->fed = true;
        out->n_steps++;
        memcpy(d->bout, d->hid, sizeof(float) * (size_t)H);
    }
    return VS_OK;
}

static vs_status md_propose(vs_spec_drafter *base, const vs_spec_limits *lim, vs_spec_proposal *out,
                            vs_error *err) {
    msd *d = (msd *)base;
    out->n = 0;
    out->n_steps = 0;
    d->fed = false;
    if (d->starved) return VS_OK;
    /* the last true slot is evaluated in this call (its input holds the pending token) */
    const int32_t last = VS_MIN(d->n_feat, d->cx.n_rows - 1) - 1;
    if (last < 0 || d->n_feat != d->cx.n_rows - 1) return VS_OK; /* features missing: nothing to draft from */
    if (last >= d->n_ctx) return VS_OK;                        /* the head's cache is full: plain decoding */
    vs_status st = vs_kv_seq_truncate(d->kv, 0, VS_MIN(vs_kv_seq_len(d->kv, 0), last), err);
    if (!st) st = fill_true(d, err);
    if (st) return st;
    out->n_steps = 1;
    d->base = vs_kv_seq_len(d->kv, 0);
    const float *hroot = d->hroot; /* fill_true ended with slot `last` */
    const int32_t room = d->n_ctx - d->base;
    int32_t k = lim->max_depth;
    if (d->topk) k = VS_MIN(k, room / d->topk + 1);
    else k = VS_MIN(k, room + 1);
    if (k < 1) return VS_OK;
    return d->topk ? propose_tree(d, hroot, k, VS_MIN(d->tnodes, lim->max_nodes), out, err)
                   : propose_chain(d, hroot, k, out, err);
}

static vs_status md_commit(vs_spec_drafter *base, const vs_spec_commit *c, vs_error *err) {
    msd *d = (msd *)base;
    vs_status st;
    /* drafted slots held predictions: back to the true slots */
    if (d->fed && (st = vs_kv_seq_truncate(d->kv, 0, d->base, err))) return st;
    d->fed = false;
    /* the context grows by the accepted drafts and the new pending token */
    if (!vs_feat_ctx_commit(&d->cx, c))
        return vs_error_set(err, VS_ERR_RANGE, "%s: context beyond %d rows", d->who, d->cx.cap);
    return VS_OK;
}

static void md_end(vs_spec_drafter *base) {
    msd *d = (msd *)base;
    vs_feat_ctx_end(&d->cx); /* the request's image rows are gone */
    d->fed = false;
}

static void md_free(vs_spec_drafter *base) {
    msd *d = (msd *)base;
    if (!d) return;
    vs_kv_free(d->kv);
    vs_sampler_free(d->sampler);
    vs_feat_ctx_free(&d->cx);
    vs_free(d->feat);
    vs_free(d->in), vs_free(d->cat), vs_free(d->hid), vs_free(d->logits), vs_free(d->q), vs_free(d->bout);
    vs_free(d->hroot), vs_free(d->rows), vs_free(d->cand), vs_free(d->order), vs_free(d->panc);
    vs_free(d);
}

static const vs_spec_drafter_vt msd_vt = {
    .name = "msd",
    .begin = md_begin,
    .target_rows = md_target_rows,
    .propose = md_propose,
    .commit = md_commit,
    .end = md_end,
    .free = md_free,
};

vs_spec_drafter *vs_draft_msd_new(const vs_msd_head *h, vs_lm *target, const vs_draft_msd_opts *o,
                                  vs_error *err) {
    vs_draft_msd_opts def = {0};
    if (!o) o = &def;
    if (!h || !target) {
        vs_error_set(err, VS_ERR_INVALID, "MSD drafter: needs a head and a target");
        return NULL;
    }
    if (vs_msd_head_check(h, target, err) ||
        vs_feat_check_opts("MSD drafter", o->tree_top_k, o->tree_nodes, target, err))
        return NULL;
    const vs_lm_weights *tw = vs_lm_w(target);
    msd *d = vs_calloc(1, sizeof(*d));
    if (!d) {
        vs_error_set(err, VS_ERR_NOMEM, "MSD drafter: out of memory");
        return NULL;
    }
    const vs_lm_config *tc = vs_lm_cfg(target);
    d->hdr.vt = &msd_vt;
    d->hdr.n_vocab = tc->n_vocab;
    d->hdr.want_hidden = true;
    d->hdr.keeps_features = true;
    d->h = h;
    d->head = (vs_lm *)h->lm;
    d->target = target;
    d->tp = o->tp;
    d->H = tc->n_embd, d->V = tc->n_vocab;
    d->cx.H = d->H;
    snprintf(d->who, sizeof(d->who), "MSD drafter %s", hname(h));
    d->n_ctx = o->n_ctx > 0 ? o->n_ctx : tc->n_ctx_train;
    d->eps = tc->rms_eps;
    d->norm_w = tw->output_norm;
    d->out = &tw->output;
    d->force_greedy = o->greedy;
    d->topk = o->tree_top_k;
    d->tnodes = o->tree_nodes > 0 ? o->tree_nodes : vs_tree_default_nodes(o->tree_top_k);
    vs_sampler_params sp = vs_sampler_params_default();
    const vs_type kvt = o->kv_type == VS_TYPE_F16 || o->kv_type == VS_TYPE_BF16 ? o->kv_type : VS_TYPE_F32;
    if (!(d->sampler = vs_sampler_new(d->V, &sp, err)) || !(d->kv = vs_lm_kv_new(d->head, 1, d->n_ctx, kvt, err))) {
        md_free(&d->hdr);
        return NULL;
    }
    d->q = vs_malloc(sizeof(float) * (size_t)d->V);
    d->logits = vs_malloc(sizeof(float) * (size_t)d->V);
    d->hroot = vs_malloc(sizeof(float) * (size_t)d->H);
    if (!d->q || !d->logits || !d->hroot || ensure_cap(d, tc->n_ctx_train + 1, err)) {
        vs_error_set(err, VS_ERR_NOMEM, "MSD drafter: out of memory");
        md_free(&d->hdr);
        return NULL;
    }
    return &d->hdr;
}

const vs_draft_msd_stats *vs_draft_msd_get_stats(const vs_spec_drafter *d) {
    return d && d->vt == &msd_vt ? &((const msd *)d)->stats : NULL;
}

vs_kv *vs_draft_msd_kv(vs_spec_drafter *d) { return d && d->vt == &msd_vt ? ((msd *)d)->kv : NULL; }
