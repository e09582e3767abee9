/* feat_ctx: the feature-level drafters' context mirror and shared steps (see feat_ctx.h). */
#include "feat_ctx.h"

#include <math.h>
#include <string.h>

#include "kernels.h"

bool vs_feat_ctx_reserve(vs_feat_ctx *c, int32_t cap) {
    if (cap <= c->cap) return true;
    int64_t *key = vs_realloc(c->key, sizeof(int64_t) * (size_t)cap);
    if (key) c->key = key;
    int32_t *tok = vs_realloc(c->tok, sizeof(int32_t) * (size_t)cap);
    if (tok) c->tok = tok;
    const float **img = vs_realloc((void *)c->img, sizeof(float *) * (size_t)cap);
    if (img) c->img = img;
    if (!key || !tok || !img) return false;
    c->cap = cap;
    return true;
}

void vs_feat_ctx_free(vs_feat_ctx *c) {
    vs_free(c->key), vs_free(c->tok), vs_free((void *)c->img);
    memset(c, 0, sizeof(*c));
}

int32_t vs_feat_ctx_begin(vs_feat_ctx *c, const vs_spec_prompt *p, bool reuse) {
    int32_t common = 0, i = 0;
    bool same = reuse;
    for (int32_t s = 0; s < p->n_seg; s++) {
        const vs_spec_segment *g = &p->seg[s];
        for (int32_t j = 0; j < g->n; j++, i++) {
            const int64_t k = vs_spec_segment_key(g, j);
            same = same && i < c->n_rows && k != VS_SPEC_KEY_NONE && c->key[i] == k;
            if (same) common = i + 1;
            c->key[i] = k;
            c->tok[i] = g->kind == VS_SPEC_SEG_TEXT ? g->tokens[j] : -1;
            c->img[i] = g->kind == VS_SPEC_SEG_TEXT ? NULL : g->embd + (size_t)j * c->H;
        }
    }
    c->n_rows = i;
    return common;
}

bool vs_feat_ctx_commit(vs_feat_ctx *c, const vs_spec_commit *cm) {
    const int32_t N = c->n_rows - 1; /* the pending row of the block */
    const int32_t add = cm->n_accepted + (cm->next >= 0 ? 1 : 0);
    if (N + 1 + add > c->cap) return false;
    for (int32_t i = 0; i < add; i++) {
        const int32_t t = i < cm->n_accepted ? cm->accepted[i] : cm->next;
        c->tok[N + 1 + i] = t;
        c->key[N + 1 + i] = t;
        c->img[N + 1 + i] = NULL;
    }
    c->n_rows = N + 1 + add;
    return true;
}

void vs_feat_ctx_end(vs_feat_ctx *c) {
    for (int32_t i = 0; i < c->n_rows; i++) c->img[i] = NULL;
}

vs_status vs_feat_ctx_row_embd(const vs_feat_ctx *c, const vs_lm *target, int32_t i, float *out, const char *who,
                               vs_error *err) {
    if (c->tok[i] < 0) {
        if (!c->img[i]) return vs_error_set(err, VS_ERR_INVALID, "%s: image row %d without data", who, i);
        memcpy(out, c->img[i], sizeof(float) * (size_t)c->H);
        return VS_OK;
    }
    return vs_lm_embed(target, c->tok[i], out, err);
}

vs_status vs_feat_check_opts(const char *what, int32_t tree_top_k, int32_t tree_nodes, const vs_lm *target,
                             vs_error *err) {
    if (tree_top_k < 0 || tree_top_k > VS_TREE_MAX_TOP_K)
        return vs_error_set(err, VS_ERR_INVALID, "%s: tree top-k %d outside [1, %d] (0 = chains)", what, tree_top_k,
                            VS_TREE_MAX_TOP_K);
    if (tree_nodes < 0 || tree_nodes > VS_TREE_MAX_NODES)
        return vs_error_set(err, VS_ERR_INVALID, "%s: %d tree nodes outside [1, %d] (0 = 8 x top-k)", what, tree_nodes,
                            VS_TREE_MAX_NODES);
    const vs_lm_weights *tw = vs_lm_w(target);
    if (!tw->output.data || !tw->output_norm)
        return vs_error_set(err, VS_ERR_INVALID, "%s: the target %s has no LM head", what,
                            vs_gguf_name(vs_lm_gguf(target)));
    return VS_OK;
}

void vs_feat_lm_head(vs_threadpool *tp, const vs_lm_mat *out, const float *f, int32_t n, float *logits) {
    if (out->packed) vs_matmul_x16(tp, out->type, out->data, out->packed, out->n_out, out->n_in, f, n, logits);
    else vs_matmul(tp, out->type, out->data, out->n_out, out->n_in, f, n, logits);
}

vs_status vs_feat_transform(vs_sampler *s, bool greedy, const float *lg, float *q, int32_t V, vs_error *err) {
    if (!greedy) return vs_sampler_probs(s, lg, q, err);
    memcpy(q, lg, sizeof(float) * (size_t)V);
    vs_softmax_inplace(q, V);
    return VS_OK;
}

vs_status vs_feat_expand(vs_threadpool *tp, const vs_lm_mat *out, vs_sampler *s, bool greedy, const float *f,
                         float *logits, float *q, int32_t K, vs_tree_cand *cand, int32_t *nc, int32_t parent,
                         vs_error *err) {
    const int32_t V = (int32_t)out->n_out;
    int32_t tok[VS_TREE_MAX_TOP_K];
    double lp[VS_TREE_MAX_TOP_K];
    vs_feat_lm_head(tp, out, f, 1, logits);
    vs_status st = vs_feat_transform(s, greedy, logits, q, V, err);
    if (st) return st;
    const int32_t n = vs_tree_top_k(q, V, K, true, tok);
    for (int32_t i = 0; i < n; i++) lp[i] = log((double)q[tok[i]]);
    vs_tree_add_children(cand, nc, parent, tok, lp, n);
    return VS_OK;
}
